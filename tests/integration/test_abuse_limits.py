"""Login limits through the running daemon (issue 10, item 2), with the shipped defaults:
5 failed logins per (account, address), 100 per account and 50 per address in 15 minutes.

A hundred wrong passwords for one account sent at once from one address: five are verified
(401), the other 95 are refused before any verification (429), alike for an unknown name. The
right password from that address is refused too, while the owner at another address logs in,
as often as they like. Then the same across two daemons counting in one redis-server (with
apiThrottle off: the abuse limits use Redis whenever redis.url is set), and daemons whose
Redis is down, failing closed (503) or open (logins go through).
Requests come from several loopback addresses (127.0.0.0/8), standing for several clients.
"""

from __future__ import annotations

import pytest

from assertions import assert_json, assert_problem
from harness import ADMIN, Daemon, deployment_with_accounts, free_port, new_person, running_daemon
from logins import GUESSES, PAIR_LIMIT, WINDOW, guess_at_once, log_in
from redis_server import running_redis


def assert_owner_logs_in(daemons: list[Daemon], person: dict, source: str, times: int) -> None:
    for n in range(times):
        assert "token" in assert_json(log_in(daemons[n % len(daemons)], person["username"], person["password"], source))


# --- one daemon, counting in process -----------------------------------------------------------


def test_simultaneous_guesses_verify_at_most_the_pair_limit_and_the_owner_still_logs_in(daemon, admin_token):
    person = new_person(daemon, admin_token)
    attacker, owner = "127.0.0.71", "127.0.0.72"
    assert guess_at_once([daemon], person["username"], attacker) == {401: PAIR_LIMIT, 429: GUESSES - PAIR_LIMIT}
    right = log_in(daemon, person["username"], person["password"], attacker)
    assert_problem(right, 429)
    assert 1 <= int(right.headers["Retry-After"]) <= WINDOW
    # the owner elsewhere is not locked out, and their logins never count against them
    assert_owner_logs_in([daemon], person, owner, PAIR_LIMIT + 2)
    # an unknown name is limited alike
    assert guess_at_once([daemon], "nobody-by-that-name", "127.0.0.73") == {401: PAIR_LIMIT, 429: GUESSES - PAIR_LIMIT}


# --- two daemons, counting in one Redis -----------------------------------------------------------


@pytest.fixture(scope="module")
def redis_daemons(tmp_path_factory):
    """Two daemons on one deployment (one database, one JWT secret) counting in one Redis."""
    with running_redis() as server:
        deployment = deployment_with_accounts(tmp_path_factory.mktemp("redis"), server={"redis": {"url": server.url}})
        with running_daemon(deployment) as first, running_daemon(deployment) as second:
            yield first, second


def test_two_daemons_sharing_redis_verify_at_most_the_pair_limit_together(redis_daemons):
    first, second = redis_daemons
    person = new_person(first, first.login(*ADMIN[:2]))
    attacker, owner = "127.0.0.81", "127.0.0.82"
    # counted apart, each daemon would verify five
    assert guess_at_once([first, second], person["username"], attacker) == {401: PAIR_LIMIT, 429: GUESSES - PAIR_LIMIT}
    assert_problem(log_in(second, person["username"], person["password"], attacker), 429)
    assert_problem(log_in(first, person["username"], person["password"], attacker), 429)
    assert_owner_logs_in([first, second], person, owner, PAIR_LIMIT + 2)


# --- Redis down -------------------------------------------------------------------------------------


def redis_down(root, on_failure: str):
    nowhere = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    return running_daemon(deployment_with_accounts(root, server={"redis": {"url": nowhere, "onFailure": on_failure}}))


def test_with_redis_down_and_on_failure_closed_the_account_endpoints_answer_503(tmp_path_factory):
    with redis_down(tmp_path_factory.mktemp("closed"), "closed") as daemon:
        for path, body in (
            ("/authenticate", {"username": ADMIN[0], "password": ADMIN[1]}),
            ("/register", {"username": "newcomer", "password": "newcomer-password-1", "email": "new@example.com"}),
            ("/forgotPassword", {"email": ADMIN[2]}),
        ):
            reply = daemon.request("POST", path, body, timeout=10)
            problem = assert_problem(reply, 503)
            assert problem["type"] == "urn:apid:problem:service-unavailable"
            assert int(reply.headers["Retry-After"]) >= 1


def test_with_redis_down_and_on_failure_open_logins_go_through_uncounted(tmp_path_factory):
    with redis_down(tmp_path_factory.mktemp("open"), "open") as daemon:
        assert_problem(log_in(daemon, ADMIN[0], "wrong-password", "127.0.0.91"), 401)
        assert "token" in assert_json(log_in(daemon, ADMIN[0], ADMIN[1], "127.0.0.91"))
        assert "Redis unreachable" in daemon.stderr and "failing open" in daemon.stderr
