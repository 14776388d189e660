"""SIGHUP re-reads the IO State files: a valid change takes effect at once, a broken file
is refused and the rules in force stay."""

from __future__ import annotations

import json
import signal

import pytest

from harness import ADMIN, USER, Daemon, deployment_with_accounts, running_daemon, wait_for


@pytest.fixture()
def reloading(tmp_path):
    with running_daemon(deployment_with_accounts(tmp_path)) as daemon:
        yield daemon


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
