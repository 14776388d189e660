"""The HTTP client side of apid (peer pings, webhooks): connection pools and agents.

`agent` builds a treq-ready Agent whose endpoints are made once per (scheme, host, port):
Twisted's default makes a HostnameEndpoint for every request, IDNA-encoding the host name
each time with the `idna` package, about a sixth of the reactor's time per webhook delivery.
"""

from __future__ import annotations

from twisted.internet.endpoints import HostnameEndpoint, wrapClientTLS
from twisted.internet.interfaces import IReactorTime, IStreamClientEndpoint
from twisted.web.client import Agent, BrowserLikePolicyForHTTPS, HTTPConnectionPool, URI, _HTTP11ClientFactory
from twisted.web.iweb import IAgentEndpointFactory
from zope.interface import implementer


class _QuietFactory(_HTTP11ClientFactory):
    noisy = False  # no "Starting factory" log line for every new connection


def connection_pool(reactor: IReactorTime, per_host: int) -> HTTPConnectionPool:
    """A persistent pool keeping `per_host` idle connections per host, never retrying a request
    on its own (a retried POST could deliver twice without our knowing)."""
    pool = HTTPConnectionPool(reactor, persistent=True)
    pool.maxPersistentPerHost = per_host
    pool.retryAutomatically = False
    pool._factory = _QuietFactory
    return pool


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
