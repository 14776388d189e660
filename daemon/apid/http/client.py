"""The HTTP client side of apid (peer pings, webhooks): connection pools and agents.

`agent` builds a treq-ready Agent whose endpoints are made once per (scheme, host, port):
Twisted's default makes a HostnameEndpoint for every request, IDNA-encoding the host name
each time with the `idna` package, about a sixth of the reactor's time per webhook delivery.

`connection_pool` keeps connections open between requests where HTTP says they stay open
(`keeps_connection`; Twisted's client only looks for `Connection: close` and so pooled the
connections of HTTP/1.0 answers, which their servers close), and sends a request once more, on
a fresh connection, when a pooled connection turns out to have been closed before it answered.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import cast

from twisted.internet.defer import Deferred, succeed
from twisted.internet.endpoints import HostnameEndpoint, wrapClientTLS
from twisted.internet.error import ConnectionAborted, ConnectionClosed
from twisted.internet.interfaces import IConsumer, IReactorTime, IStreamClientEndpoint
from twisted.python.failure import Failure
from twisted.web.client import (
    URI,
    Agent,
    BrowserLikePolicyForHTTPS,
    HTTPConnectionPool,
    RequestNotSent,
    RequestTransmissionFailed,
    ResponseNeverReceived,
)
from twisted.web.iweb import IAgentEndpointFactory, IBodyProducer, IResponse
from zope.interface import implementer

from apid.private_apis.client import (
    ClientConnectionFactory,
    ClientProtocolHooks,
    ClientRequest,
    ConnectionPoolHooks,
    HTTP11ClientProtocol,
)


def keeps_connection(version: tuple[bytes, int, int], connection: Sequence[bytes]) -> bool:
    """Whether a connection stays open after an answer of this HTTP `version` with these
    `Connection` header values (RFC 9112 section 9.3): the `close` option ends it on any
    version; HTTP/1.1 and later keep it otherwise; HTTP/1.0 keeps it only with `keep-alive`."""
    options = {option.strip().lower() for value in connection for option in value.split(b",")}
    if b"close" in options:
        return False
    return version[1:] >= (1, 1) or b"keep-alive" in options


class _HTTP11Client(ClientProtocolHooks):
    """Twisted's client protocol, but the answer's version counts when deciding whether the
    connection outlives the exchange. Twisted closes it only for a `Connection: close` value
    and otherwise hands it back to the pool, also after an HTTP/1.0 answer, whose server then
    closes it: the next request written on it gets no answer."""

    exchanges = 0  # requests sent on this connection: one handed out with any came from the pool

    def request(self, request: ClientRequest) -> Deferred[IResponse]:
        self.exchanges += 1
        return super().request(request)

    def answer_keeps_connection(self, version: tuple[bytes, int, int], connection: Sequence[bytes]) -> bool:
        return keeps_connection(version, connection)


class _QuietFactory(ClientConnectionFactory):
    noisy = False  # no "Starting factory" log line for every new connection
    client_protocol = _HTTP11Client


@implementer(IBodyProducer)
class BytesBody:
    """A request body held in memory, written whole and as often as asked: a request carrying
    it can be sent again on another connection (Twisted's FileBodyProducer reads its file once)."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self.length = len(data)

    def startProducing(self, consumer: IConsumer) -> Deferred[None]:
        consumer.write(self._data)
        return succeed(None)

    def pauseProducing(self) -> None:
        pass

    def resumeProducing(self) -> None:
        pass

    def stopProducing(self) -> None:
        pass


def _never_answered(failure: Failure) -> bool:
    """Whether a request failed because its connection closed before any byte of an answer
    (not because we cancelled it, nor after part of an answer)."""
    if failure.check(RequestNotSent):
        return True
    error = failure.value
    if not isinstance(error, (ResponseNeverReceived, RequestTransmissionFailed)):
        return False
    return all(reason.check(ConnectionClosed) and not reason.check(ConnectionAborted) for reason in error.reasons)


class _PooledConnection:
    """A connection taken from the pool, which its server may have closed while it was idle,
    at the moment we wrote to it (its close not read yet; Twisted issue 7843). A request that
    finds it so closed, before any answer, is sent once more on a fresh connection; whatever
    a fresh connection does stands.

    Twisted's own retry (`retryAutomatically`) does this only for idempotent methods without a
    body. Ours also resends POSTs: a webhook's receiver deduplicates on its webhook-id (Standard
    Webhooks; delivery is at least once anyway), and a server closing a connection before
    answering has normally not read the request at all (RFC 9112 section 9.3.1 allows the retry
    when a repeated request does no harm). Only bodies that can be written again are resent."""

    def __init__(self, connection: _HTTP11Client, fresh: Callable[[], Deferred[HTTP11ClientProtocol]]) -> None:
        self._connection = connection
        self._fresh = fresh

    def request(self, request: ClientRequest) -> Deferred[IResponse]:
        def closed_before_answering(failure: Failure) -> Deferred[IResponse] | Failure:
            replayable = request.bodyProducer is None or isinstance(request.bodyProducer, BytesBody)
            if not (replayable and _never_answered(failure)):
                return failure
            return self._fresh().addCallback(lambda connection: connection.request(request))

        # Twisted's overloads of addErrback take an errback returning a Deferred or a Failure,
        # not one returning either; the Deferred is chained and the Failure passed on, so the
        # result is still an IResponse
        return cast("Deferred[IResponse]", self._connection.request(request).addErrback(closed_before_answering))


class _ConnectionPool(ConnectionPoolHooks):
    connection_factory = _QuietFactory
    retryAutomatically = False  # replaced by _PooledConnection, which covers POSTs too

    # Twisted types what the pool hands out as its protocol class, but its Agent only calls
    # request() on it, which _PooledConnection answers in the protocol's stead
    def getConnection(  # type: ignore[override]
        self, key: Hashable, endpoint: IStreamClientEndpoint
    ) -> Deferred[HTTP11ClientProtocol | _PooledConnection]:
        def second_chance_if_pooled(connection: HTTP11ClientProtocol) -> HTTP11ClientProtocol | _PooledConnection:
            # every connection is an _HTTP11Client (_QuietFactory builds them)
            if isinstance(connection, _HTTP11Client) and connection.exchanges > 0:
                return _PooledConnection(connection, lambda: self.new_connection(key, endpoint))
            return connection

        return super().getConnection(key, endpoint).addCallback(second_chance_if_pooled)


def connection_pool(reactor: IReactorTime, per_host: int) -> HTTPConnectionPool:
    """A persistent pool keeping `per_host` idle connections per host. A request that finds a
    pooled connection closed before any answer is sent once more on a fresh connection
    (`_PooledConnection` says when and why that is safe); no other request is retried."""
    pool = _ConnectionPool(reactor, persistent=True)
    pool.maxPersistentPerHost = per_host
    return pool


def single_use_pool(reactor: IReactorTime) -> HTTPConnectionPool:
    """A pool keeping no connection: each request gets a new one, closed after its answer.
    For requests too rare to keep one open (an OpenID provider's keys), and nothing to close
    at shutdown."""
    return _ConnectionPool(reactor, persistent=False)


@implementer(IAgentEndpointFactory)
class _Endpoints:
    """Endpoints by (scheme, host, port), made on first use: TCP, with TLS for https
    (certificates checked as a browser would)."""

    def __init__(self, reactor: IReactorTime, timeout: float) -> None:
        self._reactor = reactor
        self._timeout = timeout
        self._tls = BrowserLikePolicyForHTTPS()
        self._known: dict[tuple[bytes, bytes, int], IStreamClientEndpoint] = {}

    def endpointForURI(self, uri: URI) -> IStreamClientEndpoint:
        key = (uri.scheme, uri.host, uri.port)
        endpoint = self._known.get(key)
        if endpoint is None:
            endpoint = HostnameEndpoint(self._reactor, uri.host, uri.port, timeout=self._timeout)
            if uri.scheme == b"https":
                endpoint = wrapClientTLS(self._tls.creatorForNetloc(uri.host, uri.port), endpoint)
            self._known[key] = endpoint
        return endpoint


def agent(reactor: IReactorTime, pool: HTTPConnectionPool, connect_timeout: float = 30.0) -> Agent:
    return Agent.usingEndpointFactory(reactor, _Endpoints(reactor, connect_timeout), pool=pool)
