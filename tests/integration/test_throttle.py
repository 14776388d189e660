"""Per-role rate limiting through the running daemon (SPEC "Limits", DESIGN 4.11, issue 6).

With `apiThrottle` on and small limits (ROLE_USER 5 a day, ROLE_ADMIN 1000, a 2 s lock):
the IETF RateLimit fields on every answer to a limited user, errors too; the 5th request
allowed and the 6th a 429 problem with Retry-After; after the lock (real waiting, the one
slow test here) the count starts over; batches and chains charged one per element or link
and refused whole when they would cross the limit; each user and role counted apart.
A user with no ruled role, and a daemon without `apiThrottle`, get no fields at all.

Then the Redis store: two daemons sharing one redis-server share the count, and a daemon
whose Redis cannot be reached fails closed (503) or open, as `redis.onFailure` says.
Every user whose count a test reads is created fresh for it, so the tests do not share counts.
"""

from __future__ import annotations

import itertools
import re
import time

import pytest
import yaml

from assertions import assert_json, assert_problem
from harness import (
    ADMIN,
    ADMIN_ACCOUNT,
    USER,
    USER_ACCOUNT,
    Daemon,
    Deployment,
    V,
    create_team,
    deployment_with_accounts,
    free_port,
    new_person,
    running_daemon,
)
from redis_server import running_redis

B = "/b0.1"
C = "/c0.1"
USER_LIMIT = 5
EXPIRES = 2
THROTTLE = {"rateLimit": {"ROLE_USER": USER_LIMIT, "ROLE_ADMIN": 1000}, "expires": EXPIRES}
USER_POLICY = f'"ROLE_USER";q={USER_LIMIT};w=86400'
ADMIN_POLICY = '"ROLE_ADMIN";q=1000;w=86400'
STATE = re.compile(r'^"(?P<name>[A-Z_]+)";r=(?P<r>\d+);t=(?P<t>\d+)$')
TOO_MANY = "urn:apid:problem:too-many-requests"
_teams = itertools.count(1)


# --- helpers -----------------------------------------------------------------------------------


def fresh_user(daemon, admin_token, login_on=None) -> tuple[dict, str]:
    """A new ROLE_USER account and a token for it (from `login_on`, by default the same daemon)."""
    person = new_person(daemon, admin_token, roles=["ROLE_USER"])
    return person, (login_on or daemon).login(person["username"], person["password"])


def state(reply, policy: str = "ROLE_USER") -> tuple[int, int]:
    """The RateLimit field of an answer, checked to name `policy`: (remaining, seconds to reset)."""
    value = reply.headers.get("RateLimit")
    assert value is not None, (reply.status, dict(reply.headers), reply.body)
    match = STATE.match(value)
    assert match and match["name"] == policy, value
    return int(match["r"]), int(match["t"])


def remaining(reply, policy: str = "ROLE_USER") -> int:
    return state(reply, policy)[0]


def assert_limited(reply, remaining_left: int, policy: str = USER_POLICY) -> None:
    assert reply.headers.get("RateLimit-Policy") == policy, dict(reply.headers)
    assert remaining(reply, policy.split(";")[0].strip('"')) == remaining_left, reply.headers.get("RateLimit")


def assert_no_fields(reply) -> None:
    assert "RateLimit" not in reply.headers, dict(reply.headers)
    assert "RateLimit-Policy" not in reply.headers, dict(reply.headers)


def assert_refused(reply, instance: str | None = None) -> dict:
    """A 429 problem naming the ROLE_USER policy, with Retry-After and the RateLimit fields."""
    body = assert_problem(reply, 429, instance)
    assert body["type"] == TOO_MANY, body
    assert body["violatedPolicies"] == ["ROLE_USER"], body
    assert reply.headers.get("RateLimit-Policy") == USER_POLICY
    retry_after = reply.headers.get("Retry-After")
    assert retry_after is not None and retry_after.isdigit() and int(retry_after) >= 1, retry_after
    return body


def show(daemon, token, person_id):
    return daemon.request("GET", f"{V}/person/show/{person_id}", token=token)


def batch_of_shows(daemon, token, person_id, n: int):
    return daemon.request("POST", f"{B}/person/show", {"batch": [{"id": person_id}] * n, "combine": True}, token=token)


# --- the in-process store: one daemon with small limits ----------------------------------------


@pytest.fixture(scope="module")
def deployment(tmp_path_factory) -> Deployment:
    return deployment_with_accounts(
        tmp_path_factory.mktemp("throttle"), server={"apiThrottle": True}, api={"throttle": THROTTLE}
    )


def test_every_answer_to_a_limited_user_carries_the_fields_errors_too(daemon, admin_token):
    person, token = fresh_user(daemon, admin_token)
    ok = show(daemon, token, person["id"])
    assert assert_json(ok)["id"] == person["id"]
    assert ok.headers["RateLimit-Policy"] == USER_POLICY
    left, reset = state(ok)
    assert left == USER_LIMIT - 1
    assert 86400 - 60 < reset <= 86400  # the day's window, just begun
    missing = daemon.request("GET", f"{V}/person/nothingHere", token=token)
    assert_problem(missing, 404)
    assert_limited(missing, USER_LIMIT - 2)
    forbidden = show(daemon, token, 1)  # someone else's record
    assert_problem(forbidden, 403)
    assert_limited(forbidden, USER_LIMIT - 3)


def test_the_fifth_request_is_allowed_the_sixth_refused_and_after_the_lock_the_count_starts_over(daemon, admin_token):
    person, token = fresh_user(daemon, admin_token)
    for left in range(USER_LIMIT - 1, 0, -1):
        assert_limited(show(daemon, token, person["id"]), left)
    fifth = show(daemon, token, person["id"])
    assert assert_json(fifth)["id"] == person["id"]  # the request that reaches the limit still runs
    assert state(fifth) == (0, EXPIRES)  # and the reset is now the lock
    locked_at = time.monotonic()
    sixth = show(daemon, token, person["id"])
    body = assert_refused(sixth, f"{V}/person/show/{person['id']}")
    assert int(sixth.headers["Retry-After"]) <= EXPIRES
    assert remaining(sixth) == 0
    assert "person" not in body and "username" not in body  # nothing ran
    assert_refused(daemon.request("GET", f"{V}/person/nothingHere", token=token))  # every call, while locked
    assert_refused(batch_of_shows(daemon, token, person["id"], 1))
    time.sleep(max(0.0, locked_at + EXPIRES + 0.5 - time.monotonic()))
    again = show(daemon, token, person["id"])
    assert assert_json(again)["id"] == person["id"]
    assert_limited(again, USER_LIMIT - 1)  # counted from zero again


def test_a_batch_that_would_cross_the_limit_is_refused_whole_and_a_batch_counts_each_element(daemon, admin_token):
    person, token = fresh_user(daemon, admin_token)
    too_many = batch_of_shows(daemon, token, person["id"], USER_LIMIT + 1)
    assert_refused(too_many, f"{B}/person/show")
    assert remaining(too_many) == USER_LIMIT  # none of the six was counted
    assert_limited(show(daemon, token, person["id"]), 4)
    three = batch_of_shows(daemon, token, person["id"], 3)
    assert [p["id"] for p in assert_json(three)] == [person["id"]] * 3
    assert_limited(three, 1)  # down by three
    two = batch_of_shows(daemon, token, person["id"], 2)
    assert_refused(two)
    assert remaining(two) == 1  # refused whole: the one that fits was not spent
    assert_limited(show(daemon, token, person["id"]), 0)


def test_a_chain_counts_one_per_link(daemon, admin_token):
    person, token = fresh_user(daemon, admin_token)
    team = create_team(daemon, admin_token, f"throttled{next(_teams)}", person["id"], 5.0)
    chain = {"chain": {"key": "leaderId", "combine": True, "order": {"person/show": "return"}}}
    assert_limited(show(daemon, token, person["id"]), 4)
    chained = daemon.request("GET", f"{C}/team/show/{team['id']}", chain, token=token)
    team_out, person_out = assert_json(chained)
    assert (team_out["id"], person_out["id"]) == (team["id"], person["id"])
    assert_limited(chained, 2)  # team/show and person/show: two links
    assert_limited(show(daemon, token, person["id"]), 1)
    crossing = daemon.request("GET", f"{C}/team/show/{team['id']}", chain, token=token)
    assert_refused(crossing)
    assert remaining(crossing) == 1  # refused before any link ran, nothing counted
    assert_limited(show(daemon, token, person["id"]), 0)


def test_a_request_costing_more_than_is_left_is_429_saying_its_cost_and_what_is_left(daemon, admin_token):
    """Not "used up" while calls are left: the 429 says what the request costs, what is left,
    and that none of it was counted; the RateLimit fields and the next answer agree."""
    person, token = fresh_user(daemon, admin_token)
    assert_limited(show(daemon, token, person["id"]), USER_LIMIT - 1)
    crossing = batch_of_shows(daemon, token, person["id"], USER_LIMIT)
    body = assert_refused(crossing, f"{B}/person/show")
    reset = int(crossing.headers["Retry-After"])
    assert state(crossing) == (USER_LIMIT - 1, reset)
    assert body["detail"] == (
        f"this request costs {USER_LIMIT} (a batch counts one per element, a chain one per link) and "
        f"{USER_LIMIT - 1} are left of the request limit of {USER_LIMIT} a day: it was refused whole, none of it "
        f"counted against that limit; send at most {USER_LIMIT - 1}, or this one again in {reset} seconds"
    )
    beyond = batch_of_shows(daemon, token, person["id"], USER_LIMIT + 1)
    assert "more than the request limit of 5 a day allows at once" in assert_refused(beyond)["detail"]
    assert remaining(beyond) == USER_LIMIT - 1
    assert_limited(show(daemon, token, person["id"]), USER_LIMIT - 2)  # neither batch was counted


def test_a_batch_over_batch_limit_is_413_and_charges_nothing(daemon, admin_token):
    """Refused for its size before it is counted: 999 elements once charged an administrator
    999 of their 1000 calls (and locked them), 10,000 answered a user 429 "used up"."""
    admin = new_person(daemon, admin_token, roles=["ROLE_ADMIN"])
    token = daemon.login(admin["username"], admin["password"])
    assert remaining(show(daemon, token, admin["id"]), "ROLE_ADMIN") == 999
    team = create_team(daemon, admin_token, f"throttled{next(_teams)}", admin["id"], 1.0)
    too_big = daemon.request("POST", f"{B}/team/show", {"batch": [{"id": team["id"]}] * 999}, token=token)
    problem = assert_problem(too_big, 413, f"{B}/team/show")
    assert problem["limit"] == 100 and problem["detail"] == "a batch holds at most 100 elements, this one 999"
    assert_no_fields(too_big)  # refused before it was counted: there is no count to tell of
    assert remaining(show(daemon, token, admin["id"]), "ROLE_ADMIN") == 998

    person, user_token = fresh_user(daemon, admin_token)
    huge = batch_of_shows(daemon, user_token, person["id"], 10_000)
    assert assert_problem(huge, 413)["detail"] == "a batch holds at most 100 elements, this one 10000"
    assert_limited(show(daemon, user_token, person["id"]), USER_LIMIT - 1)


def test_a_chain_over_chain_limit_is_422_and_charges_nothing(daemon, admin_token):
    person, token = fresh_user(daemon, admin_token)
    order = {f"person/show{n}": "id" for n in range(10)} | {"person/list": "return"}  # 12 links, chainLimit 10
    too_long = daemon.request(
        "GET", f"{C}/person/show/{person['id']}", {"chain": {"key": "id", "order": order}}, token=token
    )
    problem = assert_problem(too_long, 422)
    assert problem["rule"] == "chain-limit" and problem["detail"] == "a chain holds at most 10 links, this one 12"
    assert_no_fields(too_long)
    assert_limited(show(daemon, token, person["id"]), USER_LIMIT - 1)


def test_an_admin_has_their_own_larger_limit_and_users_are_counted_apart(daemon, admin_token):
    person, token = fresh_user(daemon, admin_token)
    for _ in range(USER_LIMIT):
        show(daemon, token, person["id"])
    assert_refused(show(daemon, token, person["id"]))
    first = show(daemon, admin_token, person["id"])
    assert assert_json(first)["id"] == person["id"]
    assert first.headers["RateLimit-Policy"] == ADMIN_POLICY
    admin_left = remaining(first, "ROLE_ADMIN")
    assert 900 < admin_left < 1000
    assert remaining(show(daemon, admin_token, person["id"]), "ROLE_ADMIN") == admin_left - 1
    other, other_token = fresh_user(daemon, admin_token)
    assert_limited(show(daemon, other_token, other["id"]), USER_LIMIT - 1)
    assert_refused(show(daemon, token, person["id"]))  # still locked


# --- no rule, no fields; no apiThrottle, no fields --------------------------------------------


@pytest.fixture(scope="module")
def unruled_daemon(tmp_path_factory):
    """apiThrottle on, but only ROLE_ADMIN has a rateLimit (the repository's ROLE_USER rule removed)."""
    deployment = Deployment(
        tmp_path_factory.mktemp("unruled"), server={"apiThrottle": True}, api={"throttle": {"expires": EXPIRES}}
    )
    deployment.write()
    api_file = deployment.config_dir / "service_api.yml"
    api = yaml.safe_load(api_file.read_text())
    api["throttle"]["rateLimit"] = {"ROLE_ADMIN": 1000}
    api_file.write_text(yaml.safe_dump(api))
    for account in (ADMIN_ACCOUNT, USER_ACCOUNT):
        deployment.add_user(*account)
    with running_daemon(deployment) as running:
        yield running


def test_a_user_with_no_ruled_role_gets_no_fields_and_no_limit(unruled_daemon):
    admin_token = unruled_daemon.login(*ADMIN[:2])
    people = assert_json(unruled_daemon.request("GET", f"{V}/person/list", token=admin_token))
    user_id = next(p["id"] for p in people if p["username"] == USER[0])
    token = unruled_daemon.login(*USER[:2])
    for _ in range(USER_LIMIT + 3):
        reply = show(unruled_daemon, token, user_id)
        assert_json(reply)
        assert_no_fields(reply)
    missing = unruled_daemon.request("GET", f"{V}/person/nothingHere", token=token)
    assert_problem(missing, 404)
    assert_no_fields(missing)
    assert show(unruled_daemon, admin_token, user_id).headers["RateLimit-Policy"] == ADMIN_POLICY  # throttle is on


@pytest.fixture(scope="module")
def unthrottled_daemon(tmp_path_factory):
    with running_daemon(deployment_with_accounts(tmp_path_factory.mktemp("unthrottled"))) as running:
        yield running


def test_without_api_throttle_no_answer_carries_the_fields(unthrottled_daemon):
    admin_token = unthrottled_daemon.login(*ADMIN[:2])
    token = unthrottled_daemon.login(*USER[:2])
    replies = [
        unthrottled_daemon.request("GET", f"{V}/person/list", token=admin_token),
        unthrottled_daemon.request("GET", f"{V}/person/nothingHere", token=token),
        unthrottled_daemon.request("POST", f"{B}/person/show", {"batch": [{"id": 1}]}, token=admin_token),
    ]
    assert [r.status for r in replies] == [200, 404, 200]
    for reply in replies:
        assert_no_fields(reply)
        assert "Retry-After" not in reply.headers


# --- the Redis store ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def redis_server():
    with running_redis() as server:
        yield server


@pytest.fixture(scope="module")
def redis_daemons(tmp_path_factory, redis_server):
    """Two daemons on one deployment (one database, one JWT secret) counting in one Redis."""
    deployment = deployment_with_accounts(
        tmp_path_factory.mktemp("redis"),
        server={"apiThrottle": True, "redis": {"url": redis_server.url}},
        api={"throttle": {**THROTTLE, "expires": 60}},
    )
    with running_daemon(deployment) as first, running_daemon(deployment) as second:
        yield first, second


def test_two_daemons_sharing_redis_share_the_count(redis_daemons):
    first, second = redis_daemons
    admin_token = first.login(*ADMIN[:2])
    person, token = fresh_user(first, admin_token, login_on=second)
    answers = [show(daemon, token, person["id"]) for daemon in (first, second, first, second, first)]
    for left, reply in zip(range(USER_LIMIT - 1, -1, -1), answers, strict=True):
        assert assert_json(reply)["id"] == person["id"]
        assert_limited(reply, left)
    assert state(answers[-1])[1] == 60  # the fifth, on the first daemon, locked the user
    refused = show(second, token, person["id"])  # and the second daemon knows it
    assert_refused(refused)
    assert int(refused.headers["Retry-After"]) <= 60
    assert_refused(show(first, token, person["id"]))
    other, other_token = fresh_user(second, admin_token)  # the admin's token works on both
    assert_limited(show(first, other_token, other["id"]), USER_LIMIT - 1)
    assert_limited(show(second, other_token, other["id"]), USER_LIMIT - 2)


def test_a_batch_on_one_daemon_counts_on_the_other(redis_daemons):
    first, second = redis_daemons
    admin_token = second.login(*ADMIN[:2])
    person, token = fresh_user(second, admin_token)
    assert_limited(batch_of_shows(first, token, person["id"], 3), 2)
    assert_refused(batch_of_shows(second, token, person["id"], 3))
    assert_limited(show(second, token, person["id"]), 1)


def test_on_redis_a_refused_batch_counts_nothing_and_a_crossing_one_says_what_is_left(redis_daemons):
    first, second = redis_daemons
    admin_token = first.login(*ADMIN[:2])
    person, token = fresh_user(first, admin_token)
    assert_problem(batch_of_shows(first, token, person["id"], 101), 413)  # over batchLimit
    assert_limited(show(second, token, person["id"]), USER_LIMIT - 1)
    crossing = batch_of_shows(first, token, person["id"], USER_LIMIT)
    assert f"costs {USER_LIMIT} " in assert_refused(crossing)["detail"]
    assert f"and {USER_LIMIT - 1} are left of" in assert_refused(crossing)["detail"]
    assert remaining(crossing) == USER_LIMIT - 1
    assert_limited(show(second, token, person["id"]), USER_LIMIT - 2)


def redis_down_daemon(root, on_failure: str | None):
    redis = {"url": f"redis://127.0.0.1:{free_port()}/0"}  # nothing listens there
    if on_failure is not None:
        redis["onFailure"] = on_failure
    deployment = deployment_with_accounts(
        root, server={"apiThrottle": True, "redis": redis}, api={"throttle": THROTTLE}
    )
    return running_daemon(deployment)


@pytest.fixture(scope="module")
def fail_closed_daemon(tmp_path_factory):
    """A daemon whose Redis is down, failing closed, and a user's token for it. Logging in there
    is refused too (the abuse limits count in Redis as well), so the token comes from a daemon
    of the same deployment without Redis; APID_REDIS_URL gives the other one its Redis."""
    deployment = deployment_with_accounts(
        tmp_path_factory.mktemp("closed"),
        server={"apiThrottle": True, "redis": {"onFailure": "closed"}},
        api={"throttle": THROTTLE},
    )
    with running_daemon(deployment) as in_process:
        token = in_process.login(*USER[:2])
    down = Daemon(deployment, env={"APID_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"}).start()
    try:
        yield down, token
    finally:
        down.stop()


@pytest.fixture(scope="module")
def fail_open_daemon(tmp_path_factory):
    with redis_down_daemon(tmp_path_factory.mktemp("open"), None) as running:  # open is the default
        yield running


REDIS_HANGS = (
    "BUG: with Redis unreachable RedisCounters.charge never answers (txredisapi's reconnecting pool "
    "queues the EVAL until a connection exists), so the call hangs instead of failing open or closed; "
    "apid/calls/rate_limits.py RedisCounters.charge: bound it with a timeout (e.g. addTimeout(2, reactor))"
)


def test_with_redis_down_and_on_failure_closed_calls_are_503_with_retry_after(fail_closed_daemon):
    daemon, token = fail_closed_daemon
    reply = daemon.request("GET", f"{V}/person/nothingHere", token=token, timeout=6)
    body = assert_problem(reply, 503)
    assert body["type"] == "urn:apid:problem:service-unavailable"
    assert int(reply.headers["Retry-After"]) >= 1
    assert_no_fields(reply)


def test_with_redis_down_and_on_failure_open_calls_are_allowed_without_fields(fail_open_daemon):
    token = fail_open_daemon.login(*USER[:2])
    admin_token = fail_open_daemon.login(*ADMIN[:2])
    people = assert_json(fail_open_daemon.request("GET", f"{V}/person/list", token=admin_token, timeout=6))
    user_id = next(p["id"] for p in people if p["username"] == USER[0])
    for _ in range(USER_LIMIT + 1):  # not limited either: nothing is counted
        reply = show(fail_open_daemon, token, user_id)
        assert_json(reply)
        assert_no_fields(reply)


def test_a_plugin_route_is_charged_like_an_api_call(daemon, admin_token):
    """`@route` paths are governed alike (issue 10, item 5): each request costs one, and a
    locked-out user is refused there too."""
    person, token = fresh_user(daemon, admin_token)
    for left in range(USER_LIMIT - 1, 0, -1):
        reply = daemon.request("GET", "/teamCount", token=token)
        assert reply.status == 200, reply.body
        assert_limited(reply, left)
    assert_limited(show(daemon, token, person["id"]), 0)  # the API call that reaches the limit
    assert_refused(daemon.request("GET", "/teamCount", token=token), "/teamCount")
