"""`apid serve` and `apid worker`: the reactor installed first, then the daemon imported and
started, its log on standard error."""

from __future__ import annotations

import argparse
import os
import signal
import sys

from apid.cli.common import CommandFailed, load_config
from apid.config.files import Config


def cmd_serve(args: argparse.Namespace) -> int:
    """One process, or (`procCores` above 1) the parent of that many worker processes."""
    from apid.runtime import tls
    from apid.runtime.reactors import ReactorUnavailable, check_available, install
    from apid.server.workers import share_metrics, worker_count

    signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C before the reactor runs: an end, not a traceback
    config = load_config(args)
    choice = args.reactor or config.server.reactor
    try:
        check_available(choice)
    except ReactorUnavailable as exc:
        raise CommandFailed(str(exc)) from None
    tls.leave_out(config)  # first: before anything imports Twisted's TLS
    count = worker_count(config)
    if count > 1:
        metrics = share_metrics()  # first: before anything imports prometheus_client
        install("default")  # the parent runs no plugin code: the workers run the reactor chosen
        from apid.server.workers.parent import serve_workers
        from apid.server.workers.versions import installed_code

        _start_logging(config)
        return serve_workers(config, count, choice, metrics, installed_code())
    # first: the daemon's modules (Klein among them) import twisted.internet.reactor
    reactor = install(choice)
    from apid.server.daemon import serve

    _start_logging(config)
    return serve(config, reactor)


def cmd_worker(args: argparse.Namespace) -> int:
    """A worker process, started by `apid serve`'s parent (apid.server.workers.worker says how)."""
    import pickle
    import socket

    from apid.runtime import tls
    from apid.runtime.reactors import install
    from apid.server.workers import CHANNEL_FD, PORT_FD, WorkerStart

    # `python -m apid` had it end with its parent (apid.server.workers.orphans) before it imported this
    if sys.stdin.isatty() or not all(_open(fd) for fd in (PORT_FD, CHANNEL_FD)):
        raise CommandFailed("`apid worker` is started by `apid serve` (procCores above 1), not by hand")
    try:
        start = pickle.load(sys.stdin.buffer)  # pickled by the parent, on a pipe only it holds
    except (EOFError, pickle.UnpicklingError) as exc:
        raise CommandFailed(f"`apid worker` read no configuration from its parent ({exc})") from None
    if not isinstance(start, WorkerStart):
        raise CommandFailed("`apid worker` read no configuration from its parent (another version of apid?)")
    os.setpgrp()  # Ctrl-C in a terminal reaches the parent alone, which stops the workers in order
    tls.leave_out(start.config)
    reactor = install(args.reactor)
    from apid.runtime.reactors import installed
    from apid.server.daemon import serve
    from apid.server.shutdown import Shutdown
    from apid.server.workers.versions import CODE_CHANGED, code_changes, installed_code
    from apid.server.workers.worker import link

    config = start.config
    _start_logging(config, worker=args.index)
    changes = code_changes(start.code, installed_code())
    if changes:
        say(
            f"apid: worker {args.index} refuses to serve: the code installed changed since the daemon started "
            f"({'; '.join(changes)}); restart the daemon to serve it"
        )
        return CODE_CHANGED
    stopping = Shutdown(installed(), config.server.shutdown)
    family = socket.AddressFamily[args.family]
    return serve(config, reactor, link(installed(), args.index, family, args.parent, stopping))


def _open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def _start_logging(config: Config, worker: int | None = None) -> None:
    """Log to standard error as `logFormat` says (after the reactor is installed: apid.server.logs
    imports twisted.web); a worker's events carry its index. From now on `say` logs."""
    global _logging
    from twisted.logger import globalLogBeginner

    from apid.server.logs import log_observer

    observer = log_observer(config.server.log_format, sys.stderr, worker)
    globalLogBeginner.beginLoggingTo([observer], redirectStandardIO=False)
    _logging = True


_logging = False  # whether the daemon's log began: its lines then follow `logFormat`


def say(line: str) -> None:
    """A command's failure on standard error: an event of the daemon's log once it began (a JSON
    line with `logFormat: json`), a plain line before (no configuration read, no format known)."""
    if not _logging:
        print(line, file=sys.stderr)
        return
    from twisted.logger import Logger

    Logger(namespace="apid.cli").critical("{line}", line=line)
