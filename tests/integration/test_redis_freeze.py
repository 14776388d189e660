"""Redis frozen under load (issue 39, "A Redis that pauses never comes back"): a redis-server
requiring AUTH is stopped with SIGSTOP for 10 s, past the 2 s reply timeout, while a client
calls the daemon; it still accepts TCP, so AUTH on every new connection times out, and
txredisapi gives up reconnecting for good. The daemon must serve normally, every call counted
in Redis, within a few seconds of SIGCONT, in every process; while it is frozen, calls go
through uncounted (`onFailure: open`) or answer 503 and /health fails (`closed`, a hard
dependency); each process logs the outage once when it starts and once when it ends.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from harness import ADMIN, Daemon, V, deployment_with_accounts, wait_for
from redis_server import RedisServer

SHOW = f"{V}/person/show/1"
RECOVERY_SECONDS = 8  # the probe's longest wait (4 s) and its PING, with room for a loaded machine


@contextmanager
def frozen_redis_daemon(root, on_failure: str, workers: int) -> Iterator[tuple[Daemon, RedisServer]]:
    """A daemon (of `workers` worker processes, above 1) counting its limits in a Redis of its
    own that requires a password."""
    redis = RedisServer(password="frozen-test").start()
    api: dict = {"throttle": {"rateLimit": {"ROLE_USER": 100000, "ROLE_ADMIN": 100000}}}
    if workers > 1:
        api["procCores"] = workers
    deployment = deployment_with_accounts(
        root,
        server={"apiThrottle": True, "redis": {"url": redis.url, "onFailure": on_failure}, "logFormat": "json"},
        api=api,
    )
    daemon = Daemon(deployment).start()
    try:
        yield daemon, redis
    finally:
        daemon.stop()
        redis.stop()


class Stream:
    """A client thread calling SHOW until stopped, keeping (time, status, counted) of each answer."""

    def __init__(self, daemon: Daemon, token: str) -> None:
        self._daemon, self._token = daemon, token
        self._stopping = threading.Event()
        self.answers: list[tuple[float, int, bool]] = []
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Stream:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stopping.set()
        self._thread.join(60)

    def _run(self) -> None:
        while not self._stopping.is_set():
            reply = self._daemon.request("GET", SHOW, token=self._token, timeout=30)
            self.answers.append((time.monotonic(), reply.status, counted(reply)))
            time.sleep(0.02)


def counted(reply) -> bool:
    """Whether the call was counted: its answer carries the RateLimit fields."""
    return reply.status == 200 and "RateLimit" in reply.headers


def counted_in_redis(redis: RedisServer) -> int:
    """The admin's calls counted in Redis now (the rate limiter's key for user 1)."""
    reply = subprocess.run(
        ["redis-cli", "-p", str(redis.port), "-a", redis.password, "--no-auth-warning", "GET", "apid:throttle:count:1"],
        capture_output=True,
        text=True,
        timeout=10,
        check=True,
    )
    return int(reply.stdout.strip() or 0)


def events(daemon: Daemon, offset: int) -> list[dict]:
    return [json.loads(line) for line in daemon.stderr[offset:].splitlines() if line.startswith("{")]


@pytest.mark.parametrize(("on_failure", "workers"), [("open", 1), ("closed", 1), ("closed", 2)])
def test_redis_frozen_past_its_timeout_serves_normally_within_seconds_of_continuing(tmp_path, on_failure, workers):
    with frozen_redis_daemon(tmp_path, on_failure, workers) as (daemon, redis):
        admin = daemon.login(*ADMIN[:2])
        assert wait_for(lambda: all(counted(daemon.request("GET", SHOW, token=admin)) for _ in range(10)))
        offset = len(daemon.stderr)
        with Stream(daemon, admin) as stream:
            redis.freeze()
            frozen = time.monotonic()
            try:
                if on_failure == "closed":  # a hard dependency: the balancer must route around
                    assert wait_for(lambda: all(refused_health(daemon) for _ in range(2 * workers)), timeout=8)
                time.sleep(max(0.0, frozen + 10 - time.monotonic()))
                if on_failure == "open":  # a soft dependency: routing away would help no one
                    assert daemon.request("GET", "/health", timeout=10).status == 200
                while_frozen = [(status, was_counted) for at, status, was_counted in stream.answers if at > frozen + 3]
                expected = 200 if on_failure == "open" else 503
                assert while_frozen and {status for status, _ in while_frozen} == {expected}, while_frozen
                assert not any(was_counted for _, was_counted in while_frozen)
            finally:
                redis.thaw()
            thawed = time.monotonic()
            assert wait_for(lambda: serves_normally(daemon, admin, 10 * workers), timeout=RECOVERY_SECONDS), (
                f"not serving normally {RECOVERY_SECONDS} s after SIGCONT"
            )
            recovered = time.monotonic()
            time.sleep(1)
        assert all(status == 200 and was_counted for at, status, was_counted in stream.answers if at > recovered)
        before = counted_in_redis(redis)
        replies = [daemon.request("GET", SHOW, token=admin) for _ in range(10 * workers)]
        assert all(counted(reply) for reply in replies)
        assert counted_in_redis(redis) == before + 10 * workers  # every process counts in Redis again
        assert daemon.request("GET", "/health").status == 200
        logged = events(daemon, offset)
        circuit = [event for event in logged if event["namespace"] == "apid.store.redis"]
        starts = [event for event in circuit if "unreachable (" in event["message"]]
        ends = [event for event in circuit if "reachable again" in event["message"]]
        assert len(starts) == len(ends) == workers, circuit  # once per process and outage
        assert {event.get("worker") for event in ends} == ({None} if workers == 1 else set(range(workers)))
        attempts = [
            event for event in logged if "Scheduling retry" in event["message"] or "Redis error" in event["message"]
        ]
        assert attempts == []  # no line per reconnection attempt
        assert recovered - thawed < RECOVERY_SECONDS


def refused_health(daemon: Daemon) -> bool:
    """Whether /health answers 503 with Redis as the failing check."""
    reply = daemon.request("GET", "/health", timeout=10)
    return reply.status == 503 and "redis" in reply.json.get("checks", {})


def serves_normally(daemon: Daemon, token: str, calls: int) -> bool:
    """Whether `calls` calls in a row (over every process) answer 200 counted, and /health 200."""
    return all(counted(daemon.request("GET", SHOW, token=token)) for _ in range(calls)) and all(
        daemon.request("GET", "/health").status == 200 for _ in range(calls)
    )
