"""The database handle: synchronous SQLAlchemy run in a dedicated thread pool.

Each unit of work is one function `work(connection, *args)` run inside one transaction in a
database thread, returning plain data; the reactor thread never touches a connection.
SQLite runs in WAL mode and takes the write lock up front (BEGIN IMMEDIATE) for writes, so
two writers queue on `busy_timeout` instead of failing halfway. The hottest reads, one row
by key, are `PreparedSelect`s instead: one statement, compiled once. How long each unit of
work waited for a thread is a metric (`apid_db_pool_wait_seconds`): a pool too small for the
load shows there first.

A database that cannot be reached (stopped, restarting, the network down) fails every unit of
work alike: `unreachable` tells that apart from the work's own errors (a constraint, a bug in
the SQL), and the boundary here turns it into a 503 problem with Retry-After
(`DatabaseUnavailable`) for every caller, and tells the database's `Outage`, which logs the
outage once and holds /health failing until a probe answers. Connecting to PostgreSQL is
bounded by `CONNECT_TIMEOUT` (unless the URL sets `connect_timeout`), so a host that does not
answer fails calls in seconds rather than minutes; the pool checks a connection before lending
it (`pool_pre_ping`), so that once the server is back the next call gets a fresh one.
"""

from __future__ import annotations

import sqlite3
import sys
import time
from collections import namedtuple
from collections.abc import Callable
from typing import Any, TypeVar, cast

from sqlalchemy import Connection, Engine, Insert, Select, create_engine, event, make_url, text
from sqlalchemy.exc import DBAPIError, DisconnectionError
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorThreads, IReactorTime
from twisted.internet.threads import deferToThreadPool
from twisted.logger import Logger
from twisted.python.threadpool import ThreadPool

from apid.problems import ServiceUnavailable
from apid.store.outage import Outage
from apid.telemetry.metrics import pool_wait

T = TypeVar("T")

log = Logger(namespace="apid.store.database")

CONNECT_TIMEOUT = 5  # seconds to connect to PostgreSQL (libpq's connect_timeout), unless the URL says
RETRY_AFTER = 5  # seconds a 503 of an unreachable database asks the client to wait
# PostgreSQL's SQLSTATEs that mean "no connection now": class 08 (connection exception), the
# server shutting down or starting up, no connection slot free
UNREACHABLE_STATES = frozenset({"57P01", "57P02", "57P03", "53300"})
# SQLite's: the file cannot be opened, or read or written (a disk or mount gone)
UNREACHABLE_SQLITE = frozenset({sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_IOERR})


class DatabaseUnavailable(ServiceUnavailable):
    """The database cannot be reached now: a 503 with Retry-After, whatever the call was."""

    def __init__(self) -> None:
        super().__init__("the database cannot be reached; try again shortly", headers={"Retry-After": str(RETRY_AFTER)})


def unreachable(error: BaseException) -> bool:
    """Whether `error` says the database could not be reached (no connection, or one lost),
    as opposed to an error of the work itself (a constraint, a bug in the SQL, a deadlock),
    which stays a 500 with its traceback. `error` is SQLAlchemy's or the driver's own (a
    `PreparedSelect` runs on the driver's connection): psycopg's, or sqlite3's."""
    if isinstance(error, DisconnectionError):
        return True
    if isinstance(error, DBAPIError):
        return error.connection_invalidated or (error.orig is not None and unreachable(error.orig))
    if isinstance(error, sqlite3.OperationalError):
        return (getattr(error, "sqlite_errorcode", 0) & 0xFF) in UNREACHABLE_SQLITE
    psycopg = sys.modules.get("psycopg")  # loaded only where PostgreSQL is used
    if psycopg is not None and isinstance(error, psycopg.OperationalError):
        state = error.sqlstate  # None: the connection failed, timed out or broke, no server answered
        return state is None or state.startswith("08") or state in UNREACHABLE_STATES
    return False


def make_engine(url: str, pool_size: int = 4) -> Engine:
    """An engine for `url`; SQLite gets its pragmas and explicit transaction control."""
    if not url.startswith("sqlite"):
        parsed = make_url(url)
        bounded = parsed.get_backend_name() == "postgresql" and "connect_timeout" not in parsed.query
        return create_engine(
            url,
            pool_size=pool_size,
            max_overflow=0,
            pool_pre_ping=True,
            connect_args={"connect_timeout": CONNECT_TIMEOUT} if bounded else {},
        )
    engine = create_engine(url, connect_args={"timeout": 30})

    @event.listens_for(engine, "connect")
    def _pragmas(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        for pragma in ("journal_mode=WAL", "busy_timeout=30000", "foreign_keys=ON", "synchronous=NORMAL"):
            cursor.execute(f"PRAGMA {pragma}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(connection: Connection) -> None:
        write = connection.get_execution_options().get("apid_write", False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")

    return engine


def dialect_insert(connection: Connection) -> Callable[..., Any]:
    """The `insert` of the connection's dialect, PostgreSQL's or SQLite's (both with ON CONFLICT),
    its module imported on first use: a daemon on SQLite never loads PostgreSQL's (about 2 MiB)."""
    if connection.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as postgresql_insert

        return postgresql_insert
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert


def inserted_id(connection: Connection, statement: Insert) -> int:
    """Run a one-row insert and answer the new row's id (SQLAlchemy types the key as optional,
    but a one-row insert into a table with a primary key always has one)."""
    key = connection.execute(statement).inserted_primary_key
    if key is None:
        raise RuntimeError(f"the insert into {statement.table} returned no primary key")
    return int(key[0])


def _after_wait(
    seen: Callable[[BaseException], None],
    waited: Callable[[float], None],
    queued: float,
    function: Callable[..., T],
    /,
    *args: Any,
    **kwargs: Any,
) -> T:
    """In the database thread: report how long the work waited for it, then do it; an error
    that says the database cannot be reached is `seen` and leaves as `DatabaseUnavailable`."""
    waited(time.monotonic() - queued)
    try:
        return function(*args, **kwargs)
    except Exception as error:
        if not unreachable(error):
            raise
        seen(error)
        raise DatabaseUnavailable() from error


def _select_one(connection: Connection) -> None:
    connection.execute(text("SELECT 1"))


def run_read(engine: Engine, work: Callable[..., T], *args: Any) -> T:
    with engine.connect() as connection, connection.begin():
        return work(connection, *args)


def run_write(engine: Engine, work: Callable[..., T], *args: Any) -> T:
    with engine.connect() as connection:
        connection.execution_options(apid_write=True)
        with connection.begin():
            return work(connection, *args)


class PreparedSelect:
    """One SELECT compiled once, run on a pooled driver connection without SQLAlchemy's
    per-call machinery.

    Through `run_read`, a one-row read by key is mostly that machinery (connection wrapper,
    BEGIN and COMMIT, execution context, cache key), and it is slowest with the cold caches
    of a daemon between requests: timed inside the daemon, the database step of person/show
    took ~250 us that way and ~100 us this way, on every single call and chain link. What
    stays SQLAlchemy's is what matters: the SQL, compiled once for the engine's dialect, and
    the column types, whose own result processors type each value. There is no explicit
    transaction: one statement reads one consistent snapshot on its own (SQLite runs it in
    autocommit mode, in WAL; elsewhere the pool's reset on return ends the transaction the
    driver began). Expanding (IN list) parameters are not supported: their SQL depends on
    the values.
    """

    # a named tuple class with the statement's columns as fields, known only at run time (mypy
    # reads a namedtuple's fields from literals alone: the ignore below)
    _row: Callable[..., tuple[Any, ...]]

    def __init__(self, engine: Engine, statement: Select[Any]) -> None:
        dialect = engine.dialect
        self._engine = engine
        self._compiled = statement.compile(dialect=dialect)
        columns = list(statement.selected_columns)
        self._row = namedtuple("Row", [column.key for column in columns])  # type: ignore[misc]
        self._processors = [column.type.dialect_impl(dialect).result_processor(dialect, None) for column in columns]

    def rows(self, **values: Any) -> list[Any]:
        """The rows for these parameter values, each a named tuple; blocks, so run it in a
        database thread (`Database.select`)."""
        compiled = self._compiled
        params: Any = compiled.construct_params(values)
        if compiled.positional:
            params = tuple(params[name] for name in compiled.positiontup or ())
        connection = self._engine.raw_connection()
        try:
            cursor = connection.cursor()
            try:
                cursor.execute(compiled.string, params)
                found = cursor.fetchall()
            finally:
                cursor.close()
        finally:
            connection.close()
        processors = self._processors
        return [
            self._row(
                *(value if process is None else process(value) for process, value in zip(processors, row, strict=True))
            )
            for row in found
        ]


class Database:
    """Runs units of work in the database thread pool and hands back Deferreds.

    On SQLite every write goes to one writer thread of its own. SQLite has one writer at a
    time; writers in several threads of the process would wait for each other in SQLite's
    busy handler, which sleeps 1, 2, 5, 10... ms between tries instead of waking when the lock
    is free, so concurrent writes (webhook events, claims, settlements, sessions) stalled for
    milliseconds. Queued for one thread, they run back to back. Readers are never blocked by
    the writer in WAL mode; other processes still meet busy_timeout.

    `pool`, when given, runs every unit of work instead of the pools made here: the testing
    kit's runs each at once, so no reactor has to turn for a call to finish. `outage` follows
    the database's reachability (see `unreachable`); `report_to` makes /health follow it too.
    """

    def __init__(
        self, *, reactor: IReactorThreads, engine: Engine, threads: int, pool: ThreadPool | None = None
    ) -> None:
        self.engine = engine
        self._reactor = reactor
        clock = cast(IReactorTime, reactor)  # every reactor is a clock too
        self.outage = Outage(
            clock=clock,
            log=log,
            subject="database",
            consequence="calls answer 503 and /health fails",
            probe=self._probe,
        )
        self._pool = ThreadPool(minthreads=1, maxthreads=threads, name="apid-db") if pool is None else pool
        single_writer = pool is None and engine.dialect.name == "sqlite"
        self._writer = ThreadPool(minthreads=1, maxthreads=1, name="apid-db-writer") if single_writer else self._pool
        self._read_waited = pool_wait("read")
        self._write_waited = pool_wait("write")

    def start(self) -> None:
        self._pool.start()
        if self._writer is not self._pool:
            self._writer.start()

    def stop(self) -> None:
        """Stop the threads and close the connections; again (a shutdown after a failed
        start-up stopped it) does nothing."""
        self.outage.stop()
        if not self._pool.started:
            return
        if self._writer is not self._pool:
            self._writer.stop()
        self._pool.stop()
        self.engine.dispose()

    def _seen(self, error: BaseException) -> None:
        """In a database thread: tell the outage, in the reactor's."""
        self._reactor.callFromThread(self.outage.failed, error)

    def _probe(self) -> Deferred[None]:
        """SELECT 1, while an outage lasts (its `probe`): bounded by the connect timeout."""
        return deferToThreadPool(self._reactor, self._pool, run_read, self.engine, _select_one)

    def prepare(self, statement: Select[Any]) -> PreparedSelect:
        return PreparedSelect(self.engine, statement)

    def select(self, prepared: PreparedSelect, **values: Any) -> Deferred[list[Any]]:
        """The rows of a prepared statement for these parameter values."""
        return deferToThreadPool(
            self._reactor,
            self._pool,
            _after_wait,
            self._seen,
            self._read_waited,
            time.monotonic(),
            prepared.rows,
            **values,
        )

    def read(self, work: Callable[..., T], *args: Any) -> Deferred[T]:
        """Run `work(connection, *args)` in a read transaction."""
        return deferToThreadPool(
            self._reactor,
            self._pool,
            _after_wait,
            self._seen,
            self._read_waited,
            time.monotonic(),
            run_read,
            self.engine,
            work,
            *args,
        )

    def write(self, work: Callable[..., T], *args: Any) -> Deferred[T]:
        """Run `work(connection, *args)` in a write transaction; an exception rolls it back."""
        return deferToThreadPool(
            self._reactor,
            self._writer,
            _after_wait,
            self._seen,
            self._write_waited,
            time.monotonic(),
            run_write,
            self.engine,
            work,
            *args,
        )
