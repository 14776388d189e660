"""Migration 0012 (apid.auth.lifecycle): existing accounts get their lifecycle state, and on
SQLite an id is never given again, on a SQLite file and on a real PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text

from apid.store.database import make_engine
from apid.store.migrate import upgrade


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgresql)])
def database(request, tmp_path):
    if request.param == "sqlite":
        engine = make_engine(f"sqlite:///{tmp_path / 'apid.db'}")
    else:
        engine = make_engine(request.getfixturevalue("postgres").new_database(tmp_path.name.lower()))
    yield engine
    engine.dispose()


def add_person(connection, name: str, enabled: bool) -> int:
    return connection.execute(
        text(
            "INSERT INTO person (username, username_key, password, email, email_key, enabled, date_created, "
            "last_updated) VALUES (:n, :n, 'x', :e, :e, :on, :at, :at) RETURNING id"
        ),
        {"n": name, "e": f"{name}@example.com", "on": enabled, "at": datetime(2026, 1, 2, tzinfo=UTC)},
    ).scalar()


def add_id(connection, person_id: int, purpose: str, expires: datetime, used: datetime | None = None) -> None:
    connection.execute(
        text(
            "INSERT INTO account_token (person_id, purpose, token_hash, date_created, expires_at, used_at) "
            "VALUES (:p, :purpose, :hash, :now, :expires, :used)"
        ),
        {
            "p": person_id,
            "purpose": purpose,
            "hash": f"{person_id}-{purpose}-{expires.timestamp()}",
            "now": datetime.now(UTC),
            "expires": expires,
            "used": used,
        },
    )


def test_0012_tells_pending_sign_ups_from_disabled_accounts(database):
    upgrade(database, "0011")
    now = datetime.now(UTC)
    with database.begin() as connection:
        active = add_person(connection, "active", True)
        pending = add_person(connection, "pending", False)
        add_id(connection, pending, "validate", now + timedelta(hours=1))
        disabled = add_person(connection, "disabled", False)
        add_id(connection, disabled, "validate", now - timedelta(hours=1))  # expired
        add_id(connection, disabled, "validate", now + timedelta(hours=1), used=now)  # used
        add_id(connection, disabled, "reset", now + timedelta(hours=1))  # not a validation
    upgrade(database, "0012")

    with database.connect() as connection:
        rows = dict(connection.execute(text("SELECT id, validated_at FROM person")).all())
    assert rows[pending] is None
    for validated in (active, disabled):
        moment = rows[validated]
        if isinstance(moment, str):
            moment = datetime.fromisoformat(moment)
        assert moment.replace(tzinfo=UTC) == datetime(2026, 1, 2, tzinfo=UTC)  # when it was made


def test_after_0012_no_id_is_given_again(database):
    upgrade(database, "0011")
    with database.begin() as connection:
        add_person(connection, "first", True)
        second = add_person(connection, "second", True)
        connection.execute(text("DELETE FROM person WHERE id = :id"), {"id": second})
    upgrade(database)
    with database.begin() as connection:
        third = add_person(connection, "third", True)
        connection.execute(text("DELETE FROM person WHERE id = :id"), {"id": third})
        fourth = add_person(connection, "fourth", True)
    assert fourth > third >= second
