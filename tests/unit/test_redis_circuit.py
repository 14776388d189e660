"""The Redis circuit (`apid.store.redis.RedisCircuit`): after a failure, scripts fail at once
for a second, then one probes; a pool that lost its connections fails them at once; the
outage is logged once when it starts and once when it ends. Time is a `task.Clock`; Redis is
a real redis-server (or a port where none listens), reached through the real reactor."""

from __future__ import annotations

import pytest
import pytest_twisted
from twisted.internet import reactor
from twisted.internet.task import Clock, deferLater
from twisted.logger import LogLevel, globalLogPublisher

from apid.store.redis import PROBE_SECONDS, RedisCircuit, RedisUnreachable, redis_pool
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


def failed_at_once(circuit: RedisCircuit) -> bool:
    """Whether a script failed before this returned, with RedisUnreachable."""
    outcome: list = []
    circuit.run_script(SCRIPT, [], []).addBoth(outcome.append)
    if not outcome:
        return False
    assert outcome[0].check(RedisUnreachable), outcome[0]
    return True


async def until(predicate, seconds: float = 10) -> None:
    """Real time passes (the pool connects through the real reactor) until `predicate` holds."""
    for _ in range(int(seconds / 0.02)):
        if predicate():
            return
        await deferLater(reactor, 0.02, lambda: None)
    raise AssertionError("never happened")


@pytest_twisted.ensureDeferred
async def test_nothing_listening_one_call_waits_its_timeout_then_calls_fail_at_once_and_one_probes(logged):
    pool = redis_pool(f"redis://127.0.0.1:{free_port()}/0")
    clock = Clock()
    circuit = RedisCircuit(pool, clock, timeout=2)
    try:
        first: list = []
        circuit.run_script(SCRIPT, [], []).addBoth(first.append)
        assert first == []  # the pool never connected: it cannot tell, and the call waits
        clock.advance(2)
        assert first[0].check(RedisUnreachable)
        assert all(failed_at_once(circuit) for _ in range(100))
        clock.advance(PROBE_SECONDS)
        probe: list = []
        circuit.run_script(SCRIPT, [], []).addBoth(probe.append)
        assert probe == []  # the probe goes to the pool...
        assert failed_at_once(circuit)  # ...the others do not wait for it
        clock.advance(2)
        assert probe[0].check(RedisUnreachable)
        assert failed_at_once(circuit)
        assert [event["log_level"] for event in logged] == [LogLevel.error]
        assert circuit.outage.down
    finally:
        await pool.disconnect()


@pytest_twisted.ensureDeferred
async def test_redis_stopped_fails_every_call_at_once_and_started_again_closes_the_circuit(logged):
    server = RedisServer().start()
    pool = redis_pool(server.url)
    clock = Clock()
    circuit = RedisCircuit(pool, clock)
    try:
        assert await circuit.run_script(SCRIPT, [], []) == 1
        await until(lambda: pool._factory.deferred is None)  # every connection made
        server.halt()
        await until(lambda: pool._factory.size == 0)  # the pool saw its connections close
        assert all(failed_at_once(circuit) for _ in range(50))  # no clock moved: none waited
        assert circuit.outage.down
        server.resume()
        await until(lambda: pool._factory.size > 0)  # the pool reconnects within 2 s
        assert failed_at_once(circuit)  # the circuit is open until its second is over
        clock.advance(PROBE_SECONDS)
        assert await circuit.run_script(SCRIPT, [], []) == 1  # the probe
        assert not circuit.outage.down
        assert await circuit.run_script(SCRIPT, [], []) == 1
        assert [event["log_level"] for event in logged] == [LogLevel.error, LogLevel.info]
        assert logged[-1]["count"] == 51
    finally:
        await pool.disconnect()
        server.stop()


@pytest_twisted.ensureDeferred
async def test_a_script_error_is_redis_answering_not_an_outage(logged):
    server = RedisServer().start()
    pool = redis_pool(server.url)
    circuit = RedisCircuit(pool, Clock())
    try:
        with pytest.raises(Exception, match="ERR"):
            await circuit.run_script("return redis.call('NOSUCHCOMMAND')", [], [])
        assert not circuit.outage.down and logged == []
    finally:
        await pool.disconnect()
        server.stop()
