"""PostgreSQL and Redis stopped and started again under load (issue 24, "outages answered, not
dumped"): calls answer 503 problems with Retry-After, never a 500; the log says so once (and a
count), not once per request with a traceback; /health fails while the database cannot be
reached and passes again after; every call succeeds again once the server is back, and every
write that was acknowledged is in the database. With Redis down, `onFailure: open` lets calls
through at once and `closed` answers 503 at once, each outage logged when it starts and ends.

Each daemon logs JSON (`logFormat: json`), so that its events are counted by level.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import create_engine, select

from apid.store.tables import person
from harness import ADMIN, USER, Daemon, Deployment, V, deployment_with_accounts, person_fields, wait_for
from redis_server import RedisServer

LOG_JSON = {"logFormat": "json"}


def events_since(daemon: Daemon, offset: int) -> list[dict]:
    """The daemon's log events written after `offset` characters of its standard error."""
    return [json.loads(line) for line in daemon.stderr[offset:].splitlines() if line.startswith("{")]


def errors(events: list[dict]) -> list[dict]:
    return [event for event in events if event["level"] in ("error", "critical") or "failure" in event]


def health(daemon: Daemon) -> int:
    return daemon.request("GET", "/health", timeout=10).status


class Load:
    """Client threads calling the daemon until stopped, each creating a person then reading it
    (or the admin, when the create failed), again and again; every answer is kept, and the
    names of the persons whose creation was acknowledged (2xx)."""

    def __init__(self, daemon: Daemon, token: str, threads: int = 3) -> None:
        self._daemon = daemon
        self._token = token
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self.answers: list[tuple[str, int, str | None]] = []  # (call, status, Retry-After)
        self.acknowledged: list[str] = []
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stopping.set()
        for thread in self._threads:
            thread.join(60)

    def _call(self, name: str, method: str, path: str, body: dict | None = None):
        reply = self._daemon.request(method, path, body, token=self._token, timeout=30)
        with self._lock:
            self.answers.append((name, reply.status, reply.headers.get("Retry-After")))
        return reply

    def _run(self) -> None:
        shown = 1
        while not self._stopping.is_set():
            fields = person_fields("outage")
            created = self._call("create", "POST", f"{V}/person/create", fields)
            if 200 <= created.status < 300:
                with self._lock:
                    self.acknowledged.append(fields["username"])
                shown = created.json["id"]
            self._call("show", "GET", f"{V}/person/show/{shown}")
            if created.status >= 500:
                time.sleep(0.01)  # as a client backing off a little

    def statuses(self) -> set[int]:
        with self._lock:
            return {status for _, status, _ in self.answers}


# --- PostgreSQL ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def deployment(tmp_path_factory, postgres) -> Deployment:
    """The module's daemon: on the PostgreSQL server that the tests stop and start again."""
    return deployment_with_accounts(
        tmp_path_factory.mktemp("outages"), server={"database": {"url": postgres.url}, **LOG_JSON}
    )


@pytest.mark.postgresql
def test_postgresql_stopped_and_started_under_load(daemon, admin_token, postgres):
    offset = len(daemon.stderr)
    with Load(daemon, admin_token) as load:
        assert wait_for(lambda: len(load.acknowledged) >= 3, timeout=20)
        postgres.halt()
        halted = time.monotonic()
        try:
            assert wait_for(lambda: health(daemon) == 503, timeout=10)
            assert wait_for(lambda: 503 in load.statuses(), timeout=10)
            time.sleep(max(0.0, 6 - (time.monotonic() - halted)))  # an outage of some seconds, under load
            down = daemon.request("GET", "/health", timeout=10)
            assert down.status == 503 and "database" in down.json["checks"]
        finally:
            postgres.resume()
        assert wait_for(lambda: health(daemon) == 200, timeout=15)
        before = len(load.acknowledged)
        assert wait_for(lambda: len(load.acknowledged) > before + 3, timeout=20)  # calls succeed again

    outage = [answer for answer in load.answers if answer[1] == 503]
    assert load.statuses() <= {200, 503}, load.statuses()
    assert outage and all(retry_after is not None and int(retry_after) >= 1 for _, _, retry_after in outage)
    assert {name for name, _, _ in outage} == {"create", "show"}

    events = events_since(daemon, offset)
    assert not [event for event in events if "failure" in event], "a traceback was logged"
    logged_errors = errors(events)
    assert 1 <= len(logged_errors) <= 3, logged_errors  # the outage's start (and no request's)
    assert logged_errors[0]["message"].startswith("database unreachable (")
    counts = [event for event in events if "still unreachable" in event["message"]]
    assert len(counts) <= 3  # at most one every 5 s of the outage
    ended = [event for event in events if "reachable again" in event["message"]]
    assert len(ended) == 1 and ended[0]["level"] == "info"

    with create_engine(postgres.url).connect() as connection:
        stored = set(
            connection.execute(select(person.c.username).where(person.c.username.in_(load.acknowledged))).scalars()
        )
    assert stored == set(load.acknowledged)  # nothing acknowledged was lost


# --- Redis -----------------------------------------------------------------------------------


@contextmanager
def redis_daemon(root, on_failure: str) -> Iterator[tuple[Daemon, RedisServer]]:
    """A daemon counting its rate and abuse limits in a Redis of its own, failing `on_failure`."""
    redis = RedisServer().start()
    deployment = deployment_with_accounts(
        root,
        server={"apiThrottle": True, "redis": {"url": redis.url, "onFailure": on_failure}, **LOG_JSON},
        api={"throttle": {"rateLimit": {"ROLE_USER": 100000, "ROLE_ADMIN": 100000}}},
    )
    daemon = Daemon(deployment).start()
    try:
        yield daemon, redis
    finally:
        daemon.stop()
        redis.stop()


def counted(reply) -> bool:
    """Whether the call was counted: its answer carries the RateLimit fields."""
    return reply.status == 200 and "RateLimit" in reply.headers


def redis_events(events: list[dict]) -> tuple[list[dict], list[dict]]:
    """The outage's start and end events of the Redis circuit."""
    circuit = [event for event in events if event["namespace"] == "apid.store.redis"]
    return (
        [event for event in circuit if "unreachable (" in event["message"]],
        [event for event in circuit if "reachable again" in event["message"]],
    )


def test_redis_stopped_under_load_with_on_failure_open_costs_nothing(tmp_path):
    with redis_daemon(tmp_path, "open") as (daemon, redis):
        admin = daemon.login(*ADMIN[:2])
        show = f"{V}/person/show/1"
        assert counted(daemon.request("GET", show, token=admin))
        offset = len(daemon.stderr)
        with Load(daemon, admin, threads=2) as load:
            redis.halt()
            try:
                started = time.monotonic()
                replies = [daemon.request("GET", show, token=admin) for _ in range(50)]
                took = time.monotonic() - started
                assert [reply.status for reply in replies] == [200] * 50
                assert took < 5, f"50 calls took {took:.1f} s with Redis down"  # not 50 x 2 s
                assert not any(counted(reply) for reply in replies[5:])  # through, uncounted
                assert daemon.login(*USER[:2])  # logins too
            finally:
                redis.resume()
            assert wait_for(lambda: counted(daemon.request("GET", show, token=admin)), timeout=15)
        assert load.statuses() == {200}
        starts, ends = redis_events(events_since(daemon, offset))
        assert len(starts) == 1 and starts[0]["level"] == "error", starts
        assert len(ends) == 1 and ends[0]["level"] == "info", ends
        assert len(errors(events_since(daemon, offset))) == 1


def test_redis_stopped_with_on_failure_closed_answers_503_at_once(tmp_path):
    with redis_daemon(tmp_path, "closed") as (daemon, redis):
        admin = daemon.login(*ADMIN[:2])
        show = f"{V}/person/show/1"
        assert counted(daemon.request("GET", show, token=admin))
        offset = len(daemon.stderr)
        redis.halt()
        try:
            started = time.monotonic()
            replies = [daemon.request("GET", show, token=admin) for _ in range(20)]
            took = time.monotonic() - started
            refused = replies[3:]  # the first may still have found the pool's connections
            assert all(reply.status == 503 and int(reply.headers["Retry-After"]) >= 1 for reply in refused)
            assert took < 5, f"20 calls took {took:.1f} s with Redis down"
            login = daemon.request("POST", "/authenticate", {"username": USER[0], "password": USER[1]})
            assert login.status == 503 and "Retry-After" in login.headers
        finally:
            redis.resume()
        assert wait_for(lambda: counted(daemon.request("GET", show, token=admin)), timeout=15)
        starts, ends = redis_events(events_since(daemon, offset))
        assert len(starts) == 1 and len(ends) == 1, (starts, ends)
        assert len(errors(events_since(daemon, offset))) == 1
