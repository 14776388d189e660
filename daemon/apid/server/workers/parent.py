"""`apid serve` with `procCores` above 1: the parent of the worker processes.

The parent migrates the database, binds the listening socket (or takes systemd's) and never
accepts on it: it starts N workers that each serve the same socket, and the kernel gives each
new connection to one of the workers waiting in accept. It prints the ready line and tells
systemd READY=1 once every worker serves; replaces a worker that dies (after 1 s, doubling
up to 30 s while it keeps dying young), but not one that refused the code installed since the
parent started (`apid.server.workers.versions`): the daemon must be restarted for that, and removes a
dead worker's IO State report, so that `apid iostate reload` does not wait for it; has one
worker reload on SIGHUP, whose reload reaches every worker and daemon through the database
(`apid.server.reloading`), telling systemd RELOADING=1, then READY=1 with the outcome; sends systemd's
watchdog its keep-alives while every worker answers (`apid.server.systemd`); and on SIGTERM or SIGINT
has each worker stop as a single daemon does (fail /health while serving, stop accepting,
finish the requests in flight), keeping the socket open while /health fails, and kills those
still running after the drain time.
Without Redis it keeps the counts that must be exact across workers (`apid.server.workers.channel`).
"""

from __future__ import annotations

import os
import pickle
import shutil
import signal
import socket
import sys
from collections.abc import Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass

from twisted.internet import defer, tcp
from twisted.internet.defer import Deferred
from twisted.internet.error import ProcessExitedAlready, ProcessTerminated
from twisted.internet.interfaces import IAddress, IDelayedCall, IListeningPort, IProcessTransport
from twisted.internet.protocol import Factory, ProcessProtocol, Protocol
from twisted.internet.threads import deferToThread
from twisted.logger import Logger
from twisted.python.failure import Failure

from apid.auth.limits import MemoryWindows
from apid.calls.rate_limits import MemoryCounters
from apid.config.files import Config
from apid.runtime.reactors import Reactor
from apid.server.shutdown import Shutdown, stop_on_signals
from apid.server.systemd import KeepAlive, notify, reloaded, reloading, watchdog_seconds
from apid.server.workers import CHANNEL_FD, PORT_FD, WorkerStart
from apid.server.workers.channel import Alive, CatchUp, DropAnswers, ParentSide, Reload, adopt
from apid.server.workers.versions import CODE_CHANGED, Code, code_changes, installed_code

log = Logger(namespace="apid.workers")

FIRST_BACKOFF = 1.0  # seconds before a dead worker is replaced
MOST_BACKOFF = 30.0
STEADY_SECONDS = 60.0  # a worker that served this long before dying is replaced after FIRST_BACKOFF again
PASS_ON_SECONDS = 1.0  # a worker's change waits at most this long for the others to drop their answers
KILL_AFTER = 5.0  # seconds past the workers' own drain time before they are killed (within TimeoutStopSec)
# Systemd's variables are the parent's: a worker must neither notify nor take the sockets itself
NOT_INHERITED = ("NOTIFY_SOCKET", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES", "WATCHDOG_USEC", "WATCHDOG_PID")


def address_family(port: tcp.Port) -> socket.AddressFamily:
    """The family of the socket (IPv4, IPv6, Unix: whatever `listen` or systemd gave), as the
    workers must name it to adopt it."""
    with socket.socket(fileno=os.dup(port.fileno())) as listening:
        return listening.family


class NoConnections(Factory):
    """The parent's socket never accepts (it stops reading at once); should it, it hangs up."""

    protocol = Protocol
    noisy = False

    def buildProtocol(self, addr: IAddress | None) -> Protocol | None:
        return None


@dataclass
class Worker:
    index: int
    transport: IProcessTransport
    pid: int
    started: float
    ready: bool = False


class WorkerProcess(ProcessProtocol):
    """One worker: its configuration written to its standard input, its end reported."""

    def __init__(self, parent: Parent, index: int, config: bytes) -> None:
        self._parent = parent
        self._index = index
        self._config = config

    def connectionMade(self) -> None:
        if self.transport is None:  # Twisted sets it before calling this
            raise RuntimeError(f"worker {self._index} started without a transport")
        self.transport.write(self._config)
        self.transport.closeStdin()

    def processEnded(self, reason: Failure) -> None:
        self._parent.ended(self._index, reason)


class Parent:
    """The workers of one `apid serve`, started, watched and stopped."""

    def __init__(
        self,
        *,
        reactor: Reactor,
        start: WorkerStart,
        port: tcp.Port,
        count: int,
        reactor_choice: str,
        shutdown: Shutdown,
    ) -> None:
        self._reactor = reactor
        self._code = start.code
        self._database_url = start.config.server.database_url
        self._config = pickle.dumps(start)
        self._port = port
        self._count = count
        self._family = address_family(port)
        self._reactor_choice = reactor_choice
        self._shutdown = shutdown
        self._refused: set[int] = set()  # workers that refused the code installed now: not replaced
        self._counters = MemoryCounters(reactor)
        self._windows = MemoryWindows(reactor)
        self._workers: dict[int, Worker] = {}
        self._channels: dict[int, ParentSide] = {}
        self._failures: dict[int, int] = {}  # worker index -> deaths in a row, each young
        self._restarts: dict[int, IDelayedCall] = {}
        self._serving: Deferred[str] = Deferred()  # fires with the workers' reactor once all serve, once
        self._served = False  # all served once: from then on a worker that dies is replaced
        self._stopping = False
        self._all_ended: Deferred[None] | None = None
        self._silent: set[tuple[int, int]] = set()  # (index, pid) of those that did not answer the last check

    def start(self) -> Deferred[str]:
        """Start every worker; fires when all serve (with the reactor they run), or fails
        when one ends before it serves."""
        for index in range(self._count):
            self._spawn(index)
        return self._serving

    def _spawn(self, index: int) -> None:
        self._restarts.pop(index, None)
        parent_end, worker_end = socket.socketpair()
        env = {name: value for name, value in os.environ.items() if name not in NOT_INHERITED}
        args = [
            sys.executable,
            "-m",
            "apid",
            "worker",
            "--index",
            str(index),
            "--family",
            self._family.name,
            "--reactor",
            self._reactor_choice,
            "--parent",
            str(os.getpid()),
        ]
        try:
            transport = self._reactor.spawnProcess(
                WorkerProcess(self, index, self._config),
                sys.executable,
                args,
                env,
                childFDs={0: "w", 1: 1, 2: 2, PORT_FD: self._port.fileno(), CHANNEL_FD: worker_end.fileno()},
            )
            channel = ParentSide(
                counters=self._counters,
                windows=self._windows,
                ready=self._ready,
                changed=lambda controllers: self._pass_on(index, controllers),
            )
            adopt(self._reactor, parent_end.fileno(), channel)
        finally:
            parent_end.close()
            worker_end.close()
        self._workers[index] = Worker(index, transport, transport.pid, self._reactor.seconds())
        self._channels[index] = channel

    def _pass_on(self, sender: int, controllers: Sequence[str]) -> Deferred[None]:
        """Worker `sender` changed `controllers`: every other worker drops their cached answers
        before the change is answered. One that fails to (ending, perhaps) reads the change
        counters within a second anyway (`apid.calls.caching`)."""
        drops = [
            channel.callRemote(DropAnswers, controllers=list(controllers))
            .addTimeout(PASS_ON_SECONDS, self._reactor)
            .addErrback(lambda _: None)
            for index, channel in self._channels.items()
            if index != sender
        ]
        return defer.gatherResults(drops).addCallback(lambda _: None)

    def _ready(self, index: int, reactor_name: str) -> None:
        worker = self._workers.get(index)
        if worker is None:
            return
        worker.ready = True
        if self._served:
            log.info("worker {index} (pid {pid}) serves again", index=index, pid=worker.pid)
        elif all(worker.ready for worker in self._workers.values()) and len(self._workers) == self._count:
            self._served = True
            self._serving.callback(reactor_name)

    def ended(self, index: int, reason: Failure) -> None:
        worker = self._workers.pop(index)
        del self._channels[index]
        _metrics_of_dead(worker.pid)
        if self._stopping:
            if not self._workers and self._all_ended is not None and not self._all_ended.called:
                self._all_ended.callback(None)
            return
        how = ended_how(reason)
        if not self._served:
            if not self._serving.called:  # the first to fail says why; the parent is stopping
                self._serving.errback(RuntimeError(f"worker {index} {how} before it served (its error is above)"))
            return
        self._forget_reports(worker.pid)  # a worker that stops removes its own
        if isinstance(reason.value, ProcessTerminated) and reason.value.exitCode == CODE_CHANGED:
            self._code_changed(index, worker.pid)
            return
        ran = self._reactor.seconds() - worker.started
        failures = 1 if ran >= STEADY_SECONDS else self._failures.get(index, 0) + 1
        self._failures[index] = failures
        delay = min(MOST_BACKOFF, FIRST_BACKOFF * 2 ** (failures - 1))
        log.error(
            "worker {index} (pid {pid}) {how}; replacing it in {delay:g} s",
            index=index,
            pid=worker.pid,
            how=how,
            delay=delay,
        )
        _count_restart()
        self._restarts[index] = self._reactor.callLater(delay, self._spawn, index)

    def _code_changed(self, index: int, pid: int) -> None:
        """Worker `index` refused the code installed since the parent started: a replacement
        would refuse it too, until the daemon restarts, so its place stays empty (no restarts
        in a loop) and the other workers serve on."""
        first = not self._refused
        self._refused.add(index)
        if not first:
            log.error(
                "worker {index} (pid {pid}) refused the code installed too; not replaced until apid restarts",
                index=index,
                pid=pid,
            )
            return
        serving = len(self._workers)

        def tell(now: dict[str, Code]) -> None:
            log.critical(
                "the code installed changed since apid started ({changes}): restart apid to serve it. Worker "
                "{index} (pid {pid}) refused to serve it and is not replaced until then; {serving} workers serve on",
                changes="; ".join(code_changes(self._code, now)),
                index=index,
                pid=pid,
                serving=serving,
            )

        deferToThread(installed_code).addCallback(tell).addErrback(
            lambda failure: log.failure("reading the code installed failed", failure)
        )

    def _forget_reports(self, pid: int) -> None:
        from apid.server.reloading import forget_ended

        deferToThread(forget_ended, self._database_url, pid).addErrback(
            lambda failure: log.warn(
                "removing the IO State report of worker pid {pid} failed ({error}); "
                "`apid iostate reload` waits for it until it is old",
                pid=pid,
                error=failure.getErrorMessage().splitlines()[0],
            )
        )

    async def _catch_up(self, but: int) -> None:
        """Every other ready worker swaps in the rules worker `but` announced. One that ended
        meanwhile is replaced by a worker that reads them when it starts."""
        asked = [
            self._channels[index].callRemote(CatchUp)
            for index, worker in self._workers.items()
            if index != but and worker.ready
        ]
        await defer.gatherResults(asked, consumeErrors=True).addErrback(lambda _: None)

    async def reload(self) -> None:
        """SIGHUP: one worker validates the files and, when they load, has every process
        reload; systemd hears RELOADING=1, then READY=1 with the outcome."""
        notify(reloading())
        notify(reloaded(await self._reload()))

    async def _reload(self) -> str | None:
        """Why nothing reloaded, if it did not; back once every worker serves the outcome."""
        for index, worker in self._workers.items():
            if worker.ready:
                try:
                    answer = await self._channels[index].callRemote(Reload)
                except Exception as exc:  # the worker ended meanwhile
                    return f"worker {index} (pid {worker.pid}) did not reload: {exc}"
                refused: str | None = answer["refused"]
                if refused is None:
                    await self._catch_up(but=index)
                return refused
        log.error("SIGHUP ignored: no worker serves to reload the IO State")
        return "no worker serves to reload the IO State"

    def alive(self, timeout: float) -> Deferred[bool]:
        """Whether every worker serving answers within `timeout` seconds (their reactors turn);
        this process's reactor runs this check. Logs a worker once when it stops answering."""
        serving = [(index, worker.pid) for index, worker in self._workers.items() if worker.ready]

        def answered(index: int) -> Deferred[bool]:
            return (
                self._channels[index]
                .callRemote(Alive)
                .addTimeout(timeout, self._reactor)
                .addCallbacks(lambda _: True, lambda _: False)
            )

        def checked(answers: list[bool]) -> bool:
            silent = {(index, pid) for (index, pid), ok in zip(serving, answers, strict=True) if not ok}
            for index, pid in sorted(silent - self._silent):
                log.error(
                    "worker {index} (pid {pid}) did not answer within {timeout:g} s: "
                    "no keep-alive to systemd's watchdog while it does not",
                    index=index,
                    pid=pid,
                    timeout=timeout,
                )
            self._silent = silent
            return not silent

        return defer.gatherResults([answered(index) for index, _ in serving]).addCallback(checked)

    async def stop(self) -> None:
        """Have every worker drain (each fails its /health while serving, then finishes what is
        in flight), keeping the socket open while their /health fails; kill the late."""
        self._stopping = True
        for restart in self._restarts.values():
            restart.cancel()
        self._restarts.clear()
        if self._workers:
            self._all_ended = Deferred()
            for worker in self._workers.values():
                _signal(worker, "TERM")
        await self._shutdown.health_drain()
        # a socket apid bound is shut down, so that every worker stops accepting at once and
        # new clients are refused rather than left waiting; systemd's stays open for the next start
        await self._port.stopListening()
        if self._all_ended is not None:
            kill_in = self._shutdown.deadline - self._reactor.seconds() + KILL_AFTER
            late = self._reactor.callLater(max(0.0, kill_in), self._kill_all)
            await self._all_ended
            if late.active():
                late.cancel()

    def _kill_all(self) -> None:
        for worker in self._workers.values():
            log.error(
                "worker {index} (pid {pid}) still running after the drain time; killing it",
                index=worker.index,
                pid=worker.pid,
            )
            _signal(worker, "KILL")


def ended_how(reason: Failure) -> str:
    ended = reason.value
    if isinstance(ended, ProcessTerminated) and ended.signal is not None:
        return f"was killed by signal {ended.signal}"
    if isinstance(ended, ProcessTerminated):
        return f"exited with status {ended.exitCode}"
    return "exited"


def _signal(worker: Worker, name: str) -> None:
    with suppress(ProcessExitedAlready):  # its end is on its way to `ended`
        worker.transport.signalProcess(name)


def _metrics_of_dead(pid: int) -> None:
    """Its gauges leave the sums (files removed: in a thread)."""
    from apid.telemetry.metrics import process_dead

    deferToThread(process_dead, pid).addErrback(
        lambda failure: log.failure("removing the metrics of worker pid {pid} failed", failure, pid=pid)
    )


def _count_restart() -> None:
    from apid.telemetry.metrics import worker_restarted

    worker_restarted()


def serve_workers(config: Config, count: int, reactor_choice: str, metrics_dir: str, code: Mapping[str, Code]) -> int:
    """Run the parent until SIGTERM or SIGINT; the exit status tells whether every worker
    started. `code`: the code installed as it started, which every worker must find too."""
    from apid.http.proxies import socket_listen
    from apid.runtime.reactors import installed
    from apid.server.listening import describe, server_endpoint
    from apid.server.metrics import listen_metrics
    from apid.server.migration_child import MigrationChild
    from apid.telemetry.metrics import count_if_read

    reactor = installed()

    outcome = {"status": 0}

    def failed(exc: Exception) -> None:
        log.critical("apid: cannot start: {error}", error=str(exc))
        outcome["status"] = 1
        reactor.stop()

    async def shutdown(parent: Parent, metrics: IListeningPort | None) -> None:
        notify("STOPPING=1")
        await parent.stop()
        if metrics is not None:
            stopped = metrics.stopListening()  # scraped until the last worker ended
            if stopped is not None:  # a port may also stop at once
                await stopped
        log.info("apid stopped: every worker ended")

    async def begin() -> None:
        try:
            for change in await deferToThread(migration.wait):  # once, before any worker
                log.info("apid: {change}", change=change)
            count_if_read(config.server.metrics)  # the restarts of workers
            port = await endpoint.listen(NoConnections())
            if not isinstance(port, tcp.Port):  # TCP, Unix and systemd's sockets all are
                raise TypeError(f"{config.server.listen} gives a {type(port).__name__}, which workers cannot share")
            port.stopReading()  # the workers accept; this process only holds the socket open
            # every worker's metrics, added up: one port, so the parent's
            metrics = (
                None
                if config.server.metrics.listen is None
                else await listen_metrics(reactor, config.server.metrics.listen)
            )
        except Exception as exc:
            failed(exc)
            return
        start = WorkerStart(config, code)
        parent = Parent(
            reactor=reactor,
            start=start,
            port=port,
            count=count,
            reactor_choice=reactor_choice,
            shutdown=Shutdown(reactor, config.server.shutdown),
        )
        reactor.addSystemEventTrigger("before", "shutdown", lambda: defer.ensureDeferred(shutdown(parent, metrics)))
        signal.signal(signal.SIGHUP, lambda *_: reactor.callFromThread(lambda: defer.ensureDeferred(parent.reload())))
        try:
            reactor_name = await parent.start()
        except Exception as exc:
            failed(exc)
            return
        print(
            f"apid ready on {describe(port)} (environment {config.server.environment}, "
            f"API version {config.api.version}, reactor {reactor_name}, {count} workers)",
            flush=True,
        )
        notify(f"READY=1\nSTATUS=serving with {count} workers")
        interval = watchdog_seconds()
        if interval is not None:  # a quarter of the interval for the workers' answers
            KeepAlive(reactor, interval, lambda: parent.alive(interval / 4)).start()

    # the socket alone (a bad `listen` ends here, exit 2): each worker serves it through the PROXY
    # protocol when `listen` says so (apid.http.proxies.client_endpoint), this process never reads it
    endpoint = server_endpoint(reactor, socket_listen(config.server.listen))
    migration = MigrationChild.fork(config)  # now, while this process runs one thread
    reactor.callWhenRunning(stop_on_signals, reactor)
    reactor.callWhenRunning(lambda: defer.ensureDeferred(begin()))
    reactor.run()
    shutil.rmtree(metrics_dir, ignore_errors=True)
    return outcome["status"]
