"""Asking the peer API servers whether they are up: every peer at once, each within its own time.

Each peer's public `/health` is fetched with treq through a connection pool of our own.
The whole exchange with a peer (connecting, the headers, the body) is bounded by that peer's
timeout, so the answer comes within the largest timeout whatever the peers do: refuse the
connection, accept and stay silent, answer slowly, answer an error or garbage. The client is
made at the first ping: until then treq and Twisted's HTTP client stay out of the daemon.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from twisted.internet.defer import CancelledError, Deferred, TimeoutError, gatherResults, succeed
from twisted.internet.interfaces import IReactorTime

from apid.config.server import PeerServer
from apid.telemetry import metrics

if TYPE_CHECKING:
    from treq.client import HTTPClient
    from twisted.web.client import HTTPConnectionPool


class PeerPinger:
    def __init__(self, reactor: IReactorTime, peers: Iterable[PeerServer]) -> None:
        self._reactor = reactor
        self._peers = tuple(peers)
        self._pool: HTTPConnectionPool | None = None
        self._client: HTTPClient | None = None

    def close(self) -> Deferred[None]:
        return succeed(None) if self._pool is None else self._pool.closeCachedConnections()

    def _http(self) -> HTTPClient:
        if self._client is None:  # the first ping: a daemon that never pings never loads treq
            from treq.client import HTTPClient

            from apid.http.client import agent, connection_pool

            self._pool = connection_pool(self._reactor, per_host=1)
            self._client = HTTPClient(agent(self._reactor, self._pool))  # each ping is bounded as a whole below
        return self._client

    async def ping_all(self) -> dict[str, Any]:
        results = await gatherResults([Deferred.fromCoroutine(self._ping(peer)) for peer in self._peers])
        up = sum(1 for result in results if result["up"])
        return {"peers": results, "total": len(results), "up": up, "down": len(results) - up}

    async def _fetch(self, url: str) -> tuple[int, bytes]:
        response = await self._http().get(url, allow_redirects=False)
        return response.code, await response.content()

    async def _ping(self, peer: PeerServer) -> dict[str, Any]:
        from twisted.web.client import ResponseNeverReceived  # loaded by the first ping's client

        started = self._reactor.seconds()
        status, error, outcome = None, None, "down"
        exchange = Deferred.fromCoroutine(self._fetch(peer.url + "/health"))
        exchange.addTimeout(peer.timeout, self._reactor)
        try:
            status, body = await exchange
            error = _health_error(status, body)
        except (TimeoutError, CancelledError, ResponseNeverReceived):
            timed_out = self._reactor.seconds() - started >= peer.timeout * 0.99
            error = f"no answer within {peer.timeout:g} s" if timed_out else "the connection closed without an answer"
            outcome = "timeout" if timed_out else "down"
        except Exception as failure:
            error = f"{type(failure).__name__}: {failure}".strip().rstrip(":")
        metrics.ping_result("up" if error is None else outcome)
        return {
            "url": peer.url,
            "up": error is None,
            "status": status,
            "ms": round((self._reactor.seconds() - started) * 1000, 1),
            "error": error,
        }


def _health_error(status: int, body: bytes) -> str | None:
    """Why a peer's /health answer does not mean "up", or None when it does."""
    if status != 200:
        return f"answered HTTP {status}"
    try:
        health = json.loads(body)
    except ValueError:
        return "answered something that is not JSON"
    if not isinstance(health, dict) or health.get("status") != "pass":
        return "answered a health document whose status is not pass"
    return None
