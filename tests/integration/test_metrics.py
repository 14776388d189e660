"""Metrics, request ids and JSON logs (issue 15, item 4), on the real daemon.

The daemon serves /metrics on a loopback port of its own and, to a token of ROLE_ADMIN, on
the API's port; it logs JSON lines with the access log on. Counts are compared before and
after a known set of requests: nothing else calls the daemon in between.
"""

from __future__ import annotations

import json
import os
import re
import signal
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from assertions import assert_json, assert_problem
from event_streams import EventStream
from harness import ADMIN, ADMIN_ACCOUNT, USER_ACCOUNT, V, deployment_with_accounts, free_port, running_daemon, wait_for

CAROL = ("carol", "carol-password-1", "carol@example.com", "ROLE_USER")
CAROL_LIMIT = 3  # requests a day: her fourth is refused
HOOKS = {"timeout": 1, "lease": 3, "poll": 0.2, "retryBase": 0.1, "retryFactor": 2, "retryMax": 0.4}
NEW_ID = re.compile(r"[0-9a-f]{32}")

Samples = dict[tuple[str, frozenset], float]


@pytest.fixture(scope="module")
def metrics_port() -> int:
    return free_port()


@pytest.fixture(scope="module")
def deployment(tmp_path_factory, receiver, metrics_port):
    return deployment_with_accounts(
        tmp_path_factory.mktemp("metrics"),
        server={
            "metrics": {"listen": f"tcp:{metrics_port}:interface=127.0.0.1", "role": "ROLE_ADMIN"},
            "logFormat": "json",
            "accessLog": True,
            "apiThrottle": True,
            "webhookActive": True,
            "webhooks": HOOKS,
            "servers": [f"http://127.0.0.1:{free_port()}"],  # a peer that is down
        },
        api={"throttle": {"rateLimit": {"ROLE_USER": CAROL_LIMIT}}, "cors": {"allowedOrigins": [receiver.origin]}},
        accounts=(ADMIN_ACCOUNT, USER_ACCOUNT, CAROL),
    )


def parse(text: str) -> Samples:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def scrape(port: int) -> Samples:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as reply:
        assert reply.status == 200 and reply.headers["Content-Type"].startswith("text/plain")
        return parse(reply.read().decode())


def grown(before: Samples, after: Samples, name: str, **labels: str) -> float:
    key = (name, frozenset(labels.items()))
    return after.get(key, 0.0) - before.get(key, 0.0)


def requests_made(before: Samples, after: Samples) -> dict[tuple[str, str, str, str], float]:
    """apid_requests_total's growth per (endpoint, api_version, method, status)."""
    counts = {}
    for (name, labels), count in after.items():
        if name == "apid_requests_total":
            label = dict(labels)
            made = count - before.get((name, labels), 0.0)
            if made:
                counts[(label["endpoint"], label["api_version"], label["method"], label["status"])] = made
    return counts


def test_the_counts_match_the_requests_made(daemon, admin_token, metrics_port):
    before = scrape(metrics_port)
    for _ in range(3):
        assert_json(daemon.request("GET", f"{V}/person/show/1", token=admin_token))
    for _ in range(2):
        assert_problem(daemon.request("GET", f"{V}/person/show/999999", token=admin_token), 404)
    assert_problem(daemon.request("GET", f"{V}/person/show/1"), 401)
    assert_problem(daemon.request("PUT", f"{V}/person/show/1", token=admin_token), 405)
    assert_problem(daemon.request("GET", f"{V}/nosuch/thing/7", token=admin_token), 404)
    assert_problem(daemon.request("GET", "/no/such/path"), 404)
    batch = {"batch": [{"id": 1}, {"id": 1}, {"id": 1}], "combine": True}
    assert len(assert_json(daemon.request("POST", "/b0.1/person/show", batch, token=admin_token))) == 3
    assert assert_json(daemon.request("GET", f"{V}/server/pingServers", token=admin_token))["down"] == 1
    assert_json(daemon.request("GET", "/health"))
    after = scrape(metrics_port)

    assert requests_made(before, after) == {
        ("person/show", "1", "GET", "200"): 3,
        ("person/show", "1", "GET", "404"): 2,
        ("person/show", "1", "GET", "401"): 1,
        ("person/show", "1", "PUT", "405"): 1,
        ("other", "", "GET", "404"): 2,
        ("batch", "1", "POST", "200"): 1,
        ("server/pingServers", "1", "GET", "200"): 1,
        ("/health", "", "GET", "200"): 1,
    }
    assert grown(before, after, "apid_request_duration_seconds_count", endpoint="person/show") == 7
    assert grown(before, after, "apid_batch_size_count") == 1
    assert grown(before, after, "apid_batch_size_sum") == 3
    assert grown(before, after, "apid_ping_results_total", outcome="down") == 1
    assert grown(before, after, "apid_db_pool_wait_seconds_count", pool="read") >= 5
    assert after[("apid_worker_restarts_total", frozenset())] == 0


def test_rate_and_abuse_rejections_are_counted(daemon, metrics_port):
    before = scrape(metrics_port)
    carol = daemon.login(CAROL[0], CAROL[1])
    statuses = [daemon.request("GET", "/openapi.json", token=carol).status for _ in range(CAROL_LIMIT + 2)]
    assert statuses == [200] * CAROL_LIMIT + [429, 429]
    guesses = [
        daemon.request("POST", "/authenticate", {"username": "mallory", "password": f"guess-{n}"}).status
        for n in range(6)
    ]
    assert guesses == [401] * 5 + [429]
    after = scrape(metrics_port)
    assert grown(before, after, "apid_throttle_rejections_total", kind="rate", policy="ROLE_USER") == 2
    assert grown(before, after, "apid_throttle_rejections_total", kind="abuse", policy="login") == 1
    made = requests_made(before, after)
    assert made[("/openapi.json", "", "GET", "429")] == 2 and made[("/authenticate", "", "POST", "429")] == 1


def test_a_webhook_delivery_is_counted_for_its_hook(daemon, admin_token, receiver, metrics_port):
    hook = assert_json(
        daemon.request(
            "POST",
            f"{V}/hook/create",
            {"url": receiver.origin + "/metrics-hook", "service": "person"},
            token=admin_token,
        )
    )
    before = scrape(metrics_port)
    fields = {"username": "dora", "password": "dora-password-1", "email": "dora@example.com"}
    assert_json(daemon.request("POST", f"{V}/person/create", fields, token=admin_token))
    assert wait_for(
        lambda: (
            grown(
                before, scrape(metrics_port), "apid_webhook_deliveries_total", hook=str(hook["id"]), outcome="delivered"
            )
            == 1
        ),
        timeout=15,
    )


def test_metrics_on_the_api_port_need_a_token_of_the_role(daemon, admin_token, user_token):
    assert_problem(daemon.request("GET", "/metrics"), 401)
    assert_problem(daemon.request("GET", "/metrics", token=user_token), 403)
    reply = daemon.request("GET", "/metrics", token=admin_token)
    assert reply.status == 200 and reply.content_type.startswith("text/plain")
    made = requests_made({}, parse(reply.body.decode()))
    assert made[("/metrics", "", "GET", "401")] == 1 and made[("/metrics", "", "GET", "403")] == 1


def test_the_request_id_sent_is_echoed_and_a_hostile_one_replaced(daemon, admin_token):
    ok = daemon.request("GET", f"{V}/person/show/1", token=admin_token, headers={"X-Request-ID": "edge-7f3a:1"})
    assert ok.status == 200 and ok.headers["X-Request-ID"] == "edge-7f3a:1"
    missing = daemon.request("GET", f"{V}/person/show/999999", token=admin_token, headers={"X-Request-ID": "r-404"})
    assert missing.headers["X-Request-ID"] == "r-404" and assert_problem(missing, 404)["requestId"] == "r-404"
    for hostile in ("two words", "x" * 129, "caf\u00e9", ""):
        reply = daemon.request("GET", f"{V}/nosuch/x", token=admin_token, headers={"X-Request-ID": hostile})
        assert NEW_ID.fullmatch(assert_problem(reply, 404)["requestId"]), hostile
    made = {daemon.request("GET", "/health").headers["X-Request-ID"] for _ in range(3)}
    assert len(made) == 3 and all(NEW_ID.fullmatch(chosen) for chosen in made)
    assert daemon.request("GET", "/health", headers={"X-Request-ID": "x" * 128}).headers["X-Request-ID"] == "x" * 128


def test_log_lines_are_json_and_the_access_lines_name_the_request(daemon, admin_token):
    daemon.request("GET", f"{V}/person/show/1", token=admin_token, headers={"X-Request-ID": "log-call"})
    daemon.request("GET", "/health?probe=1", headers={"X-Request-ID": "log-health"})

    def lines() -> list[dict]:
        return [json.loads(line) for line in daemon.stderr.splitlines() if line.strip()]

    def access(request_id: str) -> dict | None:
        return next((line for line in lines() if line.get("requestId") == request_id), None)

    assert wait_for(lambda: access("log-call") and access("log-health"))
    for line in lines():
        assert {"level", "time", "namespace", "message"} <= line.keys(), line
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", line["time"]), line
    call, health = access("log-call"), access("log-health")
    assert (call["level"], call["namespace"], call["method"], call["path"], call["endpoint"], call["status"]) == (
        "info",
        "apid.access",
        "GET",
        f"{V}/person/show/1",
        "person/show",
        200,
    )
    assert (health["path"], health["endpoint"], health["status"]) == ("/health", "/health", 200)
    assert all(isinstance(line["duration"], float) and 0 <= line["duration"] < 10 for line in (call, health))
    assert "log-call" in call["message"]


def test_worker_processes_answer_with_the_counts_of_all_of_them(tmp_path):
    """Each worker's /metrics and the parent's metrics port count the requests of both workers;
    a worker killed and replaced is counted, and what it had counted stays."""
    port = free_port()
    deployment = deployment_with_accounts(
        tmp_path,
        server={"metrics": {"role": "ROLE_ADMIN", "listen": f"tcp:{port}:interface=127.0.0.1"}},
        api={"procCores": 2},
        accounts=(ADMIN_ACCOUNT,),
    )
    with running_daemon(deployment) as daemon:
        token = daemon.login(ADMIN[0], ADMIN[1])
        for _ in range(12):  # each on a new connection: the kernel spreads them over the workers
            assert_json(daemon.request("GET", f"{V}/person/show/1", token=token))
        for scraped in range(2):  # whichever worker answers, it reads the files of both
            reply = daemon.request("GET", "/metrics", token=token)
            assert reply.status == 200
            made = requests_made({}, parse(reply.body.decode()))
            assert made[("person/show", "1", "GET", "200")] == 12
            assert made.get(("/metrics", "", "GET", "200"), 0) == scraped
        assert requests_made({}, scrape(port))[("person/show", "1", "GET", "200")] == 12

        victim = daemon.workers()[0]
        os.kill(victim, signal.SIGKILL)
        assert wait_for(lambda: len(daemon.workers()) == 2 and victim not in daemon.workers(), timeout=30)
        after = scrape(port)
        assert after[("apid_worker_restarts_total", frozenset())] == 1
        assert requests_made({}, after)[("person/show", "1", "GET", "200")] == 12


def test_live_event_streams_are_counted(daemon, admin_token, metrics_port):
    streams = ("apid_event_streams", frozenset())
    before = scrape(metrics_port)
    with EventStream(daemon.port, admin_token) as stream:
        assert stream.status == 200
        assert scrape(metrics_port)[streams] == before.get(streams, 0) + 1
        fields = {"username": "erin", "password": "erin-password-1", "email": "erin@example.com"}
        assert_json(daemon.request("POST", f"{V}/person/create", fields, token=admin_token))
        assert stream.next(timeout=2).event == "person/create"
        after = scrape(metrics_port)
        assert grown(before, after, "apid_events_sent_total", service="person/create") == 1
        assert grown(before, after, "apid_event_lag_seconds_count") == 1
        assert grown(before, after, "apid_event_lag_seconds_bucket", le="1.0") == 1
    assert wait_for(lambda: scrape(metrics_port)[streams] == before.get(streams, 0))
