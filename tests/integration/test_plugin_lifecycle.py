"""Through the real daemon: a plugin's setting (the sample plugin's `plugins.team.defaultBudget`)
reaches its controller, a bad one stops `apid serve` naming the file, the line and the key, and
the plugin's start-up hook runs before the daemon listens, its shutdown hook after SIGTERM and
before the pools close."""

from __future__ import annotations

import re

from harness import ADMIN, Daemon, Deployment, V, deployment_with_accounts


def test_a_plugin_setting_reaches_its_controller_and_its_hooks_run_in_order(tmp_path):
    deployment = deployment_with_accounts(tmp_path, server={"plugins": {"team": {"defaultBudget": 7}}})
    daemon = Daemon(deployment).start()
    try:
        started = daemon.stderr  # written before the ready line was printed
        assert "team plugin started (default budget 7)" in started
        assert "team plugin stopping" not in started
        token = daemon.login(*ADMIN[:2])
        me = daemon.request("GET", f"{V}/person/list", token=token).json[0]
        created = daemon.request("POST", f"{V}/team/create", {"name": "Core", "leaderId": me["id"]}, token=token)
        assert created.status == 200, created.body
        assert created.json["budget"] == 7
    finally:
        assert daemon.stop() == 0
    log = daemon.stderr
    assert log.index("team plugin started") < log.index("Received SIGTERM") < log.index("team plugin stopping")
    assert log.index("team plugin stopping") < log.index("apid stopped")


def test_a_bad_plugin_setting_stops_the_start_naming_the_file_the_line_and_the_key(tmp_path):
    deployment = Deployment(tmp_path, server={"plugins": {"team": {"defaultBudgte": 7}}})
    deployment.write()
    done = deployment.cli("serve", "--listen", "tcp:0:interface=127.0.0.1")
    assert done.returncode == 1, done.stderr
    assert re.search(
        r"apid: cannot start: \S+/etc/service_server\.yml:\d+: test\.plugins\.team\.defaultBudgte: unknown key; "
        r"allowed here: defaultBudget",
        done.stderr,
    ), done.stderr
    assert "team plugin started" not in done.stderr
