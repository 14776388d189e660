"""API calls reach their handler by apid's own path grammar; an API path no call can be made on
is a 404 or 405 problem from the same router; every other path goes to the Klein routes
(`apid.server.dispatch`)."""

from __future__ import annotations

import pytest
from twisted.internet.defer import CancelledError, Deferred
from twisted.python.failure import Failure
from twisted.web.http import Request
from twisted.web.resource import Resource

from apid.http.answers import write_json, write_problem
from apid.problems import NotFound, Problem
from apid.server.dispatch import ApiDispatch
from assertions import assert_problem
from http_in_memory import Connection

METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"]


class Routes(Resource):
    """Stands in for the Klein routes: says it answered."""

    isLeaf = True

    def render(self, request: Request) -> bytes:
        return write_json(request, {"routes": request.path.decode()})


class Api:
    """The API handler: answers the segments it was given, raises for `show/404`, and waits
    for `slow` until told."""

    def __init__(self) -> None:
        self.waiting: Deferred[None] = Deferred()
        self.cancelled = False

    async def handle(self, request: Request, *segments: str) -> bytes:
        if segments[-1] == "404":
            raise NotFound("no such record")
        if "slow" in segments:
            try:
                await self.waiting
            except CancelledError:
                self.cancelled = True
                raise
        return write_json(request, {"segments": list(segments)})


def failed(request: Request, failure: Failure) -> bytes:
    failure.trap(Problem)
    return write_problem(request, failure.value)


@pytest.fixture
def api() -> Api:
    return Api()


def connect(api: Api) -> Connection:
    return Connection(
        ApiDispatch(handle=api.handle, failed=failed, methods=METHODS, routes=Routes(), claimed=[b"v9.9"])
    )


def get(api: Api, target: bytes, method: bytes = b"GET"):
    return connect(api).send(method + b" " + target + b" HTTP/1.1\r\nHost: x\r\n\r\n").only_answer()


@pytest.mark.parametrize(
    "target, segments",
    [
        (b"/v0.1/person/show/7", ["v0.1", "person", "show", "7"]),
        (b"/v0.1/person/show/7/", ["v0.1", "person", "show", "7"]),
        (b"/b0.1-2/person/create?x=1", ["b0.1-2", "person", "create"]),
        (b"/c0.1/person", ["c0.1", "person"]),
        (b"/v0.1/person/show/caf%C3%A9", ["v0.1", "person", "show", "café"]),
    ],
)
def test_an_api_call_reaches_its_handler_with_its_segments(api, target, segments):
    answer = get(api, target)
    assert answer.status == 200 and answer.json == {"segments": segments}
    assert answer.headers["Content-Length"] == str(len(answer.body))
    assert "Transfer-Encoding" not in answer.headers


@pytest.mark.parametrize(
    "target, method",
    [
        (b"/health", b"GET"),
        (b"/", b"GET"),
        (b"/x0.1/person/show", b"GET"),  # not an API prefix
        (b"/v9.9/person/show", b"GET"),  # a first segment a route claims
        (b"/v9.9/person/show", b"TRACE"),
    ],
)
def test_every_path_that_is_no_api_call_goes_to_the_routes(api, target, method):
    answer = get(api, target, method)
    assert answer.status == 200 and "routes" in answer.json


@pytest.mark.parametrize(
    "target",
    [
        b"/v0.1",  # one segment
        b"/v0.1/",
        b"/b0.1",
        b"/v0.1/person/show/7/extra",  # five
        b"/v0.1//person",  # an empty segment
        b"/v0.1/person/show/7//",
        b"/v0.1/person/show/a%2Fb",  # an encoded slash
        b"/v0.1/person/show/a%2fb",
    ],
)
def test_an_api_path_no_call_can_be_made_on_is_404_here(api, target):
    answer = get(api, target)
    assert assert_problem(answer, 404)["detail"] == f"no resource at {target.decode()}"


@pytest.mark.parametrize("method", [b"TRACE", b"FOO"])
def test_an_api_path_called_with_a_method_no_call_takes_is_405_with_allow(api, method):
    answer = get(api, b"/v0.1/person/show", method)
    assert assert_problem(answer, 405)["detail"] == f"/v0.1/person/show is not called with {method.decode()}"
    assert answer.headers["Allow"] == ", ".join(sorted(METHODS))


def test_a_problem_raised_is_answered_with_its_length(api):
    answer = get(api, b"/v0.1/person/show/404")
    assert assert_problem(answer, 404)["detail"] == "no such record"
    assert answer.headers["Content-Length"] == str(len(answer.body))


def test_head_answers_the_length_of_the_body_it_leaves_out(api):
    connection = connect(api).send(b"HEAD /v0.1/person/show/7 HTTP/1.1\r\nHost: x\r\n\r\n")
    head, _, rest = connection.transport.value().partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and rest == b""
    assert b"Content-Length: %d" % len(b'{"segments":["v0.1","person","show","7"]}') in head


def test_a_client_that_hangs_up_cancels_its_call_and_gets_nothing(api):
    connection = connect(api).send(b"GET /v0.1/slow/show HTTP/1.1\r\nHost: x\r\n\r\n")
    connection.channel.connectionLost(Failure(ConnectionError("gone")))
    assert api.cancelled
    assert connection.transport.value() == b""


def test_a_call_that_finishes_is_answered_once(api):
    connection = connect(api).send(b"GET /v0.1/slow/show HTTP/1.1\r\nHost: x\r\n\r\n")
    assert connection.transport.value() == b""
    api.waiting.callback(None)
    assert connection.only_answer().json == {"segments": ["v0.1", "slow", "show"]}
