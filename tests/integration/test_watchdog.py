"""systemd's watchdog (issue 39): with `WatchdogSec=` set, apid sends WATCHDOG=1 at half the
interval while it answers, one process or the parent while every worker answers it, and stops
when any of them is frozen; systemd then kills the service and starts it again.

The test's stand-in plays systemd's part: it owns the notify socket ($NOTIFY_SOCKET), sets
WATCHDOG_USEC, and restarts the service as systemd would once no keep-alive came for the
watchdog interval: SIGABRT to the main process (pending while it is frozen), SIGKILL to every
process of the service, then a new start.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import time
from pathlib import Path

import pytest

from harness import Daemon, Deployment

WATCHDOG = 4.0  # seconds; apid sends a keep-alive every 2 s, a worker answers its parent within 1 s
KEEP_ALIVE = "WATCHDOG=1"


class StandInSystemd:
    """systemd's side of one service: the notify socket and the watchdog."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.socket.bind(str(path))

    def env(self) -> dict[str, str]:
        return {"NOTIFY_SOCKET": str(self.path), "WATCHDOG_USEC": str(int(WATCHDOG * 1_000_000))}

    def receive(self, timeout: float) -> tuple[float, str] | None:
        """The next message and when it came, or None within `timeout`."""
        self.socket.settimeout(max(timeout, 0.001))
        try:
            message = self.socket.recv(4096).decode()
        except TimeoutError:
            return None
        return time.monotonic(), message

    def ready(self, timeout: float = 60) -> float:
        arrived = self.receive(timeout)
        assert arrived is not None and arrived[1].startswith("READY=1"), arrived
        return arrived[0]

    def keep_alives(self, seconds: float) -> list[float]:
        """When each keep-alive came within the next `seconds`."""
        until = time.monotonic() + seconds
        times = []
        while (arrived := self.receive(until - time.monotonic())) is not None:
            assert arrived[1] == KEEP_ALIVE, arrived
            times.append(arrived[0])
        return times

    def silence(self, last: float, limit: float) -> float:
        """As the watchdog: wait until no keep-alive came for WATCHDOG seconds after `last` (or
        a later one), at most `limit` seconds; when the last keep-alive came."""
        give_up = time.monotonic() + limit
        while time.monotonic() < give_up:
            arrived = self.receive(last + WATCHDOG - time.monotonic())
            if arrived is None:
                return last
            assert arrived[1] == KEEP_ALIVE, arrived
            last = arrived[0]
        raise AssertionError(f"keep-alives went on for {limit:g} s")

    def close(self) -> None:
        self.socket.close()


def restart(daemon: Daemon) -> Daemon:
    """What systemd does when the watchdog fires (`WatchdogSignal=SIGABRT`, then SIGKILL to the
    control group after `TimeoutAbortSec`), then `Restart=on-failure`."""
    assert daemon.process is not None
    pid = daemon.process.pid
    children = [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    metrics = [_metrics_dir(child) for child in children]
    os.kill(pid, signal.SIGABRT)
    for process in (pid, *children):
        os.kill(process, signal.SIGKILL)
    # A process that is not the frozen one may end of the SIGABRT before the SIGKILL arrives, as
    # under systemd when TimeoutAbortSec is long enough: either signal ended it, nothing else.
    assert daemon.process.wait(30) in (-signal.SIGABRT, -signal.SIGKILL)
    for folder in metrics:  # systemd's PrivateTmp= would go with the service
        if folder:
            shutil.rmtree(folder, ignore_errors=True)
    return Daemon(daemon.deployment, env=daemon.env).start(timeout=60)


def _metrics_dir(pid: int) -> str | None:
    for variable in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
        if variable.startswith(b"PROMETHEUS_MULTIPROC_DIR="):
            return variable.split(b"=", 1)[1].decode()
    return None


@pytest.fixture
def systemd(tmp_path):
    stand_in = StandInSystemd(tmp_path / "notify")
    yield stand_in
    stand_in.close()


def assert_healthy(systemd: StandInSystemd, ready_at: float) -> float:
    """Keep-alives come at half the interval, none missing for the interval; the last one."""
    times = systemd.keep_alives(1.5 * WATCHDOG)
    gaps = [round(later - earlier, 2) for earlier, later in zip([ready_at, *times], times, strict=False)]
    assert len(times) >= 2 and max(gaps) < WATCHDOG, gaps
    return times[-1]


def assert_restarted_when_frozen(systemd: StandInSystemd, daemon: Daemon, frozen: int, last: float) -> Daemon:
    os.kill(frozen, signal.SIGSTOP)
    frozen_at = time.monotonic()
    try:
        # a check begun before the freeze may still pass: at most one keep-alive after it
        silent_since = systemd.silence(last, limit=4 * WATCHDOG)
        assert silent_since < frozen_at + WATCHDOG / 2 + 1.0
    finally:
        restarted = restart(daemon)
    ready_at = systemd.ready()
    assert_healthy(systemd, ready_at)
    return restarted


def test_a_frozen_daemon_is_restarted_by_the_watchdog(tmp_path, systemd):
    deployment = Deployment(tmp_path / "deployment")
    deployment.write()
    daemon = Daemon(deployment, env=systemd.env()).start(timeout=60)
    try:
        last = assert_healthy(systemd, systemd.ready())
        assert daemon.process is not None
        daemon = assert_restarted_when_frozen(systemd, daemon, daemon.process.pid, last)
        assert daemon.request("GET", "/health").status == 200
    finally:
        daemon.stop()


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="worker processes need two CPUs")
def test_a_frozen_worker_or_parent_stops_the_keep_alives_and_the_service_is_restarted(tmp_path, systemd):
    deployment = Deployment(tmp_path / "deployment", api={"procCores": 2})
    deployment.write()
    daemon = Daemon(deployment, env=systemd.env()).start(timeout=60)
    try:
        last = assert_healthy(systemd, systemd.ready())
        worker = daemon.workers()[0]
        daemon = assert_restarted_when_frozen(systemd, daemon, worker, last)
        assert f"(pid {worker}) did not answer within {WATCHDOG / 4:g} s" in daemon.stderr
        assert len(daemon.workers()) == 2

        last = assert_healthy(systemd, time.monotonic())
        assert daemon.process is not None
        daemon = assert_restarted_when_frozen(systemd, daemon, daemon.process.pid, last)
        assert daemon.request("GET", "/health").status == 200
    finally:
        daemon.stop()
