"""The public endpoints in a document: the fixed ones, each declared with its operation beside
its handler (`PublicPath`; the server lists them, `apid.server.service_endpoints.PUBLIC_PATHS`),
this document's own, and the plugins' `@route` paths. Without a
token a document lists those in `reservedUris` only; with one, all, those not listed needing
the token."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from apid.auth.endpoints import PublicPath
from apid.http.fixed_paths import OPENAPI_PATH
from apid.http.operations import BEARER, NO_TOKEN, PUBLIC_TAG, ROUTES_TAG, STRING, json_answer, problem_answers

if TYPE_CHECKING:
    from apid.plugin_host.discovery import LoadedController

ROUTE_VARIABLE = re.compile(r"<(?:[^:<>]+:)?([^:<>]+)>")  # werkzeug's <name> or <converter:name>

# `/openapi.json` is routed by `apid.server.application.Application`, but what it answers is this package's own.
OPENAPI_DOCUMENT = PublicPath(
    OPENAPI_PATH,
    "GET",
    {
        "summary": "This document: with a token, the API your roles may call; without one, the "
        "endpoints that answer without a token",
        "responses": {
            "200": json_answer("An OpenAPI 3.1 document", {"type": "object"}),
            **problem_answers("401", "429"),
        },
    },
)


@dataclass(frozen=True)
class RouteDoc:
    """A plugin's `@route` path, outside IO State."""

    path: str
    method: str
    description: str
    owner: str  # the plugin, with its distribution


def plugin_routes(controllers: Iterable[LoadedController]) -> tuple[RouteDoc, ...]:
    """The `@route` paths of the loaded controllers, sorted."""
    routes = []
    for loaded in controllers:
        for attr, (path, method) in loaded.cls.routes().items():
            description = " ".join((getattr(loaded.cls, attr).__doc__ or "").split())
            routes.append(RouteDoc(path, method, description, loaded.plugin.label))
    return tuple(sorted(routes, key=lambda r: (r.path, r.method)))


def is_public(path: str, reserved: frozenset[str]) -> bool:
    """Whether reservedUris makes a path public: the path, or the fixed part before a variable."""
    return (path.split("{", 1)[0].rstrip("/") or "/") in reserved


def public_paths(
    fixed: Iterable[PublicPath], routes: Iterable[RouteDoc], reserved: frozenset[str], anonymous: bool
) -> dict[str, dict[str, Any]]:
    """The fixed endpoints and plugins' routes: without a token (`anonymous`) only those in
    `reserved`; with one, all, those not reserved needing the token."""
    operations = {(p.path, p.method.lower()): {**p.operation, "tags": [PUBLIC_TAG]} for p in fixed}
    for route in routes:
        path = ROUTE_VARIABLE.sub(r"{\1}", route.path)
        operation: dict[str, Any] = {
            "tags": [ROUTES_TAG],
            "summary": route.description or f"A route of {route.owner}",
            "description": f"A route of {route.owner}, outside IO State.",
            "responses": {"200": json_answer("The route's answer", {}), **problem_answers("400", "401", "429")},
        }
        variables = ROUTE_VARIABLE.findall(route.path)
        if variables:
            operation["parameters"] = [
                {"name": name, "in": "path", "required": True, "schema": STRING} for name in variables
            ]
        operations[(path, route.method.lower())] = operation
    paths: dict[str, dict[str, Any]] = {}
    for (path, method), operation in operations.items():
        public = is_public(path, reserved)
        if anonymous and not public:
            continue
        operation = dict(operation)
        operation["operationId"] = f"{method}{path.replace('/', '.')}"
        operation.setdefault("security", NO_TOKEN if public else BEARER)
        if not public and "401" not in operation["responses"]:
            operation["responses"] = {**operation["responses"], **problem_answers("401")}
        paths.setdefault(path, {})[method] = operation
    return paths
