"""The two configuration files, read once at start into frozen typed values.

`service_server.yml` holds one section per environment; `service_api.yml` holds what every
environment shares. Each setting is declared once, below, as a field of the class that holds
it: key, type, default, bounds and the description docs/configuration.md shows (apid.config.settings
says how, and reads them all). Every key is checked: an unknown key, a wrong type or a missing
value stops the daemon with a `ConfigError` naming the file, the line and the key.
Relative paths are resolved against the deployment root, the parent of the config folder,
so `etc/` beside `iostate/` and `var/` works from any working directory.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from apid.config.api import ApiConfig
from apid.config.kinds import API_FILE, ENVIRONMENTS, SERVER_FILE
from apid.config.nodes import ConfigError, Reading, read_file
from apid.config.server import ServerConfig
from apid.config.settings import read_section


@dataclass(frozen=True)
class Config:
    server: ServerConfig
    api: ApiConfig
    root: Path = field(compare=False)


# Each file's settings, as docs/configuration.md's tables show them (scripts/sync-settings).
DOCUMENTED: Mapping[str, type] = {SERVER_FILE: ServerConfig, API_FILE: ApiConfig}


# --- reading ---------------------------------------------------------------------------------------------


def load_server(path: Path, environment: str, root: Path, env: Mapping[str, str]) -> ServerConfig:
    """The chosen environment's settings; every section is validated, so a typo in
    `production` stops a development start too instead of waiting for the deploy."""
    top = read_file(path)
    if environment not in ENVIRONMENTS:
        raise top.fail(f"unknown environment {environment!r}; choose one of {', '.join(ENVIRONMENTS)}")
    sections = top.mapping(ENVIRONMENTS)
    configs = {
        name: read_section(
            ServerConfig, sections.get(name) or top.child(name, {}), Reading(root, env, name), environment=name
        )
        for name in ENVIRONMENTS
    }
    return configs[environment]


def load_api(path: Path, root: Path) -> ApiConfig:
    return read_section(ApiConfig, read_file(path), Reading(root, {}))


def load(
    config_dir: Path | None = None,
    environment: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Config:
    """Read both files; the command line beats the environment, which beats the files."""
    env = os.environ if env is None else env
    config_dir = (config_dir or Path(env.get("APID_CONFIG_DIR") or "etc")).resolve()
    root = config_dir.parent
    environment = environment or env.get("APID_ENV") or "development"
    for name in (SERVER_FILE, API_FILE):
        if not (config_dir / name).exists():
            # The usual cause: apid run outside the deployment (or checkout) whose etc/ it needs.
            raise ConfigError(
                f"{config_dir / name}: cannot read: No such file or directory; name the folder holding "
                f"{SERVER_FILE} and {API_FILE} with --config-dir or APID_CONFIG_DIR "
                "(default: etc in the current directory)"
            )
    server = load_server(config_dir / SERVER_FILE, environment, root, env)
    api = load_api(config_dir / API_FILE, root)
    if server.metrics.role is not None and server.metrics.role not in api.security.all_roles:
        raise ConfigError(
            f"{config_dir / SERVER_FILE}: {environment}.metrics.role: role {server.metrics.role!r} "
            f"is not in security.networkRoles ({API_FILE})"
        )
    if any(issuer.issuer == server.jwt.issuer for issuer in api.security.issuers):
        raise ConfigError(
            f"{config_dir / API_FILE}: security.issuers: {server.jwt.issuer!r} is apid's own issuer "
            f"(jwt.issuer, {SERVER_FILE})"
        )
    return Config(server=server, api=api, root=root)
