"""The HTTP client side: connection pools for the requests apid makes (peer pings, webhooks)."""

from __future__ import annotations

from twisted.internet.interfaces import IReactorTime
from twisted.web.client import HTTPConnectionPool, _HTTP11ClientFactory


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
