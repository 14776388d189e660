"""Gzip through the real daemon: a list answer, a 207 batch and /openapi.json compressed for a
client that asks, with the plain answer's ETag marked `-gzip`, a 304 for either tag and HEAD
saying what GET would; small answers and clients that do not ask get the plain bytes."""

from __future__ import annotations

import gzip

import pytest

from harness import V, new_person

GZIP = {"Accept-Encoding": "gzip"}


@pytest.fixture(scope="module")
def listing(daemon, admin_token) -> str:
    """A person list over the threshold: eight or more people."""
    for _ in range(6):
        new_person(daemon, admin_token)
    return f"{V}/person/list?max=8"


def vary(reply) -> set[str]:
    return {name.strip().lower() for value in reply.headers.get_all("Vary") or [] for name in value.split(",")}


def test_a_list_answer_is_compressed_for_a_client_that_asks(daemon, admin_token, listing):
    plain = daemon.request("GET", listing, token=admin_token)
    assert plain.status == 200 and "Content-Encoding" not in plain.headers
    compressed = daemon.request("GET", listing, token=admin_token, headers=GZIP)
    assert compressed.status == 200
    assert compressed.headers["Content-Encoding"] == "gzip"
    assert int(compressed.headers["Content-Length"]) == len(compressed.body) < len(plain.body) / 2
    assert gzip.decompress(compressed.body) == plain.body
    assert compressed.headers["ETag"] == plain.headers["ETag"][:-1] + '-gzip"'
    assert "accept-encoding" in vary(compressed)
    assert compressed.headers["Link"] == plain.headers["Link"]  # the paging links, untouched


def test_either_tag_revalidates(daemon, admin_token, listing):
    compressed = daemon.request("GET", listing, token=admin_token, headers=GZIP)
    tag = compressed.headers["ETag"]
    again = daemon.request("GET", listing, token=admin_token, headers={**GZIP, "If-None-Match": tag})
    assert (again.status, again.body, again.headers["ETag"]) == (304, b"", tag)
    assert "accept-encoding" in vary(again)
    plain_tag = tag.replace("-gzip", "")
    plain = daemon.request("GET", listing, token=admin_token, headers={"If-None-Match": plain_tag})
    assert (plain.status, plain.headers["ETag"]) == (304, plain_tag)
    held = daemon.request("GET", listing, token=admin_token, headers={"If-None-Match": tag})  # no gzip now
    assert (held.status, held.headers["ETag"]) == (304, plain_tag)


def test_head_says_what_get_would(daemon, admin_token, listing):
    get = daemon.request("GET", listing, token=admin_token, headers=GZIP)
    head = daemon.request("HEAD", listing, token=admin_token, headers=GZIP)
    assert (head.status, head.body) == (200, b"")
    for name in ("Content-Encoding", "Content-Length", "ETag", "Content-Type"):
        assert head.headers[name] == get.headers[name], name


def test_small_answers_and_problems_stay_plain(daemon, admin_token):
    show = daemon.request("GET", f"{V}/person/show/1", token=admin_token, headers=GZIP)
    assert show.status == 200 and "Content-Encoding" not in show.headers and show.json["id"] == 1
    missing = daemon.request("GET", f"{V}/person/show/999999", token=admin_token, headers=GZIP)
    assert missing.status == 404 and "Content-Encoding" not in missing.headers and missing.json["status"] == 404


def test_a_batch_answer_with_errors_is_compressed_too(daemon, admin_token, listing):
    elements = [{"id": 1}] * 6 + [{"id": 999_999}]
    reply = daemon.request(
        "POST", "/b0.1/person/show", {"batch": elements, "combine": True}, token=admin_token, headers=GZIP
    )
    assert reply.status == 207 and reply.headers["Content-Encoding"] == "gzip"
    assert gzip.decompress(reply.body).startswith(b'{"data"')


def test_the_openapi_document_is_compressed_and_revalidated(daemon, admin_token):
    plain = daemon.request("GET", "/openapi.json", token=admin_token)
    compressed = daemon.request("GET", "/openapi.json", token=admin_token, headers=GZIP)
    assert compressed.headers["Content-Encoding"] == "gzip"
    assert gzip.decompress(compressed.body) == plain.body
    assert len(compressed.body) < len(plain.body) / 5
    tag = compressed.headers["ETag"]
    assert tag == plain.headers["ETag"][:-1] + '-gzip"'
    again = daemon.request("GET", "/openapi.json", token=admin_token, headers={**GZIP, "If-None-Match": tag})
    assert (again.status, again.body, again.headers["ETag"]) == (304, b"", tag)


def test_a_client_refusing_gzip_gets_the_plain_bytes(daemon, admin_token, listing):
    for accept in ("identity", "gzip;q=0", "br"):
        reply = daemon.request("GET", listing, token=admin_token, headers={"Accept-Encoding": accept})
        assert reply.status == 200 and "Content-Encoding" not in reply.headers, accept
        assert reply.json
