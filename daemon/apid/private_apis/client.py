"""The private names of twisted.web's client side that apid relies on (see `apid.private_apis`
for why they are fenced, and tests/unit/test_private_apis.py for their tests). Imported only by
`apid.http.client`, which loads when apid first makes an outgoing request.
"""

from __future__ import annotations

from collections.abc import Sequence

from twisted.internet.interfaces import IAddress, IReactorTime
from twisted.web._newclient import HTTP11ClientProtocol
from twisted.web._newclient import Request as ClientRequest
from twisted.web.client import HTTPConnectionPool, _HTTP11ClientFactory

__all__ = [
    "ClientConnectionFactory",
    "ClientProtocolHooks",
    "ClientRequest",
    "ConnectionPoolHooks",
    "HTTP11ClientProtocol",
]


# twisted.web's client side. Its HTTP/1.1 connection (HTTP11ClientProtocol) and the request
# it sends (ClientRequest) live in a private module, twisted.web._newclient: twisted.web.client
# imports them but leaves them out of its __all__. Exported from here for apid.http.client.


class ClientProtocolHooks(HTTP11ClientProtocol):
    """Twisted's HTTP/1.1 client connection, asking `answer_keeps_connection` whether the
    connection outlives each exchange. Checked against Twisted 25.5.0 and 26.10.0."""

    def answer_keeps_connection(self, version: tuple[bytes, int, int], connection: Sequence[bytes]) -> bool:
        """Whether the connection may stay open after an answer of this HTTP `version` with
        these `Connection` header values. True by default: Twisted's own rule then decides
        alone (a `close` value closes it)."""
        return True

    def _finishResponse_WAITING(self, rest: bytes) -> None:
        # The one place Twisted decides whether the connection goes back to the pool, from the
        # parser's (`_parser`) connection headers and the request's (`_currentRequest`)
        # `persistent`: a request marked not persistent closes the connection.
        parser = self._parser
        request = self._currentRequest
        if (
            parser is not None
            and request is not None
            and not self.answer_keeps_connection(
                parser.response.version, parser.connHeaders.getRawHeaders(b"connection", ())
            )
        ):
            request.persistent = False
        super()._finishResponse_WAITING(rest)

    # A complete answer before the request was all sent is finished the same way: Twisted's
    # stateful dispatch calls `_finishResponse_` + the state, and aliases these two itself.
    _finishResponse_TRANSMITTING = _finishResponse_WAITING


class ClientConnectionFactory(_HTTP11ClientFactory):
    """The factory HTTPConnectionPool makes each connection with (private in Twisted), building
    `client_protocol` with the pool's callback for a connection that became idle
    (`_quiescentCallback`). Checked against Twisted 25.5.0 and 26.10.0."""

    client_protocol: type[HTTP11ClientProtocol] = HTTP11ClientProtocol

    def buildProtocol(self, addr: IAddress | None) -> HTTP11ClientProtocol:
        return self.client_protocol(self._quiescentCallback)


class ConnectionPoolHooks(HTTPConnectionPool):
    """Twisted's connection pool, connecting with `connection_factory` (HTTPConnectionPool's
    private `_factory`), and opening a fresh connection on request, past the idle ones
    (`new_connection`). Checked against Twisted 25.5.0 and 26.10.0."""

    connection_factory: type[ClientConnectionFactory] = ClientConnectionFactory

    def __init__(self, reactor: IReactorTime, persistent: bool = True) -> None:
        super().__init__(reactor, persistent)
        # HTTPConnectionPool._newConnection calls self._factory(quiescentCallback, metadata)
        self._factory = self.connection_factory

    # (key, endpoint) -> Deferred of a new connection, as HTTPConnectionPool.getConnection
    # makes one when no idle connection is left, and as Twisted's own retry does.
    new_connection = HTTPConnectionPool._newConnection
