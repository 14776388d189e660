"""The asyncio reactor through the real daemon (`reactor: asyncio`, docs/plugins.md "Awaiting
asyncio libraries").

The sample plugin's `team/audit` awaits, in one coroutine, apid's accounts (a Deferred), httpx
(an asyncio HTTP client) posting to an audit service on loopback (tests/receiver.py) and
`asyncio.sleep` before it tries a 503 again. It answers plain, batch and chain calls; a client
that goes away cancels its asyncio task, which the action counts (`GET /teamAudits`); it runs
on Python's standard loop, and on uvloop when asked (`reactor: uvloop`). Under the default reactor the
same action is a 500 problem naming the setting, logged once.
"""

from __future__ import annotations

import http.client
import itertools
import json

import pytest

from assertions import assert_json, assert_problem
from harness import Daemon, Deployment, V, create_team, deployment_with_accounts, wait_for
from receiver import Answer, Receiver

RETRY_PAUSE = 0.1  # the action's asyncio.sleep between a 503 and its second try
_names = itertools.count(1)


@pytest.fixture(scope="module")
def audits(receiver) -> Receiver:
    """The audit service the action posts to: the module's receiver."""
    return receiver


@pytest.fixture
def own_audits(own_receiver) -> Receiver:
    """An audit service for a test's own daemon, whose team ids start at 1 again."""
    return own_receiver


def start(root, audits: Receiver, reactor: str, env: dict | None = None, server: dict | None = None) -> Daemon:
    deployment = deployment_with_accounts(root, server={"reactor": reactor, **(server or {})})
    return Daemon(deployment, env={"APID_SAMPLE_AUDIT_URL": audits.origin, **(env or {})}).start()


@pytest.fixture(scope="module")
def deployment(tmp_path_factory) -> Deployment:
    """The module's daemon runs on the asyncio reactor."""
    return deployment_with_accounts(tmp_path_factory.mktemp("apid-asyncio"), server={"reactor": "asyncio"})


@pytest.fixture(scope="module")
def daemon_options(audits) -> dict:
    """The sample plugin's action posts to `audits`."""
    return {"env": {"APID_SAMPLE_AUDIT_URL": audits.origin}}


def new_team(daemon, admin_token, leader_id: int) -> dict:
    return create_team(daemon, admin_token, f"audited {next(_names)}", leader_id, 10.0)


def posts(audits: Receiver, team: dict) -> list:
    return [received for received in audits.received if received.path == f"/audit/{team['id']}"]


def refuse_once(audits: Receiver, *teams: dict) -> None:
    """The service answers each team's first audit 503, its second 200: the action sleeps between."""
    for team in teams:
        audits.scripts[f"/audit/{team['id']}"] = [Answer(503), Answer(200)]


def shown(team: dict) -> dict:
    return {key: team[key] for key in ("id", "name", "leaderId")}


def cancelled_audits(daemon, token) -> int:
    return assert_json(daemon.request("GET", "/teamAudits", token=token))["cancelled"]


def leave_during(daemon, token: str, method: str, path: str, body: bytes | None, arrived) -> None:
    """Send a request, wait until `arrived()` (the action is then awaiting httpx), then close
    the connection without reading the answer: the client went away."""
    connection = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=10)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    connection.request(method, path, body=body, headers=headers)
    try:
        assert wait_for(arrived), "the audit service never heard of the call"
    finally:
        connection.close()


def test_the_daemon_runs_on_the_asyncio_reactor_on_the_standard_loop(daemon):
    assert "reactor asyncio on the standard event loop)" in daemon.ready


def test_a_call_awaits_apids_accounts_httpx_and_asyncio_sleep(daemon, admin_token, user_token, user_id, audits):
    team = new_team(daemon, admin_token, user_id)
    refuse_once(audits, team)
    reply = daemon.request("GET", f"{V}/team/audit/{team['id']}", token=user_token)
    assert assert_json(reply) == shown(team)  # the user's RESPONSE fields: no budget
    first, second = posts(audits, team)
    assert first.json == second.json == {"team": team["id"], "reader": "alice", "leader": "alice"}
    assert second.at - first.at >= RETRY_PAUSE  # asyncio.sleep ran between the two tries


def test_a_failing_audit_service_is_the_actions_problem(daemon, admin_token, user_token, user_id, audits):
    team = new_team(daemon, admin_token, user_id)
    audits.scripts[f"/audit/{team['id']}"] = [Answer(500)]
    body = assert_problem(daemon.request("GET", f"{V}/team/audit/{team['id']}", token=user_token), 500)
    assert body["detail"] == "the audit service answered 500"


def test_a_batch_runs_the_action_per_element_and_reports_the_one_that_failed(
    daemon, admin_token, user_token, user_id, audits
):
    teams = [new_team(daemon, admin_token, user_id) for _ in range(3)]
    refuse_once(audits, teams[0], teams[2])
    audits.scripts[f"/audit/{teams[1]['id']}"] = [Answer(500)]
    reply = daemon.request(
        "POST", "/b0.1/team/audit", {"batch": [{"id": t["id"]} for t in teams], "combine": True}, token=user_token
    )
    body = assert_json(reply, 207)
    assert body["data"] == [shown(teams[0]), None, shown(teams[2])]
    [error] = body["errors"]
    assert (error["index"], error["status"], error["detail"]) == (1, 500, "the audit service answered 500")
    assert [len(posts(audits, team)) for team in teams] == [2, 1, 2]


def test_a_chain_runs_the_action_as_a_link(daemon, admin_token, user_id, audits):
    team = new_team(daemon, admin_token, user_id)
    refuse_once(audits, team)
    chain = {"key": "id", "combine": True, "order": {"team/audit": "leaderId", "person/show": "return"}}
    reply = daemon.request("GET", f"/c0.1/team/show/{team['id']}", {"chain": chain}, token=admin_token)
    shown_team, audited, leader = assert_json(reply)
    assert (shown_team, audited) == ({**shown(team), "budget": 10.0}, shown(team))  # each link's RESPONSE fields
    assert (leader["id"], leader["username"]) == (user_id, "alice")
    assert [received.json["reader"] for received in posts(audits, team)] == ["admin", "admin"]


def test_a_client_that_goes_away_cancels_the_actions_asyncio_task(daemon, admin_token, user_token, user_id, audits):
    team = new_team(daemon, admin_token, user_id)
    audits.scripts[f"/audit/{team['id']}"] = [Answer(hang=True)]
    before = cancelled_audits(daemon, user_token)
    leave_during(daemon, user_token, "GET", f"{V}/team/audit/{team['id']}", None, lambda: posts(audits, team))
    assert wait_for(lambda: cancelled_audits(daemon, user_token) == before + 1), daemon.stderr
    assert "Traceback" not in daemon.stderr and "Unhandled" not in daemon.stderr


def test_a_client_that_goes_away_cancels_every_running_element_of_a_batch(
    daemon, admin_token, user_token, user_id, audits
):
    teams = [new_team(daemon, admin_token, user_id) for _ in range(3)]
    for team in teams:
        audits.scripts[f"/audit/{team['id']}"] = [Answer(hang=True)]
    before = cancelled_audits(daemon, user_token)
    body = json.dumps({"batch": [{"id": t["id"]} for t in teams]}).encode()
    leave_during(
        daemon, user_token, "POST", "/b0.1/team/audit", body, lambda: all(posts(audits, team) for team in teams)
    )
    assert wait_for(lambda: cancelled_audits(daemon, user_token) == before + 3), daemon.stderr
    assert "Traceback" not in daemon.stderr and "Unhandled" not in daemon.stderr


def test_shutdown_cancels_the_asyncio_task_of_a_call_still_running_when_the_drain_ends(tmp_path, own_audits):
    """SIGTERM: the port closes, in-flight calls get the drain time (2 s here), then their
    connections close, which cancels what still runs; the daemon exits cleanly."""
    daemon = start(tmp_path, own_audits, "asyncio", server={"shutdown": {"drain": 2}})
    token = daemon.login("admin", "admin-password-1")
    team = new_team(daemon, token, 1)
    own_audits.scripts[f"/audit/{team['id']}"] = [Answer(hang=True)]
    connection = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=60)
    try:
        connection.request("GET", f"{V}/team/audit/{team['id']}", headers={"Authorization": f"Bearer {token}"})
        assert wait_for(lambda: posts(own_audits, team))
        assert daemon.stop(timeout=60) == 0
    finally:
        connection.close()
    assert f"audit of team {team['id']} cancelled" in daemon.stderr
    assert "Traceback" not in daemon.stderr and "Task was destroyed" not in daemon.stderr


def test_the_uvloop_reactor_runs_the_action_on_uvloop(tmp_path, own_audits):
    daemon = start(tmp_path, own_audits, "uvloop")
    try:
        assert "reactor asyncio on uvloop)" in daemon.ready
        token = daemon.login("admin", "admin-password-1")
        team = new_team(daemon, token, 1)
        refuse_once(own_audits, team)
        assert assert_json(daemon.request("GET", f"{V}/team/audit/{team['id']}", token=token))["id"] == team["id"]
        assert len(posts(own_audits, team)) == 2
    finally:
        daemon.stop()


def test_under_the_default_reactor_the_action_is_a_500_naming_the_setting_logged_once(tmp_path, own_audits):
    daemon = start(tmp_path, own_audits, "default")
    try:
        assert "reactor default (EPollReactor))" in daemon.ready
        token = daemon.login("admin", "admin-password-1")
        team = new_team(daemon, token, 1)
        for _ in range(2):
            body = assert_problem(daemon.request("GET", f"{V}/team/audit/{team['id']}", token=token), 500)
            assert "`reactor: asyncio` in service_server.yml" in body["detail"], body
        assert posts(own_audits, team) == []
        told = [line for line in daemon.stderr.splitlines() if "team/audit awaited asyncio" in line]
        assert len(told) == 1, daemon.stderr
        assert "set `reactor: asyncio` in service_server.yml" in told[0]
    finally:
        daemon.stop()
