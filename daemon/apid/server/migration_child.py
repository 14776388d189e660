"""Migrating at start-up in a child process, so that Alembic never loads into the daemon.

Alembic, Mako (and Pygments, which Mako loads when installed) take about 9 MiB of a process's
memory for good once imported, for work done once at start. `apid serve` forks a child for
it while it still runs one thread (a fork copies only the thread that calls it), before the
reactor runs: the child brings every schema up to date (or, with `database.migrate: false`,
checks that none is behind), writes what it did to each schema it changed, or what failed,
to a pipe and exits; the daemon logs the one or reports the other. The daemon
waits for it before it first reads the database. `apid migrate` migrates in its own process.
"""

from __future__ import annotations

import os
from typing import NoReturn

from apid.config.files import Config


class MigrationFailed(Exception):
    """The child could not migrate or check the database; the message is its error's."""


class MigrationChild:
    """The forked child migrating the database; `wait` for it before reading the database."""

    def __init__(self, pid: int, reader: int) -> None:
        self._pid = pid
        self._reader = reader

    @classmethod
    def fork(cls, config: Config) -> MigrationChild:
        """Start the child; call it while this process runs no other thread."""
        reader, writer = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(reader)
            _migrate_and_exit(config, writer)
        os.close(writer)
        return cls(pid, reader)

    def wait(self) -> list[str]:
        """Block until the child ends (run it in a thread); what it did to each schema it
        changed (`upgraded the schema of plugin shop from revision 0001 to 0002`); raise
        MigrationFailed if it failed."""
        with os.fdopen(self._reader, "rb") as pipe:
            said = pipe.read().decode(errors="replace")
        status = os.waitstatus_to_exitcode(os.waitpid(self._pid, 0)[1])
        if status < 0:
            raise MigrationFailed(f"the migration process was killed by signal {-status}")
        if status != 0:
            raise MigrationFailed(said or f"the migration process exited with status {status}")
        return said.splitlines()


def _migrate_and_exit(config: Config, writer: int) -> NoReturn:
    """The child's whole life: migrate, say why not if it failed, and leave without running the
    parent's exit handlers or flushing the parent's buffers a second time."""
    status = 1
    try:
        try:
            said = _migrated(config)
            status = 0
        except BaseException as exc:
            said = str(exc)
        with os.fdopen(writer, "wb", closefd=False) as pipe:
            pipe.write(said.encode())
    finally:
        os._exit(status)


def _migrated(config: Config) -> str:
    """Every schema brought up to date (or checked, with `database.migrate: false`): a line
    for each schema it changed."""
    from apid.plugin_host.migrations import migration_sources
    from apid.store.database import make_engine
    from apid.store.migrate import ensure_sqlite_folder, require_current, upgrade_all

    url = config.server.database_url
    ensure_sqlite_folder(url)
    engine = make_engine(url, 1)
    sources = migration_sources(only=config.server.load_plugins)
    try:
        if not config.server.migrate_on_start:
            require_current(engine, sources)
            return ""
        return "".join(f"{change.describe()}\n" for change in upgrade_all(engine, sources) if change.changed)
    finally:
        engine.dispose()
