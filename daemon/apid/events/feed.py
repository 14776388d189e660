"""This process's live event streams and the one reader of the change log they share.

While a stream is open the feed reads the log (apid.store.changes) for what is new: at once
when this process made a change (`wake`), and every `events.poll` seconds for the changes of
the other processes on the database (worker processes, other daemons). It hands every
change, in order, to every stream, each filtered for its own subscriber (apid.events.copies).
It checks each subscriber's standing as a request would be checked (token expired or revoked,
account disabled, deleted or demoted) when the daemon learns of a revocation or an account's
change (`affected`: at once for its own, within half a second for the other daemons'), once a
second for the token's expiry, and whole once a minute: a stream whose caller no longer stands
ends with the problem, and one whose roles were cut hears only what the roles left may. It
also sends the heartbeats; and from the daemon's start (`start`), with streams or without, it
sweeps once a minute what `events.retention` no longer keeps.

Positions are handed out in order with no gap skipped early: on PostgreSQL a change may commit
after a later one (apid.store.changes), so a gap waits `GAP_WAIT` seconds to fill before the
feed goes past it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from typing import Any

from twisted.internet.defer import Deferred, ensureDeferred
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from apid.auth.sessions import Revoked
from apid.auth.tokens import Principal
from apid.config.server import EventsConfig
from apid.events.copies import Subscriber, change_endpoint, copy_for, decoded
from apid.events.stream import Stream
from apid.iostate import RuleSet
from apid.problems import Problem, ServiceUnavailable, TooManyRequests
from apid.store.changes import PAGE, Change, after, bounds, sweep
from apid.store.database import Database, DatabaseUnavailable
from apid.telemetry import metrics

log = Logger(namespace="apid.events")

GAP_WAIT = 2.0  # seconds a missing position may take to commit before the feed goes past it
CHECK_SECONDS = 1.0  # heartbeats, and the expiry of each stream's token
FULL_CHECK_SECONDS = 60.0  # every caller checked whole, beside what revocations tell at once
SWEEP_SECONDS = 60.0
RETRY_MS = 3000  # the client's reconnection delay (`retry:`)

# The caller a stream is for, as their account stands now (or the problem that ends the stream)
Recheck = Callable[[Principal], Awaitable[Principal]]


class ChangeFeed:
    def __init__(
        self,
        *,
        reactor: IReactorTime,
        db: Database,
        rules: Callable[[], RuleSet],
        config: EventsConfig,
        recheck: Recheck,
        expired: Callable[[Principal], bool],
    ) -> None:
        self._reactor = reactor
        self._db = db
        self._rules = rules
        self._config = config
        self._recheck = recheck
        self._expired = expired
        self._streams: set[Stream] = set()
        self._callers: Counter[tuple[str, int]] = Counter()
        # each stream under its token, its login and its account: what a revocation names
        self._named: defaultdict[tuple[str, object], set[Stream]] = defaultdict(set)
        self._order: InOrder | None = None  # the positions handed out; None while no stream is open
        self._reading: Deferred[None] | None = None
        self._again = False
        self._poller = LoopingCall(self._read)
        self._poller.clock = reactor
        self._checker = LoopingCall(self._check)
        self._checker.clock = reactor
        self._sweeper = LoopingCall(self._sweep)
        self._sweeper.clock = reactor
        self._checked_whole = 0.0

    @property
    def open_streams(self) -> int:
        return len(self._streams)

    def wake(self) -> None:
        """This process logged a change: read it now, not at the next poll."""
        if self._streams:
            self._read_soon()

    async def serve(
        self, request: Any, principal: Principal, services: frozenset[str] | None, since: int | None
    ) -> None:
        """Stream to `principal` from now, or from after position `since` (Last-Event-ID), until
        the stream ends; a 429 or 503 problem past the caps."""
        caller = _caller(principal)
        if self._callers[caller] >= self._config.per_caller:
            raise TooManyRequests(f"at most {self._config.per_caller} event streams per caller are open at once")
        if len(self._streams) >= self._config.total:
            raise ServiceUnavailable(
                "this server holds as many event streams as it may; try another or later", retry_after=RETRY_MS / 1000
            )
        if self._order is None:
            newest = (await self._db.read(bounds))[1]
            if self._order is None:  # not started meanwhile by another stream's arrival
                self._order = InOrder(newest)
                self._start()
        now = self._reactor.seconds()
        stream = Stream(request, Subscriber(principal, services), self._order.last, buffer=self._config.buffer, now=now)
        self._streams.add(stream)
        names = _names(principal)
        for name in names:
            self._named[name].add(stream)
        self._callers[caller] += 1
        metrics.streams_open(len(self._streams))
        try:
            stream.start(RETRY_MS, now)
            if since is not None and since < stream.position:
                await self._replay(stream, since)
            stream.replayed(self._reactor.seconds())
            await stream.ended
        finally:
            stream.close()
            self._streams.discard(stream)
            for name in names:
                self._named[name].discard(stream)
                if not self._named[name]:
                    del self._named[name]
            metrics.streams_open(len(self._streams))
            self._callers[caller] -= 1
            if not self._callers[caller]:
                del self._callers[caller]
            if not self._streams:
                self._stop()

    async def start(self) -> None:
        """Sweep the log now, before the daemon serves (a write, done with before anyone can
        stop the daemon holding it), then once a minute, whether or not a stream is open here:
        it is written with every change."""
        await self._sweep()
        self._sweeper.start(SWEEP_SECONDS, now=False).addErrback(
            lambda failure: log.failure("sweeping the change log stopped", failure)
        )

    def stop(self) -> None:
        """The daemon stops: every stream ends (clients reconnect to another daemon), and the
        sweeping."""
        if self._sweeper.running:
            self._sweeper.stop()
        for stream in list(self._streams):
            stream.close()

    async def _replay(self, stream: Stream, since: int) -> None:
        """What the client missed, from the log, up to where the live changes took over; a
        `reset` when some of it is no longer kept."""
        oldest, _ = await self._db.read(bounds)
        if oldest > since + 1:
            stream.reset("missed")
            return
        upto, position = stream.position, since
        stream.position = since
        while position < upto and stream.open:
            changes = [change for change in await self._db.read(after, position) if change.position <= upto]
            if not changes:
                break
            self._hand_out(changes, [stream], live=False)
            position = changes[-1].position

    # --- reading the log -----------------------------------------------------------------

    def _start(self) -> None:
        self._poller.start(self._config.poll, now=False).addErrback(
            lambda failure: log.failure("reading the change log stopped", failure)
        )
        self._checker.start(CHECK_SECONDS, now=False).addErrback(
            lambda failure: log.failure("checking the event streams stopped", failure)
        )

    def _stop(self) -> None:
        for loop in (self._poller, self._checker):
            if loop.running:
                loop.stop()
        self._order = None

    def _read_soon(self) -> None:
        if self._reading is not None:
            self._again = True
            return
        self._read()

    def _read(self) -> Deferred[None] | None:
        if self._reading is not None:
            self._again = True
            return None
        self._reading = ensureDeferred(self._read_new())

        def done(_: object) -> None:
            self._reading = None
            if self._again and self._streams:
                self._again = False
                self._read()

        self._reading.addBoth(done)
        return None

    async def _read_new(self) -> None:
        while self._order is not None:
            try:
                changes = await self._db.read(after, self._order.last)
            except DatabaseUnavailable:
                return  # the outage is logged once, by the database's; the next poll tries again
            except Exception:
                log.failure("reading the change log failed; the next poll tries again")
                return
            if self._order is None:  # the last stream closed meanwhile
                return
            ready = self._order.ready(changes, self._reactor.seconds())
            self._hand_out(ready, list(self._streams))
            if len(changes) < PAGE or not ready:
                return

    def _hand_out(self, changes: list[Change], streams: list[Stream], live: bool = True) -> None:
        rules = self._rules()
        now = self._reactor.seconds()
        for change in changes:
            record = decoded(change)
            endpoint = change_endpoint(rules, change)
            made: dict[frozenset[str], str] = {}
            for stream in streams:
                if stream.open:
                    message = copy_for(stream.subscriber, change, endpoint, record, made)
                    stream.offer(change.position, change.service, message, now, live=live)
                    if message is not None:
                        metrics.event_sent(change.service, now - change.created_at if live else None)

    # --- the callers' standing -----------------------------------------------------------

    def affected(self, revoked: Revoked) -> None:
        """What the daemon now refuses (apid.auth.sessions.Revocations): the streams of those
        tokens, logins and accounts are checked at once, ended or narrowed (found by name: a
        change of an account happens with many a write, and must not cost one per open stream)."""
        named = (
            *(("token", token) for token in revoked.tokens),
            *(("session", session) for session in revoked.sessions),
            *(("person", person) for person in revoked.accounts),
        )
        for stream in {stream for name in named for stream in self._named.get(name, ())}:
            ensureDeferred(self._check_caller(stream))

    async def _check(self) -> None:
        """Once a second: heartbeats, and the streams whose token expired; every caller checked
        whole once a minute."""
        now = self._reactor.seconds()
        whole = now - self._checked_whole >= FULL_CHECK_SECONDS
        if whole:
            self._checked_whole = now
        for stream in list(self._streams):
            if not stream.open:
                continue
            if whole or self._expired(stream.subscriber.principal):
                await self._check_caller(stream)
            if stream.open and now - stream.last_write >= self._config.heartbeat:
                stream.heartbeat(now)

    async def _check_caller(self, stream: Stream) -> None:
        """End the stream of a caller who no longer stands, narrow that of one whose roles were cut."""
        try:
            principal = await self._recheck(stream.subscriber.principal)
        except Problem as problem:
            stream.end(problem)
            return
        except DatabaseUnavailable:
            return  # the standing as it was kept stands until the database answers again
        if principal != stream.subscriber.principal:
            stream.subscriber = Subscriber(principal, stream.subscriber.services)

    async def _sweep(self) -> None:
        now = self._reactor.seconds()
        try:
            await self._db.write(sweep, now - self._config.retention, self._config.retention_count)
        except DatabaseUnavailable:
            return
        except Exception:
            log.failure("sweeping the change log failed; the next minute tries again")


class InOrder:
    """Positions handed out in order: a change that does not follow the last one waits for the
    missing one to commit, `wait` seconds at most (then it was a rolled-back transaction's)."""

    def __init__(self, last: int, wait: float = GAP_WAIT) -> None:
        self.last = last
        self._wait = wait
        self._gap: tuple[int, float] | None = None  # a missing position, and since when

    def ready(self, changes: list[Change], now: float) -> list[Change]:
        """Of `changes` (read after `last`, oldest first), those to hand out now."""
        ready = []
        for change in changes:
            expected = self.last + 1
            if change.position != expected:
                if self._gap is None or self._gap[0] != expected:
                    self._gap = (expected, now)
                if now - self._gap[1] < self._wait:
                    break
            self._gap = None
            ready.append(change)
            self.last = change.position
        return ready


def _names(principal: Principal) -> tuple[tuple[str, object], ...]:
    """What a revocation may name of a stream's caller: their token, their login, their account."""
    return (("token", principal.token_id), ("session", principal.session), ("person", principal.user_id))


def _caller(principal: Principal) -> tuple[str, int]:
    """Whose streams count together against `events.perCaller`: an API key's, or an account's."""
    return ("key", principal.key_id) if principal.key_id is not None else ("person", principal.user_id)
