"""apid's pytest plugin (`apid.testing.pytest_plugin`) as a plugin's tests use it: the shipped
`apid_daemon` fixture runs the real `apid serve` (here on the asyncio reactor) with the
installed sample plugin, and `webhook_receiver` stands in for the service its asyncio
actions call and receives the daemon's signed webhooks."""

from __future__ import annotations

import pytest

from apid.testing import Answer, ApidDaemon, WebhookReceiver


@pytest.fixture(scope="module")
def apid_daemon_settings(webhook_receiver):
    """The sample plugin's actions call the module's receiver; the daemon runs on asyncio."""
    return {"reactor": "asyncio", "env": {"APID_SAMPLE_AUDIT_URL": webhook_receiver.origin}}


def admin_login(daemon: ApidDaemon):
    return daemon.caller("ROLE_ADMIN")


def new_team(daemon: ApidDaemon, admin, name: str) -> dict:
    reply = daemon.post("/v0.1/team/create", {"name": name, "leaderId": admin.id}, caller=admin)
    assert reply.status == 200, reply.text
    return reply.json


def test_the_fixture_serves_on_the_reactor_asked_with_its_accounts(apid_daemon):
    assert "reactor asyncio" in apid_daemon.ready
    admin, user = apid_daemon.accounts
    assert (admin.username, user.username) == ("admin", "user")
    assert apid_daemon.login(user.username, user.password)


def test_an_asyncio_action_through_the_shipped_daemon(apid_daemon, webhook_receiver: WebhookReceiver):
    admin = admin_login(apid_daemon)
    team = new_team(apid_daemon, admin, "audited")
    webhook_receiver.script(f"/audit/{team['id']}", 503, 200)
    reply = apid_daemon.get(f"/v0.1/team/audit/{team['id']}", caller=admin)
    assert reply.status == 200, reply.text
    first, second = webhook_receiver.wait_for(2, path=f"/audit/{team['id']}")
    assert second.at - first.at >= 0.1


def test_an_upstream_that_is_down_answers_503_with_retry_after(apid_daemon, webhook_receiver):
    admin = admin_login(apid_daemon)
    team = new_team(apid_daemon, admin, "relayed")
    webhook_receiver.script(f"/relay/{team['id']}", Answer(503, {"Retry-After": "12"}))
    reply = apid_daemon.get(f"/v0.1/team/relay/{team['id']}", caller=admin)
    assert reply.status == 503, reply.text
    assert reply.problem["type"] == "urn:apid:problem:service-unavailable"
    assert reply.headers["retry-after"] == "12"


def test_a_batch_element_whose_upstream_is_down_carries_the_retry_after_in_its_problem(apid_daemon, webhook_receiver):
    """An element has no headers: its problem says when to try it again, as its call's header would."""
    admin = admin_login(apid_daemon)
    up, down = new_team(apid_daemon, admin, "up"), new_team(apid_daemon, admin, "down")
    webhook_receiver.script(f"/relay/{down['id']}", Answer(503, {"Retry-After": "7"}))
    reply = apid_daemon.batch("team/relay", [{"id": up["id"]}, {"id": down["id"]}], caller=admin, combine=True)
    assert reply.status == 207, reply.text
    (error,) = reply.json["errors"]
    assert error["index"] == 1 and error["status"] == 503 and error["retryAfter"] == 7
    assert reply.json["data"][0]["id"] == up["id"]


def test_the_api_document_lists_the_upstream_failures_of_the_actions_that_declare_one(apid_daemon):
    admin = admin_login(apid_daemon)
    paths = apid_daemon.get("/openapi.json", caller=admin).json["paths"]
    relay, show = paths["/v0.1/team/relay/{id}"]["get"], paths["/v0.1/team/show/{id}"]["get"]
    assert {"502", "503", "504"} <= relay["responses"].keys()
    assert {"502", "504"}.isdisjoint(show["responses"].keys()) and "503" in show["responses"]
    chain = paths["/c0.1/team/relay/{id}"]["post"]
    assert {"502", "504"} <= chain["responses"].keys()


def test_a_hook_to_the_receiver_gets_signed_deliveries(apid_daemon, webhook_receiver):
    admin = admin_login(apid_daemon)
    hook = apid_daemon.post(
        "/v0.1/hook/create", {"url": webhook_receiver.url("/hooks/team"), "service": "team"}, caller=admin
    )
    assert hook.status == 200, hook.text
    team = new_team(apid_daemon, admin, "hooked")
    [delivery] = webhook_receiver.wait_for(1, path="/hooks/team")
    assert delivery.json["type"] == "team/create" and delivery.json["data"]["id"] == team["id"]
    assert delivery.verified(hook.json["secret"])
    assert not delivery.verified("whsec_" + "A" * 44)


def test_a_daemon_that_stops_before_it_is_ready_is_reported_at_once_with_its_log(tmp_path):
    """A mistake only `apid serve` reads (a plugin's setting): not "did not become ready within
    60 s", but its exit status and the line naming the key, as soon as it ended."""
    from time import monotonic

    from apid.testing import DaemonFailed

    daemon = ApidDaemon(tmp_path, server={"plugins": {"team": {"defaultBudget": "lots"}}})
    began = monotonic()
    with pytest.raises(DaemonFailed) as failed:
        daemon.start(timeout=60)
    assert monotonic() - began < 30
    assert "apid serve exited with status 1 before it was ready" in str(failed.value)
    assert "plugins.team.defaultBudget: expected a whole number" in str(failed.value)


def test_a_daemon_of_migrations_already_made_starts_from_their_copy(tmp_path):
    """The first daemon of a set of revisions migrates and keeps its database; the next starts
    from a copy, its accounts made in the test's process: up to date, and they log in."""
    from apid.testing import Account
    from apid.testing.template import template_for

    template = template_for(())
    with ApidDaemon(tmp_path / "first"):  # migrates and keeps it, or (another test was first) copies it
        assert template.exists()
    kept = template.stat().st_mtime_ns
    accounts = (Account("keeper", "keeper-password-1", ("ROLE_ADMIN",)),)
    with ApidDaemon(tmp_path / "second", accounts=accounts) as second:
        assert second.login("keeper", "keeper-password-1")
        status = second.cli("migrate", "--status")
        assert status.returncode == 0, status.stderr  # nothing pending: the copy is at head
    assert template.stat().st_mtime_ns == kept  # copied from, not made again
