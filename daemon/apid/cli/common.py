"""What the commands share: the configuration they read, the database they open, the plugins
bound to it, and the one failure a command reports.

Only `apid migrate` changes a schema (and `apid serve` with `database.migrate: true`, in
apid.server.migration_child): every other command that works on the database opens it through
`current_engine`, which refuses a database behind the code installed, changing nothing."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from apid.config import files as config_module
from apid.config.files import Config

if TYPE_CHECKING:  # imported where used: a command loads only what it needs
    from sqlalchemy import Engine

    from apid.plugin_host.discovery import Bound
    from apid.plugin_host.migrations import MigrationSource


def load_config(args: argparse.Namespace) -> Config:
    """The deployment's configuration. What the command creates from here on (the SQLite
    database and its WAL files, the JWT secret, mail, in `var/` by default) is private to
    apid's user, as `UMask=0077` in etc/apid.service makes it under systemd: files 0600,
    folders 0700, in worker processes too (they inherit the mask)."""
    os.umask(0o077)
    env = dict(os.environ)
    if getattr(args, "listen", None):
        env["APID_LISTEN"] = args.listen
    return config_module.load(args.config_dir, args.env, env)


def current_engine(config: Config) -> Engine:
    """An engine on the configured database, whose schemas (apid's and every installed plugin's)
    are all at the revisions installed; otherwise the command ends naming the pending ones and
    `apid migrate`, having changed nothing."""
    from apid.plugin_host.discovery import PluginError
    from apid.store.migrate import MigrationsPending, require_current

    sources = installed_migrations(config)
    engine = open_database(config)
    try:
        require_current(engine, sources)
    except (MigrationsPending, PluginError) as refused:
        engine.dispose()
        raise CommandFailed(str(refused)) from None
    return engine


def open_database(config: Config) -> Engine:
    from apid.store.database import make_engine
    from apid.store.migrate import ensure_sqlite_folder

    ensure_sqlite_folder(config.server.database_url)
    return make_engine(config.server.database_url)


def installed_migrations(config: Config) -> list[MigrationSource]:
    """The installed plugins' migrations (those `loadPlugins` names, and apid's); a broken entry
    point ends the command."""
    from apid.plugin_host.discovery import PluginError
    from apid.plugin_host.migrations import migration_sources

    try:
        return migration_sources(only=config.server.load_plugins)
    except PluginError as exc:
        raise CommandFailed(str(exc)) from None


def bound_plugins(config: Config, own_only: bool = False) -> Bound:
    """The installed plugins bound to their IO State; a broken file or plugin ends the command.
    With `own_only`, apid's own controllers alone (an account's events need nothing else, and
    an account is made whatever plugins are installed, or broken)."""
    from apid.iostate import IOStateError
    from apid.plugin_host.discovery import APID, PluginError, load_all

    security = config.api.security
    try:
        if own_only:
            return load_all(config.api.iostate_dir, security, (APID,), skip_failing=True)
        return load_all(config.api.iostate_dir, security, config.server.load_plugins)
    except (IOStateError, PluginError) as exc:
        raise CommandFailed(str(exc)) from None


class CommandFailed(Exception):
    """The work of a command failed; `main` prints the message and exits with status 1."""
