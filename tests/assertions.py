"""What the tests check on every answer: the media type and the problem shape."""

from __future__ import annotations

PROBLEM_MEDIA_TYPE = "application/problem+json"
PROBLEM_TYPE_BASE = "urn:apid:problem:"
PROBLEM_MEMBERS = {"type", "title", "status", "detail", "instance"}
USER_FIELDS = {"id", "version", "username", "email"}
ADMIN_FIELDS = USER_FIELDS | {
    "enabled",
    "accountLocked",
    "accountExpired",
    "passwordExpired",
    "roles",
    "dateCreated",
    "lastUpdated",
}


def assert_json(reply, status: int = 200):
    assert reply.status == status, reply.body
    assert reply.content_type.split(";")[0].strip() == "application/json", reply.content_type
    return reply.json


def assert_problem(reply, status: int, instance: str | bool | None = True) -> dict:
    """An RFC 9457 problem as apid answers one: its media type, the members, the status in the
    body the answer's, a `type` of apid's, and a `requestId` that is the answer's X-Request-ID.
    `instance` is the path it names: any (True), that one (a string), none (False: a request
    whose line could not be read has no path to name), or not looked at (None). `reply` is an
    answer of the real daemon (`harness.Response`) or of the site in memory (`http_in_memory.Answer`)."""
    assert reply.status == status, reply.body
    assert reply.headers["Content-Type"] == PROBLEM_MEDIA_TYPE, reply.headers["Content-Type"]
    assert not reply.body.lstrip().startswith(b"<"), reply.body
    body = reply.json
    assert isinstance(body, dict)
    assert body.keys() >= PROBLEM_MEMBERS - {"instance"}, body
    assert body["status"] == status
    for member in ("type", "title", "detail"):
        assert isinstance(body[member], str) and body[member], (member, body)
    assert body["type"].startswith(PROBLEM_TYPE_BASE), body
    if instance is False:
        assert "instance" not in body, body
    elif instance is not None:
        assert isinstance(body.get("instance"), str) and body["instance"], body
        if instance is not True:
            assert body["instance"] == instance
    assert body["requestId"] == reply.headers["X-Request-ID"], (body, reply.headers)
    return body


def error_fields(body: dict) -> set[str]:
    """The fields a 400 problem names in its `errors` list (which must not be empty)."""
    assert isinstance(body.get("errors"), list) and body["errors"], body
    return {error["field"] for error in body["errors"]}
