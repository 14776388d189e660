"""What a worker process gets from its parent: the listening socket, the channel, its place.

The parent starts each worker as `python -m apid worker` with the configuration it loaded,
pickled on standard input (so that a worker restarted later serves the same configuration as
the others, whatever the files say by then), the listening socket as descriptor `PORT_FD` and
its end of the channel as `CHANNEL_FD`. A worker whose parent is gone stops in a hurry
(`apid.server.workers.orphans`): whether its channel is lost or the kernel signals it.
"""

from __future__ import annotations

import contextlib
import socket
from dataclasses import dataclass
from typing import cast

from twisted.internet.defer import Deferred, maybeDeferred
from twisted.internet.error import ReactorNotRunning
from twisted.internet.interfaces import (
    IListeningPort,
    IProtocolFactory,
    IReactorCore,
    IReactorSocket,
    IStreamServerEndpoint,
)
from twisted.internet.protocol import ServerFactory
from twisted.logger import Logger
from zope.interface import implementer

from apid.private_apis import OneAcceptPerRead, adopt_listening_port
from apid.runtime.reactors import Reactor
from apid.server.shutdown import Shutdown
from apid.server.workers import CHANNEL_FD, PORT_FD
from apid.server.workers.channel import ParentCounters, ParentWindows, Ready, SiblingWorkers, WorkerSide, adopt
from apid.server.workers.orphans import PARENT_GONE_SECONDS, orphaned

log = Logger(namespace="apid.workers")


class SharedPort(OneAcceptPerRead):
    """A port on a socket every worker accepts on. A new connection wakes each worker waiting
    in the reactor; Twisted's port then accepts all it can (up to 100, and more each time
    it gets them all), so the first awake takes a whole burst and keeps its connections
    (keep-alive) while the others idle. Accepting one per wake-up leaves the rest to the
    others, and a busy worker, late back to its reactor, takes fewer.

    At shutdown the parent shuts the socket down, so that every worker stops accepting at once
    (`apid.server.workers.parent.Parent.stop`): a worker still waiting on it is then woken to
    an accept that fails (EINVAL), which Twisted would log as an unhandled error. A socket that
    no longer listens is read no more: one getsockopt per wake-up, per new connection."""

    def doRead(self) -> None:
        if not self.socket.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
            self.stopReading()
            return
        super().doRead()


@implementer(IStreamServerEndpoint)
class AdoptedPort:
    """The parent's listening socket, served by this worker too."""

    def __init__(self, reactor: IReactorSocket, fd: int, family: socket.AddressFamily) -> None:
        self._reactor = reactor
        self._fd = fd
        self._family = family

    def listen(self, factory: IProtocolFactory) -> Deferred[IListeningPort]:
        if self._family == socket.AF_UNIX:
            # Twisted types adoptStreamPort's factory as a ServerFactory, though an endpoint is
            # given any IProtocolFactory and the reactor uses only that (as does Twisted's own
            # AdoptedStreamServerEndpoint, which passes its factory on unchanged)
            server_factory = cast(ServerFactory, factory)
            return maybeDeferred(self._reactor.adoptStreamPort, self._fd, self._family, server_factory)
        return maybeDeferred(self._adopt, factory)

    def _adopt(self, factory: IProtocolFactory) -> SharedPort:
        port = adopt_listening_port(SharedPort, self._reactor, self._fd, self._family, factory)
        port.startListening()
        return port


@dataclass
class WorkerLink:
    """This process as worker `index` of its parent."""

    index: int
    endpoint: AdoptedPort
    channel: WorkerSide
    parent: int  # the pid of the parent that started it
    shutdown: Shutdown

    def check_parent(self) -> None:
        """At a signal: a worker whose parent is gone (the kernel's SIGTERM) stops in a hurry."""
        if orphaned(self.parent):
            _hurry(self.shutdown)

    def ready(self, reactor_name: str) -> Deferred[dict]:
        return self.channel.callRemote(Ready, index=self.index, reactor=reactor_name)

    def counters(self) -> ParentCounters:
        return ParentCounters(self.channel)

    def windows(self) -> ParentWindows:
        return ParentWindows(self.channel)

    def siblings(self) -> SiblingWorkers:
        return SiblingWorkers(self.channel)


def link(reactor: Reactor, index: int, family: socket.AddressFamily, parent: int, shutdown: Shutdown) -> WorkerLink:
    """Adopt the channel now (so a parent gone while this worker starts stops it) and the port
    when the daemon listens."""
    channel = adopt(reactor, CHANNEL_FD, WorkerSide(lost=lambda: _parent_gone(reactor, shutdown)))
    return WorkerLink(
        index=index,
        endpoint=AdoptedPort(reactor, PORT_FD, family),
        channel=channel,
        parent=parent,
        shutdown=shutdown,
    )


def _parent_gone(reactor: IReactorCore, shutdown: Shutdown) -> None:
    _hurry(shutdown)
    with contextlib.suppress(ReactorNotRunning):  # stopping already
        reactor.stop()


def _hurry(shutdown: Shutdown) -> None:
    """Nobody waits for this worker's answers now: what is in flight gets a moment, not the drain."""
    if not shutdown.hurried:
        log.warn("the parent is gone: stopping within {seconds:g} s", seconds=PARENT_GONE_SECONDS)
    shutdown.hurry(PARENT_GONE_SECONDS)
