"""The two configuration files, read once at start into frozen typed values.

`service_server.yml` holds one section per environment; `service_api.yml` holds what every
environment shares. Every key is checked: an unknown key, a wrong type or a missing value
stops the daemon with a `ConfigError` naming the file and the key.
Relative paths are resolved against the deployment root, the parent of the config folder,
so `etc/` beside `iostate/` and `var/` works from any working directory.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import yaml

SERVER_FILE = "service_server.yml"
API_FILE = "service_api.yml"
ENVIRONMENTS = ("development", "test", "production")

T = TypeVar("T")


class ConfigError(Exception):
    """A configuration file is missing, unreadable or holds a value that is not allowed."""


@dataclass(frozen=True)
class PeerServer:
    url: str
    timeout: float


@dataclass(frozen=True)
class MailConfig:
    backend: str
    outbox: Path
    sender: str
    smtp_host: str
    smtp_port: int
    smtp_username: str | None
    smtp_password: str | None
    smtp_starttls: bool


@dataclass(frozen=True)
class JwtConfig:
    secret: bytes | None
    secret_file: Path
    issuer: str
    audience: str
    access_lifetime: int
    leeway: int
    refresh_lifetime: int
    refresh_grace: int


@dataclass(frozen=True)
class AccountsConfig:
    """Lifetimes of the emailed links, where the reset link lands, and whether an owner's new
    e-mail address must confirm before it takes effect (docs/accounts.md)."""

    validation_lifetime: int
    reset_lifetime: int
    reset_url: str
    confirm_email_change: bool = False
    revert_lifetime: int = 7 * 86400


@dataclass(frozen=True)
class WebhooksConfig:
    """How hooks are delivered: `timeout` bounds a whole delivery, `per_host` the deliveries
    in flight to one host, `retry_base` x `retry_factor`^n up to `retry_max` the backoff after
    a failure, `lease`
    how long a claimed delivery is this daemon's before another may take it over."""

    timeout: float
    per_host: int
    retry_base: float
    retry_factor: float
    retry_max: float
    lease: float
    poll: float
    retention_days: int


@dataclass(frozen=True)
class ConnectionLimits:
    """How long a client may take to send one request, and how many connections one client
    address may hold open in one process (`connections` in service_server.yml; the defaults
    and why: docs/configuration.md). Slow clients must not hold sockets for free."""

    header_timeout: float = 10.0  # seconds from a request's first byte to the end of its headers
    body_timeout: float = 10.0  # seconds from the end of the headers for any body...
    body_rate: int = 65536  # ...plus one second per this many bytes of it (declared, or received if chunked)
    per_address: int = 128

    def body_seconds(self, size: int) -> float:
        """How long a body of `size` bytes may take to arrive."""
        return self.body_timeout + size / self.body_rate


@dataclass(frozen=True)
class MetricsConfig:
    """Where the metrics are read: `listen`, a port of their own without a token (None: no
    such port), and `role`, whose tokens read them at /metrics on the API's port (None: not there)."""

    listen: str | None
    role: str | None


@dataclass(frozen=True)
class ServerConfig:
    environment: str
    webhook_active: bool
    webhooks: WebhooksConfig
    api_throttle: bool
    listen: str
    base_url: str
    home_url: str
    accounts: AccountsConfig
    secure_cookies: bool
    database_url: str
    database_pool_size: int
    migrate_on_start: bool
    redis_url: str | None
    redis_fail_open: bool
    mail: MailConfig
    jwt: JwtConfig
    servers: tuple[PeerServer, ...]
    ping_timeout: float
    access_log: bool
    reactor: str  # one of REACTORS (apid.reactors)
    metrics: MetricsConfig
    log_format: str  # one of LOG_FORMATS
    connections: ConnectionLimits


@dataclass(frozen=True)
class ThrottleConfig:
    rate_limit: Mapping[str, int]
    data_limit: Mapping[str, int]
    expires: int


@dataclass(frozen=True)
class SecurityConfig:
    superuser_role: str
    user_role: str
    network_groups: tuple[str, ...]
    network_roles: Mapping[str, frozenset[str]]
    # the role of a caller without a token: endpoints whose roles include it answer anonymously
    anonymous_role: str = "ROLE_ANONYMOUS"

    @property
    def all_roles(self) -> frozenset[str]:
        return frozenset().union(*self.network_roles.values())


@dataclass(frozen=True)
class AbuseLimit:
    """At most `per_address` attempts from one client address, `per_account` for one account
    name and, where set (logins), `per_account_address` for one account name from one
    address, within `window` seconds."""

    per_address: int
    per_account: int
    window: int
    per_account_address: int | None = None


@dataclass(frozen=True)
class ApiConfig:
    reserved_uris: frozenset[str]
    throttle: ThrottleConfig
    attempts: int
    proc_cores: int
    iostate_dir: Path
    batch_limit: int
    chain_limit: int
    max_body_bytes: int
    security: SecurityConfig
    allowed_origins: tuple[str, ...]
    version: str
    abuse: Mapping[str, AbuseLimit]


@dataclass(frozen=True)
class Config:
    server: ServerConfig
    api: ApiConfig
    root: Path = field(compare=False)


class _Node:
    """A value read from a YAML file, with the path that names it in error messages."""

    def __init__(self, value: Any, file: str, path: str) -> None:
        self.value = value
        self.file = file
        self.path = path

    def fail(self, message: str) -> ConfigError:
        return ConfigError(f"{self.file}: {self.path or '(top level)'}: {message}")

    def child(self, key: str, value: Any) -> _Node:
        joined = f"{self.path}{key}" if key.startswith("[") else f"{self.path}.{key}" if self.path else key
        return _Node(value, self.file, joined)

    def mapping(self, allowed: tuple[str, ...] | None = None) -> dict[str, _Node]:
        if self.value is None:
            return {}
        if not isinstance(self.value, dict):
            raise self.fail(f"expected a mapping, got {_kind(self.value)}")
        out = {}
        for key, value in self.value.items():
            if not isinstance(key, str):
                raise self.fail(f"keys must be strings, got {key!r}")
            if allowed is not None and key not in allowed:
                raise self.child(key, value).fail(f"unknown key; allowed here: {', '.join(allowed)}")
            out[key] = self.child(key, value)
        return out

    def string(self) -> str:
        if not isinstance(self.value, str) or not self.value:
            raise self.fail(f"expected a non-empty string, got {_kind(self.value)}")
        return self.value

    def boolean(self) -> bool:
        if not isinstance(self.value, bool):
            raise self.fail(f"expected true or false, got {_kind(self.value)}")
        return self.value

    def integer(self, minimum: int = 0) -> int:
        if isinstance(self.value, bool) or not isinstance(self.value, int):
            raise self.fail(f"expected a whole number, got {_kind(self.value)}")
        if self.value < minimum:
            raise self.fail(f"must be at least {minimum}, got {self.value}")
        return self.value

    def number(self, minimum: float = 0.0) -> float:
        if isinstance(self.value, bool) or not isinstance(self.value, (int, float)):
            raise self.fail(f"expected a number, got {_kind(self.value)}")
        if self.value <= minimum:
            raise self.fail(f"must be greater than {minimum}, got {self.value}")
        return float(self.value)

    def strings(self) -> tuple[str, ...]:
        if not isinstance(self.value, list):
            raise self.fail(f"expected a list of strings, got {_kind(self.value)}")
        return tuple(self.child(f"[{i}]", v).string() for i, v in enumerate(self.value))

    def url(self) -> str:
        """An absolute http(s) URL: a bare host (`api.example.com`) would make every link
        built on it relative, and so broken, in a mail or a redirect."""
        try:
            return http_url(self.string())
        except ValueError as exc:
            raise self.fail(str(exc)) from None

    def listen(self) -> str:
        """A `listen` value; YAML reads a bare port (`listen: 8080`) as a number."""
        if isinstance(self.value, int) and not isinstance(self.value, bool):
            text = str(self.value)
        else:
            text = self.string()
        try:
            return listen_endpoint(text)
        except ValueError as exc:
            raise self.fail(str(exc)) from None

    def endpoint(self) -> str:
        """A `listen` value Twisted can build a server endpoint from, checked now (without a
        reactor): the ports apid opens besides its own must not fail it once it started."""
        from twisted.internet.endpoints import serverFromString

        text = self.listen()
        if text.startswith("systemd:"):
            raise self.fail("systemd sockets are for the API's listen; give tcp:PORT:interface=ADDR")
        try:
            serverFromString(None, text)
        except (ValueError, TypeError, KeyError, IndexError, AttributeError, OSError) as exc:
            raise self.fail(
                f"{exc}; give a port (9464 means tcp:9464:interface=127.0.0.1) "
                "or an endpoint such as tcp:PORT:interface=ADDR"
            ) from None
        return text


LOOPBACK_LISTEN = "tcp:{port}:interface=127.0.0.1"


def listen_endpoint(value: str) -> str:
    """The Twisted endpoint a `listen` value names. A bare port means that port on loopback
    only (the safe default: exposing apid is a decision, `tcp:PORT` or `interface=0.0.0.0`);
    any other value is an endpoint string that `apid serve` checks when it builds the endpoint."""
    text = value.strip()
    if re.fullmatch(r"[0-9]+", text):
        port = int(text)
        if port > 65535:
            raise ValueError(f"port {port} is out of range 0-65535")
        return LOOPBACK_LISTEN.format(port=port)
    return text


def http_url(value: str) -> str:
    """`value` if it is an absolute http:// or https:// URL with a host and a valid port."""
    try:
        parts = urlsplit(value)
        parts.port  # reading it raises ValueError for a port that is not a number or out of range
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"must be an absolute http:// or https:// URL such as https://api.example.com, got {value!r}")
    return value


def _kind(value: Any) -> str:
    if value is None:
        return "nothing"
    return f"{type(value).__name__} {value!r}"


def _get(section: dict[str, _Node], key: str, read: Callable[[_Node], T], default: T) -> T:
    node = section.get(key)
    return default if node is None else read(node)


def _require(section: dict[str, _Node], owner: _Node, key: str, read: Callable[[_Node], T]) -> T:
    node = section.get(key)
    if node is None:
        raise owner.child(key, None).fail("is required")
    return read(node)


def _overridden(env: Mapping[str, str], name: str, value: T) -> T | str:
    """The environment variable if set (and not empty), else the file's already-checked value."""
    return env.get(name) or value


def _path(root: Path, value: str) -> Path:
    path = Path(value).expanduser()
    return path if path.is_absolute() else root / path


def _read_yaml(path: Path) -> _Node:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text: {exc}") from exc
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    return _Node(value, str(path), "")


def _sqlite_url(root: Path, url: str) -> str:
    """Anchor a relative SQLite file path at the deployment root."""
    prefix = "sqlite:///"
    if url.startswith(prefix) and not url.startswith(prefix + "/") and url != prefix + ":memory:":
        return prefix + str(_path(root, url[len(prefix) :]))
    return url


def _peer(node: _Node, default_timeout: float) -> PeerServer:
    if isinstance(node.value, str):
        return PeerServer(url=node.url().rstrip("/"), timeout=default_timeout)
    section = node.mapping(("url", "timeout"))
    url = _require(section, node, "url", _Node.url).rstrip("/")
    return PeerServer(url=url, timeout=_get(section, "timeout", _Node.number, default_timeout))


def _mail(node: _Node | None, root: Path) -> MailConfig:
    section = node.mapping(("backend", "outbox", "from", "smtp")) if node else {}
    backend = _get(section, "backend", _Node.string, "file")
    if backend not in ("file", "smtp"):
        raise section["backend"].fail(f"must be file or smtp, got {backend!r}")
    smtp_node = section.get("smtp")
    smtp = smtp_node.mapping(("host", "port", "username", "password", "starttls")) if smtp_node else {}
    return MailConfig(
        backend=backend,
        outbox=_path(root, _get(section, "outbox", _Node.string, "var/outbox")),
        sender=_get(section, "from", _Node.string, "apid <apid@localhost>"),
        smtp_host=_get(smtp, "host", _Node.string, "localhost"),
        smtp_port=_get(smtp, "port", _Node.integer, 587),
        smtp_username=_get(smtp, "username", _Node.string, None),
        smtp_password=_get(smtp, "password", _Node.string, None),
        smtp_starttls=_get(smtp, "starttls", _Node.boolean, True),
    )


def _jwt(node: _Node | None, root: Path) -> JwtConfig:
    section = (
        node.mapping(
            (
                "secret",
                "secretFile",
                "issuer",
                "audience",
                "accessLifetime",
                "leeway",
                "refreshLifetime",
                "refreshGrace",
            )
        )
        if node
        else {}
    )
    secret = _get(section, "secret", _Node.string, None)
    if secret is not None and len(secret.encode()) < 32:
        raise section["secret"].fail("must be at least 32 bytes long")
    return JwtConfig(
        secret=secret.encode() if secret is not None else None,
        secret_file=_path(root, _get(section, "secretFile", _Node.string, "var/jwt.secret")),
        issuer=_get(section, "issuer", _Node.string, "apid"),
        audience=_get(section, "audience", _Node.string, "apid"),
        access_lifetime=_get(section, "accessLifetime", lambda n: n.integer(minimum=1), 900),
        leeway=_get(section, "leeway", _Node.integer, 30),
        refresh_lifetime=_get(section, "refreshLifetime", lambda n: n.integer(minimum=60), 14 * 86400),
        refresh_grace=_get(section, "refreshGrace", _Node.integer, 10),
    )


def _accounts(node: _Node | None, base_url: str) -> AccountsConfig:
    keys = ("validationLifetime", "resetLifetime", "resetUrl", "confirmEmailChange", "revertLifetime")
    section = node.mapping(keys) if node else {}
    return AccountsConfig(
        validation_lifetime=_get(section, "validationLifetime", lambda n: n.integer(minimum=60), 86400),
        reset_lifetime=_get(section, "resetLifetime", lambda n: n.integer(minimum=60), 3600),
        reset_url=_get(section, "resetUrl", _Node.url, base_url + "/reset-password"),
        confirm_email_change=_get(section, "confirmEmailChange", _Node.boolean, False),
        revert_lifetime=_get(section, "revertLifetime", lambda n: n.integer(minimum=60), 7 * 86400),
    )


def _webhooks(node: _Node | None) -> WebhooksConfig:
    keys = ("timeout", "perHost", "retryBase", "retryFactor", "retryMax", "lease", "poll", "retentionDays")
    section = node.mapping(keys) if node else {}
    timeout = _get(section, "timeout", _Node.number, 10.0)
    lease = _get(section, "lease", _Node.number, 60.0)
    if lease < 3 * timeout:
        # a delivery may wait for its host's slot behind others: the lease must outlast that
        raise (section.get("lease") or section["timeout"]).fail(
            f"webhooks.lease ({lease:g} s) must be at least three times webhooks.timeout ({timeout:g} s)"
        )
    retry_base = _get(section, "retryBase", _Node.number, 5.0)
    retry_max = _get(section, "retryMax", _Node.number, 3600.0)
    if retry_max < retry_base:
        raise section["retryMax"].fail(f"must be at least retryBase ({retry_base:g} s)")
    return WebhooksConfig(
        timeout=timeout,
        per_host=_get(section, "perHost", lambda n: n.integer(minimum=1), 8),
        retry_base=retry_base,
        retry_factor=_get(section, "retryFactor", lambda n: n.number(minimum=1.0), 6.0),
        retry_max=retry_max,
        lease=lease,
        poll=_get(section, "poll", _Node.number, 1.0),
        retention_days=_get(section, "retentionDays", lambda n: n.integer(minimum=1), 30),
    )


def _connections(node: _Node | None) -> ConnectionLimits:
    section = node.mapping(("headerTimeout", "bodyTimeout", "bodyRate", "perAddress")) if node else {}
    defaults = ConnectionLimits()
    return ConnectionLimits(
        header_timeout=_get(section, "headerTimeout", _Node.number, defaults.header_timeout),
        body_timeout=_get(section, "bodyTimeout", _Node.number, defaults.body_timeout),
        body_rate=_get(section, "bodyRate", lambda n: n.integer(minimum=1024), defaults.body_rate),
        per_address=_get(section, "perAddress", lambda n: n.integer(minimum=1), defaults.per_address),
    )


SERVER_KEYS = (
    "webhookActive",
    "webhooks",
    "apiThrottle",
    "listen",
    "baseUrl",
    "homeUrl",
    "accounts",
    "secureCookies",
    "database",
    "redis",
    "mail",
    "jwt",
    "servers",
    "pingTimeout",
    "accessLog",
    "reactor",
    "metrics",
    "logFormat",
    "connections",
)
# The Twisted reactors `reactor` may name; the default is the fastest (docs/configuration.md).
REACTORS = ("default", "asyncio")
DEFAULT_REACTOR = "default"
LOG_FORMATS = ("text", "json")  # apid.logs


def load_server(path: Path, environment: str, root: Path, env: Mapping[str, str]) -> ServerConfig:
    """The chosen environment's settings; every section is validated, so a typo in
    `production` stops a development start too instead of waiting for the deploy."""
    top = _read_yaml(path)
    if environment not in ENVIRONMENTS:
        raise top.fail(f"unknown environment {environment!r}; choose one of {', '.join(ENVIRONMENTS)}")
    sections = top.mapping(ENVIRONMENTS)
    configs = {
        name: _server_section(sections.get(name) or top.child(name, {}), name, root, env) for name in ENVIRONMENTS
    }
    return configs[environment]


def _server_section(node: _Node, environment: str, root: Path, env: Mapping[str, str]) -> ServerConfig:
    section = node.mapping(SERVER_KEYS)
    database = section["database"].mapping(("url", "poolSize", "migrate")) if "database" in section else {}
    redis = section["redis"].mapping(("url", "onFailure")) if "redis" in section else {}
    on_failure = _get(redis, "onFailure", _Node.string, "open")
    if on_failure not in ("open", "closed"):
        raise redis["onFailure"].fail(f"must be open or closed, got {on_failure!r}")
    ping_timeout = _get(section, "pingTimeout", _Node.number, 2.0)
    reactor = _get(section, "reactor", _Node.string, DEFAULT_REACTOR)
    if reactor not in REACTORS:
        raise section["reactor"].fail(f"must be {' or '.join(REACTORS)}, got {reactor!r}")
    log_format = _get(section, "logFormat", _Node.string, "text")
    if log_format not in LOG_FORMATS:
        raise section["logFormat"].fail(f"must be {' or '.join(LOG_FORMATS)}, got {log_format!r}")
    metrics = section["metrics"].mapping(("listen", "role")) if "metrics" in section else {}
    servers = section["servers"] if "servers" in section else None
    if servers is not None and not isinstance(servers.value, list):
        raise servers.fail(f"expected a list of peers, got {_kind(servers.value)}")
    base_url = _get(section, "baseUrl", _Node.url, "http://127.0.0.1:8080").rstrip("/")
    if "?" in base_url or "#" in base_url:
        raise section["baseUrl"].fail(f"must have no query or fragment (links are built on it), got {base_url!r}")
    listen = _get(section, "listen", _Node.listen, LOOPBACK_LISTEN.format(port=8080))
    if env.get("APID_LISTEN"):
        try:
            listen = listen_endpoint(env["APID_LISTEN"])
        except ValueError as exc:
            raise ConfigError(f"APID_LISTEN (or --listen): {exc}") from None

    return ServerConfig(
        environment=environment,
        webhook_active=_get(section, "webhookActive", _Node.boolean, False),
        webhooks=_webhooks(section.get("webhooks")),
        api_throttle=_get(section, "apiThrottle", _Node.boolean, False),
        listen=listen,
        base_url=base_url,
        home_url=_get(section, "homeUrl", _Node.url, base_url + "/"),
        accounts=_accounts(section.get("accounts"), base_url),
        secure_cookies=_get(section, "secureCookies", _Node.boolean, environment != "development"),
        database_url=_sqlite_url(
            root, _overridden(env, "APID_DATABASE_URL", _get(database, "url", _Node.string, "sqlite:///var/apid.db"))
        ),
        database_pool_size=_get(database, "poolSize", lambda n: n.integer(minimum=1), 4),
        migrate_on_start=_get(database, "migrate", _Node.boolean, True),
        redis_url=_overridden(env, "APID_REDIS_URL", _get(redis, "url", _Node.string, None)),
        redis_fail_open=on_failure == "open",
        mail=_mail(section.get("mail"), root),
        jwt=_jwt(section.get("jwt"), root),
        servers=tuple(
            _peer(servers.child(f"[{i}]", v), ping_timeout) for i, v in enumerate(servers.value if servers else ())
        ),
        ping_timeout=ping_timeout,
        access_log=_get(section, "accessLog", _Node.boolean, True),
        reactor=reactor,
        metrics=MetricsConfig(
            listen=_get(metrics, "listen", _Node.endpoint, None),
            role=_get(metrics, "role", _Node.string, None),
        ),
        log_format=log_format,
        connections=_connections(section.get("connections")),
    )


API_KEYS = (
    "reservedUris",
    "throttle",
    "attempts",
    "procCores",
    "iostateDir",
    "batchLimit",
    "chainLimit",
    "maxBodyBytes",
    "security",
    "cors",
    "api",
    "abuseLimits",
)
ABUSE_KINDS = ("login", "register", "reset")
# Per kind, the keys it accepts and their defaults (docs/accounts.md says why these numbers).
# A login is limited hardest per (account, address), so that guessing from one address locks
# only that pair and not the account's owner elsewhere; the whole account and the address
# get the wider limits that a distributed guess or a credential-stuffing run would cross.
ABUSE_DEFAULTS = {
    "login": {"perAccountAddress": 5, "perAccount": 100, "perAddress": 50, "window": 900},
    "register": {"perAddress": 20, "perAccount": 5, "window": 900},
    "reset": {"perAddress": 20, "perAccount": 5, "window": 900},
}


def _abuse(node: _Node | None) -> dict[str, AbuseLimit]:
    """Limits on logins, registrations and reset requests (each kind on its own)."""
    kinds = node.mapping(ABUSE_KINDS) if node else {}
    limits = {}
    for kind, defaults in ABUSE_DEFAULTS.items():
        section = kinds[kind].mapping(tuple(defaults)) if kind in kinds else {}

        def count(key: str) -> int | None:
            return _get(section, key, lambda n: n.integer(minimum=1), defaults.get(key))

        limits[kind] = AbuseLimit(
            per_address=count("perAddress"),
            per_account=count("perAccount"),
            window=count("window"),
            per_account_address=count("perAccountAddress"),
        )
    return limits


def _role_numbers(node: _Node | None, roles: frozenset[str]) -> dict[str, int]:
    if node is None:
        return {}
    out = {}
    for role, value in node.mapping().items():
        if role not in roles:
            raise value.fail(f"role {role!r} is not in security.networkRoles")
        out[role] = value.integer(minimum=1)
    return out


def _security(node: _Node) -> SecurityConfig:
    section = node.mapping(("superuserRole", "userRole", "anonymousRole", "networkGroups", "networkRoles"))
    groups = _require(section, node, "networkGroups", _Node.strings)
    roles_node = _require(section, node, "networkRoles", lambda n: n)
    network_roles = {}
    for group, roles in roles_node.mapping().items():
        if group not in groups:
            raise roles.fail(f"group {group!r} is not listed in security.networkGroups")
        network_roles[group] = frozenset(roles.strings())
    for group in groups:
        if group not in network_roles:
            raise roles_node.fail(f"group {group!r} has no role list")
    security = SecurityConfig(
        superuser_role=_require(section, node, "superuserRole", _Node.string),
        user_role=_require(section, node, "userRole", _Node.string),
        network_groups=groups,
        network_roles=network_roles,
        anonymous_role=_get(section, "anonymousRole", _Node.string, "ROLE_ANONYMOUS"),
    )
    for key, role in (("superuserRole", security.superuser_role), ("userRole", security.user_role)):
        if role not in security.all_roles:
            raise section[key].fail(f"role {role!r} is in no group of networkRoles")
        if role == security.anonymous_role:
            raise section[key].fail(f"role {role!r} is the anonymous role: every caller without a token would hold it")
    if "anonymousRole" in section and security.anonymous_role not in security.all_roles:
        raise section["anonymousRole"].fail(f"role {security.anonymous_role!r} is in no group of networkRoles")
    return security


def _app_version(configured: str | None, node: _Node | None) -> str:
    """`major.minor` of the application: the configured one, else the installed build's."""
    raw = configured if configured is not None else metadata.version("apid")
    parts = raw.split(".")
    if len(parts) < 2 or not all(re.fullmatch(r"[0-9]+", p) for p in parts[:2]):
        message = f"must look like MAJOR.MINOR, got {raw!r}"
        raise node.fail(message) if node else ConfigError(f"installed apid version: {message}")
    return f"{parts[0]}.{parts[1]}"


def load_api(path: Path, root: Path) -> ApiConfig:
    top = _read_yaml(path)
    section = top.mapping(API_KEYS)
    security = _security(_require(section, top, "security", lambda n: n))
    roles = security.all_roles

    throttle_node = section.get("throttle")
    throttle = throttle_node.mapping(("rateLimit", "dataLimit", "expires")) if throttle_node else {}
    cors = section["cors"].mapping(("allowedOrigins",)) if "cors" in section else {}
    api = section["api"].mapping(("version",)) if "api" in section else {}
    version_node = api.get("version")
    if version_node is not None and not isinstance(version_node.value, str):
        raise version_node.fail(
            f'must be a quoted string such as "1.10" (YAML read {version_node.value!r} as a number)'
        )

    reserved = _get(section, "reservedUris", _Node.strings, ())
    for index, uri in enumerate(reserved):
        if not uri.startswith("/"):
            raise section["reservedUris"].child(f"[{index}]", uri).fail("must start with /")

    return ApiConfig(
        reserved_uris=frozenset(uri.rstrip("/") or "/" for uri in reserved),
        throttle=ThrottleConfig(
            rate_limit=_role_numbers(throttle.get("rateLimit"), roles),
            data_limit=_role_numbers(throttle.get("dataLimit"), roles),
            expires=_get(throttle, "expires", lambda n: n.integer(minimum=1), 3600),
        ),
        attempts=_get(section, "attempts", lambda n: n.integer(minimum=1), 5),
        proc_cores=_get(section, "procCores", lambda n: n.integer(minimum=1), 8),
        iostate_dir=_path(root, _get(section, "iostateDir", _Node.string, "iostate")),
        batch_limit=_get(section, "batchLimit", lambda n: n.integer(minimum=1), 100),
        chain_limit=_get(section, "chainLimit", lambda n: n.integer(minimum=2), 10),
        max_body_bytes=_get(section, "maxBodyBytes", lambda n: n.integer(minimum=1024), 1048576),
        security=security,
        allowed_origins=tuple(o.rstrip("/") for o in _get(cors, "allowedOrigins", _Node.strings, ())),
        version=_app_version(version_node.value if version_node else None, version_node),
        abuse=_abuse(section.get("abuseLimits")),
    )


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
                f"{SERVER_FILE} and {API_FILE} with --config-dir or APID_CONFIG_DIR (default: etc in the current directory)"
            )
    server = load_server(config_dir / SERVER_FILE, environment, root, env)
    api = load_api(config_dir / API_FILE, root)
    if server.metrics.role is not None and server.metrics.role not in api.security.all_roles:
        raise ConfigError(
            f"{config_dir / SERVER_FILE}: {environment}.metrics.role: role {server.metrics.role!r} "
            f"is not in security.networkRoles ({API_FILE})"
        )
    return Config(server=server, api=api, root=root)
