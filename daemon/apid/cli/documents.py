"""`apid routes`, `apid openapi` and `apid new-plugin`: what the deployment serves, printed, and a
new plugin written from the template."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: a command loads only what it needs
    from apid.plugin_host.scaffold import PluginNames
from apid.cli.common import CommandFailed, bound_plugins, load_config


def cmd_routes(args: argparse.Namespace) -> int:
    from apid.cli.plugin_report import dump_routes

    config = load_config(args)
    for line in dump_routes(bound_plugins(config), config.api.version, config.api.reserved_uris):
        print(line)
    return 0


def cmd_openapi(args: argparse.Namespace) -> int:
    """The OpenAPI document of the given roles (none: the endpoints that need no token), as
    `/openapi.json` would answer it, from the installed plugins and the IO State files."""
    import json

    from apid.openapi.document import anonymous_view, build, document_settings
    from apid.openapi.view import api_view
    from apid.server.service_endpoints import public_paths

    config = load_config(args)
    roles = frozenset(args.role or ())
    unknown = sorted(roles - config.api.security.all_roles)
    if unknown:
        print(
            f"apid: unknown role {unknown[0]}; known roles: {', '.join(sorted(config.api.security.all_roles))}",
            file=sys.stderr,
        )
        return 2
    bound = bound_plugins(config)
    settings = document_settings(
        config, bound.controllers.values(), fixed=public_paths(config), server_url=config.server.base_url
    )
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
    written.append(target / _first_revision(names, target).relative_to(target.resolve()))
    for path in written:
        print(f"wrote {path}")
    print(f"\nnext: pip install -e '{target}[test]' && apid migrate && (cd {target} && pytest)")
    return 0


def _first_revision(names: PluginNames, target: Path) -> Path:
    """The new plugin's first revision, generated from its `store.py` as `apid migrate --generate`
    generates the next ones (against an empty database), so that the two cannot differ."""
    import sys
    import tempfile

    from apid.plugin_host.migrations import MigrationSource
    from apid.store.database import make_engine
    from apid.store.migrate import generate

    sys.path.insert(0, str(target))
    try:
        source = MigrationSource.from_package(names.branch, f"{names.package}.migrations", names.distribution)
        with tempfile.TemporaryDirectory() as empty:
            engine = make_engine(f"sqlite:///{Path(empty) / 'new.db'}")
            try:
                return generate(engine, source, names.controller)
            finally:
                engine.dispose()
    finally:
        sys.path.remove(str(target))
        for module in [name for name in sys.modules if name.partition(".")[0] == names.package]:
            del sys.modules[module]
