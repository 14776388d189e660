"""Fixtures for unit tests against a real SQLite file migrated with Alembic, and its accounts,
and against a real redis-server (the counter stores' contract suites run on both stores)."""

from __future__ import annotations

import pytest
import pytest_twisted
import txredisapi
from twisted.internet import reactor

from apid.auth.accounts import insert_account
from apid.store.database import Database, make_engine, run_write
from apid.store.migrate import upgrade
from redis_server import running_redis


@pytest.fixture
def url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'apid.db'}"


@pytest.fixture
def engine(url):
    engine = make_engine(url)
    upgrade(engine)
    yield engine
    engine.dispose()


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgresql)])
def empty_engine(request, url, tmp_path):
    """An empty database: conftest's SQLite file, or a new database on the module's PostgreSQL."""
    if request.param == "postgresql":
        url = request.getfixturevalue("postgres").new_database(tmp_path.name.lower()[:40])
    engine = make_engine(url)
    yield engine
    engine.dispose()


@pytest.fixture
def engine_of_each_database(empty_engine):
    """`empty_engine` with apid's schema."""
    upgrade(empty_engine)
    return empty_engine


@pytest.fixture
def database(engine):
    """The daemon's handle on that file: units of work in a thread pool, answered as Deferreds."""
    db = Database(reactor=reactor, engine=engine, threads=2)
    db.start()
    yield db
    db.stop()


def add_person(engine, name: str) -> int:
    return run_write(engine, insert_account, name, f"{name}@example.com", "not-a-real-hash", ["ROLE_USER"]).id


@pytest.fixture
def alice(engine) -> int:
    return add_person(engine, "alice")


@pytest.fixture
def bob(engine) -> int:
    return add_person(engine, "bob")


@pytest.fixture(scope="module")
def redis_server():
    """A real redis-server for the module (Debian's package; see tests/redis_server.py)."""
    with running_redis() as server:
        yield server


@pytest.fixture(scope="module")
def redis_pool(redis_server):
    """A txredisapi pool on it, as the daemon makes one: numbers stay strings."""
    pool = txredisapi.lazyConnectionPool(
        host="127.0.0.1",
        port=redis_server.port,
        poolsize=10,
        convertNumbers=False,
        connectTimeout=2,
        replyTimeout=5,
    )
    yield pool
    pytest_twisted.blockon(pool.disconnect())
