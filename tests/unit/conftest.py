"""Fixtures for unit tests against a real SQLite file migrated with Alembic, and its accounts."""

from __future__ import annotations

import pytest

from apid.accounts import insert_account
from apid.store.database import make_engine, run_write
from apid.store.migrate import upgrade


@pytest.fixture
def url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'apid.db'}"


@pytest.fixture
def engine(url):
    engine = make_engine(url)
    upgrade(engine)
    yield engine
    engine.dispose()


def add_person(engine, name: str) -> int:
    return run_write(engine, insert_account, name, f"{name}@example.com", "not-a-real-hash", ["ROLE_USER"]).id


@pytest.fixture
def alice(engine) -> int:
    return add_person(engine, "alice")


@pytest.fixture
def bob(engine) -> int:
    return add_person(engine, "bob")
