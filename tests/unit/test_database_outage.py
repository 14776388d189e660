"""The database boundary tells "cannot reach the database" from the work's own errors
(`apid.store.database.unreachable`), on real SQLite files and a real PostgreSQL server: the
first is a 503 `DatabaseUnavailable` for every caller and an outage, the others stay what
they were (a 500 with its traceback, upstream); once the server is back the pool recovers."""

from __future__ import annotations

import pytest
import pytest_twisted
from sqlalchemy import event, text
from sqlalchemy.exc import DBAPIError, IntegrityError, OperationalError, ProgrammingError
from twisted.internet import reactor

from apid.store.database import (
    CONNECT_TIMEOUT,
    Database,
    DatabaseUnavailable,
    make_engine,
    run_read,
    run_write,
    unreachable,
)
from apid.telemetry.health import Health
from harness import free_port


def failure_of(work, engine) -> BaseException:
    with pytest.raises(DBAPIError) as caught:
        work(engine)
    return caught.value


def duplicate(engine) -> None:
    run_write(engine, lambda c: c.execute(text("INSERT INTO t VALUES (1)")))


def bad_sql(engine) -> None:
    run_read(engine, lambda c: c.execute(text("SELEKT 1")))


def no_table(engine) -> None:
    run_read(engine, lambda c: c.execute(text("SELECT * FROM nowhere")))


def select_one(engine) -> None:
    run_read(engine, lambda c: c.execute(text("SELECT 1")))


def test_on_sqlite_a_file_that_cannot_be_opened_is_unreachable_and_mistakes_are_not(tmp_path):
    gone = make_engine(f"sqlite:///{tmp_path / 'no-such-folder' / 'apid.db'}")
    assert unreachable(failure_of(select_one, gone))
    engine = make_engine(f"sqlite:///{tmp_path / 'apid.db'}")
    run_write(engine, lambda c: c.execute(text("CREATE TABLE t (id INTEGER PRIMARY KEY)")))
    duplicate(engine)
    for mistake, kind in ((duplicate, IntegrityError), (bad_sql, OperationalError), (no_table, OperationalError)):
        error = failure_of(mistake, engine)
        assert isinstance(error, kind) and not unreachable(error), error


def test_a_postgresql_port_nobody_listens_on_is_unreachable():
    engine = make_engine(f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/apid")
    assert unreachable(failure_of(select_one, engine))


@pytest_twisted.ensureDeferred
async def test_every_unit_of_work_on_an_unreachable_database_is_a_503_and_one_outage(tmp_path):
    db = Database(reactor=reactor, engine=make_engine(f"sqlite:///{tmp_path / 'gone' / 'apid.db'}"), threads=2)
    health = Health()
    db.outage.report_to(health, "database")
    db.start()
    try:
        for run in (db.read, db.write):
            with pytest.raises(DatabaseUnavailable) as caught:
                await run(lambda c: c.execute(text("SELECT 1")))
            assert caught.value.status == 503 and caught.value.headers["Retry-After"] == "5"
            assert isinstance(caught.value.__cause__, OperationalError)
        # told before the answer came: both cross to the reactor thread in order
        assert db.outage.down and health.document("0.1")[0] == 503
    finally:
        db.stop()


@pytest_twisted.ensureDeferred
async def test_a_mistake_stays_itself_and_starts_no_outage(tmp_path):
    db = Database(reactor=reactor, engine=make_engine(f"sqlite:///{tmp_path / 'apid.db'}"), threads=2)
    db.start()
    try:
        with pytest.raises(OperationalError):
            await db.read(lambda c: c.execute(text("SELECT * FROM nowhere")))
        assert not db.outage.down
    finally:
        db.stop()


@pytest.mark.postgresql
def test_on_postgresql_mistakes_are_not_outages_and_a_stopped_server_is(postgres):
    engine = make_engine(postgres.url)
    run_write(engine, lambda c: c.execute(text("CREATE TABLE t (id INTEGER PRIMARY KEY)")))
    duplicate(engine)
    for mistake, kind in ((duplicate, IntegrityError), (bad_sql, ProgrammingError), (no_table, ProgrammingError)):
        error = failure_of(mistake, engine)
        assert isinstance(error, kind) and not unreachable(error), error
    postgres.halt()
    try:
        error = failure_of(select_one, engine)  # the pooled connection is found dead, a new one refused
        assert unreachable(error), error
    finally:
        postgres.resume()
    select_one(engine)  # the pool recovers by itself
    engine.dispose()


def test_connecting_to_postgresql_is_bounded_unless_the_url_says():
    def connect_timeout(url: str) -> object:
        engine = make_engine(url)
        seen: dict = {}
        event.listen(engine, "do_connect", lambda dialect, record, cargs, cparams: seen.update(cparams))
        failure_of(select_one, engine)  # nobody listens there: refused at once
        return seen.get("connect_timeout")

    url = f"postgresql+psycopg://postgres@127.0.0.1:{free_port()}/apid"
    assert connect_timeout(url) == CONNECT_TIMEOUT
    assert connect_timeout(url + "?connect_timeout=2") == "2"
