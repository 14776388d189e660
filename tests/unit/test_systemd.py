"""What apid tells systemd (apid.server.systemd): the watchdog's interval as systemd sets it, the
keep-alives at half of it while the liveness check passes, and the reload's messages."""

from __future__ import annotations

import os
import socket
import time

import pytest
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.task import Clock

from apid.server.systemd import KeepAlive, notify, reloaded, reloading, watchdog_seconds


@pytest.fixture
def notify_socket(tmp_path, monkeypatch):
    """A stand-in for systemd's notify socket, as $NOTIFY_SOCKET names it."""
    path = tmp_path / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind(str(path))
        listener.setblocking(False)
        monkeypatch.setenv("NOTIFY_SOCKET", str(path))
        yield listener


def received(listener: socket.socket) -> list[str]:
    messages = []
    while True:
        try:
            messages.append(listener.recv(4096).decode())
        except BlockingIOError:
            return messages


def test_the_watchdog_interval_is_systemds_and_meant_for_this_process_only():
    assert watchdog_seconds({"WATCHDOG_USEC": "30000000"}) == 30.0
    assert watchdog_seconds({"WATCHDOG_USEC": "2500000", "WATCHDOG_PID": str(os.getpid())}) == 2.5
    assert watchdog_seconds({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(os.getpid() + 1)}) is None
    assert watchdog_seconds({}) is None
    assert watchdog_seconds({"WATCHDOG_USEC": "0"}) is None
    assert watchdog_seconds({"WATCHDOG_USEC": "soon"}) is None


def test_keep_alives_go_at_half_the_interval_while_the_check_passes(notify_socket):
    clock = Clock()
    answers: list[Deferred[bool]] = []
    keep_alive = KeepAlive(clock, 4.0, lambda: answers.pop(0))
    answers += [succeed(True), succeed(True), succeed(False), fail(RuntimeError("broken")), succeed(True)]
    keep_alive.start()  # the first check at once
    assert received(notify_socket) == ["WATCHDOG=1"]
    clock.advance(2)
    assert received(notify_socket) == ["WATCHDOG=1"]
    clock.advance(2)  # a worker did not answer
    clock.advance(2)  # the check itself failed
    assert received(notify_socket) == []
    clock.advance(2)  # everybody answers again
    assert received(notify_socket) == ["WATCHDOG=1"]


def test_a_slow_check_delays_the_next_keep_alive(notify_socket):
    clock = Clock()
    pending: Deferred[bool] = Deferred()
    checks = [succeed(True), pending, succeed(True)]
    KeepAlive(clock, 4.0, lambda: checks.pop(0)).start()
    assert received(notify_socket) == ["WATCHDOG=1"]
    clock.advance(2)
    clock.advance(2)  # still waiting for an answer: no second check, no keep-alive
    assert (received(notify_socket), len(checks)) == ([], 1)
    pending.callback(True)
    assert received(notify_socket) == ["WATCHDOG=1"]


def test_a_reload_is_announced_with_the_monotonic_clock_and_its_outcome_follows(notify_socket):
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    notify(reloading())
    after = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    [message] = received(notify_socket)
    first, second = message.split("\n")
    assert first == "RELOADING=1"
    assert second.startswith("MONOTONIC_USEC=") and before <= int(second.split("=")[1]) <= after
    assert reloaded(None) == "READY=1\nSTATUS=serving; IO State reloaded"
    assert reloaded("person.json: role ROLE_NOBODY\nis not a role") == (
        "READY=1\nSTATUS=IO State reload refused, the rules in force stay: person.json: role ROLE_NOBODY "
        "is not a role\nERRNO=22"
    )


def test_nothing_is_sent_outside_systemd(monkeypatch):
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    notify("READY=1")  # no socket to send to, no error
