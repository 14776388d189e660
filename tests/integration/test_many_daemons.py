"""Many machines as one (issue 15, item 5): two `apid serve` daemons of two worker processes
each, on one PostgreSQL and one Redis, as the three-machine layout of docs/operations.md runs
them (here on one machine, each daemon on its own port).

A token issued by one daemon works on every worker of both; a logout on one is honoured by all
within a second; rate and abuse limits are exact across the four workers; `apid iostate reload`
reaches every worker; each webhook event is delivered once; a worker killed loses no answered
write and is replaced.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import create_engine, select

from apid.store.tables import person
from assertions import assert_problem
from harness import ADMIN, REPO, Daemon, V, burst, deployment_with_accounts, new_person, show_person, wait_for
from logins import GUESSES, PAIR_LIMIT, guess_at_once
from redis_server import running_redis

pytestmark = [
    pytest.mark.postgresql,
    pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="worker processes need two CPUs"),
]

RATE_LIMIT = 50
CHARGES = 200
SOON = 1.0  # seconds: how soon a change on one daemon reaches every worker of the other


@pytest.fixture(scope="module")
def daemons(tmp_path_factory, postgres, receiver):
    with running_redis() as redis:
        deployment = deployment_with_accounts(
            tmp_path_factory.mktemp("many"),
            server={
                "database": {"url": postgres.new_database("many")},
                "redis": {"url": redis.url},
                "apiThrottle": True,
                "webhookActive": True,
                "webhooks": {"timeout": 1, "lease": 3, "poll": 0.2},
            },
            api={
                "procCores": 2,
                "throttle": {"rateLimit": {"ROLE_USER": RATE_LIMIT, "ROLE_ADMIN": 100000}},
                "cors": {"allowedOrigins": [receiver.origin]},
            },
        )
        first, second = Daemon(deployment).start(), Daemon(deployment).start()
        try:
            for daemon in (first, second):
                daemon.admin_token = first.login(ADMIN[0], ADMIN[1])
            yield first, second
        finally:
            first.stop()
            second.stop()


def each_worker(daemon: Daemon, method: str, path: str, token: str, times: int = 12) -> set[int]:
    """The statuses of `times` calls on fresh connections, which the kernel spreads over the workers."""
    return {daemon.request(method, path, token=token).status for _ in range(times)}


def test_a_token_from_one_daemon_works_on_every_worker_of_both(daemons):
    first, second = daemons
    someone = new_person(first, first.admin_token)
    token = first.login(someone["username"], someone["password"])
    for daemon in daemons:
        assert each_worker(daemon, "GET", f"{V}/person/show/{someone['id']}", token) == {200}
    assert second.ready.rstrip().endswith("2 workers)")


def test_a_logout_on_one_daemon_is_honoured_by_every_worker_within_a_second(daemons):
    first, second = daemons
    someone = new_person(first, first.admin_token)
    token = second.login(someone["username"], someone["password"])
    path = f"{V}/person/show/{someone['id']}"
    assert each_worker(first, "GET", path, token) == {200}
    assert first.request("POST", "/logout", token=token).status in (200, 204)
    time.sleep(SOON)
    for daemon in daemons:
        assert each_worker(daemon, "GET", path, token) == {401}


def test_rate_limits_are_exact_across_both_daemons(daemons):
    first, _ = daemons
    someone = new_person(first, first.admin_token, roles=["ROLE_USER"])
    token = first.login(someone["username"], someone["password"])
    path = f"{V}/person/show/{someone['id']}"
    with ThreadPoolExecutor(max_workers=50) as pool:
        replies = list(pool.map(lambda n: daemons[n % 2].request("GET", path, token=token, timeout=60), range(CHARGES)))
    statuses = Counter(reply.status for reply in replies)
    assert statuses == {200: RATE_LIMIT, 429: CHARGES - RATE_LIMIT}, statuses
    assert_problem(next(reply for reply in replies if reply.status == 429), 429)


def test_abuse_limits_are_exact_across_both_daemons(daemons):
    first, _ = daemons
    someone = new_person(first, first.admin_token)
    assert guess_at_once(list(daemons), someone["username"], "127.0.0.91") == {
        401: PAIR_LIMIT,
        429: GUESSES - PAIR_LIMIT,
    }


def test_a_reload_reaches_every_worker_of_both_daemons(daemons):
    first, _ = daemons
    path = f"{V}/person/show/1"
    assert all("email" in first.request("GET", path, token=first.admin_token).json for _ in range(6))
    state = json.loads((REPO / "iostate" / "person.json").read_text())
    rules = state.get("IOSTATE", state)
    rules["VERSION"]["1"]["URI"]["show"]["RESPONSE"]["permitAll"].remove("email")
    folder = first.deployment.root / "iostate"
    (folder / "person.json").write_text(json.dumps(state))
    try:
        reload = first.deployment.cli("iostate", "reload")
        assert reload.returncode == 0, reload.stderr
        time.sleep(SOON)
        for daemon in daemons:
            answers = [daemon.request("GET", path, token=first.admin_token).json for _ in range(12)]
            assert not any("email" in answer for answer in answers)
    finally:
        (folder / "person.json").write_text((REPO / "iostate" / "person.json").read_text())
        assert first.deployment.cli("iostate", "reload").returncode == 0


def test_each_webhook_event_is_delivered_once(daemons, receiver, postgres):
    first, _ = daemons
    engine = create_engine(first.deployment.server["database"]["url"])
    try:
        with engine.begin() as connection:
            admin_id = connection.execute(select(person.c.id).where(person.c.username == ADMIN[0])).scalar_one()
            connection.exec_driver_sql(
                "insert into hook (attempts, date_created, format, last_modified, user_id, is_enabled, url, service) "
                f"values (0, now(), 'JSON', now(), {admin_id}, true, '{receiver.origin}/many', 'team')"
            )
        for daemon in daemons:
            burst(daemon, daemon.admin_token, 100)
        assert wait_for(lambda: len(receiver.received) >= 200, timeout=30)
        time.sleep(1.0)  # a second delivery of any of them would arrive by now
        ids = [reply.headers["webhook-id"] for reply in receiver.received]
        assert len(ids) == len(set(ids)) == 200
    finally:
        engine.dispose()


def test_a_killed_worker_loses_no_answered_write_and_is_replaced(daemons):
    first, second = daemons
    people = [new_person(first, first.admin_token) for _ in range(10)]
    victim = first.workers()[0]
    os.kill(victim, signal.SIGKILL)
    assert wait_for(lambda: len(first.workers()) == 2 and victim not in first.workers(), timeout=30)
    for person_record in people:
        assert show_person(second, second.admin_token, person_record["id"])["username"] == person_record["username"]
        assert show_person(first, first.admin_token, person_record["id"])["username"] == person_record["username"]
