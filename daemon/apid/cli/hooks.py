"""`apid hook add|list|enable|disable`: webhooks managed from the command line."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: a command loads only what it needs
    pass
from apid.cli.common import CommandFailed, bound_plugins, current_engine, load_config


def cmd_hook_add(args: argparse.Namespace) -> int:
    from apid.auth.accounts import find_login
    from apid.hooks.registry import insert_hook
    from apid.hooks.service import check_hook
    from apid.hooks.signing import new_secret
    from apid.store.database import run_read, run_write

    config = load_config(args)
    rules = bound_plugins(config).rules
    engine = current_engine(config)
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

    engine = current_engine(load_config(args))
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

    run_write(current_engine(load_config(args)), change_hook, args.id, None, enable_values(args.enable), None)
    if args.enable:
        print(f"apid: hook {args.id} enabled; its waiting messages go out oldest first")
    else:
        print(f"apid: hook {args.id} disabled; its events are still recorded and wait until it is enabled again")
    return 0
