"""Starting and running the daemon: storage, plugins, the application (wired by
`apid.server.assembly`, as the testing kit wires it), the listening port.

Start order matters: the database is migrated and reachable, every plugin is bound to
valid IO State and has started (`Controller.started`, apid.plugin_host.lifecycle) before the port
listens; only then the ready line and systemd's READY=1. On SIGTERM /health fails first
while everything else is served (`shutdown.healthDrain`), then the port closes, in-flight
requests finish (up to `shutdown.drain`), the plugins stop (`Controller.stopping`), then the
pools (`apid.server.shutdown` says why in that order).

A daemon holds only what its configuration uses: the migration runs in a child process
(`apid.server.migration_child`), and Redis's client, the webhook worker, the metrics and SMTP
are imported where they are set up, when the configuration asks for them.
"""

from __future__ import annotations

import gc
import os
import signal
from dataclasses import dataclass
from typing import TYPE_CHECKING

from twisted.internet import defer
from twisted.internet.interfaces import IListeningPort, IStreamServerEndpoint
from twisted.internet.threads import deferToThread
from twisted.logger import Logger

from apid.auth.passwords import Passwords
from apid.auth.sessions import Revocations
from apid.auth.tokens import load_secret
from apid.config.files import Config
from apid.http.proxies import client_endpoint, socket_listen
from apid.http.site import ApidSite, OpenConnections
from apid.mail.outbox import MailSender
from apid.openapi.docs_page import DocsPage
from apid.plugin_host.discovery import load_all
from apid.plugin_host.lifecycle import PluginLifecycle
from apid.plugin_host.rules import RuleBook
from apid.runtime.coroutines import end_tasks
from apid.runtime.reactors import Reactor, installed
from apid.server.assembly import assemble
from apid.server.listening import describe, server_endpoint
from apid.server.metrics import listen_metrics
from apid.server.migration_child import MigrationChild
from apid.server.peers import PeerPinger
from apid.server.reloading import LOAD_ERRORS, RulesWatcher, announce_reload, process_name, read_generation
from apid.server.shutdown import Shutdown, close_after_answers, stop_on_signals
from apid.server.systemd import KeepAlive, reloaded, reloading, watchdog_seconds
from apid.server.systemd import notify as notify_systemd
from apid.store.database import Database, make_engine, run_read
from apid.telemetry import metrics
from apid.telemetry.health import Health

if TYPE_CHECKING:
    from apid.hooks.deliverer import DeliveryWorker
    from apid.server.workers.worker import WorkerLink
    from apid.store.redis import RedisCircuit

log = Logger(namespace="apid.daemon")


@dataclass
class Running:
    port: IListeningPort
    site: ApidSite
    connections: OpenConnections
    db: Database
    passwords: Passwords
    rule_book: RuleBook
    rules_watcher: RulesWatcher
    revocations: Revocations
    mail: MailSender
    pinger: PeerPinger
    redis: RedisCircuit | None
    deliveries: DeliveryWorker | None
    health: Health
    plugins: PluginLifecycle
    metrics_port: IListeningPort | None = None  # `metrics.listen`


async def start(
    reactor: Reactor,
    config: Config,
    endpoint: IStreamServerEndpoint,
    worker: WorkerLink | None = None,
    migration: MigrationChild | None = None,
) -> Running:
    """Bring everything up and listen; raises (and leaves nothing running) if any step fails.
    `migration` is the child migrating the database; a worker has none: its parent migrated
    the database before starting any worker, and keeps the counts without Redis."""
    server, api = config.server, config.api
    if migration is not None:
        await deferToThread(migration.wait)
    counting = metrics.count_if_read(server.metrics)
    secret = await deferToThread(load_secret, server.jwt)
    docs_page = DocsPage()  # reads the viewer's files at the first request for them
    engine = make_engine(server.database_url, server.database_pool_size)
    generation = await deferToThread(run_read, engine, read_generation)  # before the files: no reload missed
    bound = await deferToThread(load_all, api.iostate_dir, api.security)

    db = Database(reactor=reactor, engine=engine, threads=server.database_pool_size)
    passwords = Passwords(reactor, threads=max(1, os.cpu_count() or 1))
    deliveries = webhook_delivery(reactor, config, db)
    parts = assemble(
        reactor,
        config,
        secret=secret,
        docs_page=docs_page,
        bound=bound,
        db=db,
        passwords=passwords,
        wake=deliveries.wake if deliveries else None,
        shared=worker,
    )
    rules_watcher = RulesWatcher(reactor=reactor, db=db, rule_book=parts.rule_book, who=process_name())
    db.start()
    passwords.start()
    # Their threads are not daemon threads: a process whose reactor stopped would wait for them
    # forever. A SIGTERM before `serve` registers its shutdown (while this start-up runs) must
    # stop them too, so they are stopped after every shutdown, whichever stop comes first.
    reactor.addSystemEventTrigger("after", "shutdown", db.stop)
    reactor.addSystemEventTrigger("after", "shutdown", passwords.stop)
    metrics_port = None
    try:
        await parts.revocations.start()
        await rules_watcher.start(generation)
        await parts.plugins.start()
        site = ApidSite(
            resource=parts.resource,
            max_body_bytes=api.max_body_bytes,
            access_log_enabled=server.access_log,
            observe=metrics.request_answered if counting else None,
            limits=server.connections,
        )
        connections = OpenConnections(site, server.connections.per_address, api.security.ipv6_prefix)
        if server.metrics.listen is not None and worker is None:  # a worker's parent serves every worker's
            metrics_port = await listen_metrics(reactor, server.metrics.listen)
        port = await endpoint.listen(connections)
    except BaseException:
        if metrics_port is not None:
            metrics_port.stopListening()
        await parts.plugins.stop(reactor.seconds() + server.shutdown.drain, hurried=False)  # those started, if any
        parts.revocations.stop()
        await rules_watcher.stop()
        db.stop()
        passwords.stop()
        if parts.redis is not None:
            parts.redis.stop()  # stops its probing and the pool's reconnecting; nothing waits on the Deferred
        raise
    parts.mail.start()
    if deliveries is not None:
        deliveries.start()
    if metrics_port is not None:
        log.info("metrics on {address}/metrics", address=describe(metrics_port))
    return Running(
        port=port,
        site=site,
        connections=connections,
        db=db,
        passwords=passwords,
        rule_book=parts.rule_book,
        rules_watcher=rules_watcher,
        revocations=parts.revocations,
        mail=parts.mail,
        pinger=parts.pinger,
        redis=parts.redis,
        deliveries=deliveries,
        health=parts.health,
        plugins=parts.plugins,
        metrics_port=metrics_port,
    )


def webhook_delivery(reactor: Reactor, config: Config, db: Database) -> DeliveryWorker | None:
    """The delivery worker when webhookActive is on; without it nothing is recorded or sent."""
    if not config.server.webhook_active:
        return None
    # here, not at the top: treq and Twisted's HTTP client stay out of a daemon without webhooks
    from apid.hooks.deliverer import DeliveryWorker
    from apid.hooks.delivery import Deliverer

    settings = config.server.webhooks
    deliverer = Deliverer(
        reactor=reactor,
        allowed_origins=config.api.allowed_origins,
        timeout=settings.timeout,
        per_host=settings.per_host,
    )
    return DeliveryWorker(
        reactor=reactor, db=db, deliverer=deliverer, config=settings, max_attempts=config.api.attempts
    )


async def reload_everywhere(reactor: Reactor, running: Running) -> str | None:
    """SIGHUP: once the IO State files load here, every daemon process on the database reloads
    them (`apid.server.reloading`), this one at once; a broken file is refused and changes nothing.
    None, or why nothing reloaded (for systemd, which the caller tells)."""
    try:
        await announce_reload(reactor, running.db, running.rule_book)
    except LOAD_ERRORS as exc:
        log.error("IO State reload refused, the rules in force stay: {error}", error=str(exc))
        return str(exc)
    except Exception:
        log.failure("announcing the IO State reload to the database failed; nothing reloaded")
        return "announcing the reload to the database failed; nothing reloaded"
    await running.rules_watcher.catch_up()
    return None


async def reload_for_systemd(reactor: Reactor, running: Running) -> None:
    """SIGHUP to one daemon (a worker's parent tells systemd itself): RELOADING=1, the reload,
    then READY=1 with its outcome."""
    notify_systemd(reloading())
    notify_systemd(reloaded(await reload_everywhere(reactor, running)))


async def stop(running: Running, shutdown: Shutdown) -> None:
    """Fail /health while still serving, stop listening, let in-flight requests finish and
    close each connection once its answer is written, then close the pools; all by the
    shutdown's deadline."""
    notify_systemd("STOPPING=1")
    await shutdown.health_drain(running.health)
    # a worker's port may be closed already: the parent shut the socket all workers share down
    await defer.maybeDeferred(running.port.stopListening)
    await shutdown.drain(lambda: close_after_answers(running.connections))
    for connection in list(running.connections.protocols):
        connection.transport.loseConnection()  # past the deadline: writes what is buffered, then closes
    await shutdown.drain(lambda: not running.connections.protocols)
    await running.mail.stop(shutdown.deadline)
    if running.deliveries is not None:
        await running.deliveries.stop(shutdown.deadline)
    if running.metrics_port is not None:
        stopping = running.metrics_port.stopListening()  # scraped until the last request was answered
        if stopping is not None:
            await stopping
    await running.plugins.stop(shutdown.deadline, shutdown.hurried)
    running.revocations.stop()
    await running.rules_watcher.stop()
    await running.pinger.close()
    if running.redis is not None:
        await running.redis.stop()
    running.db.stop()
    running.passwords.stop()
    log.info("apid stopped")


def serve(config: Config, reactor_name: str, worker: WorkerLink | None = None) -> int:
    """Run the daemon until SIGTERM or SIGINT; the exit status tells whether it started.
    `reactor_name` says which reactor `apid.runtime.reactors.install` installed, for the ready line.
    A worker serves its parent's socket and tells its parent, not systemd, that it serves."""
    reactor = installed()

    outcome = {"status": 0}
    stopping = worker.shutdown if worker is not None else Shutdown(reactor, config.server.shutdown)

    async def shutdown(running: Running) -> None:
        await stop(running, stopping)
        await end_tasks(reactor)  # the asyncio reactor's: what the closed connections cancelled

    async def begin() -> None:
        try:
            running = await start(reactor, config, endpoint, worker, migration)
        except Exception as exc:
            log.critical("apid: cannot start: {error}", error=str(exc))
            outcome["status"] = 1
            reactor.stop()
            return
        reactor.addSystemEventTrigger("before", "shutdown", lambda: defer.ensureDeferred(shutdown(running)))
        signal.signal(
            signal.SIGHUP,
            lambda *_: reactor.callFromThread(lambda: defer.ensureDeferred(reload_for_systemd(reactor, running))),
        )
        # Everything loaded at start lives as long as the process: move it out of the
        # collector's sight, so full collections scan only what serving creates.
        gc.freeze()
        if worker is not None:
            worker.channel.reload = lambda: defer.ensureDeferred(reload_everywhere(reactor, running))
            await worker.ready(reactor_name)
            return
        print(
            f"apid ready on {describe(running.port)} "
            f"(environment {config.server.environment}, API version {config.api.version}, reactor {reactor_name})",
            flush=True,
        )
        notify_systemd("READY=1\nSTATUS=serving")
        interval = watchdog_seconds()
        if interval is not None:  # the reactor turning is this process's liveness
            KeepAlive(reactor, interval).start()

    # a bad `listen` ends here, exit 2
    endpoint = client_endpoint(
        worker.endpoint if worker is not None else server_endpoint(reactor, socket_listen(config.server.listen)),
        config.server.listen,  # PROXY protocol on a worker's adopted socket too: the parent's wrapper is not passed
        config.server.trusted_proxies,
    )
    # forked now, while this process runs one thread; a worker's parent migrated already
    migration = MigrationChild.fork(config) if worker is None else None
    reactor.callWhenRunning(stop_on_signals, reactor, worker.check_parent if worker is not None else lambda: None)
    reactor.callWhenRunning(lambda: defer.ensureDeferred(begin()))
    reactor.run()
    return outcome["status"]
