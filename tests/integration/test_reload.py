"""SIGHUP and `apid iostate reload` re-read the IO State files: a valid change takes effect on
every daemon sharing the database, a broken file (or one naming a field the running code does
not declare) is refused and the rules in force stay everywhere."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time

import pytest

from harness import ADMIN, REPO, USER, Daemon, Deployment, deployment_with_accounts, running_daemon, wait_for


def _edit_person(daemon: Daemon, change) -> None:
    path = daemon.deployment.root / "iostate" / "person.json"
    document = json.loads(path.read_text())
    change(document["IOSTATE"]["VERSION"]["1"]["URI"])
    path.write_text(json.dumps(document))


def test_sighup_applies_a_valid_change_and_refuses_a_broken_one(reloading):
    user = reloading.login(*USER[:2])
    mine = reloading.request("GET", "/v0.1/person/list", token=reloading.login(*ADMIN[:2])).json[-1]["id"]
    assert reloading.request("GET", f"/v0.1/person/show/{mine}", token=user).status == 200

    _edit_person(reloading, lambda uri: uri["show"]["ROLES"].update(DEFAULT=["ROLE_ADMIN"], BATCH=["ROLE_ADMIN"]))
    reloading.process.send_signal(signal.SIGHUP)
    assert wait_for(lambda: reloading.request("GET", f"/v0.1/person/show/{mine}", token=user).status == 403)

    _edit_person(reloading, lambda uri: uri["show"]["ROLES"].update(DEFAULT=["ROLE_NOBODY"]))
    reloading.process.send_signal(signal.SIGHUP)
    assert wait_for(lambda: "IO State reload refused" in reloading.stderr)
    assert "ROLE_NOBODY" in reloading.stderr
    assert reloading.request("GET", f"/v0.1/person/show/{mine}", token=user).status == 403
    admin = reloading.login(*ADMIN[:2])
    assert reloading.request("GET", f"/v0.1/person/show/{mine}", token=admin).status == 200


# --- every daemon on the database ------------------------------------------------------------------


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgresql)])
def two_daemons(request, tmp_path):
    """Two daemons of one deployment: one SQLite file, or one PostgreSQL database."""
    server = {}
    if request.param == "postgresql":
        server = {"database": {"url": request.getfixturevalue("postgres").new_database(tmp_path.name.lower())}}
    deployment = deployment_with_accounts(tmp_path, server=server)
    with running_daemon(deployment) as one, running_daemon(deployment) as two:
        yield one, two


def show_statuses(daemons, person_id: int) -> list[int]:
    """What the user gets from person/show on each daemon."""
    return [
        daemon.request("GET", f"/v0.1/person/show/{person_id}", token=daemon.login(*USER[:2])).status
        for daemon in daemons
    ]


def someone(daemon: Daemon) -> int:
    return daemon.request("GET", "/v0.1/person/list", token=daemon.login(*ADMIN[:2])).json[-1]["id"]


def test_the_command_reloads_every_daemon_and_a_broken_file_none(two_daemons):
    one, _ = two_daemons
    mine = someone(one)
    assert show_statuses(two_daemons, mine) == [200, 200]

    _edit_person(one, lambda uri: uri["show"]["ROLES"].update(DEFAULT=["ROLE_ADMIN"], BATCH=["ROLE_ADMIN"]))
    done = one.deployment.cli("iostate", "reload")
    assert done.returncode == 0, done.stderr
    host = socket.gethostname()
    assert sorted(done.stdout.splitlines()) == sorted(f"{host}:{daemon.process.pid}: ok" for daemon in two_daemons)
    assert wait_for(lambda: show_statuses(two_daemons, mine) == [403, 403], timeout=1)

    _edit_person(one, lambda uri: uri["show"]["ROLES"].update(DEFAULT=["ROLE_NOBODY"]))
    done = one.deployment.cli("iostate", "reload")
    assert done.returncode == 1
    assert "person.json" in done.stderr and "ROLE_NOBODY" in done.stderr
    assert done.stdout == ""
    time.sleep(1)  # had anything moved, both would have reloaded by now
    assert show_statuses(two_daemons, mine) == [403, 403]
    admin = one.login(*ADMIN[:2])
    assert [daemon.request("GET", f"/v0.1/person/show/{mine}", token=admin).status for daemon in two_daemons] == [
        200,
        200,
    ]
    assert one.stderr.count("IO State reloaded") == 2 and "IO State reload refused" not in one.stderr


def test_sighup_to_one_daemon_reloads_the_other(two_daemons):
    one, two = two_daemons
    mine = someone(one)
    _edit_person(one, lambda uri: uri["show"]["ROLES"].update(DEFAULT=["ROLE_ADMIN"], BATCH=["ROLE_ADMIN"]))
    one.process.send_signal(signal.SIGHUP)
    # within a second (polled every half second), with room for a busy machine
    assert wait_for(lambda: show_statuses([two], mine) == [403], timeout=2)
    assert show_statuses([one], mine) == [403]


def test_the_command_with_no_daemon_running_says_so(tmp_path):
    deployment = Deployment(tmp_path)
    deployment.write()
    deployment.migrate()
    done = deployment.cli("iostate", "reload")
    assert done.returncode == 0, done.stderr
    assert "no daemon runs on this database" in done.stdout


def test_the_command_names_a_daemon_that_did_not_report(reloading):
    reloading.process.send_signal(signal.SIGSTOP)  # alive for the database, silent
    try:
        done = reloading.deployment.cli("iostate", "reload", "--wait", "0.5")
    finally:
        reloading.process.send_signal(signal.SIGCONT)
    assert done.returncode == 1
    assert done.stdout == f"{socket.gethostname()}:{reloading.process.pid}: no report within 0.5 s\n"


def test_the_command_and_sighup_to_the_parent_reload_every_worker(tmp_path):
    with running_daemon(deployment_with_accounts(tmp_path, api={"procCores": 2})) as daemon:
        workers = daemon.workers()
        assert len(workers) == 2
        mine = someone(daemon)
        _edit_person(daemon, lambda uri: uri["show"]["ROLES"].update(DEFAULT=["ROLE_ADMIN"], BATCH=["ROLE_ADMIN"]))
        done = daemon.deployment.cli("iostate", "reload")
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == sorted(f"{socket.gethostname()}:{pid}: ok" for pid in workers)

        _edit_person(daemon, lambda uri: uri["show"]["ROLES"].update(DEFAULT=["ROLE_ADMIN", "ROLE_USER"]))
        daemon.process.send_signal(signal.SIGHUP)
        assert wait_for(lambda: daemon.stderr.count("IO State reloaded") == 4, timeout=2)
        assert all(status == 200 for status in show_statuses([daemon] * 6, mine))  # whichever worker answers


# --- rules that need code the daemon does not run ------------------------------------------------

TEAM_FILE = REPO / "tests" / "sample_plugin" / "apid_sample" / "iostate" / "team.json"
UNDECLARED = (
    "controller team, version 1, action create, REQUEST permitAll: field 'motto' is not one the controller "
    "of team (distribution apid-sample-plugin) stores or answers"
)


def _team_with_a_motto(deployment: Deployment) -> None:
    """The sample team's rules as a version of the plugin with a `motto` would ship them, in
    iostateDir, where they override the rules the loaded code ships."""
    document = json.loads(TEAM_FILE.read_text())
    document["VALUES"]["motto"] = {"type": "String", "description": "The team's motto"}
    document["VERSION"]["1"]["URI"]["create"]["REQUEST"]["permitAll"].append("motto")
    (deployment.root / "iostate" / "team.json").write_text(json.dumps(document))


def test_a_reload_naming_a_field_the_code_does_not_know_is_refused_and_the_rules_stay(reloading):
    _team_with_a_motto(reloading.deployment)
    done = reloading.deployment.cli("iostate", "reload")
    assert done.returncode == 1 and UNDECLARED in done.stderr

    reloading.process.send_signal(signal.SIGHUP)
    assert wait_for(lambda: "IO State reload refused" in reloading.stderr)
    assert UNDECLARED in reloading.stderr
    admin = reloading.login(*ADMIN[:2])
    sent = reloading.request("POST", "/v0.1/team/create", {"name": "Core", "leaderId": 1, "motto": "go"}, token=admin)
    assert sent.status == 400  # refused, not answered 200 with the motto dropped
    assert sent.json["errors"] == [{"field": "motto", "reason": "is not a field of team"}]


def test_start_up_refuses_a_field_the_code_does_not_know(tmp_path):
    deployment = Deployment(tmp_path)
    deployment.write()
    _team_with_a_motto(deployment)
    config = ["--config-dir", str(deployment.config_dir), "--env", deployment.environment]
    serve = [sys.executable, "-m", "apid", "serve", *config, "--listen", "tcp:0:interface=127.0.0.1"]
    started = subprocess.run(serve, capture_output=True, text=True, timeout=60)
    assert started.returncode == 1
    assert "apid: cannot start: " in started.stderr and UNDECLARED in started.stderr
