"""The testing kit (`apid.testing`) runs every kind of action: an `async def` action awaiting
asyncio libraries (httpx, `asyncio.sleep`) as the kit is built by default (on an asyncio loop,
as the daemon's default reactor), the daemon's 500 naming the setting under
`reactor="default"`, and the upstream-failure problems (502, 503 with
Retry-After, 504) answered as docs/plugins.md documents them. In the kit a hook may name a
loopback receiver without `cors.allowedOrigins`."""

from __future__ import annotations

import socket

import pytest

from apid.testing import Answer, InMemoryApid, StillWaiting, WebhookReceiver
from apid_sample import TeamController


@pytest.fixture
def upstream(monkeypatch):
    """The service the sample plugin's `audit` and `relay` actions call: a receiver."""
    with WebhookReceiver() as receiver:
        monkeypatch.setenv("APID_SAMPLE_AUDIT_URL", receiver.origin)
        yield receiver


@pytest.fixture
def kit(upstream):
    with InMemoryApid([TeamController], timeout=10) as apid:  # the default kit: an asyncio loop
        yield apid


def new_team(apid: InMemoryApid):
    admin = apid.caller("ROLE_ADMIN")
    team = apid.post("/v0.1/team/create", {"name": "Core", "leaderId": admin.id}, caller=admin).json
    return admin, team


def test_an_asyncio_action_runs_on_the_kits_loop(kit, upstream):
    admin, team = new_team(kit)
    upstream.script(f"/audit/{team['id']}", 503, 200)
    reply = kit.get(f"/v0.1/team/audit/{team['id']}", caller=admin)
    assert reply.status == 200, reply.text
    assert reply.json == {"id": team["id"], "name": "Core", "leaderId": admin.id}
    first, second = upstream.wait_for(2)
    assert first.json == {"team": team["id"], "reader": admin.username, "leader": admin.username}
    assert second.at - first.at >= 0.1  # the action's asyncio.sleep ran between its two tries


def test_an_asyncio_action_runs_in_a_batch_on_the_kits_loop(kit, upstream):
    admin, team = new_team(kit)
    reply = kit.batch("team/audit", [{"id": team["id"]}, {"id": team["id"]}], caller=admin, combine=True)
    assert reply.status == 200, reply.text
    assert len(upstream.wait_for(2, path=f"/audit/{team['id']}")) == 2


def test_under_the_epoll_reactor_the_kit_answers_the_daemons_500(upstream):
    with InMemoryApid([TeamController], reactor="default") as apid:
        admin, team = new_team(apid)
        reply = apid.get(f"/v0.1/team/audit/{team['id']}", caller=admin)
    assert reply.status == 500
    assert "reactor: asyncio" in reply.problem["detail"]
    assert upstream.deliveries == []


def test_a_call_waiting_longer_than_the_timeout_is_still_waiting(upstream):
    with InMemoryApid([TeamController], reactor="asyncio", timeout=0.3) as apid:
        admin, team = new_team(apid)
        upstream.script(f"/audit/{team['id']}", Answer(delay=2))
        with pytest.raises(StillWaiting, match=r"0\.3 s"):
            apid.get(f"/v0.1/team/audit/{team['id']}", caller=admin)


def test_a_hook_may_name_a_loopback_receiver_without_allowed_origins(kit, upstream):
    admin, _ = new_team(kit)
    created = kit.post("/v0.1/hook/create", {"url": upstream.url("/hooks/team"), "service": "team"}, caller=admin)
    assert created.status == 200, created.text
    assert created.json["url"] == upstream.url("/hooks/team")
    elsewhere = kit.post("/v0.1/hook/create", {"url": "https://example.com/hook", "service": "team"}, caller=admin)
    assert elsewhere.status == 400
    assert elsewhere.problem["errors"][0]["field"] == "url"


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize(
    "upstream_does, status, slug, retry_after",
    [
        ([Answer(500)], 502, "bad-gateway", None),
        ([Answer(503)], 503, "service-unavailable", "30"),
        ([Answer(503, {"Retry-After": "7"})], 503, "service-unavailable", "7"),
        ("time out", 504, "gateway-timeout", None),
        ("refuse", 503, "service-unavailable", "30"),
    ],
    ids=["error-status", "down", "down-with-retry-after", "timeout", "refused"],
)
def test_an_upstream_failure_answers_its_problem(kit, upstream, monkeypatch, upstream_does, status, slug, retry_after):
    admin, team = new_team(kit)
    path = f"/relay/{team['id']}"
    if upstream_does == "time out":
        monkeypatch.setattr(TeamController, "relay_timeout", 0.2)
        upstream.script(path, Answer(delay=1))
    elif upstream_does == "refuse":
        monkeypatch.setenv("APID_SAMPLE_AUDIT_URL", f"http://127.0.0.1:{closed_port()}")
    else:
        upstream.script(path, *upstream_does)
    reply = kit.get(f"/v0.1/team/relay/{team['id']}", caller=admin)
    assert reply.status == status, reply.text
    assert reply.media_type == "application/problem+json"
    assert reply.problem["type"] == f"urn:apid:problem:{slug}"
    assert reply.problem["status"] == status
    assert reply.headers.get("retry-after") == retry_after


def test_a_working_upstream_answers_the_team(kit, upstream):
    admin, team = new_team(kit)
    reply = kit.get(f"/v0.1/team/relay/{team['id']}", caller=admin)
    assert reply.status == 200, reply.text
    assert upstream.wait_for(1, path=f"/relay/{team['id']}")[0].json["name"] == "Core"
