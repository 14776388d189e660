"""What apid tells systemd (sd_notify): READY=1, STOPPING=1, RELOADING=1 around a reload, and
the watchdog's keep-alives.

Only the process systemd started speaks to it (`NotifyAccess=main`): one daemon, or the parent
of the worker processes, which hears from its workers over their channel. A keep-alive
(WATCHDOG=1) goes at half the interval systemd asks for (`WATCHDOG_USEC`, set by `WatchdogSec=`)
and only after a liveness check passed: the reactor turned (the check runs on it) and, with
workers, every worker answered its parent. A frozen process sends nothing, and systemd kills
and restarts the service once `WatchdogSec` passes without one.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable, Mapping

from twisted.internet.defer import Deferred, maybeDeferred
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger
from twisted.python.failure import Failure

log = Logger(namespace="apid.systemd")

# a refused reload, as `ERRNO=` tells systemd: the files are invalid
EINVAL = 22


def notify(message: str) -> None:
    """sd_notify: one datagram to $NOTIFY_SOCKET, when running under systemd."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return
    if address.startswith("@"):
        address = "\0" + address[1:]
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.connect(address)
        sock.sendall(message.encode())


def reloading() -> str:
    """RELOADING=1 with the monotonic time it began, as systemd 253 and later want it."""
    return f"RELOADING=1\nMONOTONIC_USEC={time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000}"


def reloaded(refused: str | None) -> str:
    """READY=1 after a reload; `refused` says why the rules in force stay, if they do, which
    `systemctl status` then shows (STATUS=) with an error number (ERRNO=)."""
    if refused is None:
        return "READY=1\nSTATUS=serving; IO State reloaded"
    reason = " ".join(refused.split())  # one line: a newline would end the field
    return f"READY=1\nSTATUS=IO State reload refused, the rules in force stay: {reason}\nERRNO={EINVAL}"


def watchdog_seconds(environ: Mapping[str, str] | None = None) -> float | None:
    """The watchdog interval systemd set for this process, or None: none set, a bad value, or
    meant for another process (`WATCHDOG_PID`)."""
    env = os.environ if environ is None else environ
    pid = env.get("WATCHDOG_PID")
    if pid and pid != str(os.getpid()):
        return None
    try:
        usec = int(env.get("WATCHDOG_USEC", ""))
    except ValueError:
        return None
    return usec / 1_000_000 if usec > 0 else None


class KeepAlive:
    """WATCHDOG=1 at half the watchdog interval, each after `alive()` fired True; nothing while
    it fires False, fails, or takes longer than that half (then the next check waits for it)."""

    def __init__(
        self, reactor: IReactorTime, interval: float, alive: Callable[[], Deferred[bool] | bool] = lambda: True
    ) -> None:
        self._half = interval / 2
        self._alive = alive
        self._healthy = True
        self._beat = LoopingCall(self._check)
        self._beat.clock = reactor

    def start(self) -> None:
        self._beat.start(self._half, now=True).addErrback(
            lambda failure: log.failure("the watchdog's keep-alives stopped", failure)
        )

    def _check(self) -> Deferred[None]:
        return maybeDeferred(self._alive).addCallbacks(self._checked, self._failed)

    def _checked(self, alive: bool) -> None:
        if not alive:
            self._healthy = False  # whoever did not answer said so
            return
        if not self._healthy:
            log.info("every process answers again: keep-alives to systemd's watchdog resume")
            self._healthy = True
        notify("WATCHDOG=1")

    def _failed(self, failure: Failure) -> None:
        log.failure("the liveness check failed: no keep-alive to systemd's watchdog", failure)
        self._healthy = False
