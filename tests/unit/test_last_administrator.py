"""The last active administrator is kept (`apid.auth.accounts.keep_an_administrator`), in the
transaction of the change: against a real SQLite file and a real PostgreSQL, each migrated with
Alembic, including two transactions each demoting one of the last two administrators at once."""

from __future__ import annotations

import contextlib
import threading

import pytest

from apid.auth.accounts import delete_account, get_account, insert_account, update_account
from apid.problems import Conflict
from apid.store.database import run_read, run_write

ADMIN = "ROLE_ADMIN"


@pytest.fixture
def engine(engine_of_each_database):
    """Every test of the module on SQLite and on PostgreSQL (conftest)."""
    return engine_of_each_database


def administrators(engine, count: int) -> list[int]:
    return [
        run_write(engine, insert_account, f"admin{n}", f"admin{n}@example.com", "hash", [ADMIN]).id
        for n in range(count)
    ]


@pytest.mark.parametrize(
    ("changes", "roles"),
    [
        ({}, ["ROLE_USER"]),
        ({"enabled": False}, None),
        ({"accountLocked": True}, None),
        ({"accountExpired": True}, None),
    ],
)
def test_the_last_active_administrator_keeps_role_and_use(engine, changes, roles):
    first, second = administrators(engine, 2)
    run_write(engine, update_account, second, changes, None, None, roles, None, ADMIN)  # one is left
    with pytest.raises(Conflict, match="last active administrator"):
        run_write(engine, update_account, first, changes, None, None, roles, None, ADMIN)
    kept = run_read(engine, get_account, first)
    assert kept is not None and kept.roles == {ADMIN} and kept.may_log_in and kept.version == 0


def test_the_last_active_administrator_is_not_deleted_but_others_are(engine):
    first, second = administrators(engine, 2)
    assert run_write(engine, delete_account, second, ADMIN) is not None
    with pytest.raises(Conflict, match="last active administrator"):
        run_write(engine, delete_account, first, ADMIN)
    assert run_read(engine, get_account, first) is not None
    # without the role the guard is the caller's choice (the command line, a provider's groups)
    assert run_write(engine, update_account, first, {}, None, None, ["ROLE_USER"], None, None).roles == {"ROLE_USER"}


def test_changes_that_keep_an_administrator_pass(engine):
    (only,) = administrators(engine, 1)
    changed = run_write(
        engine, update_account, only, {"email": "new@example.com"}, None, None, [ADMIN, "ROLE_USER"], None, ADMIN
    )
    assert changed.email == "new@example.com" and changed.roles == {ADMIN, "ROLE_USER"}


def test_two_demotions_at_once_of_the_last_two_leave_one(engine):
    """Each transaction reads first, then both demote: without the role row's lock both would
    count two administrators and both would commit."""
    first, second = administrators(engine, 2)
    together = threading.Barrier(2, timeout=1)
    outcomes: list[object] = []

    def demote(connection, person_id: int):
        get_account(connection, person_id)
        with contextlib.suppress(threading.BrokenBarrierError):
            together.wait()  # PostgreSQL: both transactions are open here; SQLite's second waits at BEGIN
        return update_account(connection, person_id, {}, None, None, ["ROLE_USER"], None, ADMIN)

    def run(person_id: int) -> None:
        try:
            outcomes.append(run_write(engine, demote, person_id))
        except Conflict as problem:
            outcomes.append(problem)

    threads = [threading.Thread(target=run, args=(person_id,)) for person_id in (first, second)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(type(outcome).__name__ for outcome in outcomes) == ["Account", "Conflict"]
    admins = [p for p in (first, second) if ADMIN in run_read(engine, get_account, p).roles]
    assert len(admins) == 1
