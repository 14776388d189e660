"""`apid user add`: an account made from the command line, its password read without echo."""

from __future__ import annotations

import argparse
import getpass
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: a command loads only what it needs
    from apid.auth.accounts import Account
from apid.cli.common import bound_plugins, current_engine, load_config


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

    from apid.auth.accounts import insert_account
    from apid.auth.passwords import Hashing, hasher
    from apid.calls.pipeline import filter_output
    from apid.config.account_policy import check_credentials
    from apid.hooks.events import AccountEvents, Recording
    from apid.iostate.types import value_type
    from apid.store.database import run_write

    config = load_config(args)
    unknown = sorted(set(args.role) - config.api.security.all_roles)
    if unknown:
        print(
            f"apid: unknown role {unknown[0]}; known roles: {', '.join(sorted(config.api.security.all_roles))}",
            file=sys.stderr,
        )
        return 2
    engine = current_engine(config)  # before asking for the password: a database behind ends the command
    password = _read_password(args.password_stdin)
    try:
        value_type("Email").check(args.email)
    except ValueError:
        print(f"apid: {args.email!r} is not an email address", file=sys.stderr)
        return 2
    check_credentials(args.name, password)
    hashing = Hashing(hasher(config.server.passwords))
    # Subscribers hear of the account as of a person/create, recorded in the same transaction;
    # the daemons deliver it, and send it on their live event streams, at their next poll.
    recording = Recording(hooks=config.server.webhook_active, changes=config.server.events.enabled)
    rules = bound_plugins(config, own_only=True).rules if recording.hooks or recording.changes else None
    events = (
        AccountEvents(rules=lambda: rules, filter_output=filter_output, clock=time.time, recording=recording)
        if rules is not None
        else None
    )

    def create(connection: Connection) -> Account:
        account = insert_account(connection, args.name, args.email, hashing.hash(password), args.role)
        if events is not None:
            events.record(connection, "create", account)
        return account

    account = run_write(engine, create)
    print(f"apid: created user {account.username} (id {account.id}) with roles {', '.join(sorted(account.roles))}")
    return 0
