"""apid.telemetry.metrics, and the port of apid.server.metrics: what each recorder counts, what a
scrape reads, in one process and summed over
worker processes (prometheus_client's multiprocess mode, in real subprocesses), and that a
process whose metrics nobody can read counts nothing."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest_twisted
import treq
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families
from twisted.internet import reactor

from apid.server.metrics import listen_metrics
from apid.telemetry import metrics

metrics.count()  # as a daemon does when its metrics can be read


def value(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def samples(text: bytes) -> dict[tuple[str, frozenset], float]:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text.decode())
        for sample in family.samples
    }


def test_a_request_is_counted_by_endpoint_version_method_and_status_and_timed():
    labels = {"endpoint": "person/show", "api_version": "1", "method": "GET", "status": "200"}
    before = value("apid_requests_total", **labels)
    timed = value("apid_request_duration_seconds_count", endpoint="person/show")
    metrics.request_answered("person/show", "1", b"GET", 200, 0.003)
    metrics.request_answered("person/show", "1", b"GET", 200, 0.004)
    assert value("apid_requests_total", **labels) == before + 2
    assert value("apid_request_duration_seconds_count", endpoint="person/show") == timed + 2
    assert value("apid_request_duration_seconds_bucket", endpoint="person/show", le="0.005") >= 2


def test_a_method_no_client_may_invent_is_counted_as_other():
    before = value("apid_requests_total", endpoint="other", api_version="", method="other", status="405")
    metrics.request_answered("other", "", b"BREW", 405, 0.001)
    metrics.request_answered("other", "", b"PROPFIND", 405, 0.001)
    assert value("apid_requests_total", endpoint="other", api_version="", method="other", status="405") == before + 2


def test_sizes_rejections_deliveries_pings_restarts_and_pool_waits_are_counted():
    before = {
        "batch": value("apid_batch_size_count"),
        "chain": value("apid_chain_length_count"),
        "rate": value("apid_throttle_rejections_total", kind="rate", policy="ROLE_USER"),
        "abuse": value("apid_throttle_rejections_total", kind="abuse", policy="login"),
        "delivered": value("apid_webhook_deliveries_total", hook="7", outcome="delivered"),
        "timeout": value("apid_ping_results_total", outcome="timeout"),
        "restarts": value("apid_worker_restarts_total"),
        "waits": value("apid_db_pool_wait_seconds_count", pool="write"),
    }
    metrics.batch_run(40)
    metrics.chain_run(3)
    metrics.throttled("rate", "ROLE_USER")
    metrics.throttled("abuse", "login")
    metrics.delivery_recorded(7, "delivered")
    metrics.ping_result("timeout")
    metrics.worker_restarted()
    metrics.pool_wait("write")(0.002)
    assert value("apid_batch_size_count") == before["batch"] + 1
    assert value("apid_chain_length_count") == before["chain"] + 1
    assert value("apid_throttle_rejections_total", kind="rate", policy="ROLE_USER") == before["rate"] + 1
    assert value("apid_throttle_rejections_total", kind="abuse", policy="login") == before["abuse"] + 1
    assert value("apid_webhook_deliveries_total", hook="7", outcome="delivered") == before["delivered"] + 1
    assert value("apid_ping_results_total", outcome="timeout") == before["timeout"] + 1
    assert value("apid_worker_restarts_total") == before["restarts"] + 1
    assert value("apid_db_pool_wait_seconds_count", pool="write") == before["waits"] + 1


def test_a_hook_whose_backlog_emptied_reads_zero():
    metrics.webhooks_pending({31: 4, 32: 9})
    assert (value("apid_webhook_pending", hook="31"), value("apid_webhook_pending", hook="32")) == (4, 9)
    metrics.webhooks_pending({32: 1})
    assert (value("apid_webhook_pending", hook="31"), value("apid_webhook_pending", hook="32")) == (0, 1)


def test_one_process_renders_its_own_registry_in_the_text_format():
    assert not metrics.multiprocess_mode()
    metrics.request_answered("/health", "", b"GET", 200, 0.001)
    body, content_type = metrics.render()
    assert content_type.startswith("text/plain")
    read = samples(body)
    key = (
        "apid_requests_total",
        frozenset({"endpoint": "/health", "api_version": "", "method": "GET", "status": "200"}.items()),
    )
    assert read[key] == value("apid_requests_total", endpoint="/health", api_version="", method="GET", status="200")
    assert not any(name.endswith("_created") for name, _ in read)
    metrics.process_dead(os.getpid())  # nothing to forget in one process


WORKER = textwrap.dedent("""
    import sys
    from apid.telemetry import metrics
    metrics.count()
    assert metrics.multiprocess_mode()
    for _ in range(int(sys.argv[1])):
        metrics.request_answered("person/show", "1", b"GET", 200, 0.01)
    metrics.webhooks_pending({5: int(sys.argv[2])})
    print(__import__("os").getpid())
""")
SCRAPER = textwrap.dedent("""
    import sys
    from apid.telemetry import metrics
    metrics.count()
    if len(sys.argv) > 1:
        metrics.process_dead(int(sys.argv[1]))
        metrics.worker_restarted()
    sys.stdout.buffer.write(metrics.render()[0])
""")


UNREAD = textwrap.dedent("""
    import sys
    from apid.telemetry import metrics
    from apid.config.server import MetricsConfig
    metrics.request_answered("person/show", "1", b"GET", 200, 0.01)
    metrics.batch_run(3)
    metrics.throttled("rate", "ROLE_USER")
    metrics.webhooks_pending({5: 1})
    metrics.pool_wait("read")(0.002)
    metrics.worker_restarted()
    metrics.process_dead(1)
    assert not metrics.count_if_read(MetricsConfig(listen=None, role=None))
    assert "prometheus_client" not in sys.modules
    assert metrics.count_if_read(MetricsConfig(listen=None, role="ROLE_ADMIN"))
    metrics.batch_run(3)
    sys.stdout.buffer.write(metrics.render()[0])
""")


def test_a_process_whose_metrics_nobody_reads_counts_nothing_until_they_can_be_read():
    done = subprocess.run([sys.executable, "-c", UNREAD], capture_output=True, check=True)
    read = samples(done.stdout)
    assert read[("apid_batch_size_count", frozenset())] == 1
    assert (
        "apid_requests_total",
        frozenset({"endpoint": "person/show", "api_version": "1", "method": "GET", "status": "200"}.items()),
    ) not in read


def run(tmp_path, script: str, *args: str) -> bytes:
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        check=True,
        env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)},
    )
    return done.stdout


def test_worker_processes_are_summed_and_a_dead_ones_gauges_forgotten(tmp_path):
    first = int(run(tmp_path, WORKER, "3", "4"))
    run(tmp_path, WORKER, "2", "6")
    requests = (
        "apid_requests_total",
        frozenset({"endpoint": "person/show", "api_version": "1", "method": "GET", "status": "200"}.items()),
    )
    pending = ("apid_webhook_pending", frozenset({"hook": "5"}.items()))
    read = samples(run(tmp_path, SCRAPER))
    assert read[requests] == 5
    assert read[pending] == 6  # the largest of the living: both workers read one database
    read = samples(run(tmp_path, SCRAPER, str(first)))
    assert read[requests] == 5  # a dead worker's counts still count
    assert read[("apid_worker_restarts_total", frozenset())] == 1


@pytest_twisted.ensureDeferred
async def test_the_metrics_port_serves_get_metrics_and_nothing_else():
    port = await listen_metrics(reactor, "tcp:0:interface=127.0.0.1")
    origin = f"http://127.0.0.1:{port.getHost().port}"
    try:
        metrics.request_answered("person/list", "1", b"GET", 200, 0.02)
        scraped = await treq.get(origin + "/metrics")
        assert scraped.code == 200
        assert scraped.headers.getRawHeaders("Content-Type")[0].startswith("text/plain")
        assert b'apid_requests_total{api_version="1",endpoint="person/list",method="GET",status="200"}' in (
            await treq.content(scraped)
        )
        elsewhere = await treq.get(origin + "/")
        assert (elsewhere.code, (await treq.json_content(elsewhere))["status"]) == (404, 404)
        posted = await treq.post(origin + "/metrics", b"")
        assert posted.code == 405 and posted.headers.getRawHeaders("Allow") == ["GET, HEAD"]
        await treq.content(posted)
    finally:
        await port.stopListening()
