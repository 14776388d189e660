"""The settings a test deployment starts from, written as an operator's etc/ folder, so that
apid's own configuration loader reads them and every setting not chosen has its default.

`InMemoryApid` and `ApidDaemon` (apid.testing) both write theirs here: the `test`
environment on SQLite under the deployment's folder, mail to files, a fresh JWT secret,
webhooks on, cheap password hashes, and the roles of the service_api.yml apid ships.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

ENVIRONMENT = "test"

# The roles of the service_api.yml apid ships; `security` in the API settings replaces them.
SECURITY: Mapping[str, Any] = {
    "superuserRole": "ROLE_ADMIN",
    "userRole": "ROLE_USER",
    "networkGroups": ["open", "public", "private"],
    "networkRoles": {
        "open": ["ROLE_ADMIN", "ROLE_USER", "ROLE_ANONYMOUS"],
        "public": ["ROLE_ADMIN", "ROLE_USER"],
        "private": ["ROLE_ADMIN"],
    },
}
SHIPPED_ROLES = frozenset({"ROLE_ADMIN", "ROLE_USER", "ROLE_ANONYMOUS"})
# Argon2id's costs for test deployments: cheap, as no real password is kept (docs/security.md)
CHEAP_PASSWORDS: Mapping[str, int] = {"timeCost": 1, "memoryCost": 1024, "parallelism": 1}


def write_settings(root: Path, server: Mapping[str, Any], api: Mapping[str, Any]) -> Path:
    """`root`/etc with service_server.yml (its `test` environment: the defaults above, then
    `server` merged over them) and service_api.yml (the roles and an empty IO State folder,
    then `api`'s keys in their place); the folder, for `--config-dir`."""
    etc = root / "etc"
    etc.mkdir(parents=True, exist_ok=True)
    defaults: dict[str, Any] = {
        "webhookActive": True,
        "database": {"url": f"sqlite:///{root / 'var' / 'apid.db'}"},
        "mail": {"backend": "file", "outbox": str(root / "outbox")},
        "jwt": {"secret": secrets.token_urlsafe(48)},
        "accessLog": False,
        # a test's passwords need no protection: a login costs a millisecond, not a sixth of a second
        "passwords": CHEAP_PASSWORDS,
    }
    (root / "var").mkdir(exist_ok=True)
    (root / "iostate").mkdir(exist_ok=True)
    api_settings = {"security": dict(SECURITY), "iostateDir": str(root / "iostate"), **api}
    (etc / "service_server.yml").write_text(yaml.safe_dump({ENVIRONMENT: merged(defaults, server)}), encoding="utf-8")
    (etc / "service_api.yml").write_text(yaml.safe_dump(api_settings), encoding="utf-8")
    return etc


def merged(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """`override` over `base`, mappings merged key by key, anything else replaced."""
    result = dict(base)
    for key, value in override.items():
        inner = result.get(key)
        result[key] = merged(inner, value) if isinstance(inner, Mapping) and isinstance(value, Mapping) else value
    return result
