"""Asking the peer API servers whether they are up: every peer at once, each within its own time.

Each peer's public `/health` is fetched with treq through a connection pool of our own.
The whole exchange with a peer (connecting, the headers, the body) is bounded by that peer's
timeout, so the answer comes within the largest timeout whatever the peers do: refuse the
connection, accept and stay silent, answer slowly, answer an error or garbage.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import treq
from treq.client import HTTPClient
from twisted.internet.defer import CancelledError, Deferred, TimeoutError, gatherResults
from twisted.internet.interfaces import IReactorTime
from twisted.web.client import ResponseNeverReceived

from apid import metrics
from apid.config import PeerServer
from apid.outbound import agent, connection_pool


class PeerPinger:
    def __init__(self, reactor: IReactorTime, peers: Iterable[PeerServer]) -> None:
        self._reactor = reactor
        self._peers = tuple(peers)
        self._pool = connection_pool(reactor, per_host=1)
        self._client = HTTPClient(agent(reactor, self._pool))  # each ping is bounded as a whole below

    def close(self) -> Deferred[None]:
        return self._pool.closeCachedConnections()

    async def ping_all(self) -> dict[str, Any]:
        results = await gatherResults([Deferred.fromCoroutine(self._ping(peer)) for peer in self._peers])
        up = sum(1 for result in results if result["up"])
        return {"peers": results, "total": len(results), "up": up, "down": len(results) - up}

    async def _fetch(self, url: str) -> tuple[int, bytes]:
        response = await self._client.get(url, allow_redirects=False)
        return response.code, await treq.content(response)

    async def _ping(self, peer: PeerServer) -> dict[str, Any]:
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
