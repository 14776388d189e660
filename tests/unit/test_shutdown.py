"""The phases of a stop (apid.server.shutdown), on the reactor's clock: /health fails for the health
drain, then requests in flight get the drain; a parent gone hurries both."""

from __future__ import annotations

from twisted.internet import defer
from twisted.internet.task import Clock

from apid.config.server import ShutdownConfig
from apid.server.shutdown import TICK, Shutdown
from apid.telemetry.health import Health


def test_health_fails_for_the_health_drain_then_the_drain_runs_to_its_deadline():
    clock, health = Clock(), Health()
    shutdown = Shutdown(clock, ShutdownConfig(health_drain=5.0, drain=20.0))
    draining = defer.ensureDeferred(shutdown.health_drain(health))
    assert "draining" in health.failing and not draining.called
    clock.pump([TICK] * int(4.9 / TICK))
    assert not draining.called
    clock.pump([TICK] * 3)
    assert draining.called and shutdown.deadline == 25.0
    finished = defer.ensureDeferred(shutdown.drain(lambda: False))
    clock.pump([TICK] * int(19.8 / TICK))
    assert not finished.called
    clock.pump([TICK] * 6)
    assert finished.called


def test_a_drain_ends_as_soon_as_nothing_is_left():
    clock = Clock()
    shutdown = Shutdown(clock, ShutdownConfig(health_drain=0.0, drain=20.0))
    left = [3]

    def done() -> bool:
        left[0] -= 1
        return left[0] <= 0

    finished = defer.ensureDeferred(shutdown.drain(done))
    clock.pump([TICK] * 2)
    assert finished.called and clock.seconds() < 1


def test_a_parent_gone_hurries_a_stop_under_way():
    clock = Clock()
    shutdown = Shutdown(clock, ShutdownConfig(health_drain=5.0, drain=20.0))
    draining = defer.ensureDeferred(shutdown.health_drain())
    clock.advance(1.0)
    shutdown.hurry(1.0)
    assert shutdown.hurried and shutdown.deadline == 2.0
    clock.pump([TICK] * 22)
    assert draining.called
    finished = defer.ensureDeferred(shutdown.drain(lambda: False))
    clock.pump([TICK] * 2)
    assert finished.called
