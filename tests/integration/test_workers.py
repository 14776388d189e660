"""`procCores: 2` on the embedded default (SQLite, no Redis): one `apid serve` parent and two
worker processes sharing its socket (issue 15, items 1 and 2).

The parent prints the ready line and tells systemd READY=1 once both workers serve; replaces
a worker that dies, losing no answered write; counts rate and abuse limits for both workers,
so they stay exact under concurrent load; and on SIGTERM lets both finish and exits 0.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from assertions import assert_problem
from harness import (
    ADMIN,
    Daemon,
    Deployment,
    V,
    deployment_with_accounts,
    new_person,
    running_daemon,
    show_person,
    wait_for,
)
from logins import GUESSES, PAIR_LIMIT, guess_at_once

pytestmark = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="worker processes need two CPUs")

RATE_LIMIT = 50
CHARGES = 200


def two_workers(root: Path, **server) -> Deployment:
    return deployment_with_accounts(
        root,
        api={"procCores": 2, "throttle": {"rateLimit": {"ROLE_USER": RATE_LIMIT}}},
        server={"apiThrottle": True, **server},
    )


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
    with running_daemon(two_workers(tmp_path_factory.mktemp("workers"))) as daemon:
        daemon.admin_token = daemon.login(ADMIN[0], ADMIN[1])
        yield daemon


def test_the_parent_is_ready_once_both_workers_serve_the_same_port(workers):
    assert workers.ready.rstrip().endswith("2 workers)")
    pids = workers.workers()
    assert len(pids) == 2
    replies = [workers.request("GET", "/health") for _ in range(20)]
    assert {reply.status for reply in replies} == {200}


def test_rate_limits_are_exact_across_workers(workers):
    """200 calls at once by one user with a limit of 50, over connections both workers accept:
    exactly 50 are answered (the 50th starts the lock), the other 150 are 429."""
    person = new_person(workers, workers.admin_token, roles=["ROLE_USER"])
    token = workers.login(person["username"], person["password"])
    path = f"{V}/person/show/{person['id']}"
    with ThreadPoolExecutor(max_workers=50) as pool:
        replies = list(pool.map(lambda _: workers.request("GET", path, token=token, timeout=60), range(CHARGES)))
    statuses = Counter(reply.status for reply in replies)
    assert statuses[429] == CHARGES - RATE_LIMIT, statuses
    assert sum(count for status, count in statuses.items() if status != 429) == RATE_LIMIT
    for reply in replies:
        if reply.status == 429:
            assert_problem(reply, 429)


def test_abuse_limits_are_exact_across_workers(workers):
    person = new_person(workers, workers.admin_token)
    assert guess_at_once([workers], person["username"], "127.0.0.81") == {401: PAIR_LIMIT, 429: GUESSES - PAIR_LIMIT}


def test_a_killed_worker_is_replaced_and_no_answered_write_is_lost(workers):
    people = [new_person(workers, workers.admin_token) for _ in range(10)]
    victim, survivor = workers.workers()
    os.kill(victim, signal.SIGKILL)
    assert wait_for(lambda: len(workers.workers()) == 2 and victim not in workers.workers(), timeout=30)
    assert survivor in workers.workers()
    for person in people:  # served by whichever worker accepts: each one answered is stored
        assert show_person(workers, workers.admin_token, person["id"])["username"] == person["username"]
    assert "was killed by signal 9; replacing it in 1 s" in workers.stderr


def test_ready_reaches_systemd_once_when_both_workers_serve_and_stopping_ends_them_all(tmp_path):
    notify = tmp_path / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind(str(notify))
        listener.settimeout(30)
        daemon = Daemon(two_workers(tmp_path / "deployment"), env={"NOTIFY_SOCKET": str(notify)}).start()
        try:
            assert listener.recv(4096) == b"READY=1\nSTATUS=serving with 2 workers"
            pids = daemon.workers()
            assert daemon.stop() == 0
            assert listener.recv(4096) == b"STOPPING=1"
        finally:
            daemon.stop()
        listener.settimeout(0.5)
        with pytest.raises(TimeoutError):  # the workers told the parent, never systemd
            listener.recv(4096)
    assert not any(Path(f"/proc/{pid}").exists() for pid in pids)


def test_a_worker_that_cannot_start_stops_the_parent_with_its_error(tmp_path):
    deployment = two_workers(tmp_path)
    (deployment.root / "iostate" / "person.json").write_text("{not json")
    daemon = Daemon(deployment)
    with pytest.raises(RuntimeError, match="did not become ready"):
        daemon.start()
    assert daemon.process.wait(30) == 1
    assert "person.json: not valid JSON" in daemon.stderr
    assert "apid: cannot start: worker" in daemon.stderr


def test_a_worker_started_by_hand_refuses_with_one_line():
    """`apid worker` is the parent's: run without its socket, channel and configuration, it says so."""
    command = [sys.executable, "-m", "apid", "worker", "--index", "0", "--family", "AF_INET", "--reactor", "default"]
    command += ["--parent", str(os.getpid())]
    alone = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert (alone.returncode, alone.stderr) == (
        1,
        "apid: `apid worker` is started by `apid serve` (procCores above 1), not by hand\n",
    )
    # descriptors 3 and 4 open, but no configuration on standard input
    empty = subprocess.run(
        ["bash", "-c", 'exec "$@" 3</dev/null 4</dev/null', "bash", *command],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert empty.returncode == 1
    assert empty.stderr.startswith("apid: `apid worker` read no configuration from its parent")


@pytest.mark.parametrize("reactor", ["default", "asyncio"])
@pytest.mark.parametrize("cores", [1, 2])
def test_sigterm_ends_every_process_with_no_traceback_on_any_reactor(tmp_path, reactor, cores):
    """The parent shuts the shared socket down at SIGTERM; a worker woken on it stops reading
    instead of logging the failed accept (EINVAL) as an unhandled error."""
    deployment = deployment_with_accounts(tmp_path, api={"procCores": cores}, server={"reactor": reactor})
    daemon = Daemon(deployment).start()
    try:
        for _ in range(20):  # connections accepted by either worker
            assert daemon.request("GET", "/health").status == 200
    finally:
        status = daemon.stop()
    assert status == 0
    assert "Traceback" not in daemon.stderr
    assert "Unhandled Error" not in daemon.stderr
    assert daemon.stderr.count("apid stopped") == max(cores, 1) + (1 if cores > 1 else 0)
