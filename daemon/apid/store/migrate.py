"""Bringing a database to the schema this build expects (Alembic, no alembic.ini needed).

apid's schema comes first, then each plugin's (`apid.plugins.MigrationSource`), since a
plugin's tables may reference apid's. Every schema has a version table of its own
(`alembic_version`, `alembic_version_<name>`) and is upgraded in a transaction of its own;
apid's env.py runs the plugins' revision files too.

Several daemons may start at once against one PostgreSQL: the upgrade holds an advisory
lock so that only one of them migrates and the others wait, then find nothing to do.
SQLite migrates with foreign key enforcement off (a table rebuilt by a batch migration would
otherwise take the rows referencing it along) and the keys are checked before committing.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, text

from apid.plugins import MigrationSource, PluginError

MIGRATION_LOCK = 0x61706964  # "apid"
APID = "apid"  # the name of apid's own schema in what the functions below report


class MigrationRefused(Exception):
    """A migration cannot proceed on the rows it found and changed nothing; the message says
    which rows and what to do."""


class MigrationsPending(Exception):
    """The daemon may not migrate (`database.migrate: false`) and the database is behind."""


@dataclass(frozen=True)
class SchemaChange:
    """What an upgrade did to one schema (apid's, or a plugin's by its name): the revision
    before (None: none of its tables yet) and after."""

    before: str | None
    after: str | None
    schema: str = APID

    def describe(self) -> str:
        what = "the database schema" if self.schema == APID else f"the schema of plugin {self.schema}"
        if self.before == self.after:
            return f"{what} is up to date (revision {self.after})"
        if self.before is None:
            return f"created {what} (revision {self.after})"
        return f"upgraded {what} from revision {self.before} to {self.after}"


@dataclass(frozen=True)
class SchemaStatus:
    """Where one schema stands: its revision in the database, the newest installed, and the
    revisions between them, oldest first."""

    schema: str
    current: str | None
    head: str | None
    pending: tuple[str, ...]

    def describe(self) -> str:
        state = f"pending {', '.join(self.pending)}" if self.pending else "up to date"
        return f"{self.schema}: current revision {self.current or 'none'}, head {self.head or 'none'}, {state}"


def _alembic_config(source: MigrationSource | None = None) -> AlembicConfig:
    """apid's revisions, or a plugin's run by apid's env.py with the plugin's version table."""
    config = AlembicConfig()
    config.set_main_option("script_location", "apid.store:migrations")
    if source is not None:
        config.set_main_option("path_separator", "os")
        config.set_main_option("version_locations", str(source.folder).replace("%", "%%"))
        config.attributes["version_table"] = source.version_table
    return config


def _version_table(config: AlembicConfig) -> str:
    return config.attributes.get("version_table", "alembic_version")


@contextmanager
def _naming(source: MigrationSource) -> Iterator[None]:
    """A plugin's revisions that cannot be read or run fail naming the plugin."""
    try:
        yield
    except Exception as exc:
        raise PluginError(f"plugin {source.label}: migrations: {type(exc).__name__}: {exc}") from exc


def ensure_sqlite_folder(url: str) -> None:
    prefix = "sqlite:///"
    if url.startswith(prefix) and url != prefix + ":memory:":
        Path(url[len(prefix) :]).parent.mkdir(parents=True, exist_ok=True)


def upgrade_all(engine: Engine, sources: Iterable[MigrationSource]) -> list[SchemaChange]:
    """Apply every migration not yet applied, apid's first, then each plugin's, all under the
    one lock; running it again changes nothing. Returns what it did to each schema."""
    with _migrating(engine) as connection:
        changes = [_upgrade(connection, _alembic_config(), APID)]
        for source in sources:
            with _naming(source):
                changes.append(_upgrade(connection, _alembic_config(source), source.name))
    return changes


def upgrade(engine: Engine, revision: str = "head") -> SchemaChange:
    """apid's schema alone, up to `revision` (for tests of one migration)."""
    with _migrating(engine) as connection:
        return _upgrade(connection, _alembic_config(), APID, revision)


def schema_status(engine: Engine, sources: Iterable[MigrationSource]) -> list[SchemaStatus]:
    """Where apid's schema and each plugin's stand; reads only, without the lock."""
    with engine.connect() as connection:
        statuses = [_status(connection, _alembic_config(), APID)]
        for source in sources:
            with _naming(source):
                statuses.append(_status(connection, _alembic_config(source), source.name))
    return statuses


def require_current(engine: Engine, sources: Iterable[MigrationSource]) -> None:
    """Raise MigrationsPending, naming each schema behind, unless every one is up to date."""
    behind = [status for status in schema_status(engine, sources) if status.pending]
    if behind:
        raise MigrationsPending(
            f"migrations are pending and database.migrate is false: "
            f"{'; '.join(status.describe() for status in behind)}; run `apid migrate` first"
        )


@contextmanager
def _migrating(engine: Engine) -> Iterator[Connection]:
    """A connection holding the migration lock on PostgreSQL, with SQLite's foreign key
    enforcement off; both given back on leaving, whatever happened."""
    with engine.connect() as connection:
        postgresql = connection.dialect.name == "postgresql"
        if postgresql:
            connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": MIGRATION_LOCK})
            connection.commit()
        enforced = _sqlite_foreign_keys(connection, False) if connection.dialect.name == "sqlite" else False
        try:
            yield connection
        finally:
            connection.rollback()  # a failed upgrade's work, never committed by the unlock below
            if postgresql:
                connection.execute(text("SELECT pg_advisory_unlock(:key)"), {"key": MIGRATION_LOCK})
                connection.commit()
            if enforced:
                _sqlite_foreign_keys(connection, True)  # outside a transaction, where the pragma works


def _upgrade(connection: Connection, config: AlembicConfig, schema: str, revision: str = "head") -> SchemaChange:
    """Upgrade one schema in one transaction; on SQLite, fail if it leaves keys pointing nowhere."""
    table = _version_table(config)
    # Checking reads every referencing table: only when there is something to migrate.
    before = _revision(connection, table)
    target = ScriptDirectory.from_config(config).get_revision(revision)
    pending = connection.dialect.name == "sqlite" and before != (target.revision if target else None)
    dangling = _dangling(connection) if pending else set()
    config.attributes["connection"] = connection
    command.upgrade(config, revision)
    if pending and (broken := _dangling(connection) - dangling):
        raise RuntimeError(
            f"the migrations left rows whose foreign keys point nowhere (table, rowid, parent, key): {sorted(broken)}"
        )
    after = _revision(connection, table)
    connection.commit()
    return SchemaChange(before, after, schema)


def _status(connection: Connection, config: AlembicConfig, schema: str) -> SchemaStatus:
    script = ScriptDirectory.from_config(config)
    current = _revision(connection, _version_table(config))
    head = script.get_current_head()
    pending = [] if head is None else [s.revision for s in script.iterate_revisions(head, current or "base")]
    return SchemaStatus(schema, current, head, tuple(reversed(pending)))


def _sqlite_foreign_keys(connection: Connection, on: bool) -> bool:
    """Turn SQLite's foreign key enforcement on or off; whether it was on.

    A batch migration on SQLite rebuilds a table (copy, DROP, rename), and with enforcement on,
    dropping `person` deletes every row referencing it by ON DELETE CASCADE: roles, hooks,
    sessions. Alembic's advice is to migrate with enforcement off, and then to check the keys
    (`_dangling`). The pragma is a no-op inside a transaction, so it goes straight to
    the driver, before SQLAlchemy begins one.
    """
    driver = connection.connection.driver_connection
    if driver is None:  # SQLAlchemy's answer for a connection invalidated meanwhile
        raise RuntimeError("the database connection was invalidated before migrating")
    was_on = bool(driver.execute("PRAGMA foreign_keys").fetchone()[0])
    driver.execute(f"PRAGMA foreign_keys={'ON' if on else 'OFF'}")
    return was_on


def _revision(connection: Connection, version_table: str) -> str | None:
    return MigrationContext.configure(connection, opts={"version_table": version_table}).get_current_revision()


def _dangling(connection: Connection) -> set[tuple]:
    """SQLite's rows whose foreign key points nowhere. Some may predate the migration (rows
    written with enforcement off, as the sqlite3 shell does by default): only new ones fail it."""
    return {tuple(row) for row in connection.exec_driver_sql("PRAGMA foreign_key_check").all()}
