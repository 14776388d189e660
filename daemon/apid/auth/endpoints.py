"""Public endpoints: fixed paths that answer without a token when listed in `reservedUris`.

What every public endpoint shares (the route value, the path declared with its OpenAPI
operation) and what the account and session endpoints read and answer with (string fields,
e-mail addresses, a query value, the plain-text answer). The service's own endpoints
(`/health`, `/error`, `/metrics`) are `apid.server.service_endpoints`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from twisted.web.http import Request

from apid.auth.tokens import Principal
from apid.http.requests import query_fields
from apid.iostate.types import value_type
from apid.problems import InvalidFields

Handler = Callable[[Request, Principal | None], Awaitable[bytes]]
EMAIL = value_type("Email")


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


def write_text(request: Request, text: str, status: int = 200) -> bytes:
    request.setResponseCode(status, HTTPStatus(status).phrase.encode("ascii"))
    request.setHeader(b"Content-Type", b"text/plain; charset=utf-8")
    request.setHeader(b"Cache-Control", b"no-store")
    return text.encode("utf-8")
