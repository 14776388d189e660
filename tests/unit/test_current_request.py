"""A call's error event carries the request's id and the endpoint (`apid.http.current_request`): the
X-Request-ID a client got finds the traceback, even when the action failed later, from a
callback that runs outside the call's coroutine (as a database thread's answer does)."""

from __future__ import annotations

from pathlib import Path

import pytest
from twisted.internet.task import deferLater
from twisted.logger import LogLevel, globalLogPublisher
from twisted.web.http import Request

from apid.auth.tokens import Principal
from apid.calls.pipeline import CallRequest, Pipeline
from apid.config.files import load_api
from apid.http.routes import answer_failure
from apid.iostate import RuleSet, parse_text
from apid.plugin import Call, Controller, action
from apid.server.dispatch import ApiDispatch
from http_in_memory import Connection

ROOT = Path(__file__).resolve().parents[2]
SECURITY = load_api(ROOT / "etc" / "service_api.yml", ROOT).security
RULES = RuleSet(controllers={"person": parse_text((ROOT / "iostate" / "person.json").read_text(), "p", SECURITY)})
ADMIN = Principal(user_id=1, username="root", roles=frozenset({"ROLE_ADMIN"}), token_id="t", expires=0, issued_at=0.0)


@pytest.fixture
def logged():
    events: list[dict] = []

    def observe(event: dict) -> None:
        if event.get("log_level") in (LogLevel.error, LogLevel.critical):
            events.append(event)

    globalLogPublisher.addObserver(observe)
    yield events
    globalLogPublisher.removeObserver(observe)


def serve(answer) -> tuple[Connection, Pipeline]:
    """A connection to the router of API calls, each run through the pipeline as the admin."""

    class People(Controller):
        name = "person"

        @action
        def show(self, call: Call):
            return answer()

    pipeline = Pipeline(
        rules=lambda: RULES, controllers={"person": People(None)}, superuser_role=SECURITY.superuser_role
    )

    async def handle(request: Request, prefix: str, controller: str, name: str, id: str | None = None) -> bytes:
        await pipeline.run(ADMIN, CallRequest(controller=controller, action=name, api_version=None, method="GET"))
        return b"{}"

    return Connection(
        ApiDispatch(handle=handle, failed=answer_failure, methods=["GET"], routes=None, claimed=())
    ), pipeline


def test_an_action_failing_later_is_logged_with_the_request_id_and_the_endpoint(logged):
    holder: dict = {}

    def later():
        def broken():
            raise KeyError("no such thing")

        return deferLater(holder["clock"], 1, broken)  # fails from the clock, outside the call

    connection, _ = serve(later)
    holder["clock"] = connection.clock
    connection.send(b"GET /v0.1/person/show/1 HTTP/1.1\r\nHost: x\r\nX-Request-ID: client-7f3a\r\n\r\n")
    connection.clock.advance(1)
    answer = connection.only_answer()
    assert answer.status == 500 and answer.headers["X-Request-ID"] == "client-7f3a"
    (event,) = [event for event in logged if event.get("log_namespace") == "apid.pipeline"]
    assert event["requestId"] == "client-7f3a" and event["endpoint"] == "person/show"
    assert event["log_failure"].check(KeyError)


def test_an_action_failing_at_once_is_logged_with_a_made_request_id(logged):
    def broken():
        raise RuntimeError("broken")

    connection, _ = serve(broken)
    connection.send(b"GET /v0.1/person/show/1 HTTP/1.1\r\nHost: x\r\n\r\n")
    answer = connection.only_answer()
    assert answer.status == 500
    (event,) = [event for event in logged if event.get("log_namespace") == "apid.pipeline"]
    assert event["requestId"] == answer.headers["X-Request-ID"] == answer.json["requestId"]
