"""`apid iostate check|reload|convert`: IO State files checked, reloaded into the running daemon,
or converted from the original framework's form."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: a command loads only what it needs
    pass
from apid.cli.common import CommandFailed, bound_plugins, current_engine, load_config


def cmd_iostate_check(args: argparse.Namespace) -> int:
    from apid.iostate import IOStateError
    from apid.plugin_host.discovery import PluginError, load_all

    config = load_config(args)
    directory = Path(args.directory) if args.directory else config.api.iostate_dir
    try:
        bound = load_all(directory, config.api.security, config.server.load_plugins)
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

    config = load_config(args)
    bound_plugins(config)  # as a daemon loads them: a broken file ends the command, changing nothing
    engine = current_engine(config)
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

    security = load_config(args).api.security
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
