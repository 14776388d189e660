"""The metrics port: GET /metrics, and nothing else, on a port of its own (`metrics.listen`),
without a token. What is counted, and the answer to a scrape (served on the API's port too, for
a token of `metrics.role`), is `apid.telemetry.metrics`: only this port needs Klein.
"""

from __future__ import annotations

from typing import Any

from klein import Klein
from twisted.internet.endpoints import serverFromString
from twisted.internet.interfaces import IListeningPort
from twisted.web.http import Request
from twisted.web.server import Site

from apid.http.compression import compressing
from apid.http.routes import klein_routes
from apid.telemetry.metrics import scrape


class MetricsSite(Site):
    """The metrics port's site: scrapes every few seconds would drown the access log."""

    noisy = False

    def log(self, request: Request) -> None:
        pass


def _metrics_only() -> Klein:
    app = klein_routes()
    app.route("/metrics", methods=["GET", "HEAD"], strict_slashes=False)(scrape)
    return app


async def listen_metrics(reactor: Any, listen: str) -> IListeningPort:
    """Serve GET /metrics, and nothing else, on the endpoint `listen` describes (such as
    `tcp:9464:interface=127.0.0.1`), without a token: whoever reaches the port reads them.
    Gzipped for a scraper that asks (Prometheus does), as the API's answers are."""
    return await serverFromString(reactor, listen).listen(MetricsSite(compressing(_metrics_only().resource())))
