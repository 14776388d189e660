"""A reload as systemd sees it (issue 39): SIGHUP, to one daemon or to the parent of worker
processes, is told RELOADING=1 (with MONOTONIC_USEC, as systemd 253 and later want it), then
READY=1 once every process swapped the rules in, or READY=1 with STATUS= and ERRNO= saying why the rules in
force stay; and `apid iostate reload` waits for no worker the parent has replaced."""

from __future__ import annotations

import json
import os
import signal
import socket
import time

import pytest

from harness import ADMIN, USER, Daemon, deployment_with_accounts, running_daemon, wait_for


def edit_person(daemon: Daemon, roles: list[str]) -> None:
    path = daemon.deployment.root / "iostate" / "person.json"
    document = json.loads(path.read_text())
    document["IOSTATE"]["VERSION"]["1"]["URI"]["show"]["ROLES"].update(DEFAULT=roles, BATCH=["ROLE_ADMIN"])
    path.write_text(json.dumps(document))


def show_status(daemon: Daemon, person_id: int) -> int:
    return daemon.request("GET", f"/v0.1/person/show/{person_id}", token=daemon.login(*USER[:2])).status


@pytest.fixture
def notify(tmp_path):
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind(str(tmp_path / "notify"))
        listener.settimeout(30)
        yield listener


def reload(daemon: Daemon, notify: socket.socket) -> str:
    """SIGHUP; what systemd hears after RELOADING=1, which must come first, stamped when the
    reload began."""
    assert daemon.process is not None
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    daemon.process.send_signal(signal.SIGHUP)
    reloading, stamp = notify.recv(4096).decode().split("\n")
    assert reloading == "RELOADING=1"
    name, usec = stamp.split("=")
    assert name == "MONOTONIC_USEC" and before <= int(usec) <= time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    return notify.recv(4096).decode()


@pytest.mark.parametrize("workers", [1, 2], ids=["one-process", "two-workers"])
def test_a_reload_tells_systemd_when_it_is_done_and_why_it_was_refused(tmp_path, notify, workers):
    if workers > len(os.sched_getaffinity(0)):
        pytest.skip("worker processes need two CPUs")
    deployment = deployment_with_accounts(tmp_path / "deployment", api={"procCores": workers})
    with running_daemon(deployment, env={"NOTIFY_SOCKET": notify.getsockname()}) as daemon:
        assert notify.recv(4096).decode().startswith("READY=1\nSTATUS=serving")
        admin = daemon.login(*ADMIN[:2])
        mine = daemon.request("GET", "/v0.1/person/list", token=admin).json[-1]["id"]
        assert show_status(daemon, mine) == 200

        edit_person(daemon, ["ROLE_ADMIN"])
        assert reload(daemon, notify) == "READY=1\nSTATUS=serving; IO State reloaded"
        # READY=1 once every worker serves the new rules: none still reads the file edited next
        assert [show_status(daemon, mine) for _ in range(8)] == [403] * 8

        edit_person(daemon, ["ROLE_NOBODY"])
        refused = reload(daemon, notify).split("\n")
        assert refused[0] == "READY=1" and refused[2] == "ERRNO=22", refused
        assert refused[1].startswith("STATUS=IO State reload refused, the rules in force stay: ")
        assert "person.json" in refused[1] and "ROLE_NOBODY" in refused[1]
        assert [show_status(daemon, mine) for _ in range(4)] == [403] * 4
        assert daemon.request("GET", f"/v0.1/person/show/{mine}", token=admin).status == 200


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="worker processes need two CPUs")
def test_iostate_reload_waits_for_no_worker_the_parent_replaced(tmp_path):
    deployment = deployment_with_accounts(tmp_path / "deployment", api={"procCores": 2})
    with running_daemon(deployment) as daemon:
        killed, kept = daemon.workers()
        os.kill(killed, signal.SIGKILL)
        assert wait_for(lambda: killed not in daemon.workers() and len(daemon.workers()) == 2, timeout=30)
        assert kept in daemon.workers()
        assert wait_for(lambda: "serves again" in daemon.stderr, timeout=60)
        done = deployment.cli("iostate", "reload")
        assert (done.returncode, done.stderr) == (0, "")
        host = socket.gethostname()
        assert done.stdout.splitlines() == sorted(f"{host}:{pid}: ok" for pid in daemon.workers())
        assert f"{host}:{killed}" not in done.stdout
