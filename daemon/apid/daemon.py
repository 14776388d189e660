"""Assembling and running the daemon: storage, plugins, the application, the listening port.

Start order matters: the database is migrated and reachable and every plugin is bound to
valid IO State before the port listens; only then the ready line and systemd's READY=1.
On SIGTERM the port closes first, in-flight requests finish (up to a cap), then the pools.
"""

from __future__ import annotations

import gc
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass

import txredisapi
from twisted.internet import defer
from twisted.internet.endpoints import serverFromString
from twisted.internet.interfaces import IListeningPort, IStreamServerEndpoint
from twisted.internet.task import deferLater
from twisted.protocols.policies import WrappingFactory
from twisted.internet.threads import deferToThread
from twisted.logger import Logger

from apid.accounts import Accounts
from apid.app import Application, plugin_routes
from apid.auth.endpoints import ServiceEndpoints
from apid.auth.limits import AbuseLimiter, MemoryWindows, RedisWindows
from apid.auth.login import SessionEndpoints
from apid.auth.passwords import Passwords
from apid.auth.registration import AccountEndpoints
from apid.auth.sessions import Revocations
from apid.auth.standing import Standings
from apid.auth.tokens import TokenService, load_secret
from apid.batch import BatchRunner
from apid.chain import ChainRunner
from apid.config import Config, ConfigError
from apid.cors import Cors
from apid.docspage import DocsPage
from apid.hooks.delivery import Deliverer
from apid.hooks.events import AccountEvents, EventRecorder
from apid.hooks.service import Hooks
from apid.hooks.worker import DeliveryWorker
from apid.http import ApidSite
from apid.mail import Outbox, make_mailer
from apid.openapi import OpenApiDocuments, document_settings
from apid.ping import PeerPinger
from apid.pipeline import Pipeline, filter_output
from apid.plugin import Services
from apid.iostate import IOStateError
from apid.plugins import PluginError, RuleBook, load_all
from apid.store.database import Database, make_engine
from apid.store.redis import redis_pool
from apid.throttle import MemoryCounters, RateLimiter, RedisCounters
from apid.store.migrate import ensure_sqlite_folder, upgrade

log = Logger(namespace="apid.daemon")

DRAIN_SECONDS = 20.0


def with_backlog(listen: str) -> str:
    """Twisted's default TCP backlog is 50, too small under load: ask for 1024 unless set."""
    if listen.split(":", 1)[0] in ("tcp", "tcp6") and "backlog=" not in listen:
        return listen + ":backlog=1024"
    return listen


def server_endpoint(reactor, listen: str) -> IStreamServerEndpoint:
    """The endpoint `listen` describes, built before anything starts: a description Twisted
    cannot use, or a systemd socket that was not passed, is a configuration error (exit 2)."""
    try:
        return serverFromString(reactor, with_backlog(listen))
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, OSError) as exc:
        error = exc
    if listen.startswith("systemd:") and isinstance(error, (KeyError, IndexError)):
        reason = (f"systemd passed no such socket ({error}); start apid through its .socket unit, "
                  "or try it with systemd-socket-activate (docs/operations.md)")
    else:
        reason = (f"{error}; give a port (8080 means tcp:8080:interface=127.0.0.1) "
                  "or an endpoint such as tcp:PORT:interface=ADDR")
    raise ConfigError(f"listen {listen!r}: {reason}")


def notify_systemd(message: str) -> None:
    """sd_notify: one datagram to $NOTIFY_SOCKET, when running under systemd."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return
    if address.startswith("@"):
        address = "\0" + address[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.connect(address)
        sock.sendall(message.encode())


@dataclass
class Running:
    port: IListeningPort
    site: ApidSite
    connections: WrappingFactory
    db: Database
    passwords: Passwords
    rule_book: RuleBook
    revocations: Revocations
    outbox: Outbox
    pinger: PeerPinger
    redis: txredisapi.ConnectionHandler | None
    deliveries: DeliveryWorker | None


def describe(port: IListeningPort) -> str:
    host = port.getHost()
    if hasattr(host, "port"):
        name = f"[{host.host}]" if ":" in host.host else host.host
        return f"http://{name}:{host.port}"
    return str(getattr(host, "name", host))


async def start(reactor, config: Config, endpoint: IStreamServerEndpoint) -> Running:
    """Bring everything up and listen; raises (and leaves nothing running) if any step fails."""
    server, api = config.server, config.api
    secret = await deferToThread(load_secret, server.jwt)
    docs_page = await deferToThread(DocsPage)  # reads and compresses the viewer's files
    engine = make_engine(server.database_url, server.database_pool_size)
    if server.migrate_on_start:
        ensure_sqlite_folder(server.database_url)
        await deferToThread(upgrade, engine)
    bound = await deferToThread(load_all, api.iostate_dir, api.security)
    rule_book = RuleBook(bound, api.iostate_dir, api.security)

    db = Database(reactor, engine, server.database_pool_size)
    passwords = Passwords(reactor, threads=max(1, os.cpu_count() or 1))
    standings = Standings(reactor, db)
    revocations = Revocations(reactor, db, standings, server.jwt.access_lifetime + server.jwt.leeway)
    accounts = Accounts(reactor, db, passwords, revocations)
    pinger = PeerPinger(reactor, server.servers)
    deliveries = webhook_delivery(reactor, config, db)
    hooks = Hooks(db, api.allowed_origins, lambda: rule_book.current, deliveries.wake if deliveries else None)
    services = Services(db=db, accounts=accounts, security=api.security, pinger=pinger, hooks=hooks,
                        rules=lambda: rule_book.current, version=api.version)
    controllers = {name: loaded.cls(services) for name, loaded in bound.controllers.items()}
    tokens = TokenService(server.jwt, secret, time.time)
    redis = redis_pool(server.redis_url) if server.redis_url else None  # one pool, shared
    limiter = abuse_limiting(reactor, config, redis)
    outbox = Outbox(make_mailer(server.mail, reactor), reactor)
    events = EventRecorder(reactor, db, filter_output, deliveries.wake) if deliveries else None
    account_events = AccountEvents(
        lambda: rule_book.current, filter_output, time.time, lambda: reactor.callFromThread(deliveries.wake),
    ) if deliveries else None
    pipeline = Pipeline(lambda: rule_book.current, controllers, api.security.superuser_role, events, db)
    public_routes = [
        *ServiceEndpoints(api.version).routes(),
        *docs_page.routes(),
        *SessionEndpoints(accounts, tokens, db, revocations, standings, limiter, server.jwt, server.secure_cookies).routes(),
        *AccountEndpoints(db, passwords, outbox, revocations, limiter, server.accounts, server.base_url,
                          server.home_url, api.security.user_role, account_events).routes(),
        *plugin_routes(controllers, api.security.superuser_role),
    ]
    rate_limiter = rate_limiting(reactor, config, redis)
    application = Application(
        version=api.version,
        reserved_uris=api.reserved_uris,
        tokens=tokens,
        revocations=revocations,
        standings=standings,
        pipeline=pipeline,
        batch=BatchRunner(pipeline, api.batch_limit),
        chain=ChainRunner(pipeline, api.chain_limit),
        public_routes=public_routes,
        rate_limiter=rate_limiter,
        openapi=OpenApiDocuments(
            lambda: rule_book.current, document_settings(config, bound.controllers.values())).document,
    )
    db.start()
    passwords.start()
    try:
        await revocations.start()
        site = ApidSite(Cors(application.resource(), api.allowed_origins), api.max_body_bytes, server.access_log)
        connections = WrappingFactory(site)
        connections.noisy = False
        port = await endpoint.listen(connections)
    except BaseException:
        revocations.stop()
        db.stop()
        passwords.stop()
        if redis is not None:
            redis.disconnect()  # stops its reconnecting; nothing waits on the Deferred
        raise
    if deliveries is not None:
        deliveries.start()
    return Running(port=port, site=site, connections=connections, db=db, passwords=passwords,
                   rule_book=rule_book, revocations=revocations, outbox=outbox, pinger=pinger, redis=redis,
                   deliveries=deliveries)


def webhook_delivery(reactor, config: Config, db: Database) -> DeliveryWorker | None:
    """The delivery worker when webhookActive is on; without it nothing is recorded or sent."""
    if not config.server.webhook_active:
        return None
    settings = config.server.webhooks
    deliverer = Deliverer(reactor, config.api.allowed_origins, settings.timeout, settings.per_host)
    return DeliveryWorker(reactor, db, deliverer, settings, config.api.attempts)


def rate_limiting(reactor, config: Config, redis: txredisapi.ConnectionHandler | None) -> RateLimiter | None:
    """The rate limiter when apiThrottle is on: counting in Redis when redis.url is set."""
    if not config.server.api_throttle:
        return None
    store = RedisCounters(redis, reactor) if redis is not None else MemoryCounters(reactor)
    throttle = config.api.throttle
    return RateLimiter(store, throttle.rate_limit, throttle.expires, config.server.redis_fail_open)


def abuse_limiting(reactor, config: Config, redis: txredisapi.ConnectionHandler | None) -> AbuseLimiter:
    """The limits on logins, registrations and reset requests: counting in Redis when
    redis.url is set (whatever apiThrottle says), so that every daemon shares them."""
    store = RedisWindows(redis, reactor) if redis is not None else MemoryWindows(reactor)
    return AbuseLimiter(store, config.api.abuse, config.server.redis_fail_open)


async def reload_rules(rule_book: RuleBook) -> None:
    """Re-read the IO State files (in a thread) and swap them in, or keep the last good set."""
    notify_systemd("RELOADING=1")
    try:
        rules = await deferToThread(rule_book.read)
    except (IOStateError, PluginError) as exc:
        log.error("IO State reload refused, the rules in force stay: {error}", error=str(exc))
    else:
        rule_book.swap(rules)
        log.info("IO State reloaded: {count} controllers", count=len(rules.controllers))
    notify_systemd("READY=1")


async def stop(reactor, running: Running) -> None:
    """Stop listening, let in-flight requests finish, close the connections once their
    answers are written, then close the pools; all within DRAIN_SECONDS."""
    notify_systemd("STOPPING=1")
    await running.port.stopListening()
    deadline = reactor.seconds() + DRAIN_SECONDS

    async def until(done) -> None:
        while not done() and reactor.seconds() < deadline:
            await deferLater(reactor, 0.05, lambda: None)

    await until(lambda: running.site.in_flight.count == 0)
    for connection in list(running.connections.protocols):
        connection.transport.loseConnection()  # writes what is buffered, then closes
    await until(lambda: not running.connections.protocols)
    await until(lambda: not running.outbox.pending)
    if running.deliveries is not None:
        await running.deliveries.stop(deadline)
    running.revocations.stop()
    await running.pinger.close()
    if running.redis is not None:
        await running.redis.disconnect()
    running.db.stop()
    running.passwords.stop()
    log.info("apid stopped")


def serve(config: Config) -> int:
    """Run the daemon until SIGTERM or SIGINT; the exit status tells whether it started."""
    from twisted.internet import reactor

    outcome = {"status": 0}

    async def begin() -> None:
        try:
            running = await start(reactor, config, endpoint)
        except Exception as exc:
            print(f"apid: cannot start: {exc}", file=sys.stderr, flush=True)
            outcome["status"] = 1
            reactor.stop()
            return
        reactor.addSystemEventTrigger("before", "shutdown", lambda: defer.ensureDeferred(stop(reactor, running)))
        signal.signal(
            signal.SIGHUP,
            lambda *_: reactor.callFromThread(lambda: defer.ensureDeferred(reload_rules(running.rule_book))),
        )
        # Everything loaded at start lives as long as the process: move it out of the
        # collector's sight, so full collections scan only what serving creates.
        gc.freeze()
        print(
            f"apid ready on {describe(running.port)} "
            f"(environment {config.server.environment}, API version {config.api.version})",
            flush=True,
        )
        notify_systemd("READY=1\nSTATUS=serving")

    endpoint = server_endpoint(reactor, config.server.listen)  # a bad `listen` ends here, exit 2
    reactor.callWhenRunning(lambda: defer.ensureDeferred(begin()))
    reactor.run()
    return outcome["status"]
