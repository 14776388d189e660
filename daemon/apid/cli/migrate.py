"""`apid migrate`: the plan, moving a schema up or down, generating a plugin's migration, and the
status of every schema. The one command that changes a schema (beside `apid serve` with
`database.migrate: true`), and says what it did to each; a move down that would drop tables
shows them with their rows and needs `--yes`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from apid.config.files import Config

if TYPE_CHECKING:  # imported where used: a command loads only what it needs
    from sqlalchemy import Engine

    from apid.store.migrate import Target
from apid.cli.common import CommandFailed, installed_migrations, load_config, open_database

T = TypeVar("T")


def cmd_migrate(args: argparse.Namespace) -> int:
    """Every schema up to date; or one schema to a revision (`--to`, `--down`); or what either
    would run (`--plan`); or where each stands (`--status`); or a plugin's next revision
    generated (`--generate`)."""
    from apid.store.migrate import MigrationRefused, Target, TargetRefused

    refused = _misused_migrate(args)
    if refused:
        print(f"apid: {refused}", file=sys.stderr)
        return 2
    config = load_config(args)
    if args.status:
        return _migration_status(config)
    try:
        target = Target.parse(args.to) if args.to else Target(args.down, None) if args.down else None
        if args.generate:
            return _generate_migration(config, args.generate, args.message)
        if args.plan:
            return _migration_plan(config, target, args.sql)
        if target is not None:
            return _move_schema(config, target, args.yes)
        return _migrate_all(config)
    except (TargetRefused, MigrationRefused) as exc:
        raise CommandFailed(str(exc)) from None


def _migrate_all(config: Config) -> int:
    """`apid migrate`: every schema up to date, apid's then each plugin's, one line each."""
    from apid.store.migrate import upgrade_all

    sources = installed_migrations(config)
    changes = _on_database(config, lambda engine: upgrade_all(engine, sources))
    for change in changes:
        print(f"apid: {change.describe()}")
    return 0


def _misused_migrate(args: argparse.Namespace) -> str | None:
    """What is wrong with the options given together, if anything (exit status 2)."""
    if args.plan and (args.status or args.generate):
        return "--plan goes alone or with --to or --down"
    if args.sql and not args.plan:
        return "--sql goes with --plan"
    if bool(args.generate) != bool(args.message):
        return "--generate PLUGIN takes -m MESSAGE, and -m only goes with --generate"
    if args.yes and (args.plan or not (args.to or args.down)):
        return "--yes goes with --to or --down, without --plan"
    return None


def _migration_plan(config: Config, target: Target | None, sql: bool) -> int:
    """`apid migrate --plan`: per schema, the revisions `apid migrate` (or `--to`, `--down`)
    would run, in order, each with its description, and with `--sql` the SQL they would run;
    nothing runs."""
    from apid.store.migrate import plan, plan_sql

    sources = installed_migrations(config)
    plans, written = _on_database(
        config,
        lambda engine: (plan(engine, sources, target), plan_sql(engine, sources, target) if sql else None),
    )
    for planned, statements in zip(plans, written or [""] * len(plans), strict=True):
        for line in planned.describe():
            print(line)
        if statements:
            print(statements.rstrip("\n"))
    return 0


def _move_schema(config: Config, target: Target, drop: bool) -> int:
    """`apid migrate --to SCHEMA@REVISION` and `--down SCHEMA`: one schema, up or down; a move
    that would drop tables is refused naming them and their rows, unless `drop` (`--yes`)."""
    from apid.store.migrate import move

    sources = installed_migrations(config)
    change = _on_database(config, lambda engine: move(engine, sources, target, drop=drop))
    print(f"apid: {change.describe()}")
    return 0


def _generate_migration(config: Config, plugin: str, message: str) -> int:
    """`apid migrate --generate PLUGIN -m MESSAGE`: the plugin's next revision, from its tables."""
    from apid.store.migrate import APID, TargetRefused, generate

    if plugin == APID:
        raise TargetRefused("apid's own revisions are written by hand; --generate is for a plugin's")
    found = {source.name: source for source in installed_migrations(config)}
    if plugin not in found:
        raise TargetRefused(
            f"no plugin's migrations are named {plugin!r}; installed: {', '.join(sorted(found)) or 'none'}"
        )
    written = _on_database(config, lambda engine: generate(engine, found[plugin], message))
    print(f"apid: wrote {written}")
    print("review it (autogenerate cannot see renames and some changes), then `apid migrate`")
    return 0


def _migration_status(config: Config) -> int:
    """`apid migrate --status`: one line per schema; exit status 1 while any has a migration pending."""
    from apid.store.migrate import schema_status

    sources = installed_migrations(config)
    statuses = _on_database(config, lambda engine: schema_status(engine, sources))
    for status in statuses:
        print(status.describe())
    if any(status.pending for status in statuses):
        print("apid: migrations are pending; `apid migrate` applies them", file=sys.stderr)
        return 1
    return 0


def _on_database(config: Config, work: Callable[[Engine], T]) -> T:
    """`work` on the configured database, closed after; a plugin whose migrations cannot be
    read ends the command with its error."""
    from apid.plugin_host.discovery import PluginError

    engine = open_database(config)
    try:
        return work(engine)
    except PluginError as exc:
        raise CommandFailed(str(exc)) from None
    finally:
        engine.dispose()
