"""How a daemon process stops: the signals that start it, and its phases in time.

SIGTERM or SIGINT stops the reactor once; a later one is logged and changes nothing (Twisted's
own handlers would stop the reactor again, and log ReactorNotRunning's traceback). The stop
then runs in phases (`shutdown` in service_server.yml): `/health` fails for `healthDrain`
seconds while every call is still served, so that balancers route away before the port
closes; then the port closes and the requests in flight get until `drain` seconds later. A
worker whose parent is gone hurries both: nobody waits for it, and it must not outlive its
parent by more than a moment.
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from types import FrameType
from typing import cast

from twisted.internet.error import ReactorNotRunning
from twisted.internet.task import deferLater
from twisted.logger import Logger
from twisted.web.http import HTTPChannel

from apid.config.server import ShutdownConfig
from apid.http.site import OpenConnections
from apid.runtime.reactors import Reactor
from apid.telemetry.health import Health

log = Logger(namespace="apid.shutdown")

TICK = 0.05  # seconds between two looks at what is left to wait for
DRAINING = "draining"  # the /health check failing while this process stops


class Shutdown:
    """The deadlines of this process's stop, counted by the reactor from its first signal."""

    def __init__(self, reactor: Reactor, settings: ShutdownConfig) -> None:
        self._reactor = reactor
        self._settings = settings
        self._began: float | None = None
        self._hurried: float = float("inf")  # when everything must be over, once hurried

    def _begin(self) -> None:
        if self._began is None:
            self._began = self._reactor.seconds()

    @property
    def hurried(self) -> bool:
        return self._hurried != float("inf")

    def hurry(self, seconds: float) -> None:
        """Nobody waits for this process any more: end both phases within `seconds`."""
        self._begin()
        self._hurried = min(self._hurried, self._reactor.seconds() + seconds)

    @property
    def health_drained_at(self) -> float:
        began = self._reactor.seconds() if self._began is None else self._began
        return min(began + self._settings.health_drain, self._hurried)

    @property
    def deadline(self) -> float:
        """When the requests still in flight are cut."""
        return min(self.health_drained_at + self._settings.drain, self._hurried)

    async def health_drain(self, health: Health | None = None) -> None:
        """Fail /health, and wait while balancers notice; everything else is served meanwhile.
        (The parent of worker processes answers no /health: its workers fail theirs.)"""
        self._begin()
        if health is not None:
            health.fail(DRAINING, "shutting down: send new requests elsewhere")
        await self._wait(lambda: False, lambda: self.health_drained_at)

    async def drain(self, done: Callable[[], bool]) -> None:
        """Until `done()` or the deadline, which `hurry` may bring closer."""
        await self._wait(done, lambda: self.deadline)

    async def _wait(self, done: Callable[[], bool], until: Callable[[], float]) -> None:
        while not done() and self._reactor.seconds() < until():
            await deferLater(self._reactor, TICK, lambda: None)


def stop_on_signals(reactor: Reactor, before_stop: Callable[[], None] = lambda: None) -> None:
    """SIGTERM and SIGINT stop the reactor, once; `before_stop` runs at each (a worker checks
    whether its parent is gone). Call it once the reactor runs: Twisted installs its handlers
    as it starts."""

    def received(number: int, _: FrameType | None) -> None:
        reactor.callFromThread(stop, signal.Signals(number).name)

    def stop(name: str) -> None:
        before_stop()
        try:
            reactor.stop()
        except ReactorNotRunning:
            log.info("Received {signal} while stopping; the shutdown goes on", signal=name)
            return
        log.info("Received {signal}, shutting down.", signal=name)

    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, received)


def close_after_answers(connections: OpenConnections) -> bool:
    """Close idle HTTP connections now, and have each busy one close after the answer it is
    writing, saying `Connection: close`; True when none is left. Called again and again while
    draining: a request whose headers arrive later makes its connection persistent again."""
    for connection in list(connections.protocols):
        channel = cast(HTTPChannel, connection.wrappedProtocol)  # the site's: ApidChannel
        if not channel.requests:
            connection.loseConnection()
            continue
        channel.persistent = False
        for request in channel.requests:
            if not request.startedWriting:
                request.responseHeaders.setRawHeaders(b"Connection", [b"close"])
    return not connections.protocols
