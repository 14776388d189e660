"""Calls without a token where IO State admits the anonymous role (issue 14, item 4), on the
real daemon with an IO State override that puts `team` in the `open` network group and gives
ROLE_ANONYMOUS team/show, team/list, team/summary and team/create, with fewer fields than a user.

Without a token those answer with the anonymous role's fields only; every other endpoint, an
unknown one too, answers 401 as before; a bad token is a 401, never anonymous. Batch needs the
anonymous role in BATCH, and a chain needs it on every link. With apiThrottle on, anonymous
calls are counted per client address (each test sends from its own loopback address, so the
tests do not share counts). Link relations, the public OpenAPI document and webhook events
follow the same rule.
"""

from __future__ import annotations

import itertools
import json

import pytest

from assertions import assert_json, assert_problem
from harness import Deployment, V, create_team, deployment_with_accounts, wait_for

B = "/b0.1"
C = "/c0.1"
ANONYMOUS_LIMIT = 6
POLICY = f'"ROLE_ANONYMOUS";q={ANONYMOUS_LIMIT};w=86400'
EVERYONE = ["ROLE_ADMIN", "ROLE_USER", "ROLE_ANONYMOUS"]
MEMBERS = ["ROLE_ADMIN", "ROLE_USER"]
TEAM = {
    "NAME": "team",
    "NETWORKGRP": "open",
    "VALUES": {
        "id": {"type": "Long", "key": "PKEY", "description": "Team id", "mockData": "1"},
        "name": {"type": "String", "description": "Team name", "mockData": "Platform"},
        "leaderId": {
            "type": "Long",
            "key": "FKEY",
            "reference": "person.id",
            "description": "The leader",
            "mockData": "1",
        },
        "budget": {"type": "Float", "description": "Yearly budget", "mockData": "1000.5"},
        "led": {"type": "Integer", "description": "How many teams the leader leads", "mockData": "1"},
    },
    "CURRENTSTABLE": "1",
    "VERSION": {
        "1": {
            "DEFAULTACTION": "list",
            "URI": {
                "create": {
                    "METHOD": "POST",
                    "DESCRIPTION": "Create a team",
                    "ROLES": {"DEFAULT": EVERYONE, "BATCH": ["ROLE_ADMIN"], "HOOK": ["ROLE_ADMIN"]},
                    "REQUEST": {"permitAll": ["name", "leaderId"], "ROLE_ADMIN": ["budget"]},
                    "RESPONSE": {"permitAll": ["id", "name"], "ROLE_ADMIN": ["leaderId", "budget"]},
                },
                "show": {
                    "METHOD": "GET",
                    "DESCRIPTION": "One team",
                    "ROLES": {"DEFAULT": EVERYONE, "BATCH": EVERYONE},
                    "REQUEST": {"permitAll": ["id"]},
                    "RESPONSE": {
                        "permitAll": ["id", "name"],
                        "ROLE_USER": ["leaderId"],
                        "ROLE_ADMIN": ["leaderId", "budget"],
                    },
                },
                "list": {
                    "METHOD": "GET",
                    "DESCRIPTION": "All teams",
                    "ROLES": {"DEFAULT": EVERYONE, "BATCH": MEMBERS},
                    "REQUEST": {"permitAll": [], "ROLE_USER": ["leaderId"], "ROLE_ADMIN": ["leaderId"]},
                    "RESPONSE": {"permitAll": ["id", "name"], "ROLE_USER": ["leaderId"], "ROLE_ADMIN": ["leaderId"]},
                },
                "summary": {
                    "METHOD": "GET",
                    "DESCRIPTION": "A team with how many teams its leader leads",
                    "ROLES": {"DEFAULT": EVERYONE},
                    "REQUEST": {"permitAll": ["id"]},
                    "RESPONSE": {"permitAll": ["id", "name", "led"], "ROLE_USER": ["leaderId"]},
                },
                "byLeader": {
                    "METHOD": "GET",
                    "DESCRIPTION": "The first team the person leaderId leads",
                    "ROLES": {"DEFAULT": MEMBERS},
                    "REQUEST": {"permitAll": ["leaderId"]},
                    "RESPONSE": {"permitAll": ["id", "name", "leaderId"]},
                },
            },
        }
    },
}
_addresses = (f"127.0.0.{n}" for n in itertools.count(10))


@pytest.fixture(scope="module")
def deployment(tmp_path_factory, receiver) -> Deployment:
    deployment = deployment_with_accounts(
        tmp_path_factory.mktemp("anonymous"),
        server={
            "apiThrottle": True,
            "webhookActive": True,
            "webhooks": {"timeout": 1, "lease": 3, "poll": 0.2, "retryBase": 0.1, "retryFactor": 2, "retryMax": 0.4},
        },
        api={
            "throttle": {"rateLimit": {"ROLE_ANONYMOUS": ANONYMOUS_LIMIT}, "expires": 60},
            "cors": {"allowedOrigins": [receiver.origin]},
        },
    )
    (deployment.root / "iostate" / "team.json").write_text(json.dumps({"IOSTATE": TEAM}))
    return deployment


@pytest.fixture(scope="module")
def team(daemon, admin_token) -> dict:
    return create_team(daemon, admin_token, "open team", 1, 99.5)


def anonymous(daemon, method, path, body=None, **kwargs):
    """A call without a token, from a loopback address of its own unless `source` is given."""
    return daemon.request(method, path, body, source=kwargs.pop("source", None) or next(_addresses), **kwargs)


def assert_needs_token(reply) -> None:
    body = assert_problem(reply, 401)
    assert reply.headers["WWW-Authenticate"].startswith("Bearer")
    assert "token" in body["detail"]


# --- plain calls ----------------------------------------------------------------------------------


def test_an_anonymous_endpoint_answers_without_a_token_with_the_anonymous_fields(daemon, user_token, team):
    shown = assert_json(anonymous(daemon, "GET", f"{V}/team/show/{team['id']}"))
    assert shown == {"id": team["id"], "name": "open team"}
    listed = assert_json(anonymous(daemon, "GET", f"{V}/team/list"))
    assert {"id": team["id"], "name": "open team"} in listed
    assert all(set(item) == {"id", "name"} for item in listed)
    # the same call with a token answers as that role, with its fields
    as_user = assert_json(daemon.request("GET", f"{V}/team/show/{team['id']}", token=user_token))
    assert as_user == {"id": team["id"], "name": "open team", "leaderId": 1}


def test_an_anonymous_caller_may_send_only_the_anonymous_request_fields(daemon):
    body = assert_problem(anonymous(daemon, "GET", f"{V}/team/list?leaderId=1"), 400)
    assert [error["field"] for error in body["errors"]] == ["leaderId"]


@pytest.mark.parametrize(
    "method, path",
    [
        ("GET", f"{V}/team/byLeader?leaderId=1"),
        ("GET", f"{V}/person/list"),
        ("GET", f"{V}/person/show/1"),
        ("GET", f"{V}/hook/list"),
        ("GET", f"{V}/nothing/list"),
        ("GET", f"{V}/team/nothing"),
        ("POST", f"{V}/person/create"),
    ],
)
def test_every_other_endpoint_still_answers_401_without_a_token(daemon, method, path):
    assert_needs_token(anonymous(daemon, method, path))


@pytest.mark.parametrize("authorization", ["Bearer not-a-token", "Bearer ", "Basic YWRtaW46eA=="])
def test_a_bad_token_is_a_401_even_where_anonymous_calls_are_welcome(daemon, team, authorization):
    reply = anonymous(daemon, "GET", f"{V}/team/show/{team['id']}", headers={"Authorization": authorization})
    assert_problem(reply, 401)


# --- batch and chain -------------------------------------------------------------------------------


def test_a_batch_needs_the_anonymous_role_in_batch(daemon, team):
    reply = anonymous(
        daemon, "POST", f"{B}/team/show", {"batch": [{"id": team["id"]}, {"id": team["id"]}], "combine": True}
    )
    assert assert_json(reply) == [{"id": team["id"], "name": "open team"}] * 2
    assert_needs_token(anonymous(daemon, "POST", f"{B}/team/list", {"batch": [{}]}))
    assert_needs_token(anonymous(daemon, "POST", f"{B}/team/byLeader", {"batch": [{"leaderId": 1}]}))


def test_a_chain_needs_the_anonymous_role_on_every_link(daemon, team):
    chain = {"chain": {"key": "id", "combine": True, "order": {"team/summary": "return"}}}
    reply = anonymous(daemon, "GET", f"{C}/team/show/{team['id']}", chain)
    shown, summary = assert_json(reply)
    assert shown == {"id": team["id"], "name": "open team"}
    assert set(summary) == {"id", "name", "led"}
    to_person = {"chain": {"key": "id", "order": {"person/show": "return"}}}
    assert_needs_token(anonymous(daemon, "GET", f"{C}/team/show/{team['id']}", to_person))
    from_person = {"chain": {"key": "id", "order": {"team/show": "return"}}}
    assert_needs_token(anonymous(daemon, "GET", f"{C}/person/show/1", from_person))


# --- rate limits -------------------------------------------------------------------------------------


def test_anonymous_calls_are_counted_per_client_address(daemon, user_token, team):
    address, other = next(_addresses), next(_addresses)
    for left in range(ANONYMOUS_LIMIT - 1, -1, -1):
        reply = anonymous(daemon, "GET", f"{V}/team/show/{team['id']}", source=address)
        assert_json(reply)
        assert reply.headers["RateLimit-Policy"] == POLICY
        assert reply.headers["RateLimit"].startswith(f'"ROLE_ANONYMOUS";r={left};')
    refused = anonymous(daemon, "GET", f"{V}/team/list", source=address)
    body = assert_problem(refused, 429)
    assert body["violatedPolicies"] == ["ROLE_ANONYMOUS"]
    assert int(refused.headers["Retry-After"]) > 0
    assert refused.headers["RateLimit-Policy"] == POLICY
    assert refused.headers["RateLimit"].startswith('"ROLE_ANONYMOUS";r=0;')
    # another address has its own count; a user calling from the locked address is counted as the user
    fresh = anonymous(daemon, "GET", f"{V}/team/show/{team['id']}", source=other)
    assert fresh.headers["RateLimit"].startswith(f'"ROLE_ANONYMOUS";r={ANONYMOUS_LIMIT - 1};')
    as_user = daemon.request("GET", f"{V}/team/show/{team['id']}", token=user_token, source=address)
    assert_json(as_user)
    assert as_user.headers["RateLimit"].startswith('"ROLE_USER";')


def test_an_anonymous_batch_counts_each_element(daemon, team):
    address = next(_addresses)
    reply = anonymous(daemon, "POST", f"{B}/team/show", {"batch": [{"id": team["id"]}] * 3}, source=address)
    assert_json(reply)
    assert reply.headers["RateLimit"].startswith(f'"ROLE_ANONYMOUS";r={ANONYMOUS_LIMIT - 3};')


# --- links, the public OpenAPI document, webhooks ----------------------------------------------------


def test_link_relations_list_only_what_anonymous_may_call(daemon, team):
    reply = anonymous(daemon, "GET", f"{V}/team/show/{team['id']}", headers={"X-LINK-RELATIONS": "true"})
    assert_json(reply)
    rels = {part.split('rel="')[1].split('"')[0] for part in reply.headers["Link"].split(", ")}
    assert rels == {"self", "urn:apid:rel:team/create", "urn:apid:rel:team/list", "urn:apid:rel:team/summary"}


def test_the_public_openapi_document_lists_the_anonymous_endpoints(daemon):
    document = assert_json(anonymous(daemon, "GET", "/openapi.json"))
    paths = document["paths"]
    assert paths[f"{V}/team/show/{{id}}"]["get"]["security"] == []
    assert paths[f"{V}/team/list"]["get"]["security"] == []
    assert f"{V}/team/byLeader" not in paths
    assert not any(path.startswith(f"{V}/person") for path in paths)
    assert "/authenticate" in paths


def test_an_anonymous_change_still_records_events_for_subscribers(daemon, admin_token, receiver):
    reply = daemon.request(
        "POST", f"{V}/hook/create", {"url": receiver.origin + "/anonymous-teams", "service": "team"}, token=admin_token
    )
    assert reply.status == 200, reply.body
    created = assert_json(anonymous(daemon, "POST", f"{V}/team/create", {"name": "walk-in", "leaderId": 1}))
    assert set(created) == {"id", "name"}
    assert_problem(anonymous(daemon, "POST", f"{V}/team/create", {"name": "rich", "leaderId": 1, "budget": 5}), 400)

    def delivered() -> list[dict]:
        return [r.json for r in receiver.received if r.path == "/anonymous-teams"]

    assert wait_for(lambda: delivered(), timeout=15)
    (event,) = delivered()
    assert event["type"] == "team/create"
    assert event["data"] == {"id": created["id"], "name": "walk-in", "leaderId": 1, "budget": 0}
