"""The migrations build exactly the schema of apid.store.tables, and running them twice is harmless."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.exc import IntegrityError

from apid.store.database import make_engine
from apid.store.migrate import MigrationRefused, upgrade
from apid.store.tables import metadata


def test_migrations_match_the_tables(tmp_path):
    engine = create_engine(f"sqlite:///{tmp_path / 'apid.db'}")
    upgrade(engine)
    upgrade(engine)
    with engine.connect() as connection:
        differences = compare_metadata(MigrationContext.configure(connection), metadata)
    assert differences == []
    assert set(inspect(engine).get_table_names()) == {
        "alembic_version", "person", "role", "person_role", "hook", "hook_message", "hook_attempt", "account_token",
        "refresh_token", "revoked_token", "account_change"}


# --- 0004: person.email_key --------------------------------------------------------------------


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgresql)])
def database(request, tmp_path):
    """An empty database, engine made as the daemon makes it: a SQLite file, or a fresh
    database on the module's real PostgreSQL."""
    if request.param == "sqlite":
        engine = make_engine(f"sqlite:///{tmp_path / 'apid.db'}")
    else:
        engine = make_engine(request.getfixturevalue("postgres").new_database(tmp_path.name.lower()))
    yield engine
    engine.dispose()


def add_people_at_0003(engine, *emails: str) -> None:
    """People (each with a role) as revision 0003 stores them: no email_key yet."""
    with engine.begin() as connection:
        role_id = connection.execute(text("INSERT INTO role (authority) VALUES ('ROLE_USER') RETURNING id")).scalar()
        for n, address in enumerate(emails, 1):
            person_id = connection.execute(
                text("INSERT INTO person (username, password, email) VALUES (:name, 'x', :email) RETURNING id"),
                {"name": f"person{n}", "email": address}).scalar()
            connection.execute(text("INSERT INTO person_role (person_id, role_id) VALUES (:p, :r)"),
                               {"p": person_id, "r": role_id})


def version(engine) -> str:
    with engine.connect() as connection:
        return connection.execute(text("SELECT version_num FROM alembic_version")).scalar()


def test_0004_gives_every_existing_address_its_key(database):
    upgrade(database, "0003")
    add_people_at_0003(database, "Alice@Example.com", "STRASSE@example.com", "e\u0301@example.com")
    upgrade(database, "0004")

    with database.connect() as connection:
        rows = connection.execute(text("SELECT email, email_key FROM person ORDER BY id")).all()
        roles = connection.execute(text("SELECT count(*) FROM person_role")).scalar()
    assert [tuple(row) for row in rows] == [
        ("Alice@Example.com", "alice@example.com"),  # the address stays as typed
        ("STRASSE@example.com", "strasse@example.com"),
        ("e\u0301@example.com", "\u00e9@example.com"),
    ]
    assert roles == 3  # rebuilding person on SQLite took no referencing row along
    (column,) = [c for c in inspect(database).get_columns("person") if c["name"] == "email_key"]
    assert column["nullable"] is False
    assert {"name": "uq_person_email_key", "column_names": ["email_key"]}.items() <= next(
        u for u in inspect(database).get_unique_constraints("person") if u["name"] == "uq_person_email_key").items()
    with pytest.raises(IntegrityError), database.begin() as connection:
        connection.execute(text("INSERT INTO person (username, password, email, email_key) "
                                "VALUES ('again', 'x', 'ALICE@example.com', 'alice@example.com')"))
    if database.dialect.name == "sqlite":
        with database.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1  # enforcement is back


def test_0004_refuses_addresses_that_fold_alike_and_changes_nothing(database):
    upgrade(database, "0003")
    add_people_at_0003(database, "ÄRGER@example.com", "fine@example.com", "ärger@example.com",
                       "\u00e9@example.com", "e\u0301@example.com")
    with pytest.raises(MigrationRefused) as refused:
        upgrade(database, "0004")
    message = str(refused.value)
    assert "person 1 'ÄRGER@example.com', person 3 'ärger@example.com'" in message
    # The decomposed é looks like the other, so it is also shown escaped.
    assert "person 4 '\u00e9@example.com', person 5 'e\u0301@example.com' ('e\\u0301@example.com')" in message
    assert "fine@example.com" not in message
    assert version(database) == "0003"
    assert "email_key" not in {c["name"] for c in inspect(database).get_columns("person")}

    with database.begin() as connection:  # the operator makes them distinct, and migrates again
        connection.execute(text("UPDATE person SET email = 'old.' || email WHERE id IN (1, 4)"))
    upgrade(database, "0004")
    assert version(database) == "0004"


def test_rows_dangling_before_a_migration_do_not_stop_it(tmp_path):
    """Rows written with enforcement off (the sqlite3 shell's default) may point nowhere
    already; the check after migrating fails only on new ones."""
    engine = make_engine(f"sqlite:///{tmp_path / 'apid.db'}")
    upgrade(engine, "0003")
    add_people_at_0003(engine, "kept@example.com")
    with engine.connect() as connection:
        connection.connection.driver_connection.execute("PRAGMA foreign_keys=OFF")
        connection.execute(text("INSERT INTO person_role (person_id, role_id) VALUES (99, 1)"))
        connection.commit()
        connection.connection.driver_connection.execute("PRAGMA foreign_keys=ON")
    upgrade(engine, "0004")
    assert version(engine) == "0004"
    with engine.connect() as connection:
        assert connection.execute(text("SELECT person_id FROM person_role ORDER BY person_id")).scalars().all() == [1, 99]
    engine.dispose()


# --- what an upgrade reports (apid migrate prints it) -------------------------------------------


def test_upgrade_reports_whether_it_created_upgraded_or_found_the_schema_up_to_date(tmp_path):
    engine = create_engine(f"sqlite:///{tmp_path / 'apid.db'}")
    created = upgrade(engine, "0003")
    assert (created.before, created.after) == (None, "0003")
    assert created.describe() == "created the database schema (revision 0003)"
    upgraded = upgrade(engine)
    assert upgraded.before == "0003" and upgraded.after != "0003"
    assert upgraded.describe() == f"upgraded the database schema from revision 0003 to {upgraded.after}"
    assert upgrade(engine).describe() == f"the database schema is up to date (revision {upgraded.after})"
