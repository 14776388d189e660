"""Hooks that cannot take their messages, against the real daemon and a real receiver on
loopback: a receiver down under a burst, one down past the documented window, a hook disabled
by hand. Nothing is lost, failures count by rounds, and the backlog arrives in order.

The retry settings are the documented ones scaled down (retryBase 1 s, retryFactor 2, retryMax
8 s, attempts 5), so that the documented formula gives a window of 7.5-15 s between a hook's
first failure and its disabling, instead of 11-22 minutes with the defaults.
"""

from __future__ import annotations

import time
import uuid

import pytest
from sqlalchemy import create_engine, text

from apid.hooks.deliverer import backoff
from harness import V, burst, deployment_with_accounts, new_person
from receiver import Answer, Receiver

ATTEMPTS = 5
SETTINGS = {"timeout": 1, "lease": 3, "poll": 0.2, "retryBase": 1, "retryFactor": 2, "retryMax": 8}
PER_HOST = 8  # the default


def window(jitter: float) -> float:
    """Seconds from a hook's first failed round to its last (the one that disables it), by the
    formula of docs/webhooks.md: jitter 0 the shortest, 1 the longest."""
    return sum(
        backoff(SETTINGS["retryBase"], SETTINGS["retryFactor"], SETTINGS["retryMax"], n, lambda: jitter)
        for n in range(1, ATTEMPTS)
    )


SHORTEST, LONGEST = window(0.0), window(1.0)  # 7.5 s, 15 s
OUTAGE = 0.8 * SHORTEST  # as 60 s is well inside the default window (648 s at the shortest)


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgresql)])
def database_url(request, tmp_path_factory) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path_factory.mktemp('backlog-db') / 'apid.db'}"
    return request.getfixturevalue("postgres").new_database(f"backlog_{uuid.uuid4().hex[:8]}")


@pytest.fixture(scope="module")
def deployment(tmp_path_factory, receiver, database_url):
    return deployment_with_accounts(
        tmp_path_factory.mktemp("backlog"),
        server={"webhookActive": True, "webhooks": SETTINGS, "database": {"url": database_url}},
        api={"attempts": ATTEMPTS, "cors": {"allowedOrigins": [receiver.origin]}},
    )


@pytest.fixture(scope="module")
def database(database_url):
    """The deployment's database, read as any SQL client would."""
    engine = create_engine(database_url)
    yield engine
    engine.dispose()


_paths = iter(range(1, 10_000))


@pytest.fixture
def path(receiver) -> str:
    return f"/backlog-{next(_paths)}"


def add_hook(daemon, token: str, url: str, service: str) -> dict:
    reply = daemon.request("POST", f"{V}/hook/create", {"url": url, "service": service}, token=token)
    assert reply.status == 200, reply.body
    return reply.json


def show(daemon, token: str, hook_id: int) -> dict:
    return daemon.request("GET", f"{V}/hook/show/{hook_id}", token=token).json


def received_ids(receiver: Receiver, path: str) -> list[str]:
    return [r.headers["webhook-id"] for r in list(receiver.received) if r.path == path]


def query(database, sql: str, **values) -> list:
    with database.connect() as connection:
        return connection.execute(text(sql), values).all()


def recorded_ids(database, hook_id: int) -> set[str]:
    return {row[0] for row in query(database, "select id from hook_message where hook_id = :hook", hook=hook_id)}


def wait_until(check, timeout: float):
    deadline = time.monotonic() + timeout
    while not (value := check()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return value


def sent_in_order_of_recording(database, hook_id: int) -> bool:
    """Each successful attempt started no earlier than those of messages recorded before it."""
    rows = query(
        database,
        "select m.created_at from hook_attempt a join hook_message m on m.id = a.message_id "
        "where a.hook_id = :hook and a.status_code = 200 order by a.attempted_at, m.created_at",
        hook=hook_id,
    )
    created = [row[0] for row in rows]
    return created == sorted(created)


def test_a_receiver_down_under_a_burst_loses_nothing_and_its_hook_stays_enabled(
    daemon, admin_token, receiver, database, path
):
    receiver.scripts[path] = [Answer(503)]  # down: no Retry-After, so every answer is a failure
    hook = add_hook(daemon, admin_token, receiver.origin + path, "team")
    down_since = time.monotonic()
    burst(daemon, admin_token, 500)
    recorded = recorded_ids(database, hook["id"])
    assert len(recorded) == 500

    time.sleep(max(0.0, OUTAGE - (time.monotonic() - down_since)))
    during = received_ids(receiver, path)
    shown = show(daemon, admin_token, hook["id"])
    assert shown["isEnabled"] and 1 <= shown["attempts"] < ATTEMPTS
    # the deliveries in flight when it went down (one round), then one probe per round
    assert len(during) <= 2 * PER_HOST + ATTEMPTS
    assert shown["pending"] == 500
    receiver.scripts[path] = [Answer(200)]  # back

    assert wait_until(lambda: set(received_ids(receiver, path)) >= recorded, LONGEST + 10)
    assert wait_until(lambda: show(daemon, admin_token, hook["id"])["pending"] == 0, 10)
    shown = show(daemon, admin_token, hook["id"])
    assert (shown["isEnabled"], shown["attempts"], shown["disabledReason"]) == (True, 0, None)
    assert sent_in_order_of_recording(database, hook["id"])


def test_a_receiver_down_past_the_window_disables_its_hook_which_keeps_recording(
    daemon, admin_token, receiver, database, deployment, path
):
    receiver.scripts[path] = [Answer(503)]
    hook = add_hook(daemon, admin_token, receiver.origin + path, "team")
    burst(daemon, admin_token, 100)

    assert wait_until(lambda: not show(daemon, admin_token, hook["id"])["isEnabled"], LONGEST + 10)
    shown = show(daemon, admin_token, hook["id"])
    assert shown["attempts"] == ATTEMPTS
    assert f"{ATTEMPTS} consecutive failed rounds" in shown["disabledReason"] and "HTTP 503" in shown["disabledReason"]
    arrivals = [r.at for r in list(receiver.received) if r.path == path]
    assert SHORTEST - 0.1 <= arrivals[-1] - arrivals[0] <= LONGEST + ATTEMPTS * 0.5  # plus a poll per round
    assert len(arrivals) <= PER_HOST + ATTEMPTS
    assert shown["pending"] == 100  # a hook disabled by failures keeps every message

    burst(daemon, admin_token, 50)  # recorded while disabled
    assert show(daemon, admin_token, hook["id"])["pending"] == 150
    listed = deployment.cli("hook", "list")
    line = next(line for line in listed.stdout.splitlines() if line.startswith(f"{hook['id']}\t"))
    assert f"attempts {ATTEMPTS}\tpending 150\tdisabled ({ATTEMPTS} consecutive failed rounds" in line
    time.sleep(1)
    assert len([r for r in list(receiver.received) if r.path == path]) == len(arrivals)  # nothing sent meanwhile

    receiver.scripts[path] = [Answer(200)]
    assert daemon.request("PUT", f"{V}/hook/enable/{hook['id']}", token=admin_token).json["attempts"] == 0
    recorded = recorded_ids(database, hook["id"])
    assert len(recorded) == 150
    assert wait_until(lambda: set(received_ids(receiver, path)) >= recorded, 15)
    assert wait_until(lambda: show(daemon, admin_token, hook["id"])["pending"] == 0, 10)
    assert sent_in_order_of_recording(database, hook["id"])


def test_a_hook_disabled_by_hand_records_its_events_and_delivers_them_once_enabled(
    daemon, admin_token, receiver, database, deployment, path
):
    hook = add_hook(daemon, admin_token, receiver.origin + path, "person/create")
    disabled = daemon.request("PUT", f"{V}/hook/disable/{hook['id']}", token=admin_token).json
    assert (disabled["isEnabled"], disabled["pending"]) == (False, 0)

    people = [new_person(daemon, admin_token) for _ in range(5)]

    time.sleep(1)
    assert received_ids(receiver, path) == []
    assert show(daemon, admin_token, hook["id"])["pending"] == 5
    listed = daemon.request("GET", f"{V}/hook/list?max=100", token=admin_token).json
    assert next(h for h in listed if h["id"] == hook["id"])["pending"] == 5
    assert "\tpending 5\tdisabled (disabled by its owner)" in deployment.cli("hook", "list").stdout

    enabled = daemon.request("PUT", f"{V}/hook/enable/{hook['id']}", token=admin_token).json
    assert (enabled["isEnabled"], enabled["pending"]) == (True, 5)
    assert wait_until(lambda: len(received_ids(receiver, path)) == 5, 10)
    events = [r.json for r in list(receiver.received) if r.path == path]
    assert sorted(e["data"]["id"] for e in events) == [p["id"] for p in people]
    assert sent_in_order_of_recording(database, hook["id"])
    assert wait_until(lambda: show(daemon, admin_token, hook["id"])["pending"] == 0, 10)
