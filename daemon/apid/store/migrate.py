"""Bringing a database to the schema this build expects (Alembic, no alembic.ini needed).

apid's schema comes first, then each plugin's (`apid.plugin_host.migrations.MigrationSource`), since a
plugin's tables may reference apid's. Every schema has a version table of its own
(`alembic_version`, `alembic_version_<name>`) and is upgraded in a transaction of its own;
apid's env.py runs the plugins' revision files too. Beside upgrading everything (`upgrade_all`),
one schema moves to a given revision, up or down (`move`); `plan` says what either would run
without running it; `generate` writes a plugin's next revision from the difference between
the tables it declares (`metadata` in its migrations package) and the database.

Several daemons may start at once against one PostgreSQL: the upgrade holds an advisory
lock so that only one of them migrates and the others wait, then find nothing to do.
SQLite migrates with foreign key enforcement off (a table rebuilt by a batch migration would
otherwise take the rows referencing it along) and the keys are checked before committing.
"""

from __future__ import annotations

import importlib
import io
import re
from argparse import Namespace
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config as AlembicConfig
from alembic.migration import MigrationContext
from alembic.operations.ops import MigrationScript
from alembic.script import Script, ScriptDirectory
from alembic.script.revision import RevisionError
from alembic.util import CommandError
from sqlalchemy import Connection, Engine, MetaData, text

from apid.plugin_host.discovery import PluginError
from apid.plugin_host.migrations import MigrationSource
from apid.store.drops import DroppedTable, describe_tables, row_counts, tables_dropped_by

MIGRATION_LOCK = 0x61706964  # "apid"
APID = "apid"  # the name of apid's own schema in what the functions below report


class MigrationRefused(Exception):
    """A migration cannot proceed on the rows it found and changed nothing; the message says
    which rows and what to do."""


class MigrationsPending(Exception):
    """The database is behind the code installed, and what found it may not migrate: any command
    but `apid migrate`, and `apid serve` with `database.migrate: false`. One message for all."""

    def __init__(self, behind: Sequence[SchemaStatus]) -> None:
        pending = "; ".join(f"{status.schema}: {', '.join(status.pending)}" for status in behind)
        super().__init__(f"migrations are pending ({pending}); run `apid migrate` first")
        self.behind = tuple(behind)


class DropRefused(MigrationRefused):
    """A move would drop tables, their rows with them, and was not confirmed; nothing changed."""

    def __init__(self, schema: str, revision: str | None, tables: Sequence[DroppedTable]) -> None:
        super().__init__(
            f"moving {schema} down to {f'revision {revision}' if revision else 'base'} would drop "
            f"{len(tables)} {'table' if len(tables) == 1 else 'tables'}: {describe_tables(tables)}; "
            "nothing was changed; add --yes to drop them"
        )
        self.tables = tuple(tables)


class TargetRefused(Exception):
    """A schema or revision named on the command line does not exist, or a plugin's next
    migration cannot be generated now; the message says which and why."""


@dataclass(frozen=True)
class Target:
    """A schema (apid's, or a plugin's by its name) and the revision to bring it to: a
    revision id, `head`, `base` (none of its tables), or None for the one below its current."""

    schema: str
    revision: str | None

    @classmethod
    def parse(cls, text: str) -> Target:
        """`SCHEMA@REVISION` (`directory@0002`, `directory@base`)."""
        schema, at, revision = text.partition("@")
        if not (schema and at and revision):
            raise TargetRefused(f"{text!r}: name a schema and a revision, SCHEMA@REVISION (directory@0002, apid@head)")
        return cls(schema, revision)


@dataclass(frozen=True)
class SchemaChange:
    """What an upgrade did to one schema (apid's, or a plugin's by its name): the revision
    before (None: none of its tables yet) and after."""

    before: str | None
    after: str | None
    schema: str = APID
    down: bool = False  # a downgrade
    dropped: tuple[DroppedTable, ...] = ()  # the tables a downgrade dropped, with the rows they held

    @property
    def changed(self) -> bool:
        """Whether the schema moved (a revision run, or its tables dropped)."""
        return self.before != self.after or bool(self.dropped)

    def describe(self) -> str:
        moved = self._moved()
        return f"{moved}; dropped {describe_tables(self.dropped)}" if self.dropped else moved

    def _moved(self) -> str:
        what = _schema_name(self.schema)
        if self.before == self.after:
            return f"{what} is up to date (revision {self.after})"
        if self.before is None:
            return f"created {what} (revision {self.after})"
        if self.after is None:
            return f"removed {what} (it was at revision {self.before})"
        return f"{'downgraded' if self.down else 'upgraded'} {what} from revision {self.before} to {self.after}"


def _schema_name(schema: str) -> str:
    return "the database schema" if schema == APID else f"the schema of plugin {schema}"


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


@dataclass(frozen=True)
class Step:
    """One revision file a migration would run, up (its `upgrade()`) or down, and the first
    line of its docstring."""

    revision: str
    down: bool
    message: str

    def describe(self) -> str:
        return f"  {'downgrade' if self.down else 'upgrade'} {self.revision}: {self.message}"


@dataclass(frozen=True)
class SchemaPlan:
    """What a migration would do to one schema: from `current` to `target`, by `steps` in order."""

    schema: str
    current: str | None
    target: str | None
    steps: tuple[Step, ...]

    def describe(self) -> list[str]:
        """A line for the schema, then one per step."""
        if not self.steps:
            return [f"{self.schema}: at revision {self.current or 'none'}, nothing to run"]
        head = f"{self.schema}: from revision {self.current or 'none'} to {self.target or 'none (base)'}"
        return [head, *(step.describe() for step in self.steps)]


def _alembic_config(source: MigrationSource | None = None) -> AlembicConfig:
    """apid's revisions, or a plugin's run by apid's env.py with the plugin's version table;
    Alembic's own messages are not printed (the commands say what they did)."""
    config = AlembicConfig(cmd_opts=Namespace(quiet=True))
    config.set_main_option("script_location", "apid.store:migrations")
    if source is not None:
        config.set_main_option("path_separator", "os")
        config.set_main_option("version_locations", str(source.folder).replace("%", "%%"))
        config.attributes["version_table"] = source.version_table
    return config


def _version_table(config: AlembicConfig) -> str:
    return config.attributes.get("version_table", "alembic_version")


@contextmanager
def _naming(source: MigrationSource | None) -> Iterator[None]:
    """A plugin's revisions that cannot be read or run fail naming the plugin (apid's, None,
    fail as they are)."""
    try:
        yield
    except (MigrationRefused, TargetRefused):
        raise
    except Exception as exc:
        if source is None:
            raise
        raise PluginError(f"plugin {source.label}: migrations: {type(exc).__name__}: {exc}") from exc


def _schema(sources: Iterable[MigrationSource], name: str) -> tuple[AlembicConfig, MigrationSource | None]:
    """The Alembic configuration of the schema `name` (apid's, or an installed plugin's), and
    the plugin's migrations (None for apid's)."""
    if name == APID:
        return _alembic_config(), None
    found = {source.name: source for source in sources}
    if name not in found:
        raise TargetRefused(f"no schema named {name!r}; the schemas: {', '.join([APID, *sorted(found)])}")
    return _alembic_config(found[name]), found[name]


def ensure_sqlite_folder(url: str) -> None:
    prefix = "sqlite:///"
    if url.startswith(prefix) and url != prefix + ":memory:":
        Path(url[len(prefix) :]).parent.mkdir(parents=True, exist_ok=True)


def upgrade_all(engine: Engine, sources: Iterable[MigrationSource]) -> list[SchemaChange]:
    """Apply every migration not yet applied, apid's first, then each plugin's, all under the
    one lock; running it again changes nothing. Returns what it did to each schema."""
    with _migrating(engine) as connection:
        changes = [_migrate(connection, _alembic_config(), APID)]
        for source in sources:
            with _naming(source):
                changes.append(_migrate(connection, _alembic_config(source), source.name))
    return changes


def upgrade(engine: Engine, revision: str = "head") -> SchemaChange:
    """apid's schema alone, up to `revision` (for tests of one migration)."""
    with _migrating(engine) as connection:
        return _migrate(connection, _alembic_config(), APID, revision)


def move(engine: Engine, sources: Iterable[MigrationSource], target: Target, *, drop: bool = False) -> SchemaChange:
    """Bring one schema to `target`'s revision, upgrading or downgrading it, under the lock. A
    downgrade that drops tables raises DropRefused, naming them and their rows, unless `drop`;
    the change says what it dropped. Their rows are counted in the transaction that drops them."""
    config, source = _schema(sources, target.schema)
    with _migrating(engine) as connection, _naming(source):
        planned = _plan(connection, config, target)
        revision = planned.target or "base"
        down = any(step.down for step in planned.steps)
        dropped: tuple[DroppedTable, ...] = ()
        if down:
            config.attributes["connection"] = connection
            dropped = row_counts(connection, tables_dropped_by(connection, lambda: command.downgrade(config, revision)))
            if dropped and not drop:
                raise DropRefused(target.schema, planned.target, dropped)
        return replace(_migrate(connection, config, target.schema, revision, down), dropped=dropped)


def plan(engine: Engine, sources: Sequence[MigrationSource], target: Target | None = None) -> list[SchemaPlan]:
    """What `upgrade_all` (no `target`) or `move` would run, schema by schema; reads only."""
    with engine.connect() as connection:
        plans = []
        for config, source, wanted in _schemas(sources, target):
            with _naming(source):
                plans.append(_plan(connection, config, wanted))
    return plans


def plan_sql(engine: Engine, sources: Sequence[MigrationSource], target: Target | None = None) -> list[str]:
    """The SQL each schema's plan would run on this database's dialect, written by Alembic
    offline ("" for a schema with nothing to run). A revision that reads the database to
    decide what to do (apid's 0004 and 0009 check the rows first) cannot be written so: the
    TargetRefused names it."""
    written = []
    for planned, (config, *_) in zip(plan(engine, sources, target), _schemas(sources, target), strict=True):
        if not planned.steps:
            written.append("")
            continue
        config.output_buffer = output = io.StringIO()
        config.attributes["dialect"] = engine.dialect.name
        span = f"{planned.current or 'base'}:{planned.target or 'base'}"
        try:
            (command.downgrade if planned.steps[0].down else command.upgrade)(config, span, sql=True)
        except Exception as exc:
            running = re.findall(r"^-- Running (.*)$", output.getvalue(), re.MULTILINE)
            raise TargetRefused(
                f"{planned.schema}: the SQL of {running[-1] if running else 'its revisions'} cannot be written "
                f"without running it (it reads the database: {type(exc).__name__}: {exc}); `--plan` alone lists it"
            ) from exc
        written.append(output.getvalue())
    return written


def _schemas(
    sources: Sequence[MigrationSource], target: Target | None
) -> list[tuple[AlembicConfig, MigrationSource | None, Target]]:
    """The schemas a plan is about, each with its configuration, its plugin's migrations (None
    for apid's) and where it is to go: every one to its head, or `target`'s alone."""
    if target is not None:
        return [(*_schema(sources, target.schema), target)]
    everyone = [(APID, None), *((source.name, source) for source in sources)]
    return [(_alembic_config(source), source, Target(name, "head")) for name, source in everyone]


def schema_status(engine: Engine, sources: Iterable[MigrationSource]) -> list[SchemaStatus]:
    """Where apid's schema and each plugin's stand; reads only, without the lock."""
    return [
        SchemaStatus(planned.schema, planned.current, planned.target, tuple(step.revision for step in planned.steps))
        for planned in plan(engine, list(sources))
    ]


def require_current(engine: Engine, sources: Iterable[MigrationSource]) -> None:
    """Raise MigrationsPending, naming each schema behind and its pending revisions, unless every
    one is up to date: what may not migrate checks here, and changes nothing."""
    behind = [status for status in schema_status(engine, sources) if status.pending]
    if behind:
        raise MigrationsPending(behind)


def generate(engine: Engine, source: MigrationSource, message: str) -> Path:
    """Write the plugin's next revision file into its migrations package: Alembic's
    autogenerate, comparing the tables it declares (`declared_tables`) with the database,
    which must be at the plugin's head. The file is the author's to review before it ships."""
    with _naming(source):
        tables = declared_tables(source)
        config = _alembic_config(source)
        with engine.connect() as connection:
            config.attributes["metadata"], config.attributes["owned"] = _comparable(tables, connection)
            behind = _plan(connection, config, Target(source.name, "head"))
            if behind.steps:
                pending = ", ".join(step.revision for step in behind.steps)
                raise TargetRefused(
                    f"plugin {source.label}: the database lacks its revisions {pending}: run `apid migrate` "
                    "first, so that only what the tables add is generated"
                )
            config.attributes["connection"] = connection
            script = ScriptDirectory.from_config(config)
            written = command.revision(
                config, message, autogenerate=True, rev_id=_next_id(script), process_revision_directives=_unless_empty
            )
            connection.rollback()
    if not isinstance(written, Script):
        raise TargetRefused(
            f"plugin {source.label}: the tables of {source.package}.metadata match the database: nothing to generate"
        )
    return Path(written.path)


def declared_tables(source: MigrationSource) -> MetaData:
    """The tables a plugin declares once: `metadata`, a SQLAlchemy MetaData, in its migrations
    package (`from apid_directory.store import metadata` in its `__init__.py`)."""
    tables = getattr(importlib.import_module(source.package), "metadata", None)
    if not isinstance(tables, MetaData):
        raise TargetRefused(
            f"plugin {source.label}: {source.package} has no `metadata` (the SQLAlchemy MetaData of its tables) "
            f"to compare with the database: import it in {source.folder / '__init__.py'}"
        )
    return tables


def _comparable(tables: MetaData, connection: Connection) -> tuple[MetaData, frozenset[str]]:
    """The plugin's tables, with the tables of others they reference (apid's `person`) as the
    database has them, so that their foreign keys resolve; and the names of the plugin's own,
    the only ones compared. A copy: the plugin's MetaData stays as it declared it."""
    owned = frozenset(tables.tables)
    comparable = MetaData(naming_convention=tables.naming_convention)
    for table in tables.tables.values():
        table.to_metadata(comparable)
    referenced = {
        key.target_fullname.rpartition(".")[0] for table in tables.tables.values() for key in table.foreign_keys
    }
    comparable.reflect(bind=connection, only=sorted(referenced - owned))
    return comparable, owned


def _next_id(script: ScriptDirectory) -> str | None:
    """The next of numbered revision ids (0001, 0002, ...); None, Alembic's own, otherwise."""
    ids = [each.revision for each in script.walk_revisions()]
    if not all(each.isdigit() for each in ids):
        return None
    return f"{max((int(each) for each in ids), default=0) + 1:04d}"


def _unless_empty(context: Any, revision: Any, directives: list[MigrationScript]) -> None:
    """Alembic's hook before writing: no file when the tables and the database agree."""
    if directives and directives[0].upgrade_ops is not None and directives[0].upgrade_ops.is_empty():
        directives[:] = []


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


def _migrate(
    connection: Connection, config: AlembicConfig, schema: str, revision: str = "head", down: bool = False
) -> SchemaChange:
    """Upgrade (or downgrade) one schema in one transaction; on SQLite, fail if it leaves keys
    pointing nowhere."""
    table = _version_table(config)
    # Checking reads every referencing table: only when there is something to migrate.
    before = _revision(connection, table)
    target = ScriptDirectory.from_config(config).get_revision(revision)
    pending = connection.dialect.name == "sqlite" and before != (target.revision if target else None)
    dangling = _dangling(connection) if pending else set()
    config.attributes["connection"] = connection
    (command.downgrade if down else command.upgrade)(config, revision)
    if pending and (broken := _dangling(connection) - dangling):
        raise RuntimeError(
            f"the migrations left rows whose foreign keys point nowhere (table, rowid, parent, key): {sorted(broken)}"
        )
    after = _revision(connection, table)
    connection.commit()
    return SchemaChange(before, after, schema, down)


def _plan(connection: Connection, config: AlembicConfig, target: Target) -> SchemaPlan:
    """The revisions that bring the schema from its current revision to `target`'s, in the
    order they would run, each up or down."""
    script = ScriptDirectory.from_config(config)
    current = _revision(connection, _version_table(config))
    revision = _resolved(script, current, target)
    if revision == current:
        return SchemaPlan(target.schema, current, revision, ())
    try:  # up: from the target down to the current revision, run in the reverse order
        scripts = list(reversed(list(script.iterate_revisions(revision or "base", current or "base"))))
        down = False
    except RevisionError:  # the target is below: down from the current revision
        scripts, down = list(script.iterate_revisions(current or "base", revision or "base")), True
    steps = tuple(Step(each.revision, down, _first_line(each)) for each in scripts)
    return SchemaPlan(target.schema, current, revision, steps)


def _resolved(script: ScriptDirectory, current: str | None, target: Target) -> str | None:
    """The revision id `target` names (None: base), for a schema now at `current`."""
    if target.revision is None:  # one below the current
        if current is None:
            raise TargetRefused(f"{target.schema}: nothing to downgrade, none of its revisions is applied")
        below = script.get_revision(current).down_revision
        if not (below is None or isinstance(below, str)):
            raise TargetRefused(f"{target.schema}: revision {current} merges several; name the one to go to")
        return below
    if target.revision == "base":
        return None
    if target.revision == "head":
        return script.get_current_head()
    try:
        found = script.get_revision(target.revision)
    except (RevisionError, CommandError):
        found = None
    if found is None:
        known = ", ".join(each.revision for each in reversed(list(script.walk_revisions())))
        raise TargetRefused(f"{target.schema} has no revision {target.revision!r}; its revisions: {known or 'none'}")
    return found.revision


def _first_line(script: Script) -> str:
    doc = (script.doc or "").strip()
    return doc.splitlines()[0] if doc else "(no description)"


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
