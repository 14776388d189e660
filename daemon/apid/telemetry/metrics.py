"""The metrics apid exposes, in Prometheus' text format: what they count and how they are read.

One process keeps them in memory (prometheus_client's default registry). Worker processes
keep them in files in the folder `PROMETHEUS_MULTIPROC_DIR` names, which their parent sets
before any of them imports prometheus_client (it chooses its mode then, on import); a scrape
sums the files of every worker, living or dead, so counts survive a worker's restart.

Label values come from bounded sets only: IO State endpoints and API versions, route
patterns, `batch`, `chain`, `other`, statuses, methods, hook ids, policy names. A request
that reached none of those is `other`, so a client cannot mint series by inventing paths.

They are read on a port of their own (`apid.server.metrics`, `metrics.listen`) and, for a token
of `metrics.role`, at GET /metrics on the API's port (`apid.auth.endpoints`). Rendering reads
the files of every process: run `render` in a thread. This module imports neither Klein nor the
reactor, so that every layer may count (the database its pool waits, the webhooks their
deliveries).

A process counts only once `count_if_read` found a way to read them configured: without one,
every recorder below does nothing and prometheus_client is never imported.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from twisted.internet.threads import deferToThread
from twisted.logger import Logger
from twisted.web.http import Request

from apid.config.server import MetricsConfig
from apid.http.methods import KNOWN_METHODS

log = Logger(namespace="apid.metrics")

# The methods counted by name; any other a client sends is counted as `other`.
METHODS = {method.encode("ascii"): method for method in KNOWN_METHODS}


class _Metrics:
    """Every metric of the process, made (and prometheus_client imported) when counting starts."""

    def __init__(self) -> None:
        from prometheus_client import Counter, Gauge, Histogram, disable_created_metrics

        disable_created_metrics()  # the `_created` series would double the output and say little
        self.requests = Counter(
            "apid_requests",
            "Requests answered, by endpoint, API version, method and status",
            ["endpoint", "api_version", "method", "status"],
        )
        self.latency = Histogram(
            "apid_request_duration_seconds",
            "Seconds from a request's headers to its answer's last byte, by endpoint",
            ["endpoint"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )
        self.batch_sizes = Histogram(
            "apid_batch_size", "Elements of each batch run", buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000)
        )
        self.chain_lengths = Histogram(
            "apid_chain_length", "Links of each chain run", buckets=(2, 3, 4, 5, 6, 8, 10, 15, 20)
        )
        self.throttled = Counter(
            "apid_throttle_rejections",
            "Requests refused with 429: `kind` rate (a role's daily limit), endpoint "
            "(its RATELIMIT) or abuse (logins, registrations, resets); `policy` the role, endpoint or abuse limit",
            ["kind", "policy"],
        )
        self.deliveries = Counter(
            "apid_webhook_deliveries",
            "Webhook delivery attempts recorded, by hook and outcome (delivered, failed, gone, deferred, refused)",
            ["hook", "outcome"],
        )
        self.pending = Gauge(
            "apid_webhook_pending",
            "Webhook messages waiting for delivery, by hook (read from the database by the delivery worker)",
            ["hook"],
            multiprocess_mode="livemax",
        )
        self.pings = Counter(
            "apid_ping_results", "Peers asked by pingServers, by outcome (up, down, timeout)", ["outcome"]
        )
        self.worker_restarts = Counter("apid_worker_restarts", "Worker processes that died and were replaced")
        self.pool_waits = Histogram(
            "apid_db_pool_wait_seconds",
            "Seconds a unit of work waited for a database thread, by pool (read; write: SQLite's single writer)",
            ["pool"],
            buckets=(0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5),
        )
        self.streams = Gauge("apid_event_streams", "Live event streams open (GET /events)", multiprocess_mode="livesum")
        self.events_sent = Counter("apid_events_sent", "Events sent on live event streams, by service", ["service"])
        self.streams_cut = Counter(
            "apid_event_streams_cut",
            "Live event streams apid ended, by reason (slow: the client did not read; standing: its caller no "
            "longer stands; missed: back past what the log keeps)",
            ["reason"],
        )
        self.event_lag = Histogram(
            "apid_event_lag_seconds",
            "Seconds from a change's commit to its event's send, on this process's streams",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
        )
        # Label children by their values: `.labels()` costs a lock and a few dict lookups per call.
        self.answered: dict[tuple[str, str, str, int], Any] = {}
        self.timed: dict[str, Any] = {}
        self.pending_hooks: set[str] = set()


_counted: _Metrics | None = None


def count() -> None:
    """Start counting in this process (again: nothing changes)."""
    global _counted
    if _counted is None:
        _counted = _Metrics()


def count_if_read(settings: MetricsConfig) -> bool:
    """Count when the metrics can be read (`metrics.listen` or `metrics.role` set); whether it does."""
    if settings.listen is not None or settings.role is not None:
        count()
    return _counted is not None


def multiprocess_mode() -> bool:
    """prometheus_client's own choice, made when it was imported: files when the parent of the
    workers had set PROMETHEUS_MULTIPROC_DIR by then, else memory."""
    from prometheus_client import values

    return values.ValueClass is not values.MutexValue


def request_answered(endpoint: str, api_version: str, method: bytes, status: int, seconds: float) -> None:
    """Count one answered request and its latency (the site calls this once per request)."""
    if _counted is None:
        return
    method_name = METHODS.get(method, "other")
    key = (endpoint, api_version, method_name, status)
    counted = _counted.answered.get(key)
    if counted is None:
        counted = _counted.answered[key] = _counted.requests.labels(endpoint, api_version, method_name, str(status))
    counted.inc()
    timed = _counted.timed.get(endpoint)
    if timed is None:
        timed = _counted.timed[endpoint] = _counted.latency.labels(endpoint)
    timed.observe(seconds)


def batch_run(elements: int) -> None:
    if _counted is not None:
        _counted.batch_sizes.observe(elements)


def chain_run(links: int) -> None:
    if _counted is not None:
        _counted.chain_lengths.observe(links)


def throttled(kind: str, policy: str) -> None:
    """Count one 429 of `kind` (rate, endpoint or abuse) under its policy's name."""
    if _counted is not None:
        _counted.throttled.labels(kind, policy).inc()


def delivery_recorded(hook_id: int, outcome: str) -> None:
    if _counted is not None:
        _counted.deliveries.labels(str(hook_id), outcome).inc()


def webhooks_pending(counts: Mapping[int, int]) -> None:
    """The messages waiting per hook now; a hook no longer listed drops to 0."""
    if _counted is None:
        return
    now = {str(hook_id): waiting for hook_id, waiting in counts.items()}
    for hook in _counted.pending_hooks - now.keys():
        _counted.pending.labels(hook).set(0)
    for hook, waiting in now.items():
        _counted.pending.labels(hook).set(waiting)
    _counted.pending_hooks.update(now)


def streams_open(count: int) -> None:
    if _counted is not None:
        _counted.streams.set(count)


def event_sent(service: str, lag: float | None) -> None:
    """One event handed to a stream, `lag` seconds after its change was logged (None: replayed
    to a client that was away, not late)."""
    if _counted is not None:
        _counted.events_sent.labels(service).inc()
        if lag is not None:
            _counted.event_lag.observe(lag)


def stream_cut(reason: str) -> None:
    if _counted is not None:
        _counted.streams_cut.labels(reason).inc()


def ping_result(outcome: str) -> None:
    if _counted is not None:
        _counted.pings.labels(outcome).inc()


def worker_restarted() -> None:
    if _counted is not None:
        _counted.worker_restarts.inc()


def pool_wait(pool: str) -> Callable[[float], None]:
    """What a database pool reports each wait for a thread to."""
    if _counted is None:
        return lambda seconds: None
    return _counted.pool_waits.labels(pool).observe


def process_dead(pid: int) -> None:
    """Forget the gauges of a worker that ended (its counters still count)."""
    if _counted is not None and multiprocess_mode():
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)


def render() -> tuple[bytes, str]:
    """The exposition text and its content type, summed over every worker's files in
    multiprocess mode; reads files, so it runs in a thread."""
    from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest, multiprocess

    if multiprocess_mode():
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    else:
        registry = REGISTRY
    return generate_latest(registry), CONTENT_TYPE_LATEST


async def scrape(request: Request) -> bytes:
    """Answer `request` with the metrics."""
    body, content_type = await deferToThread(render)
    request.setHeader(b"Content-Type", content_type.encode("ascii"))
    request.setHeader(b"Cache-Control", b"no-store")
    return body
