"""The prepared one-statement read gives the rows, typed alike, that SQLAlchemy's own
execution gives; accounts read through it are the accounts read through a connection."""

from __future__ import annotations

import pytest_twisted
from sqlalchemy import bindparam, select
from twisted.internet import reactor

from apid.auth.account_service import Accounts
from apid.auth.accounts import get_accounts
from apid.store.database import Database, PreparedSelect, run_read
from apid.store.tables import person


def test_a_prepared_select_types_its_rows_like_sqlalchemy(engine, alice, bob):
    statement = select(person.c.id, person.c.username, person.c.enabled, person.c.date_created).where(
        person.c.id == bindparam("id")
    )
    prepared = PreparedSelect(engine, statement)
    expected = run_read(engine, lambda connection: [tuple(row) for row in connection.execute(statement, {"id": bob})])
    found = prepared.rows(id=bob)
    assert [tuple(row) for row in found] == expected
    assert found[0].username == "bob" and found[0].enabled is True
    assert prepared.rows(id=bob + 100) == []


@pytest_twisted.ensureDeferred
async def test_one_account_read_prepared_equals_the_account_read_in_a_transaction(engine, alice, bob):
    db = Database(reactor=reactor, engine=engine, threads=2)
    db.start()
    try:
        accounts = Accounts(reactor=reactor, db=db, passwords=None, revocations=None)
        assert await accounts.get(alice) == run_read(engine, get_accounts, [alice])[alice]
        assert await accounts.get(bob + 100) is None
    finally:
        db.stop()
