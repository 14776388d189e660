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
import signal
from dataclasses import dataclass
from typing import TYPE_CHECKING

from twisted.internet import defer
from twisted.internet.interfaces import IListeningPort, IStreamServerEndpoint
from twisted.internet.threads import deferToThread
from twisted.logger import Logger

from apid.auth.tokens import load_secret
from apid.config.files import Config
from apid.http.proxies import client_endpoint, socket_listen
from apid.http.site import ApidSite, OpenConnections
from apid.openapi.docs_page import DocsPage
from apid.plugin_host.discovery import load_all
from apid.runtime.coroutines import end_tasks
from apid.runtime.reactors import Reactor, installed
from apid.server.assembly import Assembly, assemble
from apid.server.listening import describe, server_endpoint
from apid.server.logs import hear_plugins
from apid.server.metrics import listen_metrics
from apid.server.migration_child import MigrationChild
from apid.server.reloading import LOAD_ERRORS, announce_reload, read_generation
from apid.server.shutdown import Shutdown, close_after_answers, stop_on_signals
from apid.server.systemd import KeepAlive, reloaded, reloading, watchdog_seconds
from apid.server.systemd import notify as notify_systemd
from apid.store.database import make_engine, run_read
from apid.telemetry import metrics

if TYPE_CHECKING:
    from apid.server.workers.worker import WorkerLink

log = Logger(namespace="apid.daemon")

# The cyclic collector's thresholds (CPython's are 700, 10, 10). What serving creates is mostly
# freed by reference counting; under load the young collections took 3.5% of a core, and with
# 1,000 live event streams open (100,000 objects that live long) a full collection ran five
# times a second over all of them, a quarter of a core (docs/benchmarks.md, the live event
# stream). Ten times fewer young collections, and a full one at most every hundred middle ones.
GC_THRESHOLDS = (7000, 10, 100)


@dataclass
class Running:
    """A started daemon: its parts (`apid.server.assembly`) and what listens."""

    parts: Assembly
    port: IListeningPort
    site: ApidSite
    connections: OpenConnections
    metrics_port: IListeningPort | None = None  # `metrics.listen`


async def start(
    reactor: Reactor,
    config: Config,
    endpoint: IStreamServerEndpoint,
    worker: WorkerLink | None = None,
    migration: MigrationChild | None = None,
) -> Running:
    """Read what the parts need from outside, build them (`assemble`), start them and listen;
    raises (and leaves nothing running) if any step fails. `migration` is the child migrating
    the database; a worker has none: its parent migrated the database before starting any
    worker, and keeps the counts without Redis."""
    server, api = config.server, config.api
    if migration is not None:
        for change in await deferToThread(migration.wait):
            log.info("apid: {change}", change=change)
    counting = metrics.count_if_read(server.metrics)
    secret = await deferToThread(load_secret, server.jwt)
    engine = make_engine(server.database_url, server.database_pool_size)
    generation = await deferToThread(run_read, engine, read_generation)  # before the files: no reload missed
    bound = await deferToThread(
        load_all, api.iostate_dir, api.security, server.load_plugins, server.skip_failing_plugins
    )
    hear_plugins(loaded.cls.__module__ for loaded in bound.controllers.values())
    parts = assemble(
        reactor,
        config,
        secret=secret,
        docs_page=DocsPage(),  # reads the viewer's files at the first request for them
        bound=bound,
        engine=engine,
        shared=worker,
    )
    parts.db.start()
    parts.passwords.start()
    # Their threads are not daemon threads: a process whose reactor stopped would wait for them
    # forever. A SIGTERM before `serve` registers its shutdown (while this start-up runs) must
    # stop them too, so they are stopped after every shutdown, whichever stop comes first.
    reactor.addSystemEventTrigger("after", "shutdown", parts.db.stop)
    reactor.addSystemEventTrigger("after", "shutdown", parts.passwords.stop)
    metrics_port = None
    try:
        await parts.revocations.start()
        await parts.rules_watcher.start(generation)
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
        await parts.rules_watcher.stop()
        parts.db.stop()
        parts.passwords.stop()
        if parts.redis is not None:
            parts.redis.stop()  # stops its probing and the pool's reconnecting; nothing waits on the Deferred
        raise
    parts.mail.start()
    if parts.deliveries is not None:
        parts.deliveries.start()
    if parts.events is not None:
        await parts.events.feed.start()
    if metrics_port is not None:
        log.info("metrics on {address}/metrics", address=describe(metrics_port))
    return Running(parts=parts, port=port, site=site, connections=connections, metrics_port=metrics_port)


async def reload_everywhere(reactor: Reactor, running: Running) -> str | None:
    """SIGHUP: once the IO State files load here, every daemon process on the database reloads
    them (`apid.server.reloading`), this one at once; a broken file is refused and changes nothing.
    None, or why nothing reloaded (for systemd, which the caller tells)."""
    try:
        await announce_reload(reactor, running.parts.db, running.parts.rule_book)
    except LOAD_ERRORS as exc:
        log.error("IO State reload refused, the rules in force stay: {error}", error=str(exc))
        return str(exc)
    except Exception:
        log.failure("announcing the IO State reload to the database failed; nothing reloaded")
        return "announcing the reload to the database failed; nothing reloaded"
    await running.parts.rules_watcher.catch_up()
    return None


async def reload_for_systemd(reactor: Reactor, running: Running) -> None:
    """SIGHUP to one daemon (a worker's parent tells systemd itself): RELOADING=1, the reload,
    then READY=1 with its outcome."""
    notify_systemd(reloading())
    notify_systemd(reloaded(await reload_everywhere(reactor, running)))


async def stop(running: Running, shutdown: Shutdown) -> None:
    """Fail /health while still serving, stop listening, let in-flight requests finish and
    end the live event streams, close each connection once its answer is written, then close
    the pools; all by the shutdown's deadline."""
    notify_systemd("STOPPING=1")
    await shutdown.health_drain(running.parts.health)
    # a worker's port may be closed already: the parent shut the socket all workers share down
    await defer.maybeDeferred(running.port.stopListening)
    if running.parts.events is not None:  # their clients reconnect, to a daemon that serves
        running.parts.events.feed.stop()
    await shutdown.drain(lambda: close_after_answers(running.connections))
    for connection in list(running.connections.protocols):
        connection.transport.loseConnection()  # past the deadline: writes what is buffered, then closes
    await shutdown.drain(lambda: not running.connections.protocols)
    await running.parts.mail.stop(shutdown.deadline)
    if running.parts.deliveries is not None:
        await running.parts.deliveries.stop(shutdown.deadline)
    if running.metrics_port is not None:
        stopping = running.metrics_port.stopListening()  # scraped until the last request was answered
        if stopping is not None:
            await stopping
    await running.parts.plugins.stop(shutdown.deadline, shutdown.hurried)
    running.parts.revocations.stop()
    await running.parts.rules_watcher.stop()
    await running.parts.pinger.close()
    if running.parts.redis is not None:
        await running.parts.redis.stop()
    running.parts.db.stop()
    running.parts.passwords.stop()
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
        gc.set_threshold(*GC_THRESHOLDS)
        if worker is not None:
            worker.channel.reload = lambda: defer.ensureDeferred(reload_everywhere(reactor, running))
            worker.channel.catch_up = lambda: defer.ensureDeferred(running.parts.rules_watcher.catch_up())
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
