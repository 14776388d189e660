"""One daemon, one version of its code (issue 24, item 3): a plugin installed into the live
environment while the daemon runs never answers from it. A worker killed is not replaced by
one running the new code: the replacement refuses to serve, the parent logs that the daemon
must be restarted (naming the change) and replaces it no more, and the other worker serves on.

The shared virtualenv stays untouched: the daemon runs with a folder of its own first on
PYTHONPATH, and a distribution's metadata appears there (as `pip install` would write it).
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from harness import ADMIN, ADMIN_ACCOUNT, V, deployment_with_accounts, running_daemon, wait_for

pytestmark = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="worker processes need two CPUs")


def install_plugin(site, name: str, version: str) -> None:
    """The metadata pip writes for a distribution providing a controller (its code never loads here)."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "entry_points.txt").write_text("[apid.controllers]\nghost = apid_ghost.controller:Ghost\n")


def test_a_worker_replaced_after_a_plugin_was_installed_refuses_and_the_others_serve_on(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    deployment = deployment_with_accounts(tmp_path / "deployment", api={"procCores": 2}, accounts=(ADMIN_ACCOUNT,))
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
    with running_daemon(deployment, env={"PYTHONPATH": path}) as daemon:
        token = daemon.login(ADMIN[0], ADMIN[1])
        install_plugin(site, "apid-ghost", "1.0")
        victim, survivor = daemon.workers()
        os.kill(victim, signal.SIGKILL)
        assert wait_for(lambda: "restart apid to serve it" in daemon.stderr, timeout=30), daemon.stderr
        statuses = [daemon.request("GET", f"{V}/person/show/1", token=token).status for _ in range(20)]
        statuses += [daemon.request("GET", f"{V}/ghost/list", token=token).status for _ in range(5)]
        time.sleep(2.5)  # past the first replacements' back-off: none comes
        assert daemon.workers() == [survivor]
        assert statuses == [200] * 20 + [404] * 5  # all from the code the daemon started with
    log = daemon.stderr
    assert "apid: worker 0 refuses to serve" in log or "apid: worker 1 refuses to serve" in log
    assert "the code installed changed since the daemon started (apid-ghost 1.0 installed)" in log
    assert log.count("restart apid to serve it") == 1
    assert "the code installed changed since apid started (apid-ghost 1.0 installed)" in log
