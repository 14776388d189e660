"""Telling every daemon process of the deployment to reload its IO State.

The deployment's rules have a generation, one row in the database. Moving it is the one way
to ask for a reload, and it moves only once the files have loaded in the asking process
(`announce_reload`, or `apid iostate reload`): a broken file changes nothing anywhere. Every
daemon process (each worker too) reads the generation every half second (`RulesWatcher`);
when it moved, it re-reads and validates the files in a thread and swaps them in, or keeps
the rules in force and logs why, then writes its report: the generation it tried, `ok` or
the error, and when. The report row also says the process is alive (`seen_at`, every 15 s),
so that `apid iostate reload` knows whose reports to wait for; a process's row goes when it
stops, a worker's when its parent sees it end (killed or crashed: `forget_ended`), and
another's purge takes it a day after a crash.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import Connection, delete, select
from twisted.internet.defer import DeferredLock
from twisted.internet.interfaces import IReactorThreads
from twisted.internet.task import LoopingCall
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger

from apid.iostate import IOStateError, RuleSet
from apid.plugin_host.discovery import PluginError
from apid.plugin_host.rules import RuleBook
from apid.runtime.reactors import Reactor
from apid.store.database import Database, DatabaseUnavailable, dialect_insert, make_engine, run_write
from apid.store.tables import iostate_change, iostate_report

log = Logger(namespace="apid.reloading")

OK = "ok"
POLL_SECONDS = 0.5
HEARTBEAT_SECONDS = 15.0  # one small write per process: a crashed daemon is waited for 37.5 s at most
# A process not seen for this long has stopped: `apid iostate reload` does not wait for it.
LIVE = timedelta(seconds=2.5 * HEARTBEAT_SECONDS)
# The report of a process gone this long is purged.
KEPT = timedelta(days=1)
LOAD_ERRORS = (IOStateError, PluginError)


def process_name(pid: int | None = None) -> str:
    """This process (or process `pid` of this host) as the reports name it: host:pid."""
    return f"{socket.gethostname()}:{os.getpid() if pid is None else pid}"


def _now() -> datetime:
    return datetime.now(UTC)


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


# --- units of work (run in a database thread) -----------------------------------------------------


def read_generation(connection: Connection) -> int:
    """The deployment's IO State generation: 0 until the first reload."""
    return connection.execute(select(iostate_change.c.generation).where(iostate_change.c.id == 1)).scalar() or 0


def bump_generation(connection: Connection) -> int:
    """Ask every daemon process to reload; the new generation."""
    moment = _now()
    statement = dialect_insert(connection)(iostate_change).values(id=1, generation=1, changed_at=moment)
    return connection.execute(
        statement.on_conflict_do_update(
            index_elements=[iostate_change.c.id],
            set_={"generation": iostate_change.c.generation + 1, "changed_at": moment},
        ).returning(iostate_change.c.generation)
    ).scalar_one()


@dataclass(frozen=True)
class Report:
    """What one process last did: the generation it tried, OK or why it kept its rules, when."""

    who: str
    generation: int
    outcome: str
    tried_at: datetime


def report(connection: Connection, done: Report) -> None:
    """Write (or refresh) a process's report, marking it alive now; purge those gone a day."""
    moment = _now()
    values = {"generation": done.generation, "outcome": done.outcome, "tried_at": done.tried_at, "seen_at": moment}
    connection.execute(
        dialect_insert(connection)(iostate_report)
        .values(who=done.who, **values)
        .on_conflict_do_update(index_elements=[iostate_report.c.who], set_=values)
    )
    connection.execute(delete(iostate_report).where(iostate_report.c.seen_at < moment - KEPT))


def forget(connection: Connection, who: str) -> None:
    """A process stops: nobody is to wait for its reports."""
    connection.execute(delete(iostate_report).where(iostate_report.c.who == who))


def forget_ended(database_url: str, pid: int) -> None:
    """The parent of worker processes saw worker `pid` end: nobody is to wait for its reports
    (it cannot remove them itself when killed). Blocking: run it in a thread."""
    engine = make_engine(database_url, pool_size=1)
    try:
        run_write(engine, forget, process_name(pid))
    finally:
        engine.dispose()


def live_processes(connection: Connection) -> set[str]:
    """The processes seen lately: those whose reports a reload waits for."""
    return set(
        connection.execute(select(iostate_report.c.who).where(iostate_report.c.seen_at >= _now() - LIVE)).scalars()
    )


def reports_since(connection: Connection, generation: int) -> list[Report]:
    """The reports on `generation` or a later one, by process."""
    rows = connection.execute(
        select(iostate_report).where(iostate_report.c.generation >= generation).order_by(iostate_report.c.who)
    )
    return [Report(row.who, row.generation, row.outcome, _aware(row.tried_at)) for row in rows]


def announce(connection: Connection) -> tuple[int, set[str]]:
    """Bump the generation; the new one and the processes that should report on it."""
    return bump_generation(connection), live_processes(connection)


# --- in the daemon ------------------------------------------------------------------------------


async def read_rules(reactor: IReactorThreads, rule_book: RuleBook) -> RuleSet:
    """The IO State files as they are now, bound to the installed plugins (in a thread: file
    I/O); raises one of LOAD_ERRORS when they do not load."""
    return await deferToThreadPool(reactor, reactor.getThreadPool(), rule_book.read)


async def reload_rules(reactor: IReactorThreads, rule_book: RuleBook) -> str:
    """Re-read the files and swap them in, or keep the last good set; OK or why not."""
    try:
        rules = await read_rules(reactor, rule_book)
    except LOAD_ERRORS as exc:
        log.error("IO State reload refused, the rules in force stay: {error}", error=str(exc))
        return str(exc)
    rule_book.swap(rules)
    log.info("IO State reloaded: {count} controllers", count=len(rules.controllers))
    return OK


async def announce_reload(reactor: IReactorThreads, db: Database, rule_book: RuleBook) -> int:
    """Have every daemon process sharing the database reload, once the files load here; the
    new generation. Raises one of LOAD_ERRORS (and moves nothing) when they do not load."""
    await read_rules(reactor, rule_book)
    return await db.write(bump_generation)


class RulesWatcher:
    """Reloads this process's rules whenever the deployment's generation moves, and reports."""

    def __init__(self, *, reactor: Reactor, db: Database, rule_book: RuleBook, who: str) -> None:
        self._reactor = reactor
        self._db = db
        self._rule_book = rule_book
        self._who = who
        self._done: Report | None = None
        self._seen = 0.0
        self._stopped = False
        self._lock = DeferredLock()  # one check at a time: the poller's, or catch_up's
        self._poller = LoopingCall(self._poll)
        self._poller.clock = reactor

    async def start(self, generation: int) -> None:
        """Watch from `generation`, the one read before the rules in force were (so that a
        reload announced while they were read is not missed)."""
        await self._report(Report(self._who, generation, OK, _now()))
        self._poller.start(POLL_SECONDS, now=False).addErrback(
            lambda failure: log.failure("IO State reload polling stopped", failure)
        )

    async def stop(self) -> None:
        """Stop watching and remove this process's report; a check in flight ends first, and
        the lock is kept, so that no report follows the removal."""
        if self._stopped:
            return
        self._stopped = True
        if self._poller.running:
            self._poller.stop()
        await self._lock.acquire()
        try:
            await self._db.write(forget, self._who)
        except DatabaseUnavailable:
            pass  # the outage is logged once, by the database's; the report goes within a day
        except Exception:
            log.failure("removing this process's IO State report failed; it goes within a day")

    async def catch_up(self) -> None:
        """Reload now if the generation moved (this process just moved it), not at the next poll."""
        await self._lock.acquire()
        try:
            await self._check()
        finally:
            self._lock.release()

    async def _poll(self) -> None:
        await self._lock.acquire()
        try:
            await self._check()
            if self._done is not None and self._reactor.seconds() - self._seen >= HEARTBEAT_SECONDS:
                await self._report(self._done)
        finally:
            self._lock.release()

    async def _check(self) -> None:
        try:
            generation = await self._db.read(read_generation)
        except DatabaseUnavailable:
            return  # the outage is logged once, by the database's
        except Exception:
            log.failure("reading the IO State generation failed; trying again")
            return
        if self._done is not None and generation == self._done.generation:
            return
        tried_at = _now()
        outcome = await reload_rules(self._reactor, self._rule_book)
        await self._report(Report(self._who, generation, outcome, tried_at))

    async def _report(self, done: Report) -> None:
        self._done = done
        try:
            await self._db.write(report, done)
        except DatabaseUnavailable:
            return  # the outage is logged once, by the database's
        except Exception:
            log.failure("writing this process's IO State report failed")
            return
        self._seen = self._reactor.seconds()
