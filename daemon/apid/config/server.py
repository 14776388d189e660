"""`service_server.yml`, one section per environment: every setting of the process that serves,
declared once as a field of the class that holds it (apid.config.settings says how)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from apid.config.kinds import (
    BASE_URL,
    DATABASE_URL,
    DEFAULT_REACTOR,
    ENDPOINT,
    LISTEN,
    LOG_FORMATS,
    LOOPBACK_LISTEN,
    PEER_URL,
    REACTORS,
    ROLE,
    SECRET,
    TLS_CHOICES,
    TRUSTED_PROXIES,
)
from apid.config.networks import TrustedProxies
from apid.config.plugin_settings import PLUGINS, PluginSections
from apid.config.settings import SECONDS, URL, Derived, Invalid, choice, list_of, section, setting, settings

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
class PasswordsConfig:
    """Argon2id's costs for new password hashes (docs/security.md). A stored hash keeps the costs
    it was made with, so changing them never locks anyone out."""

    time_cost: int = setting("timeCost", default=3, at_least=1, doc="Argon2id passes over the memory.")
    memory_cost: int = setting(
        "memoryCost",
        default=65536,
        at_least=8,
        also="at least 8 × `parallelism`",
        doc="KiB of memory one hash takes.",
    )
    parallelism: int = setting("parallelism", default=4, at_least=1, doc="Argon2id lanes.")

    def conflicts(self, given: frozenset[str]) -> Iterator[Invalid]:
        if self.memory_cost < 8 * self.parallelism:
            yield Invalid(f"must be at least 8 × parallelism ({8 * self.parallelism} KiB)", "memoryCost")


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
class EventsConfig:
    """The live event stream, `GET /events` (docs/events.md): what is kept for clients that come
    back, how each stream is kept alive and bounded, and how often a process looks for changes
    other processes made."""

    enabled: bool = setting(
        "enabled",
        default=True,
        doc="Serve `GET /events` and keep the log of changes it reads (one more row written with every change "
        "of an endpoint whose IO State gives HOOK roles). `false`: `/events` answers 404 and nothing is logged.",
    )
    retention: float = setting(
        "retention",
        default=3600.0,
        above=0,
        doc="Seconds a change stays in the log: a client back with `Last-Event-ID` within this gets what it "
        "missed; later, one `reset` event tells it to reload.",
    )
    retention_count: int = setting(
        "retentionCount",
        default=100_000,
        at_least=1,
        doc="At most this many changes are kept, the newest, however young.",
    )
    heartbeat: float = setting(
        "heartbeat",
        default=15.0,
        above=0,
        doc="Seconds between the comments sent on a stream with nothing to say, so that proxies do not close it "
        "(HAProxy's `timeout tunnel`, nginx's `proxy_read_timeout`: keep this below theirs).",
    )
    poll: float = setting(
        "poll",
        default=0.25,
        above=0,
        doc="Seconds between a process's reads of the log for changes made by the others (worker processes, "
        "daemons on the same database) while it has a stream open. Its own changes go out at once.",
    )
    per_caller: int = setting(
        "perCaller",
        default=5,
        at_least=1,
        doc="Streams one account (or API key) may hold open in one process; one more answers 429.",
    )
    total: int = setting(
        "total",
        default=1000,
        at_least=1,
        doc="Streams one process holds open in all; one more answers 503 with `Retry-After`.",
    )
    buffer: int = setting(
        "buffer",
        default=1000,
        at_least=1,
        doc="Events held for a subscriber that does not read; one more and its stream is cut with a `reset` "
        "event, so that it never slows the others.",
    )
    ticket_lifetime: int = setting(
        "ticketLifetime",
        default=30,
        at_least=1,
        doc="Seconds a ticket from `POST /events/ticket` may open a stream (once), for `EventSource`, which "
        "cannot send an Authorization header.",
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
    passwords: PasswordsConfig = section("passwords")
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
        "command to run. No other command migrates, whatever this says: `apid user add`, `hook`, `key` and "
        "`iostate reload` refuse a database behind the code in the same words.",
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
        doc="The Twisted reactor. `default` is Twisted's reactor for the platform (epoll on Linux), with no "
        "asyncio loop: an action that awaits asyncio answers a 500 problem naming this setting, logged once per "
        "action. `asyncio` is Twisted's AsyncioSelectorReactor on Python's standard event loop: plugin actions "
        "may await asyncio libraries (httpx, aiohttp, asyncpg, redis.asyncio, `asyncio.sleep`) beside apid's "
        "own services ([plugins.md](plugins.md#awaiting-asyncio-libraries)). `uvloop` is the same on "
        "[uvloop](https://github.com/MagicStack/uvloop) (`pip install 'apid[asyncio]'`; without it the start is "
        "refused). The ready line says which runs (`apid ready on ... (..., reactor asyncio on the standard "
        "event loop)`). See [why `default` is the default](#the-reactor).",
    )
    tls: str = setting(
        "tls",
        default="always",
        kind=choice(TLS_CHOICES),
        doc="`always`: every apid process loads TLS and public-key cryptography (pyOpenSSL and cryptography). "
        "`auto`: only when the configuration uses them, that is a TLS `listen` endpoint, an `https` peer in "
        "`servers`, an `https` origin in `cors.allowedOrigins` (webhook URLs), identity providers in "
        "`security.issuers`, `mail.backend: smtp` or `redis.url`; otherwise each process goes without them, "
        "about 12 MiB lighter ([benchmarks.md](benchmarks.md#memory-each-librarys-share-issue-37-item-2)). "
        "A plugin that makes TLS connections through Twisted (treq, Agent) or uses cryptography itself "
        "needs `always` ([plugins.md](plugins.md#when-a-service-you-call-fails)). The shipped "
        "`service_server.yml` sets `auto` for `development` and `test`.",
    )
    metrics: MetricsConfig = section("metrics")
    events: EventsConfig = section("events")
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
    load_plugins: tuple[str, ...] = setting(
        "loadPlugins",
        default=(),
        doc="The plugin distributions to load, by name (`apid-shop`), beside apid's own controllers and "
        "migrations; empty, every one installed. A plugin left out serves nothing and its migrations do not "
        "run: a daemon or a plugin's tests then depend on no other plugin installed beside it. A name no "
        "installed distribution has stops the start.",
    )
    skip_failing_plugins: bool = setting(
        "pluginFailure",
        default=False,
        kind=choice({"stop": False, "skip": True}),
        doc="What a plugin that fails to load does to the start: `stop` refuses to start, naming it; `skip` "
        "leaves it out, logged at `critical` with the same line, and serves the other plugins. It covers a "
        "plugin that cannot be imported or is no controller and one whose IO State is refused; apid's own "
        "controllers, a plugin's settings and a `started()` that fails always stop the start, and a reload "
        "is refused whole, as before.",
    )
    plugins: PluginSections = section(
        "plugins",
        kind=PLUGINS,
        doc="Each plugin's settings, under its controller's name: the keys its controller declares "
        "([plugins.md](plugins.md#settings)), checked when the daemon starts its plugins; see [plugins](#plugins).",
    )
