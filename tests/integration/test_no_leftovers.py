"""No apid process outlives its stop (issue 24, item 3): a SIGTERM at any moment of start-up
ends every process of the daemon, with one process and with workers; a second signal while
stopping changes nothing and logs no traceback; the workers of a parent killed with SIGKILL,
in a process group of their own, end within 2 s, even while they are still starting.

Every process a test starts carries a mark of its own in its environment, which its children
inherit: what is left is found by that mark, whatever its process group or parent.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from harness import READY, Deployment, deployment_with_accounts, wait_for

MARK = "APID_TEST_PROCESS_MARK"
ORPHAN_SECONDS = 2.0  # how long a worker may outlive its parent


def marked(mark: str) -> list[int]:
    """The pids of the living processes whose environment carries `mark` (zombies are dead)."""
    found = []
    needle = f"{MARK}={mark}".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0") and not _dead(entry):
                found.append(int(entry.name))
        except OSError:  # ended meanwhile, or not ours
            continue
    return found


def _dead(entry: Path) -> bool:
    state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
    return state in ("Z", "X")


def children(pid: int) -> list[int]:
    try:
        return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


@contextmanager
def marked_serve(deployment: Deployment) -> Iterator[subprocess.Popen]:
    """`apid serve` in a session of its own, marked; every marked process is killed on leaving."""
    mark = uuid.uuid4().hex
    command = [sys.executable, "-m", "apid", "serve", "--config-dir", str(deployment.config_dir), "--env", "test"]
    process = subprocess.Popen(
        [*command, "--listen", "tcp:0:interface=127.0.0.1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, MARK: mark},
        start_new_session=True,
    )
    process.mark = mark  # type: ignore[attr-defined]
    try:
        yield process
    finally:
        for pid in marked(mark):
            os.kill(pid, signal.SIGKILL)
        if process.poll() is None:
            process.kill()
        process.communicate()


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> Deployment:
    return deployment_with_accounts(tmp_path_factory.mktemp("single"), accounts=())


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory) -> Deployment:
    return deployment_with_accounts(tmp_path_factory.mktemp("workers"), api={"procCores": 2}, accounts=())


def start_up_seconds(deployment: Deployment) -> float:
    """How long a start-up takes here, now (the machine is shared): SIGTERMs are spread over it."""
    began = time.monotonic()
    with marked_serve(deployment) as process:
        line = process.stdout.readline().decode()
        assert READY.search(line), (line, process.stderr.read1().decode())
        took = time.monotonic() - began
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0
    return took


def interrupt_at(deployment: Deployment, delay: float) -> tuple[int, str]:
    """Start the daemon, SIGTERM it after `delay` seconds; its exit status and standard error,
    once it and every process it started ended."""
    with marked_serve(deployment) as process:
        time.sleep(delay)
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(25)  # within the drain time, 20 s
        except subprocess.TimeoutExpired:
            pytest.fail(f"SIGTERM after {delay:.2f} s left the daemon running")
        leftovers = wait_for(lambda: not marked(process.mark), timeout=5)
        assert leftovers, f"SIGTERM after {delay:.2f} s left {marked(process.mark)} running"
        return process.returncode, process.stderr.read().decode(errors="replace")


@pytest.mark.parametrize("setup", ["single", "two_workers"])
def test_a_sigterm_at_any_moment_of_start_up_leaves_no_process(request, setup):
    """Ten start-ups each (twenty in all), each interrupted at another moment, from the first
    instant (the interpreter still importing) to just past the ready line."""
    if setup == "two_workers" and len(os.sched_getaffinity(0)) < 2:
        pytest.skip("worker processes need two CPUs")
    deployment = request.getfixturevalue(setup)
    span = start_up_seconds(deployment) * 1.1
    for step in range(10):
        status, stderr = interrupt_at(deployment, span * step / 9)
        assert "Traceback" not in stderr, stderr
        assert status in (0, 1, -signal.SIGTERM), (status, stderr)


def test_a_second_signal_while_stopping_is_logged_and_the_stop_goes_on(tmp_path):
    deployment = deployment_with_accounts(tmp_path, server={"shutdown": {"healthDrain": 1.5}}, accounts=())
    with marked_serve(deployment) as process:
        assert READY.search(process.stdout.readline().decode())
        process.send_signal(signal.SIGTERM)
        time.sleep(0.5)  # draining /health now
        process.send_signal(signal.SIGTERM)
        process.send_signal(signal.SIGINT)
        assert process.wait(30) == 0
        stderr = process.stderr.read().decode()
    assert "Traceback" not in stderr and "ReactorNotRunning" not in stderr, stderr
    assert "Received SIGTERM, shutting down." in stderr
    assert "Received SIGINT while stopping; the shutdown goes on" in stderr
    assert "apid stopped" in stderr


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="worker processes need two CPUs")
@pytest.mark.parametrize("when", ["serving", "starting"])
def test_the_workers_of_a_parent_killed_end_within_two_seconds(two_workers, when):
    """The workers are in a process group of their own (a group kill misses them): serving
    requests whose bodies never end (which a SIGTERM would wait 20 s for), or still starting
    when the parent dies, each ends by itself."""
    with marked_serve(two_workers) as process, ExitStack() as stack:
        if when == "serving":
            port = int(READY.search(process.stdout.readline().decode()).group(1))
            workers = children(process.pid)
            assert len(workers) == 2 and all(os.getpgid(pid) != process.pid for pid in workers)
            for _ in range(6):  # on whichever worker accepts each
                unfinished = stack.enter_context(socket.create_connection(("127.0.0.1", port)))
                unfinished.sendall(b"POST /register HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
            time.sleep(0.5)  # read by now: in flight
        else:  # both spawned (the migration child has ended), neither serving yet
            assert wait_for(lambda: len(children(process.pid)) == 2, timeout=30, interval=0.01)
        process.kill()
        process.wait()
        killed = time.monotonic()
        assert wait_for(lambda: not marked(process.mark), timeout=ORPHAN_SECONDS), marked(process.mark)
        assert time.monotonic() - killed <= ORPHAN_SECONDS
