"""The Redis circuit (`apid.store.redis.RedisCircuit`): after a failure every script fails at
once, and the circuit probes on its own schedule (0.5, 1, 2, 4, 4... s) through a fresh pool,
which replaces the old one once it answers PING; the outage is logged once when it starts and
once when it ends. The schedule runs on a `task.Clock` with stand-in pools; the rest reaches a
real redis-server (stopped, frozen with SIGSTOP, requiring AUTH) through the real reactor."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import Clock, deferLater
from twisted.logger import LogLevel, globalLogPublisher

from apid.store.redis import PROBE_DELAYS, RedisCircuit, RedisUnreachable, redis_pool
from harness import free_port
from redis_server import RedisServer

SCRIPT = "return 1"


@pytest.fixture
def logged():
    events: list[dict] = []

    def observe(event: dict) -> None:
        if event.get("log_namespace") == "apid.store.redis":
            events.append(event)

    globalLogPublisher.addObserver(observe)
    yield events
    globalLogPublisher.removeObserver(observe)


class StandInPool:
    """What the circuit uses of a txredisapi pool; its answers are fired by the test."""

    def __init__(self) -> None:
        self._factory = SimpleNamespace(size=4, deferred=None)
        self.calls: list[Deferred] = []
        self.pings: list[Deferred] = []
        self.closed = False

    def eval(self, script: str, keys: list, args: list) -> Deferred:
        self.calls.append(Deferred())
        return self.calls[-1]

    def ping(self) -> Deferred:
        self.pings.append(Deferred())
        return self.pings[-1]

    def disconnect(self) -> Deferred:
        self.closed = True
        self._factory.size = 0
        return succeed(None)


def failed_at_once(circuit: RedisCircuit) -> bool:
    """Whether a script failed before this returned, with RedisUnreachable."""
    outcome: list = []
    circuit.run_script(SCRIPT, [], []).addBoth(outcome.append)
    if not outcome:
        return False
    assert outcome[0].check(RedisUnreachable), outcome[0]
    return True


async def until(predicate, seconds: float = 15) -> None:
    """Real time passes (the pool connects through the real reactor) until `predicate` holds."""
    for _ in range(int(seconds / 0.02)):
        if predicate():
            return
        await deferLater(reactor, 0.02, lambda: None)
    raise AssertionError("never happened")


def test_probes_back_off_to_a_cap_and_a_fresh_pool_that_answers_replaces_the_old(logged):
    pools: list[StandInPool] = []

    def connect() -> StandInPool:
        pools.append(StandInPool())
        return pools[-1]

    clock = Clock()
    circuit = RedisCircuit(connect=connect, clock=clock, timeout=2)
    first = circuit.pool
    calling = circuit.run_script(SCRIPT, [], [])
    clock.advance(2)  # no answer: the call times out and the circuit opens
    failure: list = []
    calling.addErrback(failure.append)
    assert failure[0].check(RedisUnreachable) and circuit.outage.down
    assert all(failed_at_once(circuit) for _ in range(20))
    assert PROBE_DELAYS == (0.5, 1.0, 2.0, 4.0)
    started = clock.seconds()
    probed_at = []
    for delay in (0.5, 1.0, 2.0, 4.0, 4.0, 4.0):
        count = len(pools)
        clock.advance(delay - 0.01)
        assert len(pools) == count  # not yet
        clock.advance(0.01)
        assert len(pools) == count + 1  # a fresh pool, PINGed at once
        probed_at.append(clock.seconds() - started)
        assert len(pools[-1].pings) == 1
        clock.advance(2)  # no PONG within the timeout: that attempt is closed
        assert pools[-1].closed and not first.closed
        started += 2
        assert failed_at_once(circuit)
    assert probed_at == pytest.approx([0.5, 1.5, 3.5, 7.5, 11.5, 15.5])
    clock.advance(4)
    fresh = pools[-1]
    fresh.pings[0].callback("PONG")
    assert circuit.pool is fresh and first.closed and not fresh.closed
    assert not circuit.outage.down
    running = circuit.run_script(SCRIPT, [], [])
    fresh.calls[0].callback(1)
    assert running.result == 1
    clock.advance(60)
    assert len(pools) == 8  # no more probing once closed
    levels = [event["log_level"] for event in logged]  # probes say nothing; calls failing are counted
    assert levels[0] == LogLevel.error and levels[-1] == LogLevel.info
    assert set(levels[1:-1]) <= {LogLevel.warn} and len(levels) <= 2 + 30 / 5


def test_a_call_failing_on_a_replaced_pool_does_not_open_the_circuit_again():
    pools: list[StandInPool] = []

    def connect() -> StandInPool:
        pools.append(StandInPool())
        return pools[-1]

    clock = Clock()
    circuit = RedisCircuit(connect=connect, clock=clock, timeout=2)
    late = circuit.run_script(SCRIPT, [], [])  # on the first pool, still waiting
    circuit.pool._factory.size = 0  # the pool lost its connections
    assert failed_at_once(circuit)
    clock.advance(PROBE_DELAYS[0])
    pools[-1].pings[0].callback("PONG")
    assert circuit.pool is pools[-1]
    clock.advance(2)  # the old pool's call times out
    late.addErrback(lambda failure: failure.trap(RedisUnreachable))
    assert not circuit.outage.down
    assert not failed_at_once(circuit)  # the call goes to the new pool


def test_stopping_ends_the_probing():
    pools: list[StandInPool] = []

    def connect() -> StandInPool:
        pools.append(StandInPool())
        return pools[-1]

    clock = Clock()
    circuit = RedisCircuit(connect=connect, clock=clock)
    circuit.pool._factory.size = 0
    assert failed_at_once(circuit)
    circuit.stop()
    clock.advance(60)
    assert len(pools) == 1 and pools[0].closed


@pytest_twisted.ensureDeferred
async def test_nothing_listening_one_call_waits_its_timeout_then_calls_fail_at_once_while_probes_fail(logged):
    port = free_port()
    clock = Clock()
    circuit = RedisCircuit(connect=lambda: redis_pool(f"redis://127.0.0.1:{port}/0"), clock=clock, timeout=2)
    try:
        first: list = []
        circuit.run_script(SCRIPT, [], []).addBoth(first.append)
        assert first == []  # the pool never connected: it cannot tell, and the call waits
        clock.advance(2)
        assert first[0].check(RedisUnreachable)
        assert all(failed_at_once(circuit) for _ in range(100))
        for delay in PROBE_DELAYS:
            clock.advance(delay)  # a probe through a fresh pool...
            clock.advance(2)  # ...that gets no PONG
            assert failed_at_once(circuit)
        levels = [event["log_level"] for event in logged]  # the probes say nothing
        assert levels[0] == LogLevel.error and set(levels[1:]) <= {LogLevel.warn} and len(levels) <= 1 + 17.5 / 5
        assert circuit.outage.down
    finally:
        await circuit.stop()


@pytest_twisted.ensureDeferred
async def test_redis_stopped_fails_every_call_at_once_and_started_again_a_probe_reconnects(logged):
    server = RedisServer().start()
    circuit = RedisCircuit(connect=lambda: redis_pool(server.url), clock=reactor)
    try:
        assert await circuit.run_script(SCRIPT, [], []) == 1
        first = circuit.pool
        await until(lambda: first._factory.deferred is None)  # every connection made
        server.halt()
        await until(lambda: first._factory.size == 0)  # the pool saw its connections close
        assert all(failed_at_once(circuit) for _ in range(50))
        assert circuit.outage.down
        server.resume()
        await until(lambda: not circuit.outage.down)  # a probe found it
        assert circuit.pool is not first
        assert await circuit.run_script(SCRIPT, [], []) == 1
        assert [event["log_level"] for event in logged] == [LogLevel.error, LogLevel.info]
        assert logged[-1]["count"] == 50  # the failed calls; the probe is no call
    finally:
        await circuit.stop()
        server.stop()


@pytest_twisted.ensureDeferred
async def test_redis_frozen_past_the_reply_timeout_with_auth_is_reconnected_after_it_continues(logged):
    """The issue's failure: a frozen server accepts TCP, AUTH times out, and txredisapi stops
    reconnecting for good; the circuit's probes do not depend on it."""
    server = RedisServer(password="s3cret").start()
    circuit = RedisCircuit(connect=lambda: redis_pool(server.url), clock=reactor)
    try:
        assert await circuit.run_script(SCRIPT, [], []) == 1
        first = circuit.pool
        server.freeze()
        with pytest.raises(RedisUnreachable):
            await circuit.run_script(SCRIPT, [], [])  # after the 2 s timeout
        assert circuit.outage.down
        await deferLater(reactor, 8, lambda: None)  # probes meet the frozen server: AUTH times out
        assert circuit.outage.down and failed_at_once(circuit)
        server.thaw()
        await until(lambda: not circuit.outage.down, seconds=8)  # within a probe's 4 s (+ its PING)
        assert circuit.pool is not first
        assert await circuit.run_script("return redis.call('INCR', 'k')", [], []) == 1
        levels = [event["log_level"] for event in logged]  # begun, a count of failed calls, over
        assert levels in ([LogLevel.error, LogLevel.info], [LogLevel.error, LogLevel.warn, LogLevel.info])
    finally:
        await circuit.stop()
        server.stop()


@pytest_twisted.ensureDeferred
async def test_a_wrong_password_is_an_outage_that_ends_when_it_is_right():
    server = RedisServer(password="right").start()
    password = ["wrong"]
    circuit = RedisCircuit(
        connect=lambda: redis_pool(f"redis://:{password[0]}@127.0.0.1:{server.port}/0"), clock=reactor, timeout=1
    )
    try:
        with pytest.raises(RedisUnreachable):
            await circuit.run_script(SCRIPT, [], [])
        assert circuit.outage.down
        password[0] = "right"
        await until(lambda: not circuit.outage.down, seconds=8)
        assert await circuit.run_script(SCRIPT, [], []) == 1
    finally:
        await circuit.stop()
        server.stop()


@pytest_twisted.ensureDeferred
async def test_a_script_error_is_redis_answering_not_an_outage(logged):
    server = RedisServer().start()
    circuit = RedisCircuit(connect=lambda: redis_pool(server.url), clock=Clock())
    try:
        with pytest.raises(Exception, match="ERR"):
            await circuit.run_script("return redis.call('NOSUCHCOMMAND')", [], [])
        assert not circuit.outage.down and logged == []
    finally:
        await circuit.stop()
        server.stop()
