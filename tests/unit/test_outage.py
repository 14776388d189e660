"""An outage is logged once when it starts, then as a count at most every few seconds, and once
when it ends; /health fails while it lasts; a probe finds its end (`apid.store.outage`), on a
`task.Clock`."""

from __future__ import annotations

import pytest
from twisted.internet.defer import fail, succeed
from twisted.internet.task import Clock
from twisted.logger import Logger, LogLevel, globalLogPublisher

from apid.store.outage import PROBE_SECONDS, REPORT_SECONDS, Outage, describe
from apid.telemetry.health import Health

log = Logger(namespace="test.outage")


@pytest.fixture
def logged():
    events: list[dict] = []

    def observe(event: dict) -> None:
        if event.get("log_namespace") == "test.outage":
            events.append(event)

    globalLogPublisher.addObserver(observe)
    yield events
    globalLogPublisher.removeObserver(observe)


def levels(events: list[dict]) -> list[LogLevel]:
    return [event["log_level"] for event in events]


def test_a_thousand_failures_are_one_error_then_a_count_every_few_seconds_then_one_end(logged):
    clock = Clock()
    outage = Outage(clock=clock, log=log, subject="the thing", consequence="calls answer 503")
    for _ in range(1000):  # 10 s of 100 failures a second
        outage.failed(ConnectionRefusedError("refused"))
        clock.advance(0.01)
    assert outage.down
    assert levels(logged) == [LogLevel.error, LogLevel.warn]  # at 0 s, then at 5 s
    assert logged[0]["subject"] == "the thing" and logged[0]["error"] == "ConnectionRefusedError: refused"
    assert abs(logged[1]["count"] - REPORT_SECONDS * 100) <= 2  # the failures of those 5 s (the clock's floats aside)
    outage.recovered()
    outage.recovered()  # said once
    assert not outage.down
    assert levels(logged) == [LogLevel.error, LogLevel.warn, LogLevel.info]
    assert logged[-1]["count"] == 1000
    outage.failed(ConnectionRefusedError("again"))  # a new outage is a new error
    assert levels(logged)[-1] == LogLevel.error


def test_health_fails_while_the_outage_lasts():
    clock, health = Clock(), Health()
    outage = Outage(clock=clock, log=log, subject="database", consequence="calls answer 503")
    outage.report_to(health, "database")
    assert health.document("0.1")[0] == 200
    outage.failed(OSError("down"))
    status, body = health.document("0.1")
    assert status == 503 and body["checks"]["database"][0]["output"] == "database unreachable"
    outage.recovered()
    assert health.document("0.1")[0] == 200


def test_a_probe_runs_every_second_while_down_and_ends_the_outage_when_it_answers():
    clock = Clock()
    answers = [fail(OSError("still down")), fail(OSError("still down")), succeed(None)]
    probed: list[float] = []

    def probe():
        probed.append(clock.seconds())
        return answers.pop(0)

    outage = Outage(clock=clock, log=log, subject="database", consequence="calls answer 503", probe=probe)
    clock.advance(10)
    assert probed == []  # no probe while all is well
    outage.failed(OSError("down"))
    outage.failed(OSError("down"))  # one probe schedule, whatever the failures
    for _ in range(5):
        clock.advance(PROBE_SECONDS)
    assert probed == [11.0, 12.0, 13.0]
    assert not outage.down
    assert clock.getDelayedCalls() == []


def test_stopping_cancels_the_probe():
    clock = Clock()
    outage = Outage(
        clock=clock, log=log, subject="database", consequence="calls answer 503", probe=lambda: succeed(None)
    )
    outage.failed(OSError("down"))
    outage.stop()
    assert clock.getDelayedCalls() == []


def test_an_error_is_described_by_its_cause_in_one_line():
    class Wrapped(Exception):
        orig = ConnectionRefusedError("connection refused\nIs the server running?")

    assert describe(Wrapped("(psycopg.OperationalError) ... [SQL: SELECT 1]")) == (
        "ConnectionRefusedError: connection refused"
    )
    assert describe(TimeoutError()) == "TimeoutError"
