"""What the operations of every document are written with: media types, tags, the bearer
requirement, the RFC 9457 problems answered, references to the shared components, and the
request bodies, query parameters and answers of the public endpoints, whose operations are
declared beside their handlers (`apid.auth.endpoints.PublicPath`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from apid.http.problem_schemas import status_schema
from apid.problems import MEDIA_TYPE as PROBLEM_MEDIA_TYPE

JSON = "application/json"
TEXT = "text/plain"
PUBLIC_TAG = "public"
ROUTES_TAG = "routes"
BATCH_TAG = "batch"
CHAIN_TAG = "chain"
SECURITY_SCHEME = "bearerAuth"
BEARER: list[dict[str, list[str]]] = [{SECURITY_SCHEME: []}]
NO_TOKEN: list[dict[str, list[str]]] = []
STRING = {"type": "string"}
FILLED_STRING = {"type": "string", "minLength": 1}  # a required string field: an empty one is refused
NOT_MODIFIED = "NotModified"  # the 304 of a GET whose If-None-Match names the answer's ETag


def ref(kind: str, name: str) -> dict[str, str]:
    """A reference to the component `name` of `kind` (schemas, responses, headers, parameters)."""
    return {"$ref": f"#/components/{kind}/{name}"}


def header_refs(*names: str) -> dict[str, Any]:
    return {name: ref("headers", name) for name in names}


def problem_answer(description: str, *headers: str, status: int | None = None) -> dict[str, Any]:
    """An answer whose body is a problem, of one of the types of `status` when given (else any
    type), with these shared headers."""
    return {
        "description": description,
        "headers": header_refs("X-Request-ID", *headers),
        "content": {
            PROBLEM_MEDIA_TYPE: {"schema": ref("schemas", "Problem") if status is None else status_schema(status)}
        },
    }


def _status_answer(status: int, description: str, *headers: str) -> dict[str, Any]:
    return problem_answer(description, *headers, status=status)


# status -> (the name of its shared response component, the response)
PROBLEM_RESPONSES: Mapping[str, tuple[str, dict[str, Any]]] = {
    "400": (
        "BadRequest",
        _status_answer(
            400,
            "Malformed request, or bad fields: `errors` lists every bad field at once (unknown, not allowed "
            "for your roles, badly typed, missing)",
        ),
    ),
    "401": (
        "Unauthorized",
        _status_answer(401, "No, a malformed, an invalid, an expired or a revoked access token", "WWW-Authenticate"),
    ),
    "403": ("Forbidden", _status_answer(403, "None of your roles may do this")),
    "404": ("NotFound", _status_answer(404, "No such application version, controller, API version, action or record")),
    "405": ("MethodNotAllowed", _status_answer(405, "Not called with this method", "Allow")),
    "409": (
        "Conflict",
        _status_answer(
            409, "The action refused a change that conflicts with what is stored (a name taken, a stale version)"
        ),
    ),
    "410": (
        "Gone",
        _status_answer(
            410, "This API version is past its sunset: `currentApiVersion` names the one to call, `successor` its path"
        ),
    ),
    "412": (
        "PreconditionFailed",
        _status_answer(
            412,
            "If-Match names no current ETag of the record: it changed since you read it (GET it again), or "
            "the call names no record whose ETag could be compared; nothing was changed",
        ),
    ),
    "413": ("PayloadTooLarge", _status_answer(413, "The body is over maxBodyBytes, or a batch over batchLimit")),
    "415": ("UnsupportedMediaType", _status_answer(415, "A body that is not application/json")),
    "422": (
        "Unprocessable",
        _status_answer(
            422,
            "Well-formed but refused: a chain breaks a chain rule (`rule` names it), checked before any link "
            "runs, or a link returned no key to pass on; or an action's own rule",
        ),
    ),
    "429": (
        "TooManyRequests",
        _status_answer(
            429,
            "Your daily request limit, or the endpoint's RATELIMIT, is used up",
            "Retry-After",
            "RateLimit",
            "RateLimit-Policy",
        ),
    ),
    "500": ("InternalError", _status_answer(500, "The call failed; the error was logged")),
    "502": ("BadGateway", _status_answer(502, "A service the action calls answered something unusable")),
    "503": ("ServiceUnavailable", _status_answer(503, "A dependency is down", "Retry-After")),
    "504": ("GatewayTimeout", _status_answer(504, "A service the action calls did not answer in time")),
}
# Every status an API call may answer: apid's own, and those plugins raise through apid.plugin
# (Conflict, Unprocessable) from any action; and those of an action that calls a service of its
# own (`@action(upstream=True)`): 503 is among apid's own (its database).
API_ERRORS = ("400", "401", "403", "404", "405", "409", "413", "415", "422", "429", "500", "503")
UPSTREAM_ERRORS = ("502", "504")


def problem_answers(*statuses: str) -> dict[str, Any]:
    """The shared problem answers of these statuses, by reference."""
    return {status: ref("responses", PROBLEM_RESPONSES[status][0]) for status in statuses}


def call_errors(upstream: bool) -> dict[str, Any]:
    """The problem answers of an API call, by reference: an action's that calls an upstream
    service (`upstream`) besides."""
    return problem_answers(*API_ERRORS, *(UPSTREAM_ERRORS if upstream else ()))


def schema_body(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A required JSON body of this schema."""
    return {"required": True, "content": {JSON: {"schema": dict(schema)}}}


def object_body(properties: Mapping[str, Any], required: Iterable[str], *, others: bool = False) -> dict[str, Any]:
    """A required JSON object body of these members, `required` of them required, and other
    members allowed only when `others` says so."""
    return schema_body(
        {"type": "object", "required": list(required), "additionalProperties": others, "properties": dict(properties)}
    )


def json_body(properties: Mapping[str, Any]) -> dict[str, Any]:
    """A required JSON object body of exactly these members, all required."""
    return object_body(properties, properties)


def query_parameter(name: str, description: str, required: bool = True) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": required,
        "schema": FILLED_STRING if required else STRING,
        "description": description,
    }


def text_answer(description: str) -> dict[str, Any]:
    return {"description": description, "content": {TEXT: {"schema": {"type": "string"}}}}


def json_answer(description: str, schema: Mapping[str, Any], *headers: str) -> dict[str, Any]:
    answer: dict[str, Any] = {"description": description, "content": {JSON: {"schema": schema}}}
    if headers:
        answer["headers"] = header_refs(*headers)
    return answer
