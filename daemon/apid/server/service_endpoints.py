"""The service's own public endpoints: `/health` (whether to send this daemon traffic), `/error`
(the problem body of any status, for a reverse proxy's error pages) and, when `metrics.role` is
set, `/metrics` for a token of that role (`apid.telemetry.metrics`; left out of the API
documents). And the fixed public endpoints every API document lists (`PUBLIC_PATHS`), each
declared beside its handler.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from http import HTTPStatus

from twisted.web.http import Request

from apid.auth.endpoints import PublicPath, PublicRoute
from apid.auth.login import SESSION_PATHS
from apid.auth.registration import ACCOUNT_PATHS
from apid.auth.tokens import NEEDS_TOKEN, Principal
from apid.config.files import Config
from apid.events.endpoint import EVENT_PATHS
from apid.http.answers import write_json, write_problem
from apid.http.operations import STRING, json_answer, problem_answer, query_parameter
from apid.http.requests import query_fields
from apid.openapi.public import OPENAPI_DOCUMENT
from apid.problems import Forbidden, InvalidFields, Unauthorized, problem_for_status
from apid.telemetry.health import Health
from apid.telemetry.metrics import scrape

ERROR_STATUSES = frozenset(status.value for status in HTTPStatus if 400 <= status.value <= 599)
# Three ASCII digits, matched before int() reads them: str.isdigit() also admits "²" and "٤٠٤",
# which int() refuses or reads, and a status has no business being longer.
STATUS_TEXT = re.compile(r"[45][0-9]{2}")
STATUS_REASON = "must be given once, an error status HTTP names from 400 to 599"


def error_status(query: Mapping[str, list[str]]) -> int:
    """The status `/error` renders: the query's `status`, 500 without one. Anything but one
    error status HTTP names, in three ASCII digits, is a 400 naming it."""
    values = query.get("status", ["500"])
    status = int(values[0]) if len(values) == 1 and STATUS_TEXT.fullmatch(values[0]) else None
    if status not in ERROR_STATUSES:
        raise InvalidFields(errors=[{"field": "status", "reason": STATUS_REASON}])
    return status


HEALTH = PublicPath(
    "/health",
    "GET",
    {
        "summary": "Whether to send this daemon traffic, for load balancers and peers",
        "responses": {
            "200": json_answer(
                "Up",
                {
                    "type": "object",
                    "required": ["status", "version"],
                    "properties": {"status": {"const": "pass"}, "version": STRING},
                },
            ),
            "503": json_answer(
                "Up but not to be sent traffic: draining before a stop, or its database unreachable",
                {
                    "type": "object",
                    "required": ["status", "version", "output", "checks"],
                    "properties": {
                        "status": {"const": "fail"},
                        "version": STRING,
                        "output": STRING,
                        "checks": {
                            "type": "object",
                            "additionalProperties": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "required": ["status", "output"],
                                    "properties": {"status": {"const": "fail"}, "output": STRING},
                                },
                            },
                        },
                    },
                },
            ),
        },
    },
)
ERROR = PublicPath(
    "/error",
    "GET",
    {
        "summary": "The problem body of a status (for a reverse proxy's error pages)",
        "parameters": [
            {
                **query_parameter(
                    "status",
                    "A status from 400 to 599 that HTTP names, in three digits (default "
                    "500; anything else is a 400 naming status)",
                    required=False,
                ),
                "schema": {"type": "integer", "minimum": 400, "maximum": 599},
            }
        ],
        "responses": {"default": problem_answer("That status's problem")},
    },
)
SERVICE_PATHS = (HEALTH, ERROR)
# The fixed public endpoints, in the documents' order (`apid.openapi.document.DocumentSettings.fixed`).
PUBLIC_PATHS = (*SESSION_PATHS, *ACCOUNT_PATHS, *SERVICE_PATHS, OPENAPI_DOCUMENT)


def public_paths(config: Config) -> tuple[PublicPath, ...]:
    """The fixed endpoints `config`'s daemon answers: the live event stream's when it is on."""
    return (*PUBLIC_PATHS, *(EVENT_PATHS if config.server.events.enabled else ()))


class ServiceEndpoints:
    """`/health` for load balancers and peers; `/error` renders the problem body of a status;
    `/metrics` for Prometheus, when a role may read them here (`metrics_role`)."""

    def __init__(self, version: str, health: Health, metrics_role: str | None = None) -> None:
        self._version = version
        self._health = health
        self._metrics_role = metrics_role

    def routes(self) -> list[PublicRoute]:
        routes = [HEALTH.route(self.health), ERROR.route(self.error)]
        if self._metrics_role is not None:
            routes.append(PublicRoute("/metrics", "GET", self.metrics))
        return routes

    async def health(self, request: Request, _principal: Principal | None) -> bytes:
        request.setHeader(b"Cache-Control", b"no-store")
        status, document = self._health.document(self._version)
        return write_json(request, document, status)

    async def error(self, request: Request, _principal: Principal | None) -> bytes:
        """`/error?status=502` answers a 502 problem: a reverse proxy's `error_page` can point
        here so that its own errors look like apid's."""
        status = error_status(query_fields(request))
        return write_problem(
            request, problem_for_status(status, HTTPStatus(status).description or HTTPStatus(status).phrase)
        )

    async def metrics(self, request: Request, principal: Principal | None) -> bytes:
        """The metrics, for a token of the metrics role only: they tell every endpoint's
        traffic and every hook's backlog. (Listed in reservedUris, it still needs the token.)"""
        if principal is None:
            raise Unauthorized(NEEDS_TOKEN)
        if self._metrics_role not in principal.roles:
            raise Forbidden("your roles may not read the metrics")
        return await scrape(request)
