"""Serving the keys asked for during one reactor turn with one lookup.

Calls that run together (the elements of a batch of GETs, concurrent requests) each ask for
one record; a `Coalescer` gathers the keys asked for before the reactor turns again and
fetches them all with one query, so a batch of a hundred reads costs one database round
trip rather than a hundred.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import Generic, TypeVar

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.python.failure import Failure

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class Coalescer(Generic[K, V]):
    def __init__(
        self, reactor: IReactorTime, fetch: Callable[[list[K]], Deferred[Mapping[K, V]]], most: int = 500
    ) -> None:
        self._reactor = reactor
        self._fetch = fetch
        self._most = most
        self._waiting: dict[K, list[Deferred[V | None]]] = {}
        self._flush_call: IDelayedCall | None = None

    def get(self, key: K) -> Deferred[V | None]:
        """The value for `key`, or None when there is none."""
        waiter: Deferred[V | None] = Deferred()
        self._waiting.setdefault(key, []).append(waiter)
        if self._flush_call is None:
            self._flush_call = self._reactor.callLater(0, self._flush)
        return waiter

    def _flush(self) -> None:
        waiting, self._waiting, self._flush_call = self._waiting, {}, None
        keys = list(waiting)
        for start in range(0, len(keys), self._most):
            chunk = {key: waiting[key] for key in keys[start : start + self._most]}
            self._fetch(list(chunk)).addCallbacks(
                self._deliver, self._fail, callbackArgs=(chunk,), errbackArgs=(chunk,)
            )

    @staticmethod
    def _deliver(found: Mapping[K, V], chunk: dict[K, list[Deferred[V | None]]]) -> None:
        for key, waiters in chunk.items():
            for waiter in waiters:
                waiter.callback(found.get(key))

    @staticmethod
    def _fail(failure: Failure, chunk: dict[K, list[Deferred[V | None]]]) -> None:
        for waiters in chunk.values():
            for waiter in waiters:
                waiter.errback(failure)
