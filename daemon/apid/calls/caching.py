"""Answers of GET calls: validators for all of them, and a server-side cache for the actions
whose IO State declares CACHE.

Every `v` GET answer carries a strong `ETag` (a BLAKE2b digest of its JSON body: a
microsecond for a record) and answers `If-None-Match` with 304, for clients that keep their
own copy. `Cache-Control` stays `no-store` (an authenticated answer is not kept by browsers or
HTTP caches: ASVS 8.2.1) unless the action declares a cache: then `private, max-age=N`, its
operator's choice. Never `public`: an answer depends on the caller's roles, and on the caller.

`AnswerCache` keeps the answers of cached actions in process, bounded (least recently used
first out) and for the action's maxAge on the reactor's clock, under a key of the endpoint, the
caller's granted roles, the request's fields and, unless the action says `shared`, the caller
(IO State may say so only of an action whose plugin declares it caller-independent: a hit skips
the action and any check it makes of who calls). Each controller has a generation: a writing
call of the controller moves it here at once and in the `cache_change` table, which every
daemon reads at most once a second before answering from its cache, so an answer cached before
a write anywhere is never served more than a second after it; the other worker processes of
the daemon that wrote drop theirs before the write is answered (`Siblings`). Batches and chains
neither read nor fill the cache.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from hashlib import blake2b
from typing import Any, Protocol

import orjson
from sqlalchemy import Connection, select
from twisted.internet.defer import Deferred, gatherResults
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.web.http import Request

from apid.calls.pipeline import CallRequest, CallResult
from apid.http.conditions import held
from apid.iostate import Endpoint
from apid.store.database import Database, DatabaseUnavailable, dialect_insert
from apid.store.tables import cache_change

log = Logger(namespace="apid.caching")

CHECK_SECONDS = 1.0  # how old the other daemons' change counters may be when a cached answer is served
MAX_ENTRIES = 10_000
NOT_CACHED = b"no-store"


def entity_tag(body: bytes) -> bytes:
    return b'"' + blake2b(body, digest_size=16).hexdigest().encode("ascii") + b'"'


def answer(request: Request, body: bytes, tag: bytes, endpoint: Endpoint, if_none_match: bytes | None) -> bytes:
    """The answer to a GET: its validators, and 304 without the body when the client holds it."""
    request.setHeader(b"ETag", tag)
    cache = endpoint.cache
    request.setHeader(b"Cache-Control", NOT_CACHED if cache is None else b"private, max-age=%d" % cache.max_age)
    if held(if_none_match, tag):
        request.setResponseCode(304)
        return b""
    return body


@dataclass(frozen=True)
class CachedAnswer:
    endpoint: Endpoint  # the rules it was made under: a reload makes it a miss
    result: CallResult
    body: bytes
    tag: bytes
    generation: int
    expires: float


def cache_key(endpoint: Endpoint, granted: frozenset[str], caller_id: Any, request: CallRequest) -> tuple[Any, ...]:
    """What a cached answer may be reused for: the endpoint, the granted roles (so never for a
    caller who sees other fields), the request's fields as sent and, unless the action's
    answers are `shared`, the caller."""
    fields = orjson.dumps([request.body, request.text], option=orjson.OPT_SORT_KEYS, default=str)
    person = None if endpoint.cache is not None and endpoint.cache.shared else caller_id
    return endpoint.controller, endpoint.api_version, endpoint.action, granted, person, fields


def read_generations(connection: Connection) -> dict[str, int]:
    return {row.controller: row.generation for row in connection.execute(select(cache_change))}


def bump_generations(connection: Connection, controllers: Iterable[str]) -> dict[str, int]:
    """Count one change of each controller; their counters now."""
    insert = dialect_insert(connection)
    counters = {}
    for controller in controllers:
        statement = insert(cache_change).values(controller=controller, generation=1)
        counters[controller] = connection.execute(
            statement.on_conflict_do_update(
                index_elements=[cache_change.c.controller],
                set_={"generation": cache_change.c.generation + 1},
            ).returning(cache_change.c.generation)
        ).scalar_one()
    return counters


class Siblings(Protocol):
    """The other worker processes of this daemon (`apid.server.workers.channel.SiblingWorkers`)."""

    def changed(self, controllers: Sequence[str]) -> Deferred[None]:
        """Fires once each of them dropped its answers of `controllers`."""

    def on_change(self, drop: Callable[[Sequence[str]], None]) -> None:
        """Have `drop` called with the controllers another of them changed."""


class AnswerCache:
    """The cached answers of this process, and the controller generations that keep them honest."""

    def __init__(
        self, *, clock: IReactorTime, db: Database, siblings: Siblings | None = None, max_entries: int = MAX_ENTRIES
    ) -> None:
        self._clock = clock
        self._db = db
        self._siblings = siblings
        if siblings is not None:
            siblings.on_change(self._move)
        self._max_entries = max_entries
        self._entries: OrderedDict[tuple[Any, ...], CachedAnswer] = OrderedDict()
        self._generations: dict[str, int] = {}  # moved here by local writes and by others' counters
        self._counters: dict[str, int] = {}  # the table as last read; each change is seen once
        self._checked = float("-inf")  # when the last good read of the table started
        self._checking: Deferred[None] | None = None

    def generation(self, controller: str) -> int:
        return self._generations.get(controller, 0)

    async def get(self, key: tuple[Any, ...], endpoint: Endpoint) -> CachedAnswer | None:
        """The answer kept under `key`, if still good. The counters are read first (when over a
        second old), so that the generation a miss then records has seen the others' writes."""
        if self._clock.seconds() - self._checked >= CHECK_SECONDS and not await self._check():
            return None
        entry = self._entries.get(key)
        if entry is None:
            return None
        if (
            entry.endpoint is not endpoint
            or entry.generation != self.generation(endpoint.controller)
            or entry.expires <= self._clock.seconds()
        ):
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return entry

    def put(self, key: tuple[Any, ...], result: CallResult, body: bytes, tag: bytes, generation: int) -> None:
        """Keep an answer made at `generation`; one that a write overtook is not kept."""
        endpoint = result.endpoint
        if endpoint.cache is None or generation != self.generation(endpoint.controller):
            return
        expires = self._clock.seconds() + endpoint.cache.max_age
        self._entries[key] = CachedAnswer(endpoint, result, body, tag, generation, expires)
        self._entries.move_to_end(key)
        while len(self._entries) > self._max_entries:
            self._entries.popitem(last=False)

    async def changed(self, controllers: Iterable[str]) -> None:
        """A writing call of these controllers succeeded: drop their answers here and in the
        other workers of this daemon now, before the call is answered, and in other daemons
        once they read the counters."""
        controllers = sorted(set(controllers))
        self._move(controllers)
        if self._siblings is None:
            await self._count(controllers)
        else:
            await gatherResults([Deferred.fromCoroutine(self._count(controllers)), self._siblings.changed(controllers)])

    async def _count(self, controllers: list[str]) -> None:
        """Count the change in the database, for the other daemons."""
        try:
            counters = await self._db.write(bump_generations, controllers)
        except DatabaseUnavailable:
            return  # the outage is logged once, by the database's; cached answers expire
        except Exception:
            log.failure(
                "counting a change of {controllers} failed: other daemons may serve their cached "
                "answers until these expire",
                controllers=controllers,
            )
            return
        for controller, count in counters.items():
            # our own change, seen: the next read need not drop the answers made since. With a
            # change of another daemon's unseen as well, the next read sees the difference.
            if self._counters.get(controller, 0) + 1 == count:
                self._counters[controller] = count

    def _move(self, controllers: Iterable[str]) -> None:
        for controller in controllers:
            self._generations[controller] = self.generation(controller) + 1

    async def _check(self) -> bool:
        """Read the change counters (one read at a time, shared by the calls waiting on it);
        whether they are now fresh enough to serve from the cache."""
        checking = self._checking
        if checking is None:
            checking = self._checking = Deferred.fromCoroutine(self._read())
            checking.addBoth(self._checked_now)
        await checking
        return self._clock.seconds() - self._checked < CHECK_SECONDS

    async def _read(self) -> None:
        started = self._clock.seconds()
        try:
            counters = await self._db.read(read_generations)
        except DatabaseUnavailable:
            return  # the outage is logged once, by the database's; answering without the cache
        except Exception:
            log.failure("reading the cache change counters failed; answering without the cache")
            return
        self._move(name for name, count in counters.items() if self._counters.get(name) != count)
        self._counters = counters
        self._checked = started

    def _checked_now(self, result: Any) -> Any:
        self._checking = None
        return result
