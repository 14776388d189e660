"""The HAProxy configuration apid ships (etc/haproxy/apid.cfg, quoted by docs/operations.md),
run as a file by Debian's HAProxy in front of two daemons on one PostgreSQL (issue 39, item 2):

- PostgreSQL stopped under load: every daemon fails /health together and HAProxy answers for
  them, yet every 503 a client sees is an RFC 9457 problem with Retry-After (apid's own, or the
  errorfile's), and calls succeed again once the database is back. The daemons log JSON, and
  every line of their logs parses, SQLAlchemy's pool errors included (item 3).
- A daemon killed while requests wait on it: the GETs it held are retried on the other daemon
  and answered 200; the POSTs are not retried (502), since a write may have been made.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from haproxy import SHIPPED, HAProxy, running_shipped_haproxy
from harness import (
    ADMIN,
    Daemon,
    Deployment,
    Response,
    V,
    deployment_with_accounts,
    person_fields,
    running_daemons,
    wait_for,
)

pytestmark = pytest.mark.postgresql

DOCS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


@pytest.fixture(scope="module")
def deployment(tmp_path_factory, postgres) -> Deployment:
    return deployment_with_accounts(
        tmp_path_factory.mktemp("shipped-haproxy"),
        server={"database": {"url": postgres.url}, "logFormat": "json"},
    )


@pytest.fixture(scope="module")
def daemons(deployment) -> Iterator[list[Daemon]]:
    with running_daemons(deployment) as started:
        yield started


@pytest.fixture(scope="module")
def proxy(daemons) -> Iterator[HAProxy]:
    with running_shipped_haproxy([f"127.0.0.1:{daemon.port}" for daemon in daemons]) as running:
        assert running.wait_until("UP") == {f"127.0.0.1:{daemon.port}": "UP" for daemon in daemons}
        yield running


@pytest.fixture(scope="module")
def front(deployment, proxy) -> Daemon:
    """harness.Daemon's client, pointed at the proxy: every call below goes through HAProxy."""
    client = Daemon(deployment)
    client.port = proxy.port
    return client


@pytest.fixture(scope="module")
def token(front) -> str:
    return front.login(ADMIN[0], ADMIN[1])


def test_the_documentation_quotes_the_shipped_files():
    docs = DOCS.read_text()
    assert SHIPPED.read_text().strip() in docs
    assert "etc/haproxy/apid.cfg" in docs and "etc/haproxy/503.http" in docs


def is_problem(reply: Response) -> bool:
    return (
        reply.status == 503
        and reply.content_type == "application/problem+json"
        and int(reply.headers["Retry-After"]) >= 1
        and reply.json["status"] == 503
    )


def test_a_database_outage_answers_problems_with_retry_after(front, token, proxy, postgres, daemons):
    answers: list[Response] = []
    stopping = threading.Event()

    def call() -> None:
        while not stopping.is_set():
            answers.append(front.request("GET", f"{V}/person/show/1", token=token, timeout=30))
            time.sleep(0.01)

    threads = [threading.Thread(target=call, daemon=True) for _ in range(3)]
    for thread in threads:
        thread.start()
    try:
        assert wait_for(lambda: len(answers) >= 5, timeout=20)
        postgres.halt()
        try:
            assert wait_for(lambda: set(proxy.states().values()) == {"DOWN"}, timeout=15), proxy.states()
            time.sleep(2)  # every server down: HAProxy answers alone
        finally:
            postgres.resume()
        assert proxy.wait_until("UP", timeout=20) == {f"127.0.0.1:{daemon.port}": "UP" for daemon in daemons}
        after = len(answers)
        assert wait_for(lambda: any(reply.status == 200 for reply in answers[after:]), timeout=20)
    finally:
        stopping.set()
        for thread in threads:
            thread.join(60)

    refused = [reply for reply in answers if reply.status != 200]
    assert refused and all(is_problem(reply) for reply in refused), [(r.status, r.body[:200]) for r in refused]
    assert any(reply.json.get("detail", "").startswith("No server can answer") for reply in refused)  # the errorfile

    for daemon in daemons:
        lines = daemon.stderr.splitlines()
        assert lines
        for line in lines:
            json.loads(line)  # every line of the log is a JSON object, tracebacks included


def test_a_killed_daemon_s_gets_are_retried_and_its_posts_are_not(front, token, proxy, daemons):
    victim = daemons[0]
    os.kill(victim.process.pid, signal.SIGSTOP)  # requests reach it and wait there
    answers: dict[str, list[int]] = {"GET": [], "POST": []}

    def call(method: str) -> None:
        if method == "GET":
            reply = front.request("GET", f"{V}/person/show/1", token=token, timeout=30)
        else:
            reply = front.request("POST", f"{V}/person/create", person_fields("cut"), token=token, timeout=30)
        answers[method].append(reply.status)

    # round robin: two of each method in a row, so that each reaches both daemons
    threads = [threading.Thread(target=call, args=(method,)) for method in ("GET", "GET", "POST", "POST") * 2]
    try:
        for thread in threads:
            thread.start()
            time.sleep(0.02)
        time.sleep(0.5)
    finally:
        victim.process.kill()  # SIGKILL: the connections it held are cut, no answer sent
        victim.process.wait()
    for thread in threads:
        thread.join(40)

    assert answers["GET"] == [200] * 4, answers
    assert 502 in answers["POST"], answers  # cut on the killed daemon, not replayed
    assert set(answers["POST"]) <= {201, 200, 502}, answers
