"""Public endpoints: fixed paths that answer without a token when listed in `reservedUris`.

This module holds what every public endpoint shares (the route value, the path declared with
its OpenAPI operation, reading string fields, the plain-text answer) and
the service endpoints: `/health` (liveness), `/error` (a problem body for any status, for
reverse proxies) and, when `metrics.role` is set, `/metrics` for a token of that role
(`apid.telemetry.metrics`; left out of the API documents).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from twisted.web.http import Request

from apid.auth.tokens import NEEDS_TOKEN, Principal
from apid.http.answers import write_json, write_problem
from apid.http.requests import query_fields
from apid.iostate.types import value_type
from apid.openapi.parts import STRING, json_answer, problem_answer, query_parameter
from apid.problems import Forbidden, InvalidFields, Unauthorized, problem_for_status
from apid.telemetry.health import Health
from apid.telemetry.metrics import scrape

Handler = Callable[[Request, Principal | None], Awaitable[bytes]]
EMAIL = value_type("Email")
ERROR_STATUSES = frozenset(status.value for status in HTTPStatus if 400 <= status.value <= 599)
# Three ASCII digits, matched before int() reads them: str.isdigit() also admits "²" and "٤٠٤",
# which int() refuses or reads, and a status has no business being longer.
STATUS_TEXT = re.compile(r"[45][0-9]{2}")
STATUS_REASON = "must be given once, an error status HTTP names from 400 to 599"


@dataclass(frozen=True)
class PublicRoute:
    path: str
    method: str
    handler: Handler

    @property
    def reserved_as(self) -> str:
        """The `reservedUris` entry that makes this route public: its path, or for a path with
        a variable part (`/docs/assets/<name>`) the fixed part before it (`/docs/assets`)."""
        return self.path.split("<", 1)[0].rstrip("/") or "/"


@dataclass(frozen=True)
class PublicPath:
    """A public endpoint as the API documents describe it, declared beside its handler: path,
    method and OpenAPI operation (summary, parameters, request body, responses; `security`
    only where the token is needed whatever `reservedUris` says). `apid.openapi.public` lists
    them; each document adds the tag, the operationId and, from `reservedUris`, the security."""

    path: str
    method: str
    operation: Mapping[str, Any]

    def route(self, handler: Handler) -> PublicRoute:
        """This endpoint, answered by `handler`."""
        return PublicRoute(self.path, self.method, handler)


def string_fields(body: Mapping[str, Any], *names: str) -> list[str]:
    """The named fields as non-empty strings; one 400 listing every field missing, empty or
    of another type."""
    errors = [
        {"field": name, "reason": _string_reason(body.get(name))}
        for name in names
        if not isinstance(body.get(name), str) or not body[name]
    ]
    if errors:
        raise InvalidFields(errors=errors)
    return [body[name] for name in names]


def _string_reason(value: Any) -> str:
    if value is None:
        return "is required"
    return "must not be empty" if value == "" else "must be a string"


def fields_of(body: Mapping[str, Any], *checks: Callable[[], Any], allowed: tuple[str, ...]) -> list[Any]:
    """Run every check of a public endpoint's body and refuse once, listing every bad field
    (unknown ones included), instead of stopping at the first."""
    errors = [{"field": name, "reason": "is not accepted here"} for name in body if name not in allowed]
    results = []
    for check in checks:
        try:
            results.append(check())
        except InvalidFields as invalid:
            errors.extend(invalid.extensions["errors"])
    if errors:
        raise InvalidFields(errors=errors)
    return results


def email_field(body: Mapping[str, Any], name: str = "email") -> str:
    (email,) = string_fields(body, name)
    try:
        return EMAIL.check(email)
    except ValueError as error:
        raise InvalidFields(errors=[{"field": name, "reason": str(error)}]) from None


def query_value(request: Request, name: str) -> str:
    values = query_fields(request).get(name) or [""]
    if len(values) != 1 or not values[0]:
        raise InvalidFields(errors=[{"field": name, "reason": "is required once in the query"}])
    return values[0]


def error_status(query: Mapping[str, list[str]]) -> int:
    """The status `/error` renders: the query's `status`, 500 without one. Anything but one
    error status HTTP names, in three ASCII digits, is a 400 naming it."""
    values = query.get("status", ["500"])
    status = int(values[0]) if len(values) == 1 and STATUS_TEXT.fullmatch(values[0]) else None
    if status not in ERROR_STATUSES:
        raise InvalidFields(errors=[{"field": "status", "reason": STATUS_REASON}])
    return status


def write_text(request: Request, text: str, status: int = 200) -> bytes:
    request.setResponseCode(status, HTTPStatus(status).phrase.encode("ascii"))
    request.setHeader(b"Content-Type", b"text/plain; charset=utf-8")
    request.setHeader(b"Cache-Control", b"no-store")
    return text.encode("utf-8")


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
