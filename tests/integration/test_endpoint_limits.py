"""An endpoint's own rate limit, IO State `RATELIMIT` (issue 14, item 3), on the running daemon.

The deployment's iostate/ overrides the sample plugin's team.json to give version 1 of
team/show `{"ROLE_USER": {"limit": 3, "window": 600}, "ROLE_ADMIN": "*"}`, with `apiThrottle`
on and a daily limit far away: a user's fourth call is a 429 naming the endpoint, with
Retry-After and both policies in the RateLimit fields; other endpoints, the other API
version and other users are unaffected; batch elements and chain links count; an
administrator ("*") is not limited. Without `apiThrottle` nothing is limited. Then two daemons
sharing one Redis share the count. Every user whose count a test reads is created for it.
"""

from __future__ import annotations

import itertools
import json

import pytest

from assertions import assert_json, assert_problem
from harness import ADMIN, REPO, V, create_team, deployment_with_accounts, new_person, running_daemon
from redis_server import running_redis

CALLS = 3
WINDOW = 600
DAILY = {"rateLimit": {"ROLE_USER": 1000, "ROLE_ADMIN": 1000}, "expires": 60}
USER_DAY = '"ROLE_USER";q=1000;w=86400'
ENDPOINT = f'"team/show";q={CALLS};w={WINDOW}'
SAMPLE_TEAM_IOSTATE = REPO / "tests/sample_plugin/apid_sample/iostate/team.json"
_teams = itertools.count(1)


def with_team_show_limited(deployment):
    """The deployment with its team.json overriding the shipped one: team/show limited."""
    state = json.loads(SAMPLE_TEAM_IOSTATE.read_text())
    state["VERSION"]["1"]["URI"]["show"]["RATELIMIT"] = {
        "ROLE_USER": {"limit": CALLS, "window": WINDOW},
        "ROLE_ADMIN": "*",
    }
    (deployment.root / "iostate" / "team.json").write_text(json.dumps(state))
    return deployment


def limited_deployment(root, server: dict):
    return with_team_show_limited(deployment_with_accounts(root, server=server, api={"throttle": DAILY}))


def user_and_team(daemon, admin_token, login_on=None) -> tuple[str, dict]:
    """A token of a new ROLE_USER account (from `login_on`, by default the same daemon) and a team it leads."""
    person = new_person(daemon, admin_token, roles=["ROLE_USER"])
    team = create_team(daemon, admin_token, f"limited{next(_teams)}", person["id"], 1.0)
    return (login_on or daemon).login(person["username"], person["password"]), team


def show(daemon, token, team, version: str = ""):
    return daemon.request("GET", f"{V}{version}/team/show/{team['id']}", token=token)


def endpoint_left(reply) -> int:
    """What the RateLimit field says is left of team/show's limit (its second item)."""
    assert reply.headers.get("RateLimit-Policy") == f"{USER_DAY}, {ENDPOINT}", dict(reply.headers)
    day, endpoint = reply.headers["RateLimit"].split(", ")
    assert day.startswith('"ROLE_USER";r='), day
    name, left, reset = endpoint.split(";")
    assert name == '"team/show"' and 0 < int(reset.removeprefix("t=")) <= WINDOW, endpoint
    return int(left.removeprefix("r="))


def assert_refused(reply) -> None:
    """A 429 problem naming team/show's policy, with Retry-After and both policies."""
    body = assert_problem(reply, 429)
    assert body["type"] == "urn:apid:problem:too-many-requests", body
    assert body["violatedPolicies"] == ["team/show"], body
    assert f"{CALLS} calls of team/show per {WINDOW} seconds" in body["detail"], body
    assert 1 <= int(reply.headers["Retry-After"]) <= WINDOW, dict(reply.headers)
    assert endpoint_left(reply) == 0


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    return limited_deployment(tmp_path_factory.mktemp("endpoint-limits"), {"apiThrottle": True})


def test_the_call_past_the_endpoint_limit_is_429_and_other_endpoints_are_unaffected(daemon, admin_token):
    token, team = user_and_team(daemon, admin_token)
    for left in range(CALLS - 1, -1, -1):
        reply = show(daemon, token, team)
        assert assert_json(reply)["id"] == team["id"]
        assert endpoint_left(reply) == left
    refused = show(daemon, token, team)
    assert_refused(refused)
    assert "name" not in refused.json  # nothing ran
    listed = daemon.request("GET", f"{V}/team/list", token=token)  # another endpoint
    assert team["id"] in [t["id"] for t in assert_json(listed)]
    assert listed.headers["RateLimit-Policy"] == USER_DAY  # the day's policy only
    assert assert_json(show(daemon, token, team, "-2"))["id"] == team["id"]  # version 2 has no RATELIMIT
    other, _ = user_and_team(daemon, admin_token)
    assert endpoint_left(show(daemon, other, team)) == CALLS - 1  # each user counted apart
    assert_refused(show(daemon, token, team))  # and the first is still refused


def test_batch_elements_count_and_a_batch_that_would_cross_is_refused_whole(daemon, admin_token):
    token, team = user_and_team(daemon, admin_token)
    two = daemon.request("POST", "/b0.1/team/show", {"batch": [{"id": team["id"]}] * 2, "combine": True}, token=token)
    assert [t["id"] for t in assert_json(two)] == [team["id"]] * 2
    assert endpoint_left(two) == CALLS - 2
    crossing = daemon.request("POST", "/b0.1/team/show", {"batch": [{"id": team["id"]}] * 2}, token=token)
    assert_problem(crossing, 429)
    assert crossing.json["violatedPolicies"] == ["team/show"]
    assert endpoint_left(crossing) == 1  # neither element was counted
    assert endpoint_left(show(daemon, token, team)) == 0


def test_a_chain_counts_its_link_to_the_limited_endpoint(daemon, admin_token):
    token, team = user_and_team(daemon, admin_token)
    chain = {"chain": {"key": "leaderId", "combine": True, "order": {"person/show": "return"}}}
    chained = daemon.request("GET", f"/c0.1/team/show/{team['id']}", chain, token=token)
    shown_team, leader = assert_json(chained)
    assert (shown_team["id"], leader["id"]) == (team["id"], team["leaderId"])
    assert endpoint_left(chained) == CALLS - 1


def test_a_role_with_a_star_is_not_limited_by_the_endpoint(daemon, admin_token):
    _, team = user_and_team(daemon, admin_token)
    for _ in range(CALLS + 2):
        reply = show(daemon, admin_token, team)
        assert assert_json(reply)["budget"] == 1.0
        assert reply.headers["RateLimit-Policy"] == '"ROLE_ADMIN";q=1000;w=86400'


def test_without_api_throttle_the_endpoint_limit_does_not_apply(tmp_path):
    with running_daemon(limited_deployment(tmp_path, {})) as daemon:
        admin_token = daemon.login(*ADMIN[:2])
        token, team = user_and_team(daemon, admin_token)
        for _ in range(CALLS + 2):
            reply = show(daemon, token, team)
            assert assert_json(reply)["id"] == team["id"]
            assert "RateLimit" not in reply.headers and "RateLimit-Policy" not in reply.headers


# --- counted in Redis ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def redis_daemons(tmp_path_factory):
    """Two daemons on one deployment (one database, one JWT secret) counting in one Redis."""
    with running_redis() as redis:
        deployment = limited_deployment(
            tmp_path_factory.mktemp("endpoint-limits-redis"), {"apiThrottle": True, "redis": {"url": redis.url}}
        )
        with running_daemon(deployment) as first, running_daemon(deployment) as second:
            yield first, second


def test_two_daemons_sharing_redis_share_the_endpoint_count(redis_daemons):
    first, second = redis_daemons
    admin_token = first.login(*ADMIN[:2])
    token, team = user_and_team(first, admin_token, login_on=second)
    answers = [show(daemon, token, team) for daemon in (first, second, first)]
    assert [endpoint_left(reply) for reply in answers] == [2, 1, 0]
    assert_refused(show(second, token, team))
    batch = second.request("POST", "/b0.1/team/show", {"batch": [{"id": team["id"]}]}, token=token)
    assert_refused(batch)
    assert assert_json(first.request("GET", f"{V}/team/list", token=token))  # other endpoints answer
