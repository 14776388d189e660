"""Bringing a database to the schema this build expects (Alembic, no alembic.ini needed).

Several daemons may start at once against one PostgreSQL: the upgrade holds an advisory
lock so that only one of them migrates and the others wait, then find nothing to do.
SQLite migrates with foreign key enforcement off (a table rebuilt by a batch migration would
otherwise take the rows referencing it along) and the keys are checked before committing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, text

MIGRATION_LOCK = 0x61706964  # "apid"


class MigrationRefused(Exception):
    """A migration cannot proceed on the rows it found and changed nothing; the message says
    which rows and what to do."""


@dataclass(frozen=True)
class SchemaChange:
    """What an upgrade did: the schema revision before (None: an empty database) and after."""

    before: str | None
    after: str | None

    def describe(self) -> str:
        if self.before == self.after:
            return f"the database schema is up to date (revision {self.after})"
        if self.before is None:
            return f"created the database schema (revision {self.after})"
        return f"upgraded the database schema from revision {self.before} to {self.after}"


def _alembic_config() -> AlembicConfig:
    config = AlembicConfig()
    config.set_main_option("script_location", "apid.store:migrations")
    return config


def ensure_sqlite_folder(url: str) -> None:
    prefix = "sqlite:///"
    if url.startswith(prefix) and url != prefix + ":memory:":
        Path(url[len(prefix):]).parent.mkdir(parents=True, exist_ok=True)


def upgrade(engine: Engine, revision: str = "head") -> SchemaChange:
    """Apply every migration not yet applied (up to `revision`, for tests of one migration);
    running it again changes nothing. Returns the revisions before and after."""
    config = _alembic_config()
    with engine.connect() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": MIGRATION_LOCK})
            connection.commit()
        sqlite = connection.dialect.name == "sqlite"
        enforced = _sqlite_foreign_keys(connection, False) if sqlite else False
        try:
            # Checking reads every referencing table: only when there is something to migrate.
            before = _revision(connection)
            pending = sqlite and before != ScriptDirectory.from_config(config).get_revision(revision).revision
            dangling = _dangling(connection) if pending else set()
            config.attributes["connection"] = connection
            command.upgrade(config, revision)
            if pending and (broken := _dangling(connection) - dangling):
                raise RuntimeError(f"the migrations left rows whose foreign keys point nowhere "
                                   f"(table, rowid, parent, key): {sorted(broken)}")
            after = _revision(connection)
            connection.commit()
        finally:
            if connection.dialect.name == "postgresql":
                connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": MIGRATION_LOCK})
                connection.commit()
            if enforced:
                connection.rollback()  # the pragma is ignored inside a transaction
                _sqlite_foreign_keys(connection, True)
    return SchemaChange(before, after)


def _sqlite_foreign_keys(connection: Connection, on: bool) -> bool:
    """Turn SQLite's foreign key enforcement on or off; whether it was on.

    A batch migration on SQLite rebuilds a table (copy, DROP, rename), and with enforcement on,
    dropping `person` deletes every row referencing it by ON DELETE CASCADE: roles, hooks,
    sessions. Alembic's advice is to migrate with enforcement off, and then to check the keys
    (`_dangling`). The pragma is a no-op inside a transaction, so it goes straight to
    the driver, before SQLAlchemy begins one.
    """
    driver = connection.connection.driver_connection
    was_on = bool(driver.execute("PRAGMA foreign_keys").fetchone()[0])
    driver.execute(f"PRAGMA foreign_keys={'ON' if on else 'OFF'}")
    return was_on


def _revision(connection: Connection) -> str | None:
    return MigrationContext.configure(connection).get_current_revision()


def _dangling(connection: Connection) -> set[tuple]:
    """SQLite's rows whose foreign key points nowhere. Some may predate the migration (rows
    written with enforcement off, as the sqlite3 shell does by default): only new ones fail it."""
    return {tuple(row) for row in connection.exec_driver_sql("PRAGMA foreign_key_check").all()}
