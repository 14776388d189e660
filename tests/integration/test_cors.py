"""CORS: preflights and answers for allowed origins carry the headers; others carry none; a
page of an allowed origin can revalidate with the ETag and write with If-Match."""

from __future__ import annotations

from assertions import assert_problem
from harness import ADMIN, V, new_person

EXPOSED = {
    *("Deprecation", "ETag", "Idempotent-Replayed", "Link", "RateLimit", "RateLimit-Policy", "Retry-After"),
    *("Next-Offset", "Sunset", "X-Request-ID"),
}

ALLOWED = "http://localhost:3000"  # listed in etc/service_api.yml cors.allowedOrigins
OTHER = "http://evil.example"


def preflight(
    daemon,
    origin: str,
    path: str = f"{V}/person/show/1",
    method: str = "GET",
    headers: str = "authorization, x-link_relations",
):
    return daemon.request(
        "OPTIONS",
        path,
        headers={"Origin": origin, "Access-Control-Request-Method": method, "Access-Control-Request-Headers": headers},
    )


def listed(value: str) -> set[str]:
    return {name.strip().lower() for name in value.split(",")}


def test_a_preflight_from_an_allowed_origin_is_answered_without_a_token(daemon):
    reply = preflight(daemon, ALLOWED)
    assert reply.status == 204
    headers = reply.headers
    assert headers["Access-Control-Allow-Origin"] == ALLOWED
    assert headers["Access-Control-Allow-Credentials"] == "true"
    assert headers["Vary"] == "Origin"
    assert {m.strip() for m in headers["Access-Control-Allow-Methods"].split(",")} == {"GET", "POST", "PUT", "DELETE"}
    allowed_headers = {h.strip().lower() for h in headers["Access-Control-Allow-Headers"].split(",")}
    assert {
        "authorization",
        "content-type",
        "if-match",
        "if-none-match",
        "x-link_relations",
        "x-link-relations",
        "x-request-id",
    } <= allowed_headers
    assert headers["Access-Control-Max-Age"] == "600"
    assert reply.body == b""


def test_a_preflight_from_another_origin_gets_no_cors_headers(daemon):
    reply = preflight(daemon, OTHER)
    assert not [name for name in reply.headers if name.lower().startswith("access-control-")]
    assert reply.headers["Vary"] == "Origin"


def test_an_answer_to_an_allowed_origin_echoes_it_and_exposes_the_headers(daemon, admin_token):
    reply = daemon.request("GET", f"{V}/person/show/1", token=admin_token, headers={"Origin": ALLOWED})
    assert reply.status == 200
    assert reply.headers["Access-Control-Allow-Origin"] == ALLOWED
    assert reply.headers["Access-Control-Allow-Credentials"] == "true"
    exposed = {h.strip() for h in reply.headers["Access-Control-Expose-Headers"].split(",")}
    assert exposed == EXPOSED
    assert reply.headers["Vary"] == "Origin"
    assert reply.json["username"] == ADMIN[0]


def test_an_answer_to_another_origin_carries_no_cors_headers(daemon, admin_token):
    reply = daemon.request("GET", f"{V}/person/show/1", token=admin_token, headers={"Origin": OTHER})
    assert reply.status == 200
    assert not [name for name in reply.headers if name.lower().startswith("access-control-")]


def test_errors_to_an_allowed_origin_are_readable_too(daemon):
    reply = daemon.request("GET", f"{V}/person/show/1", headers={"Origin": ALLOWED})
    assert reply.status == 401
    assert reply.headers["Access-Control-Allow-Origin"] == ALLOWED


def test_without_an_origin_nothing_changes_but_the_answer_varies_by_origin(daemon, admin_token):
    reply = daemon.request("OPTIONS", f"{V}/person/show/1")
    assert reply.status == 401
    assert "Access-Control-Allow-Origin" not in reply.headers
    # a cache must not hand this answer, without CORS headers, to a page of an allowed origin
    answer = daemon.request("GET", f"{V}/person/show/1", token=admin_token)
    assert (answer.status, answer.headers["Vary"]) == (200, "Origin")


def test_a_page_of_an_allowed_origin_revalidates_and_writes_with_if_match(daemon, admin_token):
    """What a browser does for a page on another origin, request by request: the preflights
    allow the conditional headers, the ETag is exposed, a 304 and a 412 are readable."""
    someone = new_person(daemon, admin_token)
    show, update = f"{V}/person/show/{someone['id']}", f"{V}/person/update/{someone['id']}"
    cross = {"Origin": ALLOWED}

    asked = "authorization, if-none-match"
    allowed = preflight(daemon, ALLOWED, show, "GET", asked)
    assert allowed.status == 204 and listed(asked) <= listed(allowed.headers["Access-Control-Allow-Headers"])
    read = daemon.request("GET", show, token=admin_token, headers=cross)
    assert read.headers["Access-Control-Allow-Origin"] == ALLOWED
    assert "ETag" in {name.strip() for name in read.headers["Access-Control-Expose-Headers"].split(",")}
    tag = read.headers["ETag"]
    same = daemon.request("GET", show, token=admin_token, headers={**cross, "If-None-Match": tag})
    assert (same.status, same.headers["ETag"], same.headers["Access-Control-Allow-Origin"]) == (304, tag, ALLOWED)

    asked = "authorization, content-type, if-match"
    allowed = preflight(daemon, ALLOWED, update, "PUT", asked)
    assert allowed.status == 204 and "PUT" in allowed.headers["Access-Control-Allow-Methods"]
    assert listed(asked) <= listed(allowed.headers["Access-Control-Allow-Headers"])
    written = daemon.request(
        "PUT", update, {"email": "cors@example.com"}, token=admin_token, headers={**cross, "If-Match": tag}
    )
    assert written.status == 200, written.body
    assert written.headers["Access-Control-Allow-Origin"] == ALLOWED
    assert listed(written.headers["Access-Control-Expose-Headers"]) >= {"etag", "x-request-id"}
    stale = daemon.request(
        "PUT", update, {"email": "stale@example.com"}, token=admin_token, headers={**cross, "If-Match": tag}
    )
    assert_problem(stale, 412)
    assert stale.headers["Access-Control-Allow-Origin"] == ALLOWED
