"""If-Match on writes, through the real daemon: the ETag of a GET of the record makes the change,
a stale one answers 412 and changes nothing, `*` needs the record to exist, a missing record
is the 404 the write answers anyway; the record's version makes check and write one step;
batches and chains refuse the header."""

from __future__ import annotations

import gzip

from assertions import assert_problem
from harness import ADMIN, V, new_person, show_person

PRECONDITION_FAILED = "urn:apid:problem:precondition-failed"


def etag(daemon, token: str, person_id: int, **headers: str) -> str:
    reply = daemon.request("GET", f"{V}/person/show/{person_id}", token=token, headers=headers)
    assert reply.status == 200, reply.body
    return reply.headers["ETag"]


def update(daemon, token: str, person_id: int, if_match: str | None, **fields):
    headers = {} if if_match is None else {"If-Match": if_match}
    return daemon.request("PUT", f"{V}/person/update/{person_id}", fields, token=token, headers=headers)


def test_the_etag_of_a_get_makes_the_change_and_is_stale_after_it(daemon, admin_token):
    someone = new_person(daemon, admin_token)
    before = show_person(daemon, admin_token, someone["id"])
    tag = etag(daemon, admin_token, someone["id"])

    changed = update(daemon, admin_token, someone["id"], tag, email="matched@example.com")
    assert changed.status == 200, changed.body
    assert changed.json["version"] == before["version"] + 1  # no version sent: If-Match's went to the write
    assert show_person(daemon, admin_token, someone["id"])["email"] == "matched@example.com"

    stale = update(daemon, admin_token, someone["id"], tag, email="stale@example.com")
    problem = assert_problem(stale, 412)
    assert problem["type"] == PRECONDITION_FAILED
    assert show_person(daemon, admin_token, someone["id"])["email"] == "matched@example.com"


def test_a_stale_etag_changes_nothing(daemon, admin_token):
    someone = new_person(daemon, admin_token)
    before = show_person(daemon, admin_token, someone["id"])
    for condition in ('"deadbeef"', "deadbeef", f"W/{etag(daemon, admin_token, someone['id'])}"):
        reply = update(daemon, admin_token, someone["id"], condition, email="never@example.com")
        assert assert_problem(reply, 412)["type"] == PRECONDITION_FAILED, condition
    assert show_person(daemon, admin_token, someone["id"]) == before


def test_any_listed_tag_or_a_star_matches_an_existing_record(daemon, admin_token):
    someone = new_person(daemon, admin_token)
    tag = etag(daemon, admin_token, someone["id"])
    assert update(daemon, admin_token, someone["id"], f'"other", {tag}', email="listed@example.com").status == 200
    assert update(daemon, admin_token, someone["id"], "*", email="star@example.com").status == 200
    assert show_person(daemon, admin_token, someone["id"])["email"] == "star@example.com"


def test_a_missing_record_answers_404_whatever_if_match_says(daemon, admin_token):
    for condition in ("*", '"deadbeef"'):
        reply = update(daemon, admin_token, 999_999, condition, email="ghost@example.com")
        assert_problem(reply, 404)


def test_the_etag_is_the_one_the_caller_sees(daemon, admin_token):
    """The user's view of their record has fewer fields than the administrator's: each one's
    ETag is their own, and the other's does not match."""
    someone = new_person(daemon, admin_token)
    token = daemon.login(someone["username"], someone["password"])
    own, admins = etag(daemon, token, someone["id"]), etag(daemon, admin_token, someone["id"])
    assert own != admins
    assert_problem(update(daemon, token, someone["id"], admins, email="mine@example.com"), 412)
    reply = update(daemon, token, someone["id"], own, email="mine@example.com", currentPassword=someone["password"])
    assert reply.status == 200, reply.body


def test_a_version_sent_as_well_wins_and_a_stale_one_is_the_usual_409(daemon, admin_token):
    someone = new_person(daemon, admin_token)
    record = show_person(daemon, admin_token, someone["id"])
    tag = etag(daemon, admin_token, someone["id"])
    stale = update(daemon, admin_token, someone["id"], tag, email="late@example.com", version=record["version"] - 1)
    assert assert_problem(stale, 409)["currentVersion"] == record["version"]
    fresh = update(daemon, admin_token, someone["id"], tag, email="fresh@example.com", version=record["version"])
    assert fresh.status == 200, fresh.body


def test_the_tag_of_a_compressed_answer_matches_too(daemon, admin_token):
    """A gzip-compressed GET answers `"<tag>-gzip"`: sent back, it names the same record state.
    A person's show answer is too small to compress, so the list's tag shows the form."""
    for _ in range(4):
        new_person(daemon, admin_token)
    listing = daemon.request("GET", f"{V}/person/list?max=50", token=admin_token, headers={"Accept-Encoding": "gzip"})
    assert listing.headers["Content-Encoding"] == "gzip" and listing.headers["ETag"].endswith('-gzip"')
    assert gzip.decompress(listing.body).startswith(b"[")
    someone = new_person(daemon, admin_token)
    tag = etag(daemon, admin_token, someone["id"])
    reply = update(daemon, admin_token, someone["id"], tag[:-1] + '-gzip"', email="gzip@example.com")
    assert reply.status == 200, reply.body


def test_delete_with_if_match(daemon, admin_token):
    someone = new_person(daemon, admin_token)
    path = f"{V}/person/delete/{someone['id']}"
    stale = daemon.request("DELETE", path, token=admin_token, headers={"If-Match": '"deadbeef"'})
    assert_problem(stale, 412)
    assert show_person(daemon, admin_token, someone["id"])["id"] == someone["id"]
    tag = etag(daemon, admin_token, someone["id"])
    assert daemon.request("DELETE", path, token=admin_token, headers={"If-Match": tag}).status == 200
    assert daemon.request("GET", f"{V}/person/show/{someone['id']}", token=admin_token).status == 404


def test_a_write_naming_no_record_cannot_be_conditional(daemon, admin_token, unchanged):
    fields = {"username": "conditional", "password": "conditional-password-1", "email": "c@example.com"}
    reply = daemon.request("POST", f"{V}/person/create", fields, token=admin_token, headers={"If-Match": "*"})
    assert "id" in assert_problem(reply, 412)["detail"]


def test_batches_and_chains_refuse_if_match(daemon, admin_token, unchanged):
    admin_id = 1
    batch = daemon.request(
        "POST",
        "/b0.1/person/update",
        {"batch": [{"id": admin_id, "email": "batch@example.com"}]},
        token=admin_token,
        headers={"If-Match": "*"},
    )
    assert "If-Match" in assert_problem(batch, 400)["detail"]
    chain = daemon.request(
        "GET",
        f"/c0.1/person/show/{admin_id}",
        {"chain": {"key": "id", "order": {"person/show": "return"}}},
        token=admin_token,
        headers={"If-Match": "*"},
    )
    assert "If-Match" in assert_problem(chain, 400)["detail"]
    assert show_person(daemon, admin_token, admin_id)["username"] == ADMIN[0]


def test_a_get_with_if_match_answers_only_while_it_holds(daemon, admin_token):
    path = f"{V}/person/show/1"
    tag = etag(daemon, admin_token, 1)
    assert daemon.request("GET", path, token=admin_token, headers={"If-Match": tag}).status == 200
    assert daemon.request("GET", path, token=admin_token, headers={"If-Match": "*"}).status == 200
    stale = daemon.request("GET", path, token=admin_token, headers={"If-Match": '"deadbeef"'})
    assert assert_problem(stale, 412)["type"] == PRECONDITION_FAILED
    assert "ETag" not in stale.headers
