"""CORS: preflights and answers for allowed origins carry the headers; others carry none."""

from __future__ import annotations

from harness import ADMIN, V

ALLOWED = "http://localhost:3000"  # listed in etc/service_api.yml cors.allowedOrigins
OTHER = "http://evil.example"


def preflight(daemon, origin: str, path: str = f"{V}/person/show/1"):
    return daemon.request(
        "OPTIONS",
        path,
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": "GET",
            "Access-Control-Request-Headers": "authorization, x-link_relations",
        },
    )


def test_a_preflight_from_an_allowed_origin_is_answered_without_a_token(daemon):
    reply = preflight(daemon, ALLOWED)
    assert reply.status == 204
    headers = reply.headers
    assert headers["Access-Control-Allow-Origin"] == ALLOWED
    assert headers["Access-Control-Allow-Credentials"] == "true"
    assert headers["Vary"] == "Origin"
    assert {m.strip() for m in headers["Access-Control-Allow-Methods"].split(",")} == {"GET", "POST", "PUT", "DELETE"}
    allowed_headers = {h.strip().lower() for h in headers["Access-Control-Allow-Headers"].split(",")}
    assert {"authorization", "content-type", "x-link_relations", "x-link-relations", "x-request-id"} <= allowed_headers


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
    assert exposed == {"Link", "RateLimit", "RateLimit-Policy", "Retry-After", "X-Request-ID"}
    assert reply.json["username"] == ADMIN[0]


def test_an_answer_to_another_origin_carries_no_cors_headers(daemon, admin_token):
    reply = daemon.request("GET", f"{V}/person/show/1", token=admin_token, headers={"Origin": OTHER})
    assert reply.status == 200
    assert not [name for name in reply.headers if name.lower().startswith("access-control-")]


def test_errors_to_an_allowed_origin_are_readable_too(daemon):
    reply = daemon.request("GET", f"{V}/person/show/1", headers={"Origin": ALLOWED})
    assert reply.status == 401
    assert reply.headers["Access-Control-Allow-Origin"] == ALLOWED


def test_without_an_origin_nothing_changes(daemon):
    reply = daemon.request("OPTIONS", f"{V}/person/show/1")
    assert reply.status == 401
    assert "Access-Control-Allow-Origin" not in reply.headers
