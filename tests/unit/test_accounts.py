"""Account identity: e-mails compare by Unicode case fold (`email_key`), usernames by ASCII case.

Against a real SQLite file and a real PostgreSQL, each migrated with Alembic; the race a
unique constraint settles is staged by skipping the check that normally answers first.
"""

from __future__ import annotations

import pytest
from sqlalchemy import event, select

import apid.auth.accounts
from apid.auth.accounts import email_key, find_login, get_account, insert_account, update_account, username_key
from apid.problems import Conflict
from apid.store.database import run_read, run_write
from apid.store.tables import person


@pytest.fixture
def engine(engine_of_each_database):
    """Every test of the module on SQLite and on PostgreSQL (conftest)."""
    return engine_of_each_database


def test_the_fold_makes_case_and_unicode_forms_one_address():
    assert email_key("ÄRGER@example.com") == email_key("ärger@example.com") == "ärger@example.com"
    assert email_key("A\u0308rger@Example.COM") == "ärger@example.com"  # decomposed Ä
    assert email_key("e\u0301@example.com") == email_key("\u00e9@example.com")  # é decomposed and precomposed
    assert email_key("STRASSE@example.com") == email_key("straße@example.com") == "strasse@example.com"
    assert email_key("\u017f\u0301@example.com") == email_key("\u015b@example.com")  # long s + acute, ś


def test_the_fold_keeps_what_casefold_keeps_apart():
    assert email_key("\u0131@example.com") == "\u0131@example.com"  # Turkish dotless ı stays ı
    assert email_key("\u0131@example.com") != email_key("i@example.com")
    assert email_key("I@example.com") == "i@example.com"  # I folds to i, not to ı
    assert email_key("\u0130@example.com") == "i\u0307@example.com"  # İ: i and a combining dot
    assert email_key("alice@example.com") != email_key("alice@example.org")


def test_the_key_column_holds_the_longest_key_an_email_address_can_have():
    local, domain = "\ufb03" * 64, "d" * 185 + ".org"  # ﬃ folds to ffi; 64 + 1 + 189 = 254
    address = f"{local}@{domain}"
    assert len(address) == 254 and len(email_key(address)) == 3 * 64 + 1 + 189
    assert person.c.email_key.type.length >= len(email_key(address))


def test_the_username_key_folds_ascii_letters_only():
    assert username_key("Bob") == username_key("BOB") == username_key("bob") == "bob"
    assert username_key("Carol.X-1_") == "carol.x-1_"
    # What str.lower() would fold too: the Kelvin sign to k, İ to i and a dot. A name typed
    # with one is not the ASCII name (and registration refuses it anyway).
    assert username_key("\u212aate") != username_key("kate")
    assert username_key("\u0130van") == "\u0130van"


def add(engine, name: str, email: str) -> int:
    return run_write(engine, insert_account, name, email, "not-a-real-hash", ["ROLE_USER"]).id


def stored_key(engine, person_id: int) -> str:
    return run_read(engine, lambda c: c.execute(select(person.c.email_key).where(person.c.id == person_id)).scalar())


def test_an_address_in_another_form_is_taken(engine):
    first = add(engine, "first", "ärger@example.com")
    assert stored_key(engine, first) == "ärger@example.com"
    for other in ("ÄRGER@example.com", "A\u0308RGER@EXAMPLE.COM"):
        with pytest.raises(Conflict) as taken:
            add(engine, "second", other)
        assert taken.value.extensions["field"] == "email"


def test_an_update_keeps_the_key_with_the_address(engine):
    first = add(engine, "first", "first@example.com")
    second = add(engine, "second", "second@example.com")
    with pytest.raises(Conflict) as taken:
        run_write(engine, update_account, second, {"email": "FIRST@example.com"}, None, None, None)
    assert taken.value.extensions["field"] == "email"
    # One's own address in another spelling is no conflict: stored as typed, same key.
    run_write(engine, update_account, first, {"email": "First@Example.com"}, None, None, None)
    assert run_read(engine, get_account, first).email == "First@Example.com"
    assert stored_key(engine, first) == "first@example.com"
    run_write(engine, update_account, second, {"email": "Straße@example.com"}, None, None, None)
    assert stored_key(engine, second) == "strasse@example.com"
    assert add(engine, "third", "second@example.com") > second  # the old address is free again


def stored_username_key(engine, person_id: int) -> str:
    return run_read(engine, lambda c: c.execute(select(person.c.username_key).where(person.c.id == person_id)).scalar())


def test_a_username_in_another_case_is_taken_and_an_update_keeps_the_key_with_the_name(engine):
    first = add(engine, "first", "first@example.com")
    second = add(engine, "second", "second@example.com")
    with pytest.raises(Conflict) as taken:
        add(engine, "FIRST", "third@example.com")
    assert taken.value.extensions["field"] == "username"
    with pytest.raises(Conflict) as taken:
        run_write(engine, update_account, second, {"username": "First"}, None, None, None)
    assert taken.value.extensions["field"] == "username"
    # One's own name in another case is no conflict: stored as typed, same key.
    run_write(engine, update_account, first, {"username": "FIRST"}, None, None, None)
    assert (run_read(engine, get_account, first).username, stored_username_key(engine, first)) == ("FIRST", "first")
    run_write(engine, update_account, second, {"username": "Renamed"}, None, None, None)
    assert stored_username_key(engine, second) == "renamed"
    assert run_read(engine, find_login, "RENAMED")[0].id == second
    assert add(engine, "Second", "fourth@example.com") > second  # the old name is free again


def test_the_unique_constraint_answers_409_when_the_check_loses_a_race(engine, monkeypatch):
    """On PostgreSQL two transactions may both pass `taken`; the constraint decides, and the
    loser gets the 409 the check would have given, naming the field."""
    first = add(engine, "first", "ärger@example.com")
    other = add(engine, "other", "other@example.com")
    monkeypatch.setattr(apid.auth.accounts, "taken", lambda *args: None)
    for name, email, field in (
        ("second", "ÄRGER@example.com", "email"),
        ("first", "new@example.com", "username"),
        ("FIRST", "new@example.com", "username"),
    ):
        with pytest.raises(Conflict) as taken:
            add(engine, name, email)
        assert taken.value.extensions["field"] == field
    with pytest.raises(Conflict) as taken:
        run_write(engine, update_account, other, {"email": "ÄRGER@EXAMPLE.COM"}, None, None, None)
    assert taken.value.extensions["field"] == "email"
    assert run_read(engine, get_account, first).email == "ärger@example.com"


def test_a_login_name_matches_in_any_letter_case(engine, alice):
    for typed in ("alice", "ALICE", "Alice"):
        account, password_hash = run_read(engine, find_login, typed)
        assert (account.id, account.username, password_hash) == (alice, "alice", "not-a-real-hash")
    assert run_read(engine, find_login, "alic") is None


def test_a_login_reads_its_account_through_the_unique_index_of_its_key(engine, alice):
    """One row by index whatever the number of accounts, never a scan of the table (what
    lower(username) made every login do; docs/benchmarks.md times it with 100,000 accounts).
    PostgreSQL is told to avoid scans: on a table this small it would rightly prefer one."""
    executed = []

    def record(connection, cursor, statement, parameters, context, executemany):
        executed.append((statement, parameters))

    event.listen(engine, "before_cursor_execute", record)
    try:
        assert run_read(engine, find_login, "ALICE")[0].id == alice
    finally:
        event.remove(engine, "before_cursor_execute", record)
    statement, parameters = next((s, p) for s, p in executed if "FROM person \nWHERE" in s)
    with engine.connect() as connection:
        if engine.dialect.name == "sqlite":
            rows = connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters)
            plan = " ".join(row[-1] for row in rows)
            assert plan.startswith("SEARCH person USING INDEX") and plan.endswith("(username_key=?)"), plan
        else:
            connection.exec_driver_sql("SET enable_seqscan = off")
            plan = " ".join(row[0] for row in connection.exec_driver_sql(f"EXPLAIN {statement}", parameters))
            assert "Index Scan using uq_person_username_key on person" in plan, plan
