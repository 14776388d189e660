"""The hand-written servers scripts/bench measures apid against (scripts/anchors/, issue 16), and
the floors of the same work (twisted_floor.py, issue 37), do apid's work: for the same token
they answer `person/show` with apid's body, 401 without a valid token and 404 for no row, so
that the comparison is of the same call.
"""

from __future__ import annotations

import http.client
import importlib.util

import jwt
import pytest

from harness import Response, V, running_anchor

FASTAPI_STACK = ("fastapi", "uvicorn", "httptools", "uvloop")
fastapi_missing = any(importlib.util.find_spec(name) is None for name in FASTAPI_STACK)
pytestmark = pytest.mark.skipif(fastapi_missing, reason="the bench extra (fastapi, uvicorn) is not installed")


def get(port: int, path: str, token: str | None = None) -> Response:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", path, headers={"Authorization": f"Bearer {token}"} if token else {})
        reply = connection.getresponse()
        return Response(reply.status, reply.headers, reply.read())
    finally:
        connection.close()


@pytest.fixture(
    scope="module",
    params=[("klein_server", ()), ("fastapi_server", ()), ("twisted_floor", ()), ("twisted_floor", ("--inline",))],
    ids=["klein", "fastapi", "floor", "floor-inline"],
)
def anchor_port(request, deployment, daemon) -> int:
    # after the daemon: its first start writes the JWT secret file the anchors read
    script, args = request.param
    with running_anchor(script, deployment, args) as (_, port):
        yield port


def test_answers_as_apid_does_for_the_same_token(anchor_port, daemon, admin_token, user_token, user_id):
    for token, path in (
        (admin_token, f"{V}/person/show/1"),
        (admin_token, f"{V}/person/show/{user_id}"),
        (user_token, f"{V}/person/show/{user_id}"),
    ):
        expected = daemon.request("GET", path, token=token)
        answer = get(anchor_port, path, token)
        assert (answer.status, answer.content_type, answer.json) == (200, "application/json", expected.json)


def test_refuses_a_missing_or_forged_token(anchor_port, admin_token):
    forged = jwt.encode(
        {**jwt.decode(admin_token, options={"verify_signature": False})}, "another-secret-" * 3, algorithm="HS256"
    )
    assert get(anchor_port, f"{V}/person/show/1").status == 401
    assert get(anchor_port, f"{V}/person/show/1", forged).status == 401


def test_no_row_is_404(anchor_port, admin_token):
    assert get(anchor_port, f"{V}/person/show/99999", admin_token).status == 404
