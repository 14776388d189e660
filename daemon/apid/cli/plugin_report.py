"""What `apid routes` prints: every endpoint of the installed plugins, with who may call it."""

from __future__ import annotations

import json

from apid.plugin_host.discovery import Bound


def dump_routes(bound: Bound, version: str, reserved_uris: frozenset[str]) -> list[str]:
    """One line per endpoint, for `apid routes`: IO State endpoints with their roles, then the
    plugins' `@route` paths, public when in reservedUris, else for any logged-in caller and
    rate limited like an API call."""
    rules = bound.rules
    lines = []
    for controller in rules.controllers.values():
        for api in controller.versions.values():
            for endpoint in api.endpoints.values():
                suffix = "" if api.name == controller.current_stable else f"-{api.name}"
                lines.append(
                    f"{endpoint.method:6} /v{version}{suffix}/{endpoint.path}  "
                    f"roles={json.dumps(sorted(endpoint.roles))} batch={json.dumps(sorted(endpoint.batch_roles))}"
                )
    for _name, loaded in sorted(bound.controllers.items()):
        for path, method in sorted(loaded.cls.routes().values()):
            access = "public" if (path.rstrip("/") or "/") in reserved_uris else "needs a token, rate limited"
            lines.append(f"{method:6} {path}  route of {loaded.plugin.label}: {access}")
    return lines
