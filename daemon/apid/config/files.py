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

import ipaddress
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from apid.config.plugin_settings import PLUGINS, PluginSections
from apid.config.settings import (
    STRING,
    ConfigError,
    Derived,
    Invalid,
    Kind,
    Node,
    Reading,
    choice,
    describe,
    list_of,
    per_kind,
    read_file,
    read_section,
    section,
    setting,
    settings,
    under_root,
)
from apid.http.proxies import TrustedProxies, proxy_network

SERVER_FILE = "service_server.yml"
API_FILE = "service_api.yml"
ENVIRONMENTS = ("development", "test", "production")
# The Twisted reactors `reactor` may name; the default is the fastest (docs/configuration.md).
REACTORS = ("default", "asyncio")
DEFAULT_REACTOR = "default"
LOG_FORMATS = ("text", "json")  # apid.server.logs
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
        _ = parts.port  # reading it raises ValueError for a port that is not a number or out of range
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"must be an absolute http:// or https:// URL such as https://api.example.com, got {value!r}")
    return value


def provider_url(value: str) -> str:
    """`value` if it is an https:// URL, or an http:// one on a loopback address (a provider
    on this machine, as the tests run one): an OpenID provider's keys decide who may call
    apid, so they never cross a network in clear text."""
    parts = urlsplit(http_url(value))
    host = parts.hostname or ""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if parts.scheme != "https" and not loopback:
        raise ValueError(
            f"must be an https:// URL (http:// only on a loopback address such as 127.0.0.1), got {value!r}"
        )
    if parts.query or parts.fragment:
        raise ValueError(f"must have no query or fragment, got {value!r}")
    return value


# --- the kinds of value that are apid's own (apid.config.settings has the plain ones) ------------------------


def _url(node: Node, _: Reading) -> str:
    """An absolute http(s) URL: a bare host (`api.example.com`) would make every link built on
    it relative, and so broken, in a mail or a redirect."""
    try:
        return http_url(node.string())
    except ValueError as exc:
        raise node.fail(str(exc)) from None


def _base_url(node: Node, reading: Reading) -> str:
    url = _url(node, reading).rstrip("/")
    if "?" in url or "#" in url:
        raise node.fail(f"must have no query or fragment (links are built on it), got {url!r}")
    return url


def _listen(node: Node, _: Reading) -> str:
    """A `listen` value; YAML reads a bare port (`listen: 8080`) as a number."""
    text = str(node.value) if isinstance(node.value, int) and not isinstance(node.value, bool) else node.string()
    try:
        return listen_endpoint(text)
    except ValueError as exc:
        raise node.fail(str(exc)) from None


def _endpoint(node: Node, reading: Reading) -> str:
    """A `listen` value Twisted can build a server endpoint from, checked now (without a
    reactor): the ports apid opens besides its own must not fail it once it started."""
    from twisted.internet.endpoints import serverFromString

    text = _listen(node, reading)
    if text.startswith("systemd:"):
        raise node.fail("systemd sockets are for the API's listen; give tcp:PORT:interface=ADDR")
    try:
        serverFromString(None, text)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, OSError) as exc:
        raise node.fail(
            f"{exc}; give a port (9464 means tcp:9464:interface=127.0.0.1) "
            "or an endpoint such as tcp:PORT:interface=ADDR"
        ) from None
    return text


def _sqlite_at_root(url: str, reading: Reading) -> str:
    """Anchor a relative SQLite file path at the deployment root."""
    prefix = "sqlite:///"
    if url.startswith(prefix) and not url.startswith(prefix + "/") and url != prefix + ":memory:":
        return prefix + str(under_root(url[len(prefix) :], reading))
    return url


def _secret(node: Node, _: Reading) -> bytes:
    secret = node.string().encode()
    if len(secret) < 32:
        raise node.fail("must be at least 32 bytes long")
    return secret


def _reserved_uris(node: Node, _: Reading) -> frozenset[str]:
    uris = node.strings()
    for index, uri in enumerate(uris):
        if not uri.startswith("/"):
            raise node.child(index, uri).fail("must start with /")
    return frozenset(uri.rstrip("/") or "/" for uri in uris)


def _role_numbers(node: Node, _: Reading) -> dict[str, int]:
    """Each role's number; that each role is a declared one, ApiConfig.conflicts checks."""
    return {role: value.integer(minimum=1) for role, value in node.mapping().items()}


def _network_roles(node: Node, _: Reading) -> dict[str, frozenset[str]]:
    return {group: frozenset(roles.strings()) for group, roles in node.mapping().items()}


def _major_minor(raw: str) -> str | None:
    parts = raw.split(".")
    if len(parts) < 2 or not all(re.fullmatch(r"[0-9]+", part) for part in parts[:2]):
        return None
    return f"{parts[0]}.{parts[1]}"


def _version(node: Node, _: Reading) -> str:
    if isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        raise node.fail(f'must be a quoted string such as "1.10" (YAML read {node.value!r} as a number)')
    if not isinstance(node.value, str):
        raise node.fail(f'must be a quoted string such as "1.10", got {describe(node.value)}')
    version = _major_minor(node.value)
    if version is None:
        raise node.fail(f"must look like MAJOR.MINOR, got {node.value!r}")
    return version


def _installed_version(_: Reading) -> str:
    raw = metadata.version("apid")
    version = _major_minor(raw)
    if version is None:
        raise ConfigError(f"installed apid version: must look like MAJOR.MINOR, got {raw!r}")
    return version


URL = Kind("URL", _url)
BASE_URL = Kind("URL", _base_url)
PEER_URL = Kind("URL", lambda node, reading: _url(node, reading).rstrip("/"))
LISTEN = Kind("port or string", _listen)
ENDPOINT = Kind("port or string", _endpoint)
DATABASE_URL = Kind("string", STRING.read, finish=_sqlite_at_root)
SECRET = Kind("string, at least 32 bytes", _secret)
ROLE = Kind("role", STRING.read)
ROLE_MAP = Kind("role map", _role_numbers)
ORIGINS = Kind("list of strings", lambda node, _: tuple(origin.rstrip("/") for origin in node.strings()))
RESERVED_URIS = Kind("list of strings", _reserved_uris)
NETWORK_ROLES = Kind("mapping group -> list of strings", _network_roles)
VERSION = Kind("quoted string `MAJOR.MINOR`", _version)


def _trusted_proxies(node: Node, _: Reading) -> TrustedProxies:
    entries = node.strings()
    networks = []
    for index, entry in enumerate(entries):
        try:
            networks.append(proxy_network(entry))
        except ValueError as exc:
            raise node.child(index, entry).fail(str(exc)) from None
    return TrustedProxies(tuple(networks))


TRUSTED_PROXIES = Kind(
    "list of IP addresses and CIDR ranges",
    _trusted_proxies,
    show=lambda trusted: f"`{trusted}`" if trusted else "empty",
)


def _seconds(node: Node, _: Reading) -> float:
    """A number of seconds that may be 0 (no wait at all)."""
    if isinstance(node.value, bool) or not isinstance(node.value, (int, float)) or node.value < 0:
        raise node.fail(f"expected a number of seconds, 0 or more, got {describe(node.value)}")
    return float(node.value)


SECONDS = Kind("number ≥ 0", _seconds)


def _issuer(node: Node, _: Reading) -> str:
    try:
        return provider_url(node.string())
    except ValueError as exc:
        raise node.fail(str(exc)) from None


def _claim(node: Node, _: Reading) -> str:
    text = node.string()
    if not all(text.split(".")):
        raise node.fail(f"must be a claim name or a dotted path such as realm_access.roles, got {text!r}")
    return text


def _claim_roles(node: Node, _: Reading) -> dict[str, frozenset[str]]:
    """Claim value -> the roles it grants; each role is checked against networkRoles by
    `SecurityConfig.conflicts`."""
    table = {}
    for value, roles in node.mapping().items():
        table[value] = frozenset((roles.string(),) if isinstance(roles.value, str) else roles.strings())
        if not table[value]:
            raise roles.fail("expected a role or a non-empty list of roles")
    if not table:
        raise node.fail("expected at least one claim value and its roles")
    return table


ISSUER = Kind("URL", _issuer)
CLAIM = Kind("claim name or dotted path", _claim)
CLAIM_ROLES = Kind("mapping value -> role or list of roles", _claim_roles)


# --- service_server.yml, per environment --------------------------------------------------------------


@settings
class PeerServer:
    url: str = setting("url", kind=PEER_URL, doc="Base URL of a peer (trailing `/` removed).")
    timeout: float = setting(
        "timeout",
        derived=Derived("`pingTimeout`", lambda reading: reading.value("pingTimeout")),
        doc="Seconds this peer's whole answer (connect, headers, body) may take.",
    )


@settings
class MailConfig:
    backend: str = setting(
        "backend",
        default="file",
        kind=choice(("file", "smtp")),
        doc="`file` writes one message per file into `outbox`; `smtp` sends through `mail.smtp`.",
    )
    outbox: Path = setting("outbox", default=Path("var/outbox"), doc="Folder for the `file` backend.")
    sender: str = setting(
        "from", default="apid <apid@localhost>", doc="Sender address (an ASCII address, optionally with a name)."
    )
    smtp_host: str = setting("smtp.host", default="localhost", doc="SMTP server.")
    smtp_port: int = setting("smtp.port", default=587, doc="SMTP port.")
    smtp_username: str | None = setting("smtp.username", default=None, doc="SMTP login.")
    smtp_password: str | None = setting("smtp.password", default=None, doc="SMTP password.")
    smtp_starttls: bool = setting("smtp.starttls", default=True, doc="Use STARTTLS.")


@settings
class JwtConfig:
    secret: bytes | None = setting(
        "secret", default=None, kind=SECRET, doc="HS256 signing secret. When set, `secretFile` is not read."
    )
    secret_file: Path = setting(
        "secretFile",
        default=Path("var/jwt.secret"),
        doc="File holding the secret. Created once (mode 0600, 64 random characters) if missing, never "
        "regenerated; must hold at least 32 bytes.",
    )
    issuer: str = setting("issuer", default="apid", doc="`iss` claim written and required.")
    audience: str = setting("audience", default="apid", doc="`aud` claim written and required.")
    access_lifetime: int = setting("accessLifetime", default=900, at_least=1, doc="Seconds an access token is valid.")
    leeway: int = setting(
        "leeway", default=30, doc="Seconds of clock skew tolerated when checking the token's times (`exp`, `iat`)."
    )
    refresh_lifetime: int = setting(
        "refreshLifetime",
        default=14 * 86400,
        at_least=60,
        doc="Seconds a refresh cookie works (its `Max-Age`): 14 days by default.",
    )
    refresh_grace: int = setting(
        "refreshGrace",
        default=10,
        doc="Seconds a rotated refresh cookie still works (for a client that lost an answer); presented "
        "later it revokes the whole login.",
    )


@settings
class AccountsConfig:
    """Lifetimes of the emailed links, where the reset link lands, and whether an owner's new
    e-mail address must confirm before it takes effect (docs/accounts.md)."""

    validation_lifetime: int = setting(
        "validationLifetime", default=86400, at_least=60, doc="Seconds an account validation link works."
    )
    reset_lifetime: int = setting(
        "resetLifetime", default=3600, at_least=60, doc="Seconds a password reset link works."
    )
    reset_url: str = setting(
        "resetUrl",
        kind=URL,
        derived=Derived("`{baseUrl}/reset-password`", lambda reading: reading.value("baseUrl") + "/reset-password"),
        doc="The site's page for choosing a new password: `/validate` redirects a reset link there with "
        "`?id=<id>`. An absolute `http://` or `https://` URL. See [accounts.md](accounts.md).",
    )
    confirm_email_change: bool = setting(
        "confirmEmailChange",
        default=False,
        doc="When `true`, an owner's new e-mail address takes effect only once it confirms by an emailed link "
        "(which works `validationLifetime` seconds). See "
        "[accounts.md](accounts.md#changing-a-password-or-e-mail-address).",
    )
    revert_lifetime: int = setting(
        "revertLifetime",
        default=7 * 86400,
        at_least=60,
        doc="Seconds the link mailed to the old address after an owner's address change works: it puts that "
        "address back, ends every login and leads to the reset page.",
    )


@settings
class WebhooksConfig:
    """How hooks are delivered (docs/webhooks.md)."""

    timeout: float = setting(
        "timeout", default=10.0, doc="Seconds for a whole delivery: connecting, sending, the answer and its body."
    )
    per_host: int = setting(
        "perHost", default=8, at_least=1, doc="Deliveries in flight to one host (scheme, host, port)."
    )
    retry_base: float = setting("retryBase", default=5.0, doc="Seconds before the first retry of a failing hook.")
    retry_factor: float = setting(
        "retryFactor",
        default=6.0,
        above=1,
        doc="Each further failed round multiplies the wait by this (5 s, 30 s, 3 min, 18 min, then `retryMax`), "
        "with jitter.",
    )
    retry_max: float = setting(
        "retryMax", default=3600.0, also="≥ `retryBase`", doc="The longest wait between retries."
    )
    lease: float = setting(
        "lease",
        default=60.0,
        also="≥ 3 × `timeout`",
        doc="Seconds a daemon holds a message it delivers; a crashed daemon's messages are taken over after it.",
    )
    poll: float = setting(
        "poll",
        default=1.0,
        doc="Seconds between looks for due messages (retries, leases run out, other daemons' events).",
    )
    retention_days: int = setting(
        "retentionDays",
        default=30,
        at_least=1,
        doc="Days messages and their delivery log are kept: a delivered one counted from its delivery, a "
        "pending one (a hook disabled or down that long) from when it was recorded.",
    )

    def conflicts(self, given: frozenset[str]) -> Iterator[Invalid]:
        if self.lease < 3 * self.timeout:
            # a delivery may wait for its host's slot behind others: the lease must outlast that
            yield Invalid(
                f"webhooks.lease ({self.lease:g} s) must be at least three times webhooks.timeout ({self.timeout:g} s)",
                "lease",
                "timeout",
            )
        if self.retry_max < self.retry_base and "retryMax" in given:
            yield Invalid(f"must be at least retryBase ({self.retry_base:g} s)", "retryMax")
        elif self.retry_max < self.retry_base:
            yield Invalid(f"must be at most retryMax ({self.retry_max:g} s, its default)", "retryBase")


@settings
class ConnectionLimits:
    """How long a client may take to send one request, and how many connections one client
    address may hold open in one process (docs/configuration.md says why these numbers). Slow
    clients must not hold sockets for free."""

    header_timeout: float = setting(
        "headerTimeout",
        default=10.0,
        doc="Seconds from a request's first byte until its headers must all be in.",
    )
    body_timeout: float = setting(
        "bodyTimeout",
        default=10.0,
        doc="Seconds a request body may take from the end of its headers, whatever its size...",
    )
    body_rate: int = setting(
        "bodyRate",
        default=65536,
        at_least=1024,
        doc="...plus one second per this many bytes of it: of its `Content-Length`, or, for a chunked body, of "
        "what has arrived (a chunked body earns its time as it comes).",
    )
    per_address: int = setting(
        "perAddress",
        default=128,
        at_least=1,
        doc="Connections one client address may hold open **in one process**; one more is closed as soon as it "
        "is accepted, before a byte of it is read, and the first refusal is logged (a warning from `apid.http` "
        "naming the address, once until all its connections have closed). With `procCores` above 1, each worker "
        "counts its own connections, so one address may hold up to `procCores` × `perAddress` in all, depending "
        "on which worker the kernel gives each connection.",
    )

    def body_seconds(self, size: int) -> float:
        """How long a body of `size` bytes may take to arrive."""
        return self.body_timeout + size / self.body_rate


@settings
class ShutdownConfig:
    """How a SIGTERM or SIGINT stops apid: first `/health` fails while everything else is
    still served, so that balancers route away before the port closes; then the port closes
    and the requests in flight finish (docs/operations.md, Rolling restarts, says why these numbers)."""

    health_drain: float = setting(
        "healthDrain",
        kind=SECONDS,
        derived=Derived(
            "`5` in `production`, else `0`", lambda reading: 5.0 if reading.environment == "production" else 0.0
        ),
        doc="Seconds `/health` answers 503 (`draining`) before the port closes, every other call still served. "
        "Longer than your balancer takes to mark a server down: HAProxy with `inter 1s fall 2` takes at most "
        "about 2 s. 0 closes the port at once (a daemon no balancer checks).",
    )
    drain: float = setting(
        "drain",
        default=20.0,
        kind=SECONDS,
        doc="Then, seconds the requests in flight may take to finish once the port is closed: idle keep-alive "
        "connections are closed at once, a busy one gets its answer with `Connection: close`. What is still "
        "running after that is cut. Keep `healthDrain` + `drain` (+ 5 s with worker processes) below systemd's "
        "`TimeoutStopSec` (45 in `etc/apid.service`).",
    )


@settings
class MetricsConfig:
    """Where the metrics are read: `listen`, a port of their own without a token (None: no
    such port), and `role`, whose tokens read them at /metrics on the API's port (None: not there)."""

    listen: str | None = setting(
        "listen",
        default=None,
        kind=ENDPOINT,
        doc="A port of its own answering `GET /metrics` (and 404 to any other path) without a token: whoever "
        "reaches it reads the metrics, so keep it on loopback or a private network. A bare port (`9464`) means "
        "`tcp:9464:interface=127.0.0.1`; anything else is a Twisted server endpoint string, checked when the file "
        "is read (one Twisted cannot use, or a `systemd:` socket, is a configuration error, exit status 2). With "
        "worker processes the parent listens here and answers for all of them.",
    )
    role: str | None = setting(
        "role",
        default=None,
        kind=ROLE,
        doc="A role of `security.networkRoles` whose tokens may read `GET /metrics` on the API's own port: "
        "without a token 401, with a token of other roles 403 (problems). It counts against the caller's rate "
        "limit like any call. Unset, the API's port has no `/metrics`.",
    )


@settings
class ServerConfig:
    environment: str
    webhook_active: bool = setting(
        "webhookActive",
        default=False,
        doc="Record and deliver webhook events; see [webhooks.md](webhooks.md). Off, nothing is recorded or sent.",
    )
    webhooks: WebhooksConfig = section("webhooks")
    api_throttle: bool = setting(
        "apiThrottle",
        default=False,
        doc="Turns per-role rate limiting on; see [rate-limiting.md](rate-limiting.md).",
    )
    listen: str = setting(
        "listen",
        default=LOOPBACK_LISTEN.format(port=8080),
        kind=LISTEN,
        env="APID_LISTEN",
        option="--listen",
        doc="Where apid listens. A bare port (`8081`, here or in `APID_LISTEN` or `--listen`) is that port on "
        "loopback only, `tcp:8081:interface=127.0.0.1`: exposing apid to the network is a decision to write out "
        "(`tcp:8080:interface=0.0.0.0`, or a reverse proxy in front). Anything else is a Twisted server endpoint "
        "string, checked by `apid serve` before anything starts (one Twisted cannot use stops it with exit status "
        "2). For `tcp:` and `tcp6:`, `:backlog=1024` is added unless a backlog is given. Use "
        "`systemd:domain=INET:name=http` with `etc/apid.socket` ([operations.md](operations.md#socket-activation)). "
        "`haproxy:` before any of these (`haproxy:tcp:8080:interface=127.0.0.1`, "
        "`haproxy:systemd:domain=INET:index=0`) reads the PROXY protocol (v1 and v2) a proxy sends before each "
        "connection, with any `procCores`; see `trustedProxies`.",
    )
    trusted_proxies: TrustedProxies = setting(
        "trustedProxies",
        default=TrustedProxies(),
        kind=TRUSTED_PROXIES,
        doc="The reverse proxies in front of apid: IP addresses and CIDR ranges, IPv4 or IPv6 (`127.0.0.1`, "
        "`10.0.0.0/8`, `fd00::/8`). Only a peer listed here is believed when its `X-Forwarded-For` (else "
        "`Forwarded`) names the client and `X-Forwarded-Proto` (or `proto=`) the scheme: the client is the first "
        "hop from the right that is not listed. Everything per client address then counts that client (abuse "
        "limits, the anonymous role's rate limit, the access log, a plugin's `Caller.address`), and the "
        "connections of a listed peer are not capped by `connections.perAddress` (a proxy carries many clients' "
        "requests). From any other peer these headers are ignored. On a `haproxy:` port, a non-empty list also "
        "closes connections from peers not listed before reading them: nobody else may name a client in a PROXY "
        "header. Empty trusts nobody. See [operations.md](operations.md#behind-a-proxy).",
    )
    base_url: str = setting(
        "baseUrl",
        default="http://127.0.0.1:8080",
        kind=BASE_URL,
        doc="Trailing `/` removed. The public address of the API: the links in validation and reset emails are "
        "`{baseUrl}/validate?id=...`. An absolute `http://` or `https://` URL with a host (`api.example.com` alone "
        "is refused: every mailed link would be broken), without a query or fragment.",
    )
    home_url: str = setting(
        "homeUrl",
        kind=URL,
        derived=Derived("`baseUrl` + `/`", lambda reading: reading.value("baseUrl") + "/"),
        doc="Where `/validate` redirects once an account is validated. An absolute `http://` or `https://` URL.",
    )
    accounts: AccountsConfig = section("accounts")
    secure_cookies: bool = setting(
        "secureCookies",
        derived=Derived("`false` in `development`, else `true`", lambda reading: reading.environment != "development"),
        doc="Mark the refresh cookie `Secure` (sent over HTTPS only).",
    )
    database_url: str = setting(
        "database.url",
        default="sqlite:///var/apid.db",
        kind=DATABASE_URL,
        env="APID_DATABASE_URL",
        doc="SQLAlchemy URL. A relative SQLite path resolves against the deployment root. PostgreSQL: "
        "`postgresql+psycopg://user:pass@host/db` (install `apid[postgresql]`).",
    )
    database_pool_size: int = setting(
        "database.poolSize", default=4, at_least=1, doc="Connection pool size and number of database threads."
    )
    migrate_on_start: bool = setting(
        "database.migrate",
        default=True,
        doc="`apid serve` brings the schema up to date before listening: apid's, then every installed plugin's "
        "([plugins.md](plugins.md#tables-and-migrations)). With `false`, run `apid migrate` yourself: `serve` "
        "then refuses to start (exit status 1) while any migration is pending, naming the schemas behind and the "
        "command to run.",
    )
    redis_url: str | None = setting(
        "redis.url",
        default=None,
        env="APID_REDIS_URL",
        doc="`redis://host:port/db`; none keeps the counts in each process. When set, the rate-limit counts "
        "(with `apiThrottle`) and the abuse-limit counts of logins, registrations and reset requests (always) "
        "live there, shared by every daemon; one connection pool serves both. Revoked tokens are shared through "
        "the database.",
    )
    redis_fail_open: bool = setting(
        "redis.onFailure",
        default=True,
        kind=choice({"open": True, "closed": False}),
        doc="When Redis cannot be reached: `open` lets calls and logins through uncounted, `closed` answers 503 "
        "with `Retry-After: 5`, logins, registrations and reset requests included. No call waits for a Redis "
        "known to be down: after a failure (refused, lost, or no answer within 2 s) calls fail at once while "
        "apid probes Redis through a new connection pool (after 0.5, 1 and 2 s, then every 4 s); with `closed`, "
        "`/health` fails meanwhile; the outage is logged when it starts and when it ends "
        "([operations.md](operations.md#outages)).",
    )
    mail: MailConfig = section("mail")
    jwt: JwtConfig = section("jwt")
    servers: tuple[PeerServer, ...] = setting(
        "servers",
        default=(),
        kind=list_of(PeerServer, "peers", shorthand="url"),
        doc="Peer API servers, asked by `GET /v{app}/server/pingServers/` "
        "([operations.md](operations.md#server-ping)); see [servers](#servers).",
    )
    ping_timeout: float = setting("pingTimeout", default=2.0, doc="Seconds; default timeout of each `servers` entry.")
    access_log: bool = setting(
        "accessLog",
        default=True,
        doc="Log one `apid.access` event per request (client, method, URI, status, bytes, request id; in JSON "
        "also path, endpoint and duration).",
    )
    reactor: str = setting(
        "reactor",
        default=DEFAULT_REACTOR,
        kind=choice(REACTORS),
        option="--reactor",
        doc="The Twisted reactor. `default` is Twisted's for the platform (epoll on Linux). `asyncio` is Twisted's "
        "AsyncioSelectorReactor, on [uvloop](https://github.com/MagicStack/uvloop) when it is installed "
        "(`pip install 'apid[asyncio]'`) and on Python's standard event loop otherwise: plugin actions may then "
        "await asyncio libraries (httpx, aiohttp, asyncpg, redis.asyncio, `asyncio.sleep`) beside apid's own "
        "services ([plugins.md](plugins.md#awaiting-asyncio-libraries)). Under `default`, an action that awaits "
        "asyncio answers a 500 problem naming this setting, logged once per action. The ready line says which "
        "runs (`apid ready on ... (..., reactor asyncio on uvloop)`). See [why `default` is the "
        "default](#the-reactor).",
    )
    metrics: MetricsConfig = section("metrics")
    log_format: str = setting(
        "logFormat",
        default="text",
        kind=choice(LOG_FORMATS),
        doc="How the log on standard error is written: text lines, or one JSON object per line per event "
        "(`level`, `time`, `namespace`, `message` and the event's fields) for journald, Loki or Elasticsearch; see "
        "[operations.md](operations.md#metrics-and-logs).",
    )
    connections: ConnectionLimits = section("connections")
    shutdown: ShutdownConfig = section("shutdown")
    plugins: PluginSections = section(
        "plugins",
        kind=PLUGINS,
        doc="Each plugin's settings, under its controller's name: the keys its controller declares "
        "([plugins.md](plugins.md#settings)), checked when the daemon starts its plugins; see [plugins](#plugins).",
    )


# --- service_api.yml, shared ----------------------------------------------------------------------------


@settings
class ThrottleConfig:
    rate_limit: Mapping[str, int] = setting(
        "rateLimit",
        default={},
        kind=ROLE_MAP,
        doc="Requests per user per day, by role (the largest of the user's ruled roles applies).",
    )
    data_limit: Mapping[str, int] = setting(
        "dataLimit",
        default={},
        kind=ROLE_MAP,
        doc="MB per role. Accepted and validated; has no effect, as the specification says.",
    )
    expires: int = setting(
        "expires", default=3600, at_least=1, doc="Seconds a user stays locked once the limit is reached."
    )


@settings
class IssuerConfig:
    """An OpenID provider whose access tokens apid accepts, and what their claims grant
    (docs/accounts.md, Signing in with your identity provider)."""

    issuer: str = setting(
        "issuer",
        kind=ISSUER,
        doc="The provider's issuer, exactly as its tokens' `iss` and its discovery document "
        "(`{issuer}/.well-known/openid-configuration`) give it: https, or http on a loopback address only.",
    )
    audience: str = setting(
        "audience",
        doc="The `aud` its tokens must hold: Keycloak's client id (or an audience mapper's value), Entra ID's "
        "application ID URI or client id.",
    )
    claim: str = setting(
        "claim",
        kind=CLAIM,
        doc="The claim whose values map to roles: a name (`groups`, `roles`, `scope`) or a dotted path "
        "(`realm_access.roles`), holding a list of strings or a string of space-separated values.",
    )
    roles: Mapping[str, frozenset[str]] = setting(
        "roles",
        kind=CLAIM_ROLES,
        doc="Claim value -> an apid role or a list of roles, each in `security.networkRoles`. A token whose values "
        "map to no role is refused (401).",
    )
    keys_refresh: float = setting(
        "keysRefresh",
        default=60.0,
        doc="Seconds at least between two fetches of the provider's keys: a token naming a key apid does not hold "
        "(the provider rotated its keys, or the token is forged) fetches them at most this often.",
    )
    keys_lifetime: float = setting(
        "keysLifetime",
        default=3600.0,
        also="at least `keysRefresh`",
        doc="Seconds the keys fetched are used before they are fetched again, so that a key the provider withdrew "
        "stops being trusted (while the provider cannot be reached, the keys held go on serving). Also how long the "
        "API keys of the provider's accounts last after the provider last vouched (a token of the subject admitted).",
    )

    def roles_of(self, claims: Mapping[str, Any]) -> frozenset[str]:
        """The roles `claims` grant: those of each string value at the claim's path."""
        value: Any = claims
        for name in self.claim.split("."):
            value = value.get(name) if isinstance(value, dict) else None
        values = value.split() if isinstance(value, str) else value if isinstance(value, list) else ()
        return frozenset().union(*(self.roles.get(each, ()) for each in values if isinstance(each, str)))

    def conflicts(self, given: frozenset[str]) -> Iterator[Invalid]:
        if self.keys_lifetime < self.keys_refresh:
            yield Invalid("must be at least keysRefresh", "keysLifetime", "keysRefresh")


@settings
class SecurityConfig:
    superuser_role: str = setting(
        "superuserRole",
        doc="The role that marks a caller as superuser (`Caller.is_superuser` for plugins; `person` lets a "
        "superuser reach any record). Must be in some group.",
    )
    user_role: str = setting(
        "userRole",
        doc="The role `person/create` gives a new account when no `roles` are sent. Must be in some group.",
    )
    # the role of a caller without a token: endpoints whose roles include it answer anonymously
    anonymous_role: str = setting(
        "anonymousRole",
        default="ROLE_ANONYMOUS",
        doc="The role of a request without a token (the original framework's `anonRole`): an endpoint whose IO "
        "State roles include it answers such requests with that role's fields; every other endpoint answers them "
        "401 ([iostate.md](iostate.md#calls-without-a-token-the-anonymous-role)). Its `throttle.rateLimit` entry "
        "limits each client address. When set, it must be in some group; it may not be `superuserRole` or "
        "`userRole`.",
    )
    network_groups: tuple[str, ...] = setting(
        "networkGroups", doc="The network groups an IO State file may name in `NETWORKGRP`."
    )
    network_roles: Mapping[str, frozenset[str]] = setting(
        "networkRoles",
        kind=NETWORK_ROLES,
        doc="The roles of each group. Every group here must be in `networkGroups`, and every group of "
        "`networkGroups` needs a list here. The union of all lists is the set of known roles (checked by "
        "`apid user add --role`, by `throttle` and by the `person` controller). Every role an IO State file names "
        "must be in its group's list.",
    )
    issuers: tuple[IssuerConfig, ...] = setting(
        "issuers",
        default=(),
        kind=list_of(IssuerConfig, "providers"),
        doc="OpenID providers whose access tokens apid accepts beside its own, each token acting as its subject's "
        "own account (made on its first call); see "
        "[accounts.md](accounts.md#signing-in-with-your-identity-provider).",
    )
    ipv6_prefix: int = setting(
        "ipv6Prefix",
        default=64,
        at_least=1,
        also="at most 128",
        doc="How many leading bits of an IPv6 client address make one client for every per-address limit (the "
        "abuse limits of logins, registrations and reset requests, and `connections.perAddress`): one host "
        "usually holds a whole /64 and may send from any address in it. 128 counts each address alone. IPv4 "
        "addresses count one by one.",
    )
    local_logins: bool = setting(
        "localLogins",
        default=True,
        doc="`false` switches password accounts off: `/authenticate`, `/refreshToken`, `/logout`, `/register`, "
        "`/validate`, `/forgotPassword`, `/validateResetPassword` and `/resetPassword` are not served (404), "
        "callers sign in with a provider of `issuers`, and the access tokens and API keys of accounts without a "
        "provider identity are refused (401).",
    )
    api_keys_per_account: int = setting(
        "apiKeysPerAccount",
        default=20,
        at_least=1,
        doc="How many API keys one account may hold at once (revoked and expired keys do not count): "
        "`apikey/create` past it answers 409. See [accounts.md](accounts.md#api-keys).",
    )

    @property
    def all_roles(self) -> frozenset[str]:
        return frozenset().union(*self.network_roles.values())

    def conflicts(self, given: frozenset[str]) -> Iterator[Invalid]:
        for group in self.network_roles:
            if group not in self.network_groups:
                yield Invalid(f"group {group!r} is not listed in security.networkGroups", ("networkRoles", group))
        for group in self.network_groups:
            if group not in self.network_roles:
                yield Invalid(f"group {group!r} has no role list", "networkRoles")
        if self.ipv6_prefix > 128:
            yield Invalid("must be at most 128 (the bits of an IPv6 address)", "ipv6Prefix")
        for key, role in (("superuserRole", self.superuser_role), ("userRole", self.user_role)):
            if role not in self.all_roles:
                yield Invalid(f"role {role!r} is in no group of networkRoles", key)
            if role == self.anonymous_role:
                yield Invalid(f"role {role!r} is the anonymous role: every caller without a token would hold it", key)
        if "anonymousRole" in given and self.anonymous_role not in self.all_roles:
            yield Invalid(f"role {self.anonymous_role!r} is in no group of networkRoles", "anonymousRole")
        seen: set[str] = set()
        for index, issuer in enumerate(self.issuers):
            if issuer.issuer in seen:
                yield Invalid(f"issuers[{index}]: {issuer.issuer} is listed twice", "issuers")
            seen.add(issuer.issuer)
            for value, roles in issuer.roles.items():
                for role in sorted(roles - self.all_roles):
                    yield Invalid(
                        f"issuers[{index}].roles: role {role!r} (for {value!r}) is in no group of networkRoles",
                        "issuers",
                    )


@settings
class AbuseLimit:
    """At most `per_address` attempts from one client address, `per_account` for one account
    name and, where set (logins), `per_account_address` for one account name from one
    address, within `window` seconds."""

    per_address: int = setting(
        "perAddress",
        at_least=1,
        doc="Attempts allowed from one client address per window, for all names together.",
    )
    per_account: int = setting(
        "perAccount",
        at_least=1,
        doc="Attempts allowed for one account name (username, or the email for `register` and `reset`) per "
        "window, from all addresses together.",
    )
    window: int = setting("window", at_least=1, doc="Seconds of a window; it starts with the first attempt it counts.")
    per_account_address: int | None = setting(
        "perAccountAddress",
        default=None,
        at_least=1,
        doc="Failed logins allowed for one username from one client address per window.",
    )


@settings
class ApiConfig:
    reserved_uris: frozenset[str] = setting(
        "reservedUris",
        default=frozenset(),
        kind=RESERVED_URIS,
        doc="Public paths: a public route (the account endpoints of [accounts.md](accounts.md), `/health`, "
        "`/error`, and a plugin's `@route` paths) whose path is listed answers without a token; one not listed "
        "needs `Authorization: Bearer`. Each must start with `/`; a trailing `/` is ignored. API calls (`/v`, "
        "`/b`, `/c`) always need a token, listed or not. Keep `/authenticate` listed, or nobody can log in. "
        "`/openapi.json` listed answers a caller without a token the OpenAPI document of the public endpoints; "
        "not listed, it needs a token ([api-docs.md](api-docs.md#openapijson)). A route whose path ends in a "
        "variable part is public when the fixed part before it is listed: `/docs/assets` covers every file of "
        "the docs page ([api-docs.md](api-docs.md#the-docs-page)).",
    )
    throttle: ThrottleConfig = section("throttle")
    attempts: int = setting(
        "attempts",
        default=5,
        at_least=1,
        doc="Consecutive failed retry rounds after which a hook is disabled (deliveries in flight together fail "
        "as one round; with the default retries, 11 to 22 minutes of failures); see [webhooks.md](webhooks.md).",
    )
    proc_cores: int = setting(
        "procCores",
        default=8,
        at_least=1,
        doc="Worker processes serving the one listening socket, capped at the CPUs apid may run on (`nproc`: "
        "taskset and cgroup limits count); `1` is a single process. Above 1, `apid serve` is a parent that "
        "migrates, binds the socket and starts the workers; see [operations.md](operations.md#worker-processes).",
    )
    iostate_dir: Path = setting(
        "iostateDir",
        default=Path("iostate"),
        doc="Folder of IO State files that override the ones plugins ship; see [iostate.md](iostate.md). A "
        "missing folder counts as empty.",
    )
    batch_limit: int = setting(
        "batchLimit",
        default=100,
        at_least=1,
        doc="Most elements in one batch call (`/b...`); more is a 413, refused before anything is charged to the "
        "rate limit. See [batch-and-chain.md](batch-and-chain.md).",
    )
    chain_limit: int = setting(
        "chainLimit",
        default=10,
        at_least=2,
        doc="Most links in one chain call (`/c...`), the path's endpoint included; more is a 422 "
        "(`rule: chain-limit`), refused before anything is charged.",
    )
    max_body_bytes: int = setting(
        "maxBodyBytes",
        default=1048576,
        at_least=1024,
        doc="Largest request body in bytes; a bigger one is answered 413 as soon as its headers say so, or a "
        "chunked one passes the limit, before it is read (see [errors.md](errors.md#the-http-layer)).",
    )
    security: SecurityConfig = section("security", required=True)
    allowed_origins: tuple[str, ...] = setting(
        "cors.allowedOrigins",
        default=(),
        kind=ORIGINS,
        doc="Origins (trailing `/` removed) whose browsers may call apid; see "
        "[links-and-cors.md](links-and-cors.md). A webhook's URL must be on one of these origins, checked when "
        "the hook is saved and before every delivery.",
    )
    version: str = setting(
        "api.version",
        kind=VERSION,
        derived=Derived("`MAJOR.MINOR` of the installed `apid` distribution (`0.1` for 0.1.0)", _installed_version),
        doc="The application version every API path carries (`/v0.1/...`, `/b0.1/...`, `/c0.1/...`). Parts after "
        'the second are dropped (`"1.2.3"` gives `1.2`). It must be quoted: an unquoted `1.10` is refused with '
        '`api.version: must be a quoted string such as "1.10" (YAML read 1.1 as a number)`.',
    )
    # A login is limited hardest per (account, address), so that guessing from one address locks
    # only that pair and not the account's owner elsewhere; the whole account and the address
    # get the wider limits that a distributed guess or a credential-stuffing run would cross
    # (docs/accounts.md says why these numbers).
    abuse: Mapping[str, AbuseLimit] = section(
        "abuseLimits",
        kind=per_kind(
            AbuseLimit,
            login={"perAccountAddress": 5, "perAccount": 100, "perAddress": 50, "window": 900},
            register={"perAddress": 20, "perAccount": 5, "window": 900},
            reset={"perAddress": 20, "perAccount": 5, "window": 900},
        ),
        doc="Limits on failed logins, registrations and reset requests; see [abuseLimits](#abuselimits).",
    )

    def conflicts(self, given: frozenset[str]) -> Iterator[Invalid]:
        for key, numbers in (("rateLimit", self.throttle.rate_limit), ("dataLimit", self.throttle.data_limit)):
            for role in numbers:
                if role not in self.security.all_roles:
                    yield Invalid(f"role {role!r} is not in security.networkRoles", ("throttle", key, role))


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
