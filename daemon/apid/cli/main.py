"""The `apid` command: serve, migrate, user add, hook add|list|enable|disable, key create|list|revoke,
iostate check|reload|convert, routes, openapi, new-plugin.

Exit status 0 on success, 1 when the work failed, 2 when the command or the configuration
is wrong; every failure prints one line saying what and where.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from apid.config.kinds import REACTORS
from apid.config.nodes import ConfigError

if TYPE_CHECKING:  # imported where used: a command loads only what it needs
    pass
from apid.cli.common import CommandFailed
from apid.cli.documents import cmd_new_plugin, cmd_openapi, cmd_routes
from apid.cli.hooks import cmd_hook_add, cmd_hook_list, cmd_hook_switch
from apid.cli.iostate import cmd_iostate_check, cmd_iostate_convert, cmd_iostate_reload
from apid.cli.keys import cmd_key_create, cmd_key_list, cmd_key_revoke
from apid.cli.migrate import cmd_migrate
from apid.cli.serve import cmd_serve, cmd_worker, say
from apid.cli.users import cmd_user_add


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
        "--yes",
        action="store_true",
        help="with --to or --down: drop the tables the move would drop, and their rows "
        "(without it such a move is refused, naming them and their rows)",
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
        say(f"apid: configuration error: {exc}")
        return 2
    except CommandFailed as exc:
        say(f"apid: {exc}")
        return 1
    except Problem as problem:  # the same checks as the API's, reported on one line
        reasons = "; ".join(f"{e['field']} {e['reason']}" for e in problem.extensions.get("errors", []))
        print(f"apid: {reasons or problem.detail}", file=sys.stderr)
        return 1
    except Exception as exc:
        failed = _database_failed(exc)
        if failed is None:
            raise
        say(f"apid: {failed}")
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
