"""What the integration tests check on every answer: the media type and the problem shape."""

from __future__ import annotations

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


def assert_problem(reply, status: int, instance: str | None = None) -> dict:
    """An RFC 9457 problem: media type, the five members, status in body and line agree, and
    its `requestId` is the answer's X-Request-ID."""
    assert reply.status == status, reply.body
    assert reply.content_type.split(";")[0].strip() == "application/problem+json", reply.content_type
    assert not reply.body.lstrip().startswith(b"<"), reply.body
    body = reply.json
    assert isinstance(body, dict)
    assert body.keys() >= PROBLEM_MEMBERS, body
    assert body["status"] == status
    for member in ("type", "title", "detail", "instance"):
        assert isinstance(body[member], str) and body[member], (member, body)
    if instance is not None:
        assert body["instance"] == instance
    assert body["requestId"] == reply.headers["X-Request-ID"], (body, reply.headers)
    return body


def error_fields(body: dict) -> set[str]:
    """The fields a 400 problem names in its `errors` list (which must not be empty)."""
    assert isinstance(body.get("errors"), list) and body["errors"], body
    return {error["field"] for error in body["errors"]}
