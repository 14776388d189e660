"""Reading the PROXY protocol header (`listen: haproxy:...`), strictly, with Twisted's parsers.

Twisted's wrapper closes a connection whose header it finds malformed, but a port that is no
number escapes it as a ValueError, logged as an `Unhandled Error` with a traceback for every
such connection, and it takes a source or destination that is no IP address as given, which
would then be the client every per-address decision counts. Here any header that cannot be
read, or that names no IP address and port, closes the connection with one log line naming
the peer (a trusted proxy: others are closed before this reads a byte, `apid.http.proxies`).
"""

from __future__ import annotations

import ipaddress
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IAddress, IListeningPort, IProtocolFactory, IStreamServerEndpoint
from twisted.logger import Logger
from twisted.protocols.haproxy._exceptions import InvalidProxyHeader
from twisted.protocols.haproxy._v1parser import V1Parser
from twisted.protocols.haproxy._v2parser import V2Parser
from twisted.protocols.haproxy._wrapper import HAProxyProtocolWrapper, HAProxyWrappingFactory
from zope.interface import implementer

log = Logger(namespace="apid.proxies")


def _parser_for(data: bytes) -> V1Parser | V2Parser:
    """The parser of the header `data` begins (as Twisted's wrapper chooses it), else InvalidProxyHeader."""
    if len(data) >= 16 and data[:12] == V2Parser.PREFIX and data[12] & 0xF0 == 0x20:
        return V2Parser()
    if len(data) >= 8 and data[:5] == V1Parser.PROXYSTR:
        return V1Parser()
    raise InvalidProxyHeader()


def _check(address: IAddress | None) -> None:
    """A ValueError unless `address` (None for a v2 LOCAL header: the proxy's own health check)
    is an IP address and a port."""
    if address is None:
        return
    ipaddress.ip_address(getattr(address, "host", None) or "")
    port = getattr(address, "port", None)
    if not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"port {port!r} is out of range")


class StrictProxyHeader(HAProxyProtocolWrapper):
    """Twisted's PROXY protocol wrapper, closing the connection with one log line on any header
    it cannot read instead of raising."""

    def dataReceived(self, data: bytes) -> None:
        if self._proxyInfo is not None:
            self.wrappedProtocol.dataReceived(data)
            return
        try:
            if self._parser is None:
                self._parser = _parser_for(data)
            info, remaining = self._parser.feed(data)
            if info is not None:
                _check(info.source)
                _check(info.destination)
        except (InvalidProxyHeader, ValueError) as error:
            self._refuse(error)
            return
        if info is None:
            return  # the header goes on in the next segment
        self._proxyInfo = info
        if remaining:
            self.wrappedProtocol.dataReceived(remaining)

    def _refuse(self, error: Exception) -> None:
        assert self.transport is not None
        log.warn(
            "closed a connection from {peer}: its PROXY protocol header cannot be read ({error})",
            peer=getattr(self.transport.getPeer(), "host", "?"),
            error=f"{type(error).__name__}: {error}" if str(error) else type(error).__name__,
        )
        self.loseConnection()


class StrictProxyHeaderFactory(HAProxyWrappingFactory):
    protocol = StrictProxyHeader  # type: ignore[assignment]  # Twisted types it as its own wrapper class


@implementer(IStreamServerEndpoint)
class StrictProxyEndpoint:
    """`socket`, each connection of which begins with a PROXY header (`twisted`'s
    `proxyEndpoint`, reading it with `StrictProxyHeader`)."""

    def __init__(self, socket: IStreamServerEndpoint) -> None:
        self._socket = socket

    def listen(self, factory: IProtocolFactory) -> Deferred[IListeningPort]:
        wrapped: Any = StrictProxyHeaderFactory(factory)
        return self._socket.listen(wrapped)
