"""The migrations build exactly the schema of apid.store.tables, and running them twice is harmless;
plugins' migrations (the example plugin apid-directory's) run after apid's, each on its own."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.exc import IntegrityError

from apid.plugin_host.discovery import PluginError
from apid.plugin_host.migrations import MigrationSource
from apid.store.database import make_engine
from apid.store.migrate import MigrationRefused, MigrationsPending, require_current, schema_status, upgrade, upgrade_all
from apid.store.tables import metadata


def test_migrations_match_the_tables(tmp_path):
    engine = create_engine(f"sqlite:///{tmp_path / 'apid.db'}")
    upgrade(engine)
    upgrade(engine)
    with engine.connect() as connection:
        differences = compare_metadata(MigrationContext.configure(connection), metadata)
    assert differences == []
    assert set(inspect(engine).get_table_names()) == {
        "alembic_version",
        "person",
        "role",
        "person_role",
        "hook",
        "hook_message",
        "hook_attempt",
        "mail_outbox",
        "account_token",
        "refresh_token",
        "revoked_token",
        "account_change",
        "cache_change",
        "iostate_change",
        "iostate_report",
        "api_key",
        "idempotency_key",
        "external_identity",
        "change_event",
        "stream_ticket",
    }


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
                {"name": f"person{n}", "email": address},
            ).scalar()
            connection.execute(
                text("INSERT INTO person_role (person_id, role_id) VALUES (:p, :r)"), {"p": person_id, "r": role_id}
            )


def version(engine) -> str:
    with engine.connect() as connection:
        return connection.execute(text("SELECT version_num FROM alembic_version")).scalar()


def assert_unique_key(database, key: str, clashing_insert: str) -> None:
    """`person.<key>` is NOT NULL under `uq_person_<key>`, `clashing_insert` breaks it, and
    SQLite enforces foreign keys again after the table was rebuilt."""
    (column,) = [c for c in inspect(database).get_columns("person") if c["name"] == key]
    assert column["nullable"] is False
    name = f"uq_person_{key}"
    assert {"name": name, "column_names": [key]}.items() <= next(
        u for u in inspect(database).get_unique_constraints("person") if u["name"] == name
    ).items()
    with pytest.raises(IntegrityError), database.begin() as connection:
        connection.execute(text(clashing_insert))
    if database.dialect.name == "sqlite":
        with database.connect() as connection:
            assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1  # enforcement is back


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
    assert_unique_key(
        database,
        "email_key",
        "INSERT INTO person (username, password, email, email_key) "
        "VALUES ('again', 'x', 'ALICE@example.com', 'alice@example.com')",
    )


def test_0004_refuses_addresses_that_fold_alike_and_changes_nothing(database):
    upgrade(database, "0003")
    add_people_at_0003(
        database,
        "ÄRGER@example.com",
        "fine@example.com",
        "ärger@example.com",
        "\u00e9@example.com",
        "e\u0301@example.com",
    )
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
        assert connection.execute(text("SELECT person_id FROM person_role ORDER BY person_id")).scalars().all() == [
            1,
            99,
        ]
    engine.dispose()


# --- 0009: person.username_key ------------------------------------------------------------------


def add_people_at_0008(engine, *names: str) -> None:
    """People (each with a role) as revision 0008 stores them: no username_key yet."""
    with engine.begin() as connection:
        role_id = connection.execute(text("INSERT INTO role (authority) VALUES ('ROLE_USER') RETURNING id")).scalar()
        for n, name in enumerate(names, 1):
            person_id = connection.execute(
                text(
                    "INSERT INTO person (username, password, email, email_key) "
                    "VALUES (:name, 'x', :email, :email) RETURNING id"
                ),
                {"name": name, "email": f"person{n}@example.com"},
            ).scalar()
            connection.execute(
                text("INSERT INTO person_role (person_id, role_id) VALUES (:p, :r)"), {"p": person_id, "r": role_id}
            )


def test_0009_gives_every_existing_name_its_key(database):
    upgrade(database, "0008")
    add_people_at_0008(database, "Alice", "bob", "CAROL.x-1", "\u212aate")  # the last with a Kelvin sign
    upgrade(database, "0009")

    with database.connect() as connection:
        rows = connection.execute(text("SELECT username, username_key FROM person ORDER BY id")).all()
        roles = connection.execute(text("SELECT count(*) FROM person_role")).scalar()
    assert [tuple(row) for row in rows] == [
        ("Alice", "alice"),  # the name stays as typed
        ("bob", "bob"),
        ("CAROL.x-1", "carol.x-1"),
        ("\u212aate", "\u212aate"),  # ASCII letters only fold: no alias of `kate`
    ]
    assert roles == 4  # rebuilding person on SQLite took no referencing row along
    assert_unique_key(
        database,
        "username_key",
        "INSERT INTO person (username, username_key, password, email, email_key) "
        "VALUES ('ALICE', 'alice', 'x', 'other@example.com', 'other@example.com')",
    )


def test_0009_refuses_names_that_differ_only_in_letter_case_and_changes_nothing(database):
    upgrade(database, "0008")
    add_people_at_0008(database, "Bob", "carol", "bob", "BOB", "Dave", "dave")
    with pytest.raises(MigrationRefused) as refused:
        upgrade(database, "0009")
    message = str(refused.value)
    assert "person 1 'Bob', person 3 'bob', person 4 'BOB'\n" in message
    assert "person 5 'Dave', person 6 'dave'\n" in message
    assert "carol" not in message
    assert "Nothing was changed." in message
    assert version(database) == "0008"
    assert "username_key" not in {c["name"] for c in inspect(database).get_columns("person")}

    with database.begin() as connection:  # the operator makes them distinct, and migrates again
        connection.execute(text("UPDATE person SET username = username || '-' || id WHERE id IN (3, 4, 6)"))
    upgrade(database, "0009")
    assert version(database) == "0009"


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


# --- plugins' migrations: apid-directory, importable from the checkout --------------------------

DIRECTORY = Path(__file__).resolve().parents[2] / "docs" / "examples" / "apid-directory"
REVISION_0002 = """
import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"


def upgrade():
    # On SQLite this rebuilds the table (copy, DROP, rename): with foreign keys enforced, the
    # DROP would take every department along (ON DELETE CASCADE).
    with op.batch_alter_table("directory_company") as batch:
        batch.alter_column("name", type_=sa.String(300))
    op.add_column("directory_company", sa.Column("website", sa.String(200)))
"""


@pytest.fixture
def directory(monkeypatch) -> MigrationSource:
    monkeypatch.syspath_prepend(str(DIRECTORY))
    return MigrationSource.from_package("directory", "apid_directory.migrations", "apid-directory")


def directory_with(tmp_path, monkeypatch, package: str, revision: str) -> MigrationSource:
    """A copy of the directory's migrations, as package `package`, with one more revision file."""
    folder = tmp_path / "packages" / package
    shutil.copytree(DIRECTORY / "apid_directory" / "migrations", folder, ignore=shutil.ignore_patterns("__pycache__"))
    (folder / "0002_next.py").write_text(revision)
    monkeypatch.syspath_prepend(str(folder.parent))
    return MigrationSource.from_package("directory", package, "apid-directory")


def rows(engine, sql: str) -> list[tuple]:
    with engine.connect() as connection:
        return [tuple(row) for row in connection.execute(text(sql))]


def test_upgrade_all_creates_apids_schema_then_each_plugins_with_its_own_version_table(tmp_path, directory):
    engine = make_engine(f"sqlite:///{tmp_path / 'apid.db'}")
    changes = upgrade_all(engine, [directory])
    assert [(c.schema, c.before) for c in changes] == [("apid", None), ("directory", None)]
    assert [c.describe() for c in changes] == [
        f"created the database schema (revision {changes[0].after})",
        "created the schema of plugin directory (revision 0001)",
    ]
    again = upgrade_all(engine, [directory])
    assert [c.describe() for c in again] == [
        f"the database schema is up to date (revision {changes[0].after})",
        "the schema of plugin directory is up to date (revision 0001)",
    ]
    assert {"directory_company", "directory_department", "alembic_version_directory"} <= set(
        inspect(engine).get_table_names()
    )
    assert rows(engine, "SELECT version_num FROM alembic_version") == [(changes[0].after,)]
    assert rows(engine, "SELECT version_num FROM alembic_version_directory") == [("0001",)]
    with engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1  # enforcement is back
    engine.dispose()


def test_a_plugins_tables_reference_apids(tmp_path, directory):
    """created_by -> person.id ON DELETE SET NULL; company_id -> directory_company.id ON DELETE CASCADE."""
    engine = make_engine(f"sqlite:///{tmp_path / 'apid.db'}")
    upgrade_all(engine, [directory])
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO person (id, username, username_key, password, email, email_key) "
                "VALUES (7, 'ann', 'ann', 'x', 'ann@example.com', 'ann@example.com')"
            )
        )
        connection.execute(text("INSERT INTO directory_company (id, name, created_by) VALUES (1, 'Acme', 7)"))
        connection.execute(text("INSERT INTO directory_department (company_id, name) VALUES (1, 'Research')"))
    with pytest.raises(IntegrityError), engine.begin() as connection:
        connection.execute(text("INSERT INTO directory_department (company_id, name) VALUES (2, 'Nowhere')"))
    with engine.begin() as connection:
        connection.execute(text("DELETE FROM person WHERE id = 7"))
    assert rows(engine, "SELECT id, name, created_by, version FROM directory_company") == [(1, "Acme", None, 0)]
    with engine.begin() as connection:
        connection.execute(text("DELETE FROM directory_company WHERE id = 1"))
    assert rows(engine, "SELECT count(*) FROM directory_department") == [(0,)]
    engine.dispose()


def test_schema_status_gives_each_schemas_revision_head_and_pending_ones(tmp_path, directory):
    engine = make_engine(f"sqlite:///{tmp_path / 'apid.db'}")
    apid, plugin = schema_status(engine, [directory])
    assert (apid.schema, apid.current, apid.pending[:2], apid.pending[-1]) == (
        "apid",
        None,
        ("0001", "0002"),
        apid.head,
    )
    assert (plugin.schema, plugin.current, plugin.head, plugin.pending) == ("directory", None, "0001", ("0001",))
    assert plugin.describe() == "directory: current revision none, head 0001, pending 0001"

    upgrade(engine, "0003")  # apid's alone, part of the way
    apid, plugin = schema_status(engine, [directory])
    assert (apid.current, apid.pending) == ("0003", tuple(f"{n:04d}" for n in range(4, int(apid.head) + 1)))
    assert plugin.pending == ("0001",)
    with pytest.raises(MigrationsPending) as pending:
        require_current(engine, [directory])
    assert str(pending.value) == (
        f"migrations are pending (apid: {', '.join(apid.pending)}; directory: 0001); run `apid migrate` first"
    )

    upgrade_all(engine, [directory])
    statuses = schema_status(engine, [directory])
    assert [s.describe() for s in statuses] == [
        f"apid: current revision {apid.head}, head {apid.head}, up to date",
        "directory: current revision 0001, head 0001, up to date",
    ]
    require_current(engine, [directory])
    engine.dispose()


def test_a_plugins_next_revision_upgrades_its_schema_keeping_the_rows_that_reference_it(
    tmp_path, monkeypatch, directory
):
    engine = make_engine(f"sqlite:///{tmp_path / 'apid.db'}")
    upgrade_all(engine, [directory])
    with engine.begin() as connection:
        connection.execute(text("INSERT INTO directory_company (id, name) VALUES (1, 'Acme')"))
        connection.execute(text("INSERT INTO directory_department (company_id, name) VALUES (1, 'Research')"))
    next_one = directory_with(tmp_path, monkeypatch, "apid_unit_directory_next", REVISION_0002)
    assert schema_status(engine, [next_one])[1].pending == ("0002",)

    (_, change) = upgrade_all(engine, [next_one])
    assert change.describe() == "upgraded the schema of plugin directory from revision 0001 to 0002"
    assert "website" in {c["name"] for c in inspect(engine).get_columns("directory_company")}
    assert rows(engine, "SELECT company_id, name FROM directory_department") == [(1, "Research")]
    with engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    engine.dispose()


def test_a_failing_plugin_revision_names_the_plugin_and_leaves_its_schema_as_it_was(tmp_path, monkeypatch, directory):
    engine = make_engine(f"sqlite:///{tmp_path / 'apid.db'}")
    upgrade_all(engine, [directory])
    failing = directory_with(
        tmp_path,
        monkeypatch,
        "apid_unit_directory_failing",
        REVISION_0002.replace(
            'op.add_column("directory_company", sa.Column("website", sa.String(200)))',
            'raise RuntimeError("the website column is not ready")',
        ),
    )
    with pytest.raises(
        PluginError,
        match=r"plugin directory \(distribution apid-directory\): migrations: "
        r"RuntimeError: the website column is not ready",
    ):
        upgrade_all(engine, [failing])
    assert rows(engine, "SELECT version_num FROM alembic_version_directory") == [("0001",)]
    assert [c["type"].length for c in inspect(engine).get_columns("directory_company") if c["name"] == "name"] == [200]
    engine.dispose()


@pytest.mark.filterwarnings("ignore:Revision 0000 referenced from:UserWarning")  # Alembic, as it fails
def test_a_plugin_revision_that_breaks_the_history_names_the_plugin(tmp_path, monkeypatch, directory):
    broken = directory_with(
        tmp_path,
        monkeypatch,
        "apid_unit_directory_broken",
        REVISION_0002.replace('down_revision = "0001"', 'down_revision = "0000"'),
    )
    engine = make_engine(f"sqlite:///{tmp_path / 'apid.db'}")
    with pytest.raises(PluginError, match=r"plugin directory \(distribution apid-directory\): migrations: .*0000"):
        schema_status(engine, [broken])
    engine.dispose()
