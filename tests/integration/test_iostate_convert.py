"""`apid iostate convert` on a file written for the original framework, then a daemon serving
the converted file in place of the sample `team` controller's (issue 14, item 5)."""

from __future__ import annotations

import json
from pathlib import Path

from harness import ADMIN, USER, create_team, deployment_with_accounts, everyone, running_daemon

ORIGINAL_TEAM = Path(__file__).resolve().parents[1] / "data" / "beapi_team.json"


def test_a_converted_original_file_is_served(tmp_path):
    deployment = deployment_with_accounts(tmp_path)
    target = deployment.root / "iostate" / "team.json"
    done = deployment.cli("iostate", "convert", str(ORIGINAL_TEAM), "--output", str(target))
    assert done.returncode == 0, done.stderr
    assert f"{ORIGINAL_TEAM}: controller team, version 1: renamed 'defaultAction' to 'DEFAULTACTION'" in done.stderr
    assert json.loads(target.read_text())["IOSTATE"]["NETWORKGRP"] == "public"
    assert deployment.cli("iostate", "check").returncode == 0

    with running_daemon(deployment) as daemon:
        admin = daemon.login(*ADMIN[:2])
        user = daemon.login(*USER[:2])
        leader = everyone(daemon, admin)[0]["id"]
        team = create_team(daemon, admin, "Platform", leader, 1000.5)

        as_admin = daemon.request("GET", f"/v0.1/team/show/{team['id']}", token=admin)
        assert as_admin.status == 200, as_admin.body
        assert as_admin.json == {"id": team["id"], "name": "Platform", "leaderId": leader, "budget": 1000.5}  # "*"
        as_user = daemon.request("GET", f"/v0.1/team/show/{team['id']}", token=user)
        assert as_user.json == {"id": team["id"], "name": "Platform", "leaderId": leader}

        listed = daemon.request("GET", "/v0.1/team", token=user)  # DEFAULTACTION list, open to the group
        assert listed.status == 200, listed.body
        assert [row["name"] for row in listed.json] == ["Platform"]

        old = daemon.request("GET", f"/v0.1-2/team/show/{team['id']}", token=user)
        assert old.status == 200
        assert old.json == {"id": team["id"], "name": "Platform"}
        assert old.headers["Deprecation"] == "@1924905600"  # 12/31/2030, the DEPRECATED list form
