"""The `apid` command: serve, migrate, user add, hook add|list|enable|disable, key create|list|revoke,
iostate check|reload|convert, routes, openapi, new-plugin.

Exit status 0 on success, 1 when the work failed, 2 when the command or the configuration
is wrong; every failure prints one line saying what and where.
"""

from __future__ import annotations

import argparse
import getpass
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from apid.config import files as config_module
from apid.config.files import Config
from apid.config.kinds import REACTORS
from apid.config.nodes import ConfigError

if TYPE_CHECKING:  # imported where used: a command loads only what it needs
    from sqlalchemy import Engine

    from apid.auth.accounts import Account
    from apid.plugin_host.discovery import Bound
    from apid.plugin_host.migrations import MigrationSource
    from apid.store.migrate import SchemaChange, Target


def _load(args: argparse.Namespace) -> Config:
    """The deployment's configuration. What the command creates from here on (the SQLite
    database and its WAL files, the JWT secret, mail, in `var/` by default) is private to
    apid's user, as `UMask=0077` in etc/apid.service makes it under systemd: files 0600,
    folders 0700, in worker processes too (they inherit the mask)."""
    os.umask(0o077)
    env = dict(os.environ)
    if getattr(args, "listen", None):
        env["APID_LISTEN"] = args.listen
    return config_module.load(args.config_dir, args.env, env)


def _engine(config: Config) -> Engine:
    return _migrated(config)[0]


def _migrated(config: Config) -> tuple[Engine, list[SchemaChange]]:
    """An engine on the configured database, apid's schema and every installed plugin's brought
    up to date, and what that did to each."""
    from apid.plugin_host.discovery import PluginError
    from apid.store.migrate import MigrationRefused, upgrade_all

    sources = _migration_sources()
    engine = _database(config)
    try:
        changes = upgrade_all(engine, sources)
    except (MigrationRefused, PluginError) as refused:
        engine.dispose()
        raise CommandFailed(str(refused)) from None
    return engine, changes


def _database(config: Config) -> Engine:
    from apid.store.database import make_engine
    from apid.store.migrate import ensure_sqlite_folder

    ensure_sqlite_folder(config.server.database_url)
    return make_engine(config.server.database_url)


def _migration_sources() -> list[MigrationSource]:
    """The installed plugins' migrations; a broken entry point ends the command."""
    from apid.plugin_host.discovery import PluginError
    from apid.plugin_host.migrations import migration_sources

    try:
        return migration_sources()
    except PluginError as exc:
        raise CommandFailed(str(exc)) from None


def _bound(config: Config) -> Bound:
    """The installed plugins bound to their IO State; a broken file or plugin ends the command."""
    from apid.iostate import IOStateError
    from apid.plugin_host.discovery import PluginError, load_all

    try:
        return load_all(config.api.iostate_dir, config.api.security)
    except (IOStateError, PluginError) as exc:
        raise CommandFailed(str(exc)) from None


class CommandFailed(Exception):
    """The work of a command failed; `main` prints the message and exits with status 1."""


def cmd_serve(args: argparse.Namespace) -> int:
    """One process, or (`procCores` above 1) the parent of that many worker processes."""
    from apid.server.reactors import install
    from apid.server.workers import share_metrics, worker_count

    signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C before the reactor runs: an end, not a traceback
    config = _load(args)
    choice = args.reactor or config.server.reactor
    count = worker_count(config)
    if count > 1:
        metrics = share_metrics()  # first: before anything imports prometheus_client
        install("default")  # the parent runs no plugin code: the workers run the reactor chosen
        from apid.server.workers.parent import serve_workers
        from apid.server.workers.versions import installed_versions

        _start_logging(config)
        return serve_workers(config, count, choice, metrics, installed_versions())
    # first: the daemon's modules (Klein among them) import twisted.internet.reactor
    reactor = install(choice)
    from apid.server.daemon import serve

    _start_logging(config)
    return serve(config, reactor)


def cmd_worker(args: argparse.Namespace) -> int:
    """A worker process, started by `apid serve`'s parent (apid.server.workers.worker says how)."""
    import pickle
    import socket

    from apid.server.reactors import install
    from apid.server.workers import CHANNEL_FD, PORT_FD, WorkerStart

    # `python -m apid` had it end with its parent (apid.server.workers.orphans) before it imported this
    if sys.stdin.isatty() or not all(_open(fd) for fd in (PORT_FD, CHANNEL_FD)):
        raise CommandFailed("`apid worker` is started by `apid serve` (procCores above 1), not by hand")
    try:
        start = pickle.load(sys.stdin.buffer)  # pickled by the parent, on a pipe only it holds
    except (EOFError, pickle.UnpicklingError) as exc:
        raise CommandFailed(f"`apid worker` read no configuration from its parent ({exc})") from None
    if not isinstance(start, WorkerStart):
        raise CommandFailed("`apid worker` read no configuration from its parent (another version of apid?)")
    os.setpgrp()  # Ctrl-C in a terminal reaches the parent alone, which stops the workers in order
    reactor = install(args.reactor)
    from apid.server.daemon import serve
    from apid.server.reactors import installed
    from apid.server.shutdown import Shutdown
    from apid.server.workers.versions import CODE_CHANGED, code_changes, installed_versions
    from apid.server.workers.worker import link

    config = start.config
    _start_logging(config, worker=args.index)
    changes = code_changes(start.versions, installed_versions())
    if changes:
        _say(
            f"apid: worker {args.index} refuses to serve: the code installed changed since the daemon started "
            f"({'; '.join(changes)}); restart the daemon to serve it"
        )
        return CODE_CHANGED
    stopping = Shutdown(installed(), config.server.shutdown)
    family = socket.AddressFamily[args.family]
    return serve(config, reactor, link(installed(), args.index, family, args.parent, stopping))


def _open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _start_logging(config: Config, worker: int | None = None) -> None:
    """Log to standard error as `logFormat` says (after the reactor is installed: apid.server.logs
    imports twisted.web); a worker's events carry its index. From now on `_say` logs."""
    global _logging
    from twisted.logger import globalLogBeginner

    from apid.server.logs import log_observer

    observer = log_observer(config.server.log_format, sys.stderr, worker)
    globalLogBeginner.beginLoggingTo([observer], redirectStandardIO=False)
    _logging = True


_logging = False  # whether the daemon's log began: its lines then follow `logFormat`


def _say(line: str) -> None:
    """A command's failure on standard error: an event of the daemon's log once it began (a JSON
    line with `logFormat: json`), a plain line before (no configuration read, no format known)."""
    if not _logging:
        print(line, file=sys.stderr)
        return
    from twisted.logger import Logger

    Logger(namespace="apid.cli").critical("{line}", line=line)


def cmd_migrate(args: argparse.Namespace) -> int:
    """Every schema up to date; or one schema to a revision (`--to`, `--down`); or what either
    would run (`--plan`); or where each stands (`--status`); or a plugin's next revision
    generated (`--generate`)."""
    from apid.store.migrate import MigrationRefused, Target, TargetRefused

    refused = _misused_migrate(args)
    if refused:
        print(f"apid: {refused}", file=sys.stderr)
        return 2
    config = _load(args)
    if args.status:
        return _migration_status(config)
    try:
        target = Target.parse(args.to) if args.to else Target(args.down, None) if args.down else None
        if args.generate:
            return _generate_migration(config, args.generate, args.message)
        if args.plan:
            return _migration_plan(config, target, args.sql)
        if target is not None:
            return _move_schema(config, target)
    except TargetRefused as exc:
        raise CommandFailed(str(exc)) from None
    except MigrationRefused as exc:
        raise CommandFailed(str(exc)) from None
    engine, changes = _migrated(config)
    engine.dispose()
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
    return None


def _migration_plan(config: Config, target: Target | None, sql: bool) -> int:
    """`apid migrate --plan`: per schema, the revisions `apid migrate` (or `--to`, `--down`)
    would run, in order, each with its description, and with `--sql` the SQL they would run;
    nothing runs."""
    from apid.plugin_host.discovery import PluginError
    from apid.store.migrate import plan, plan_sql

    sources = _migration_sources()
    engine = _database(config)
    try:
        plans = plan(engine, sources, target)
        written = plan_sql(engine, sources, target) if sql else [""] * len(plans)
    except PluginError as exc:
        raise CommandFailed(str(exc)) from None
    finally:
        engine.dispose()
    for planned, statements in zip(plans, written, strict=True):
        for line in planned.describe():
            print(line)
        if statements:
            print(statements.rstrip("\n"))
    return 0


def _move_schema(config: Config, target: Target) -> int:
    """`apid migrate --to SCHEMA@REVISION` and `--down SCHEMA`: one schema, up or down."""
    from apid.plugin_host.discovery import PluginError
    from apid.store.migrate import move

    sources = _migration_sources()
    engine = _database(config)
    try:
        change = move(engine, sources, target)
    except PluginError as exc:
        raise CommandFailed(str(exc)) from None
    finally:
        engine.dispose()
    print(f"apid: {change.describe()}")
    return 0


def _generate_migration(config: Config, plugin: str, message: str) -> int:
    """`apid migrate --generate PLUGIN -m MESSAGE`: the plugin's next revision, from its tables."""
    from apid.plugin_host.discovery import PluginError
    from apid.store.migrate import APID, TargetRefused, generate

    if plugin == APID:
        raise TargetRefused("apid's own revisions are written by hand; --generate is for a plugin's")
    found = {source.name: source for source in _migration_sources()}
    if plugin not in found:
        raise TargetRefused(
            f"no plugin's migrations are named {plugin!r}; installed: {', '.join(sorted(found)) or 'none'}"
        )
    engine = _database(config)
    try:
        written = generate(engine, found[plugin], message)
    except PluginError as exc:
        raise CommandFailed(str(exc)) from None
    finally:
        engine.dispose()
    print(f"apid: wrote {written}")
    print("review it (autogenerate cannot see renames and some changes), then `apid migrate`")
    return 0


def _migration_status(config: Config) -> int:
    """`apid migrate --status`: one line per schema; exit status 1 while any has a migration pending."""
    from apid.plugin_host.discovery import PluginError
    from apid.store.migrate import schema_status

    sources = _migration_sources()
    engine = _database(config)
    try:
        statuses = schema_status(engine, sources)
    except PluginError as exc:
        raise CommandFailed(str(exc)) from None
    finally:
        engine.dispose()
    for status in statuses:
        print(status.describe())
    if any(status.pending for status in statuses):
        print("apid: migrations are pending; `apid migrate` applies them", file=sys.stderr)
        return 1
    return 0


def _read_password(from_stdin: bool) -> str:
    if from_stdin:
        return sys.stdin.readline().rstrip("\r\n")
    if not sys.stdin.isatty():
        raise SystemExit("apid: no terminal to ask for the password; use --password-stdin")
    first = getpass.getpass("Password: ")
    if first != getpass.getpass("Password again: "):
        raise SystemExit("apid: the passwords differ")
    return first


def cmd_user_add(args: argparse.Namespace) -> int:
    import time

    from sqlalchemy import Connection

    from apid.auth.accounts import check_credentials, insert_account
    from apid.auth.passwords import hash_password
    from apid.calls.pipeline import filter_output
    from apid.hooks.events import AccountEvents
    from apid.iostate.types import value_type
    from apid.store.database import run_write

    config = _load(args)
    unknown = sorted(set(args.role) - config.api.security.all_roles)
    if unknown:
        print(
            f"apid: unknown role {unknown[0]}; known roles: {', '.join(sorted(config.api.security.all_roles))}",
            file=sys.stderr,
        )
        return 2
    password = _read_password(args.password_stdin)
    try:
        value_type("Email").check(args.email)
    except ValueError:
        print(f"apid: {args.email!r} is not an email address", file=sys.stderr)
        return 2
    check_credentials(args.name, password)
    # Subscribers hear of the account as of a person/create, recorded in the same transaction;
    # the daemons deliver it at their next poll.
    rules = _bound(config).rules if config.server.webhook_active else None
    events = AccountEvents(lambda: rules, filter_output, time.time) if rules is not None else None

    def create(connection: Connection) -> Account:
        account = insert_account(connection, args.name, args.email, hash_password(password), args.role)
        if events is not None:
            events.record(connection, "create", account)
        return account

    account = run_write(_engine(config), create)
    print(f"apid: created user {account.username} (id {account.id}) with roles {', '.join(sorted(account.roles))}")
    return 0


def cmd_hook_add(args: argparse.Namespace) -> int:
    from apid.auth.accounts import find_login
    from apid.hooks.registry import insert_hook
    from apid.hooks.service import check_hook
    from apid.hooks.signing import new_secret
    from apid.store.database import run_read, run_write

    config = _load(args)
    rules = _bound(config).rules
    engine = _engine(config)
    found = run_read(engine, find_login, args.user)
    if found is None:
        raise CommandFailed(f"no user named {args.user!r}")
    owner = found[0]
    values = check_hook(args.url, args.service, owner.roles, config.api.allowed_origins, rules)
    secret = new_secret()
    created = run_write(engine, insert_hook, owner.id, values["url"], values["service"], secret)
    print(f"apid: created hook {created.id} for {owner.username}: {created.service} -> {created.url}")
    print(f"secret: {secret}")
    print("(shown once: keep it to verify the webhook-signature header)")
    return 0


def cmd_hook_list(args: argparse.Namespace) -> int:
    from apid.hooks.registry import list_hooks
    from apid.store.database import run_read

    engine = _engine(_load(args))
    offset = 0
    while page := run_read(engine, list_hooks, None, offset, 500):
        for item in page:
            state = "enabled" if item.is_enabled else f"disabled ({item.disabled_reason or 'no reason given'})"
            print(
                f"{item.id}\tuser {item.user_id}\t{item.service}\t{item.url}\tattempts {item.attempts}"
                f"\tpending {item.pending}\t{state}"
            )
        offset += len(page)
    return 0


def cmd_hook_switch(args: argparse.Namespace) -> int:
    """`hook enable` and `hook disable`: the daemons deliver a re-enabled hook's waiting
    messages, oldest first, at their next poll."""
    from apid.hooks.registry import change_hook, enable_values
    from apid.store.database import run_write

    run_write(_engine(_load(args)), change_hook, args.id, None, enable_values(args.enable), None)
    if args.enable:
        print(f"apid: hook {args.id} enabled; its waiting messages go out oldest first")
    else:
        print(f"apid: hook {args.id} disabled; its events are still recorded and wait until it is enabled again")
    return 0


def _key_owner(engine: Engine, username: str) -> Account:
    from apid.auth.accounts import find_login
    from apid.store.database import run_read

    found = run_read(engine, find_login, username)
    if found is None:
        raise CommandFailed(f"no user named {username!r}")
    return found[0]


def cmd_key_create(args: argparse.Namespace) -> int:
    """The rules of `apikey/create`: the owner's roles at most, a scope that exists, an expiry ahead."""
    from datetime import UTC, datetime

    from apid.auth.apikeys import check_new_key, insert_key
    from apid.store.database import run_write

    config = _load(args)
    rules = _bound(config).rules
    engine = _engine(config)
    owner = _key_owner(engine, args.user)
    new = check_new_key(
        args.name,
        args.role,
        args.scope,
        args.expires,
        owner.roles,
        config.api.security.all_roles,
        rules,
        datetime.now(UTC),
    )
    record, key = run_write(engine, insert_key, owner.id, new, config.api.security.api_keys_per_account)
    roles = ", ".join(sorted(new.roles))
    print(f"apid: created API key {record.id} ({record.name}) of {owner.username} with roles {roles}")
    print(f"key: {key}")
    print("(shown once: only its hash is kept; send it as Authorization: Bearer <key>)")
    return 0


def cmd_key_list(args: argparse.Namespace) -> int:
    from apid.auth.apikeys import PREFIX, list_keys, printable
    from apid.store.database import run_read

    engine = _engine(_load(args))
    owner = _key_owner(engine, args.user).id if args.user else None
    offset = 0
    while page := run_read(engine, list_keys, owner, offset, 500):
        for key in page:
            state = f"revoked {key.revoked_at.isoformat()}" if key.revoked_at else "active"
            expires = key.expires_at.isoformat() if key.expires_at else "never"
            last = key.last_used_at.isoformat() if key.last_used_at else "never"
            scope = ",".join(sorted(key.scopes)) if key.scopes is not None else "*"
            print(
                f"{key.id}\t{printable(key.username)}\t{printable(key.name)}\t{PREFIX}{key.prefix}"
                f"\t{','.join(sorted(key.roles))}"
                f"\tscope {scope}\texpires {expires}\tlast used {last}\t{state}"
            )
        offset += len(page)
    return 0


def cmd_key_revoke(args: argparse.Namespace) -> int:
    """Every daemon on the database refuses the key within a second (it reads the deny list)."""
    from apid.auth.apikeys import printable, revoke_key
    from apid.store.database import run_write

    record = run_write(_engine(_load(args)), revoke_key, args.id, None)
    if record is None:
        raise CommandFailed(f"no API key with id {args.id}")
    print(f"apid: API key {record.id} ({printable(record.name)}) of {printable(record.username)} is revoked")
    return 0


def cmd_iostate_check(args: argparse.Namespace) -> int:
    from apid.iostate import IOStateError
    from apid.plugin_host.discovery import PluginError, bind, discover, load

    config = _load(args)
    directory = Path(args.directory) if args.directory else config.api.iostate_dir
    try:
        bound = bind(load(discover()), directory, config.api.security)
    except (IOStateError, PluginError) as exc:
        print(f"apid: {exc}", file=sys.stderr)
        return 1
    for name, state in sorted(bound.rules.controllers.items()):
        print(f"ok {name}: {state.source}")
    return 0


def cmd_iostate_reload(args: argparse.Namespace) -> int:
    """Once the files load here, move the deployment's IO State generation and print what each
    daemon process reports; exit 1 if any kept its rules or said nothing."""
    import time

    from apid.server.reloading import OK, announce, reports_since
    from apid.store.database import run_read, run_write

    config = _load(args)
    _bound(config)  # as a daemon loads them: a broken file ends the command, changing nothing
    engine = _engine(config)
    try:
        generation, expected = run_write(engine, announce)
        deadline = time.monotonic() + args.wait
        while True:
            reports = run_read(engine, reports_since, generation)
            silent = sorted(expected - {done.who for done in reports})
            if not silent or time.monotonic() >= deadline:
                break
            time.sleep(0.1)
    finally:
        engine.dispose()
    for done in reports:
        print(f"{done.who}: {done.outcome}")
    for who in silent:
        print(f"{who}: no report within {args.wait:g} s")
    if not reports and not silent:
        print(f"apid: the files load (generation {generation}); no daemon runs on this database to report")
    failed = silent or any(done.outcome != OK for done in reports)
    return 1 if failed else 0


def cmd_iostate_convert(args: argparse.Namespace) -> int:
    """Writes the file in apid's form even when it still breaks a rule, so that the rest can be
    fixed by hand; the exit status says whether it loads."""
    import json

    from apid.iostate import IOStateError, parse
    from apid.iostate.convert import convert
    from apid.iostate.loader import read_json

    security = _load(args).api.security
    source = str(args.file)
    try:
        document = read_json(args.file.read_text(encoding="utf-8"), source)
    except (OSError, UnicodeDecodeError) as exc:
        raise CommandFailed(f"{source}: cannot read: {exc}") from None
    except IOStateError as exc:
        raise CommandFailed(str(exc)) from None
    done = convert(document, security)
    text = json.dumps(done.document, indent=2, ensure_ascii=False) + "\n"
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text, encoding="utf-8")
    for change in done.changes:
        print(f"{source}: {change}", file=sys.stderr)
    try:
        parse(done.document, str(args.output or source), security)
    except IOStateError as exc:
        raise CommandFailed(str(exc)) from None
    return 0


def cmd_routes(args: argparse.Namespace) -> int:
    from apid.cli.plugin_report import dump_routes

    config = _load(args)
    for line in dump_routes(_bound(config), config.api.version, config.api.reserved_uris):
        print(line)
    return 0


def cmd_openapi(args: argparse.Namespace) -> int:
    """The OpenAPI document of the given roles (none: the endpoints that need no token), as
    `/openapi.json` would answer it, from the installed plugins and the IO State files."""
    import json

    from apid.openapi.document import anonymous_view, build, document_settings
    from apid.openapi.view import api_view

    config = _load(args)
    roles = frozenset(args.role or ())
    unknown = sorted(roles - config.api.security.all_roles)
    if unknown:
        print(
            f"apid: unknown role {unknown[0]}; known roles: {', '.join(sorted(config.api.security.all_roles))}",
            file=sys.stderr,
        )
        return 2
    bound = _bound(config)
    settings = document_settings(config, bound.controllers.values(), config.server.base_url)
    if roles:
        document = build(api_view(bound.rules, roles, config.api.version), settings)
    else:
        document = build(anonymous_view(bound.rules, settings), settings, token=False)
    print(json.dumps(document, indent=2, ensure_ascii=False))
    return 0


def cmd_new_plugin(args: argparse.Namespace) -> int:
    from apid.plugin_host.scaffold import PluginNames, ScaffoldRefused, write_plugin

    try:
        names = PluginNames.of(args.name, args.controller)
        target = args.directory or Path(names.distribution)
        written = write_plugin(names, target)
    except ScaffoldRefused as refused:
        raise CommandFailed(str(refused)) from None
    for path in written:
        print(f"wrote {path}")
    print(f"\nnext: pip install -e '{target}[test]' && apid migrate && (cd {target} && pytest)")
    return 0


def parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config-dir",
        type=Path,
        default=None,
        help="folder holding service_server.yml and service_api.yml (default: $APID_CONFIG_DIR or etc)",
    )
    common.add_argument("--env", default=None, help="environment section to use (default: $APID_ENV or development)")

    top = argparse.ArgumentParser(prog="apid", description="An API daemon for IO State-governed controllers.")
    commands = top.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", parents=[common], help="run the daemon")
    serve.add_argument(
        "--listen",
        help="a port (8080: on loopback only, tcp:8080:interface=127.0.0.1) "
        "or a Twisted endpoint such as tcp:PORT:interface=ADDR (default: $APID_LISTEN, "
        "then listen in service_server.yml)",
    )
    serve.add_argument(
        "--reactor",
        choices=REACTORS,
        help="the Twisted reactor: asyncio lets plugin actions await asyncio libraries "
        "(default: reactor in service_server.yml, else default)",
    )
    serve.set_defaults(run=cmd_serve)
    worker = commands.add_parser("worker", help="a worker process of `serve` (started by it, not by hand)")
    worker.add_argument("--index", type=int, required=True)
    worker.add_argument("--family", required=True)
    worker.add_argument("--reactor", choices=REACTORS, required=True)
    worker.add_argument("--parent", type=int, required=True, help="the pid of the `apid serve` that started it")
    worker.set_defaults(run=cmd_worker)

    migrate = commands.add_parser(
        "migrate", parents=[common], help="bring the database schema up to date, apid's then each plugin's"
    )
    what = migrate.add_mutually_exclusive_group()
    what.add_argument(
        "--status",
        action="store_true",
        help="show each schema's revision, head and pending migrations, change nothing "
        "(exit status 1 while any is pending)",
    )
    what.add_argument(
        "--to",
        metavar="SCHEMA@REVISION",
        help="bring one schema (apid, or a plugin's migrations name) to a revision, head or base, "
        "upgrading or downgrading it",
    )
    what.add_argument("--down", metavar="SCHEMA", help="take one schema one revision down")
    what.add_argument(
        "--generate",
        metavar="PLUGIN",
        help="write the plugin's next revision into its migrations package, from the difference between "
        "the tables it declares and the database (review it before `apid migrate`)",
    )
    migrate.add_argument("-m", "--message", help="the description of the revision --generate writes")
    migrate.add_argument(
        "--plan",
        action="store_true",
        help="list the revisions the command would run (with --to or --down: that move), change nothing",
    )
    migrate.add_argument(
        "--sql",
        action="store_true",
        help="with --plan: print the SQL those revisions would run on this database, written without running them",
    )
    migrate.set_defaults(run=cmd_migrate)

    user = commands.add_parser("user", help="manage accounts").add_subparsers(dest="user_command", required=True)
    add = user.add_parser("add", parents=[common], help="create an enabled account")
    add.add_argument("name")
    add.add_argument("--email", required=True)
    add.add_argument("--role", action="append", required=True, help="a role to grant (repeatable)")
    add.add_argument("--password-stdin", action="store_true", help="read the password from standard input")
    add.set_defaults(run=cmd_user_add)

    hook = commands.add_parser("hook", help="manage webhooks").add_subparsers(dest="hook_command", required=True)
    hook_add = hook.add_parser("add", parents=[common], help="subscribe a URL to a controller's or endpoint's changes")
    hook_add.add_argument("--user", required=True, help="the owner's username: the events carry what this user may see")
    hook_add.add_argument(
        "--url", required=True, help="where events are POSTed (its origin must be in cors.allowedOrigins)"
    )
    hook_add.add_argument("--service", required=True, help="a controller (person) or one endpoint (person/create)")
    hook_add.set_defaults(run=cmd_hook_add)
    hook.add_parser("list", parents=[common], help="every hook with its state and pending messages").set_defaults(
        run=cmd_hook_list
    )
    for name, enable, text in (
        ("enable", True, "deliver to a hook again, its waiting messages first"),
        ("disable", False, "stop deliveries to a hook (its events are still recorded)"),
    ):
        switch = hook.add_parser(name, parents=[common], help=text)
        switch.add_argument("id", type=int)
        switch.set_defaults(run=cmd_hook_switch, enable=enable)

    key = commands.add_parser("key", help="manage API keys").add_subparsers(dest="key_command", required=True)
    key_create = key.add_parser("create", parents=[common], help="create an API key of an account, shown once")
    key_create.add_argument("--user", required=True, help="the owner's username: the key acts for this account")
    key_create.add_argument("--name", required=True, help="what the key is for")
    key_create.add_argument(
        "--role", action="append", required=True, help="a role of the owner's to give the key (repeatable)"
    )
    key_create.add_argument(
        "--scope", action="append", help="a controller or controller/action the key may call (repeatable; default: any)"
    )
    key_create.add_argument("--expires", help="when the key stops working: ISO 8601 date or date-time (default: never)")
    key_create.set_defaults(run=cmd_key_create)
    key_list = key.add_parser("list", parents=[common], help="every API key (never the keys themselves)")
    key_list.add_argument("--user", help="only this account's keys")
    key_list.set_defaults(run=cmd_key_list)
    key_revoke = key.add_parser("revoke", parents=[common], help="revoke an API key, everywhere within a second")
    key_revoke.add_argument("id", type=int)
    key_revoke.set_defaults(run=cmd_key_revoke)

    iostate = commands.add_parser("iostate", help="IO State files").add_subparsers(
        dest="iostate_command", required=True
    )
    check = iostate.add_parser("check", parents=[common], help="validate a folder of IO State files")
    check.add_argument("directory", nargs="?", help="folder to check (default: the configured iostateDir)")
    check.set_defaults(run=cmd_iostate_check)
    reload = iostate.add_parser(
        "reload", parents=[common], help="have every daemon on the database reload the IO State files, once they load"
    )
    reload.add_argument(
        "--wait",
        type=float,
        default=3.0,
        metavar="SECONDS",
        help="how long to wait for the daemons' reports (default: 3)",
    )
    reload.set_defaults(run=cmd_iostate_reload)
    convert = iostate.add_parser(
        "convert", parents=[common], help="rewrite a file of the original framework in apid's form, listing each change"
    )
    convert.add_argument("file", type=Path)
    convert.add_argument("--output", type=Path, help="where to write it (default: standard output)")
    convert.set_defaults(run=cmd_iostate_convert)

    commands.add_parser("routes", parents=[common], help="list every endpoint").set_defaults(run=cmd_routes)

    new_plugin = commands.add_parser("new-plugin", help="write a ready plugin distribution to start from")
    new_plugin.add_argument("name", help="the plugin's name: apid-NAME, package apid_NAME, its migrations' branch")
    new_plugin.add_argument("--controller", help="the controller's name, its URL segment (default: the plugin's)")
    new_plugin.add_argument("--directory", type=Path, help="where to write it (default: ./apid-NAME)")
    new_plugin.set_defaults(run=cmd_new_plugin)

    openapi = commands.add_parser(
        "openapi", parents=[common], help="print the OpenAPI 3.1 document of some roles (none: the public endpoints)"
    )
    openapi.add_argument("--role", action="append", help="a role whose API to describe (repeatable)")
    openapi.set_defaults(run=cmd_openapi)
    return top


def main(argv: list[str] | None = None) -> int:
    from apid.problems import Problem

    args = parser().parse_args(argv)
    try:
        return args.run(args)
    except ConfigError as exc:
        _say(f"apid: configuration error: {exc}")
        return 2
    except CommandFailed as exc:
        _say(f"apid: {exc}")
        return 1
    except Problem as problem:  # the same checks as the API's, reported on one line
        reasons = "; ".join(f"{e['field']} {e['reason']}" for e in problem.extensions.get("errors", []))
        print(f"apid: {reasons or problem.detail}", file=sys.stderr)
        return 1
    except Exception as exc:
        failed = _database_failed(exc)
        if failed is None:
            raise
        _say(f"apid: {failed}")
        return 1


def _database_failed(error: BaseException) -> str | None:
    """One line when `error`, or one it was raised from, is the database's: it could not be
    reached, or it could not do the work (SQLite locked by another process, PostgreSQL out of
    connections), with the driver's first line; None for any other error (a bug: its traceback)."""
    from sqlalchemy.exc import OperationalError

    from apid.store.database import unreachable

    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if unreachable(cause) or isinstance(cause, OperationalError):
            driver = getattr(cause, "orig", None) or cause
            reason = (str(driver).strip().splitlines() or [type(driver).__name__])[0]
            what = "cannot be reached" if unreachable(cause) else "failed"
            return f"the database {what}: {reason}"
        cause = cause.__cause__ or cause.__context__
    return None


if __name__ == "__main__":
    sys.exit(main())
