"""Idempotency-Key through the real daemon, two worker processes sharing the database: a
create retried with one key makes one record and gets the first answer again, byte for byte;
the key with another request is a 422 that changes nothing; a bad key is a 400; a kept 409 is
replayed; a batch is kept as a whole; CORS lets a browser send the header and read the mark."""

from __future__ import annotations

import os
import uuid

import pytest

from assertions import assert_problem
from harness import ADMIN, V, deployment_with_accounts, person_fields

pytestmark = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="worker processes need two CPUs")


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    return deployment_with_accounts(tmp_path_factory.mktemp("idempotency"), api={"procCores": 2})


def people(daemon, token: str) -> list[str]:
    reply = daemon.request("GET", f"{V}/person/list?max=100", token=token)
    assert reply.status == 200, reply.body
    return [person["username"] for person in reply.json]


def create(daemon, token: str, fields: dict, key: str):
    return daemon.request("POST", f"{V}/person/create", fields, token=token, headers={"Idempotency-Key": key})


def test_a_create_retried_with_one_key_makes_one_record_and_gets_the_first_answer_again(daemon, admin_token):
    fields, key = person_fields("retried"), str(uuid.uuid4())
    first = create(daemon, admin_token, fields, key)
    assert first.status == 200 and "Idempotent-Replayed" not in first.headers, first.body
    # retried over new connections, reaching either worker: the same answer, marked as replayed
    for _ in range(6):
        again = create(daemon, admin_token, fields, key)
        assert (again.status, again.body, again.headers["Idempotent-Replayed"]) == (200, first.body, "true")
        assert again.headers["Content-Type"] == "application/json"
    assert people(daemon, admin_token).count(fields["username"]) == 1
    # the record is the one the first answer named
    shown = daemon.request("GET", f"{V}/person/show/{first.json['id']}", token=admin_token)
    assert shown.json["username"] == fields["username"]


def test_the_key_with_another_request_is_a_422_and_changes_nothing(daemon, admin_token):
    fields, key = person_fields("first"), str(uuid.uuid4())
    assert create(daemon, admin_token, fields, key).status == 200
    other = person_fields("other")
    assert_problem(create(daemon, admin_token, other, key), 422)
    assert other["username"] not in people(daemon, admin_token)
    # the same body elsewhere is another request too
    moved = daemon.request(
        "POST", f"{V}/person/create?x=1", fields, token=admin_token, headers={"Idempotency-Key": key}
    )
    assert_problem(moved, 422)


def test_a_refusal_that_settles_the_request_is_kept_and_replayed(daemon, admin_token):
    taken, key = person_fields("taken"), str(uuid.uuid4())
    assert create(daemon, admin_token, taken, str(uuid.uuid4())).status == 200
    refused = create(daemon, admin_token, taken, key)
    assert_problem(refused, 409)
    again = create(daemon, admin_token, taken, key)
    assert (again.status, again.body, again.headers["Idempotent-Replayed"]) == (409, refused.body, "true")


@pytest.mark.parametrize("key", ["", "two words", "x" * 256, "caf\u00e9"])
def test_a_bad_key_is_a_400_and_nothing_is_made(daemon, admin_token, key):
    fields = person_fields("badkey")
    reply = daemon.request(
        "POST",
        f"{V}/person/create",
        fields,
        token=admin_token,
        headers={"Idempotency-Key": key.encode("utf-8").decode("latin-1")},
    )
    assert_problem(reply, 400)
    assert "Idempotency-Key" in reply.json["detail"]
    assert fields["username"] not in people(daemon, admin_token)


def test_a_batch_is_kept_as_a_whole_and_a_read_ignores_the_key(daemon, admin_token):
    one, two, key = person_fields("batched"), person_fields("batched"), str(uuid.uuid4())
    body = {"batch": [one, two], "combine": True}
    headers = {"Idempotency-Key": key}
    first = daemon.request("POST", "/b0.1/person/create", body, token=admin_token, headers=headers)
    assert first.status == 200, first.body
    again = daemon.request("POST", "/b0.1/person/create", body, token=admin_token, headers=headers)
    assert (again.status, again.body) == (200, first.body)
    assert people(daemon, admin_token).count(one["username"]) == 1
    shown = daemon.request("GET", f"{V}/person/list?max=1", token=admin_token, headers=headers)
    assert shown.status == 200 and "Idempotent-Replayed" not in shown.headers


def test_a_browser_may_send_the_key_and_read_the_mark(daemon):
    preflight = daemon.request(
        "OPTIONS",
        f"{V}/person/create",
        headers={
            "Origin": "http://localhost:3000",
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type, idempotency-key",
        },
    )
    assert "Idempotency-Key" in preflight.headers["Access-Control-Allow-Headers"]
    answer = daemon.request("GET", "/health", headers={"Origin": "http://localhost:3000"})
    assert "Idempotent-Replayed" in answer.headers["Access-Control-Expose-Headers"]


def test_a_narrower_key_of_the_same_account_sending_the_same_request_reads_no_kept_answer(daemon, admin_token):
    """A kept answer is replayed before the call is admitted: an API key of the account, scoped
    to hooks, that sends the administrator's create under its key gets the 422 of another
    request, not the answer its scope forbids; and nothing is made."""
    body = {"name": "hooks only", "roles": ["ROLE_ADMIN"], "scopes": ["hook"], "currentPassword": ADMIN[1]}
    key = daemon.request("POST", f"{V}/apikey/create", body, token=admin_token).json["key"]
    fields, idempotency = person_fields("guarded"), str(uuid.uuid4())
    first = create(daemon, admin_token, fields, idempotency)
    assert first.status == 200, first.body
    guessed = create(daemon, key, fields, idempotency)
    assert_problem(guessed, 422)
    assert first.json["id"] != guessed.json.get("id") and "Idempotent-Replayed" not in guessed.headers
    # the key's own key space is the same account's: its own request under a new key is refused by its scope
    assert_problem(create(daemon, key, person_fields("scoped"), str(uuid.uuid4())), 403)
    assert people(daemon, admin_token).count(fields["username"]) == 1
