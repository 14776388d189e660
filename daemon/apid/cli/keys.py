"""`apid key create|list|revoke`: API keys managed from the command line."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: a command loads only what it needs
    from sqlalchemy import Engine

    from apid.auth.accounts import Account
from apid.cli.common import CommandFailed, bound_plugins, current_engine, load_config


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

    config = load_config(args)
    rules = bound_plugins(config).rules
    engine = current_engine(config)
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

    engine = current_engine(load_config(args))
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

    record = run_write(current_engine(load_config(args)), revoke_key, args.id, None)
    if record is None:
        raise CommandFailed(f"no API key with id {args.id}")
    print(f"apid: API key {record.id} ({printable(record.name)}) of {printable(record.username)} is revoked")
    return 0
