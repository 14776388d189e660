"""OpenAPI 3.1 documents of the API, built from the role-filtered view of `apid.apidoc`.

`build(view, settings)` turns the view of some roles into one document: every action those
roles may call as plain calls (`/v{app}[-{api}]/{controller}/{action}` and its `/{id}` form),
batch calls where they may batch it, and chains starting there, with the request and response
fields they send and receive typed as JSON Schema; the public endpoints; RFC 9457 problems as
error answers; the bearer scheme; the RateLimit, Link and Retry-After headers. With
`token=False` it is the document of someone without a token: the endpoints that answer without
one, the API calls of the anonymous role (`security.anonymousRole`, `anonymous_view`) included.
`/openapi.json` answers it through `OpenApiDocuments`; `apid openapi` prints it offline.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from apid.accounts import PASSWORD_LENGTH, USERNAME
from apid.apidoc import ActionDoc, ApiView, FieldDoc, api_view, iso_time
from apid.config import Config
from apid.iostate.model import RuleSet
from apid.iostate.types import INT32, INT64
from apid.problems import MEDIA_TYPE as PROBLEM_MEDIA_TYPE

if TYPE_CHECKING:
    from apid.plugins import LoadedController

OPENAPI_VERSION = "3.1.0"
OPENAPI_PATH = "/openapi.json"
JSON = "application/json"
TEXT = "text/plain"
PUBLIC_TAG = "public"
ROUTES_TAG = "routes"
BATCH_TAG = "batch"
CHAIN_TAG = "chain"
SECURITY_SCHEME = "bearerAuth"
BEARER: list[dict[str, list[str]]] = [{SECURITY_SCHEME: []}]
NO_TOKEN: list[dict[str, list[str]]] = []
ROUTE_VARIABLE = re.compile(r"<(?:[^:<>]+:)?([^:<>]+)>")  # werkzeug's <name> or <converter:name>


@dataclass(frozen=True)
class RouteDoc:
    """A plugin's `@route` path, outside IO State."""

    path: str
    method: str
    description: str
    owner: str  # the plugin, with its distribution


@dataclass(frozen=True)
class DocumentSettings:
    """What a document says besides the rules: the deployment's version, public paths and limits."""

    version: str
    reserved_uris: frozenset[str]
    batch_limit: int
    chain_limit: int
    server_url: str | None = None
    routes: tuple[RouteDoc, ...] = ()
    anonymous_role: str = "ROLE_ANONYMOUS"


def document_settings(
    config: Config, controllers: Iterable[LoadedController], server_url: str | None = None
) -> DocumentSettings:
    """The settings of a deployment's documents: `controllers` are the loaded ones (their routes)."""
    return DocumentSettings(
        version=config.api.version,
        reserved_uris=config.api.reserved_uris,
        batch_limit=config.api.batch_limit,
        chain_limit=config.api.chain_limit,
        server_url=server_url,
        routes=plugin_routes(controllers),
        anonymous_role=config.api.security.anonymous_role,
    )


def anonymous_view(rules: RuleSet, settings: DocumentSettings) -> ApiView | None:
    """What a caller without a token may call in `rules` (as the anonymous role); None when nothing."""
    view = api_view(rules, {settings.anonymous_role}, settings.version)
    return view if view.controllers else None


def plugin_routes(controllers: Iterable[LoadedController]) -> tuple[RouteDoc, ...]:
    """The `@route` paths of the loaded controllers, sorted."""
    routes = []
    for loaded in controllers:
        for attr, (path, method) in loaded.cls.routes().items():
            description = " ".join((getattr(loaded.cls, attr).__doc__ or "").split())
            routes.append(RouteDoc(path, method, description, loaded.plugin.label))
    return tuple(sorted(routes, key=lambda r: (r.path, r.method)))


# --- JSON Schema of the VALUES types ---------------------------------------------------------

_TYPE_SCHEMAS: Mapping[str, dict[str, Any]] = {
    "Long": {"type": "integer", "format": "int64", "minimum": INT64[0], "maximum": INT64[1]},
    "Integer": {"type": "integer", "format": "int32", "minimum": INT32[0], "maximum": INT32[1]},
    "String": {"type": "string"},
    "Boolean": {"type": "boolean"},
    "Float": {"type": "number", "format": "double"},
    "Date": {"type": "string", "format": "date-time"},
    "Email": {"type": "string", "format": "email", "maxLength": 254},
    "URL": {"type": "string", "format": "uri", "pattern": "^[hH][tT][tT][pP][sS]?://"},
    "List": {"type": "array", "items": {}},
    "Map": {"type": "object"},
}


def field_schema(field: FieldDoc, *, nullable: bool = True) -> dict[str, Any]:
    """The JSON Schema of a field's values. In JSON every type also admits null: a request may
    send null for any field, and IO State does not say which answers never hold one. Text (a
    query parameter, the path's id) cannot be null."""
    schema = dict(_TYPE_SCHEMAS[field.type])
    if nullable:
        schema["type"] = [schema["type"], "null"]
    description = field.description
    if field.type == "Date":
        description = _sentence(description, "An ISO 8601 date-time, or a date")
    if field.key == "PKEY":
        description = _sentence(description, "Primary key")
    elif field.key == "FKEY":
        description = _sentence(description, f"Refers to a {field.reference} (its id)")
    elif field.key == "INDEX":
        description = _sentence(description, "Indexed")
    if description:
        schema["description"] = description
    if _fits(field, field.mock):
        schema["examples"] = [field.mock]
    return schema


def _sentence(text: str, more: str) -> str:
    return f"{text.rstrip('.')}. {more}." if text else f"{more}."


def _fits(field: FieldDoc, value: Any) -> bool:
    if value is None:
        return False
    try:
        field.value_type.check(value)
    except ValueError:
        return False
    return True


def _object(fields: Iterable[FieldDoc], **extra: Any) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {f.name: field_schema(f) for f in fields},
        "additionalProperties": False,
        **extra,
    }


def _ref(kind: str, name: str) -> dict[str, str]:
    return {"$ref": f"#/components/{kind}/{name}"}


# --- the parts every document shares ---------------------------------------------------------


def _problem_response(description: str, *headers: str) -> dict[str, Any]:
    response: dict[str, Any] = {
        "description": description,
        "content": {PROBLEM_MEDIA_TYPE: {"schema": _ref("schemas", "Problem")}},
    }
    if headers:
        response["headers"] = {name: _ref("headers", name) for name in headers}
    return response


PROBLEM_RESPONSES: Mapping[str, tuple[str, dict[str, Any]]] = {
    "400": (
        "BadRequest",
        _problem_response(
            "Malformed request, or bad fields: `errors` lists every bad field at once (unknown, not allowed "
            "for your roles, badly typed, missing)"
        ),
    ),
    "401": (
        "Unauthorized",
        _problem_response("No, a malformed, an invalid, an expired or a revoked access token", "WWW-Authenticate"),
    ),
    "403": ("Forbidden", _problem_response("None of your roles may do this")),
    "404": ("NotFound", _problem_response("No such application version, controller, API version, action or record")),
    "405": ("MethodNotAllowed", _problem_response("Not called with this method", "Allow")),
    "409": (
        "Conflict",
        _problem_response(
            "The action refused a change that conflicts with what is stored (a name taken, a stale version)"
        ),
    ),
    "410": (
        "Gone",
        _problem_response(
            "This API version is past its sunset: `currentApiVersion` names the one to call, `successor` its path"
        ),
    ),
    "413": ("PayloadTooLarge", _problem_response("The body is over maxBodyBytes, or a batch over batchLimit")),
    "415": ("UnsupportedMediaType", _problem_response("A body that is not application/json")),
    "422": (
        "Unprocessable",
        _problem_response(
            "Well-formed but refused: a chain breaks a chain rule (`rule` names it), checked before any link "
            "runs, or a link returned no key to pass on; or an action's own rule"
        ),
    ),
    "429": (
        "TooManyRequests",
        _problem_response(
            "Your daily request limit, or the endpoint's RATELIMIT, is used up",
            "Retry-After",
            "RateLimit",
            "RateLimit-Policy",
        ),
    ),
    "500": ("InternalError", _problem_response("The call failed; the error was logged")),
    "503": ("ServiceUnavailable", _problem_response("A dependency is down", "Retry-After")),
}
# Every status an API call may answer: apid's own, and those plugins raise through apid.plugin
# (Conflict, Unprocessable) from any action.
API_ERRORS = ("400", "401", "403", "404", "405", "409", "413", "415", "422", "429", "500", "503")


def _errors(statuses: Iterable[str]) -> dict[str, Any]:
    return {status: _ref("responses", PROBLEM_RESPONSES[status][0]) for status in statuses}


def _headers(*names: str) -> dict[str, Any]:
    return {name: _ref("headers", name) for name in names}


def _components(links: Iterable[str] = ()) -> dict[str, Any]:
    """The shared parts; `links` are the "controller/action" names a chain's order may hold
    (those the roles may call), or none for a pattern of such names."""
    field_error = {
        "type": "object",
        "required": ["field", "reason"],
        "properties": {
            "field": {
                "type": "string",
                "description": "The field's name, or a dotted path into the body (batch.2.username)",
            },
            "reason": {"type": "string", "description": "What is wrong with it, a phrase following the name"},
        },
    }
    problem = {
        "type": "object",
        "description": "An RFC 9457 problem: every error apid answers",
        "required": ["type", "title", "status", "detail"],
        "properties": {
            "type": {"type": "string", "format": "uri", "examples": ["urn:apid:problem:invalid-fields"]},
            "title": {"type": "string", "description": "The status's reason phrase"},
            "status": {"type": "integer", "minimum": 400, "maximum": 599},
            "detail": {"type": "string"},
            "instance": {"type": "string", "description": "The request path"},
            "requestId": {"type": "string", "description": "The request's id, as in the X-Request-ID header"},
            "errors": {
                "type": "array",
                "items": _ref("schemas", "FieldError"),
                "description": "Every bad field (400 invalid-fields, a malformed batch or chain body)",
            },
            "allow": {"type": "array", "items": {"type": "string"}, "description": "405: the methods allowed"},
            "servedVersion": {"type": "string", "description": "404 for another application version"},
            "limit": {"type": "integer", "description": "413: the limit passed"},
            "index": {"type": "integer", "minimum": 0, "description": "A batch element's position"},
            "rule": {"type": "string", "description": "422 chain-rule: which rule was broken"},
            "link": {
                "type": "object",
                "description": "A chain link: its position and endpoint",
                "properties": {"position": {"type": "integer"}, "endpoint": {"type": "string"}},
            },
            "nonSafeCallCompleted": {
                "type": "boolean",
                "description": "A failed chain: whether its PUT, POST or DELETE had run",
            },
        },
    }
    headers = {
        "RateLimit": (
            'The quota left: "<policy>";r=<requests left>;t=<seconds to reset>, when your '
            "roles are rate limited; a second item for an endpoint with its own limit",
            {"type": "string"},
            '"ROLE_USER";r=999;t=86400',
        ),
        "RateLimit-Policy": (
            'Your quota: "<policy>";q=<requests a day>;w=86400, when your roles are '
            'rate limited; a second item, "<controller>/<action>";q=<calls>;w=<seconds>, '
            "for an endpoint with its own limit",
            {"type": "string"},
            '"ROLE_USER";q=1000;w=86400',
        ),
        "Link": (
            "RFC 8288 links to related calls, when asked with X-LINK_RELATIONS; a paged list's "
            "next, prev and first always",
            {"type": "string"},
            '</v0.1/person/show/2>; rel="self"; method="GET"',
        ),
        "Retry-After": ("Seconds to wait before trying again", {"type": "integer", "minimum": 0}, 3600),
        "Deprecation": (
            "RFC 9745: @<Unix seconds> this API version is (or will be) deprecated from",
            {"type": "string"},
            "@1767225600",
        ),
        "Sunset": (
            "RFC 8594: when this API version goes; from then on it answers 410",
            {"type": "string"},
            "Tue, 30 Jun 2026 00:00:00 GMT",
        ),
        "WWW-Authenticate": ("The scheme to authenticate with", {"type": "string"}, 'Bearer realm="apid"'),
        "Allow": ("The methods allowed", {"type": "string"}, "GET"),
        "Set-Cookie": (
            "The refresh cookie (HttpOnly), sent back to /refreshToken and /logout",
            {"type": "string"},
            "apid_refresh=...; Path=/; HttpOnly; SameSite=strict",
        ),
        "Location": ("Where the browser is sent", {"type": "string", "format": "uri"}, "https://example.com/"),
    }
    return {
        "securitySchemes": {
            SECURITY_SCHEME: {
                "type": "http",
                "scheme": "bearer",
                "bearerFormat": "JWT",
                "description": "The access token from POST /authenticate, as Authorization: Bearer <token>",
            }
        },
        "schemas": {
            "Problem": problem,
            "FieldError": field_error,
            "BatchError": {
                "allOf": [
                    _ref("schemas", "Problem"),
                    {
                        "type": "object",
                        "required": ["index"],
                        "properties": {"index": {"type": "integer", "minimum": 0}},
                    },
                ]
            },
            "Combine": {
                "description": "true: every output, in order; false, null or absent: only the last",
                "anyOf": [{"type": ["boolean", "null"]}, {"type": "string", "enum": ["true", "false"]}],
            },
            "Chain": {
                "type": "object",
                "required": ["key", "order"],
                "additionalProperties": False,
                "properties": {
                    "key": {
                        "type": "string",
                        "minLength": 1,
                        "description": "The field of the first link's output passed to the second as its id",
                    },
                    "type": {
                        "type": "string",
                        "enum": ["postchain", "prechain", "blankchain"],
                        "description": "Where the one PUT, POST or DELETE stands; absent on a GET chain: blankchain",
                    },
                    "combine": _ref("schemas", "Combine"),
                    "order": {
                        "type": "object",
                        "minProperties": 1,
                        "description": 'Each further link, in order, "controller/action" -> the field of its '
                        'output passed on; the last link -> "return"',
                        "propertyNames": {"enum": sorted(links)}
                        if links
                        else {"pattern": "^[A-Za-z_][A-Za-z0-9_]*/[A-Za-z_][A-Za-z0-9_]*$"},
                        "additionalProperties": {"type": "string", "minLength": 1},
                    },
                },
            },
        },
        "responses": {name: response for name, response in PROBLEM_RESPONSES.values()},
        "headers": {
            name: {"description": text, "schema": schema, "example": example}
            for name, (text, schema, example) in headers.items()
        },
        "parameters": {
            "LinkRelations": {
                "name": "X-LINK_RELATIONS",
                "in": "header",
                "required": False,
                "schema": {"type": "string"},
                "description": "Any value: answer a Link header of the calls related to this one "
                "(X-LINK-RELATIONS is accepted too)",
            }
        },
    }


# --- the API of the roles ---------------------------------------------------------------------


class _Names:
    """Component and operation names of one action."""

    def __init__(self, action: ActionDoc) -> None:
        version = "" if action.current else f".v{action.api_version}"
        self.operation = f"{action.controller}{version}.{action.action}"
        base = f"{action.controller}.{action.api_version}.{action.action}"
        self.request = f"{base}.request"
        self.record = f"{base}.record"
        self.output = f"{base}.output"


def _action_schemas(action: ActionDoc) -> dict[str, Any]:
    names = _Names(action)
    return {
        names.request: _object(action.request, description=f"The fields your roles may send to {action.name}"),
        names.record: _object(action.response, description=f"The fields your roles receive from {action.name}"),
        names.output: {
            "description": "One record, or a list of them (IO State does not say which an action answers)",
            "anyOf": [_ref("schemas", names.record), {"type": "array", "items": _ref("schemas", names.record)}],
        },
    }


def _summary(action: ActionDoc) -> str:
    return action.description or action.name


def _about(action: ActionDoc, form: str) -> str:
    lines = [form]
    if action.hook:
        lines.append("Your roles may receive webhooks for this endpoint (HOOK).")
    if not action.current:
        lines.append(f"API version {action.api_version} of {action.controller}.")
    return "\n\n".join(lines)


def _ok(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "description": description,
        "headers": _headers("RateLimit", "RateLimit-Policy", "Link"),
        "content": {JSON: {"schema": schema}},
    }


def _plain_operation(action: ActionDoc, with_id: bool) -> dict[str, Any]:
    names = _Names(action)
    parameters: list[dict[str, Any]] = [_ref("parameters", "LinkRelations")]
    if with_id:
        id_field = next(f for f in action.request if f.name == "id")
        parameters.append(
            {
                "name": "id",
                "in": "path",
                "required": True,
                "schema": field_schema(id_field, nullable=False),
                "description": "The request field id",
            }
        )
    operation: dict[str, Any] = {
        "operationId": names.operation + (".byId" if with_id else ""),
        "tags": [action.controller],
        "summary": _summary(action),
        "description": _about(
            action,
            (
                "Request fields come from the query string (as text), the path's last segment (id) and the "
                "JSON body; a body member wins over the same field in the query or path."
            ),
        ),
        "security": BEARER,
    }
    body_fields = [f for f in action.request if not (with_id and f.name == "id")]
    if action.is_safe or action.method == "DELETE":
        for field in body_fields:
            if field.type != "Map":  # Map values are sent in the JSON body only
                parameters.append(
                    {
                        "name": field.name,
                        "in": "query",
                        "required": False,
                        "schema": field_schema(field, nullable=False),
                    }
                )
        if any(field.type == "Map" for field in body_fields):
            operation["requestBody"] = {
                "required": False,
                "content": {JSON: {"schema": _ref("schemas", names.request)}},
            }
    elif action.request:
        operation["requestBody"] = {"required": False, "content": {JSON: {"schema": _ref("schemas", names.request)}}}
    operation["parameters"] = parameters
    operation["responses"] = {
        "200": _ok(_ref("schemas", names.output), "The output, with your roles' RESPONSE fields only"),
        **_errors(API_ERRORS),
    }
    return operation


def _batch_operation(action: ActionDoc, limit: int) -> dict[str, Any]:
    names = _Names(action)
    output = _ref("schemas", names.output)
    return {
        "operationId": names.operation + ".batch",
        "tags": [BATCH_TAG],
        "summary": f"Batch: {_summary(action)}",
        "description": _about(
            action,
            (
                f"Calls {action.name} once per element of `batch` (at most {limit}), each element checked "
                "like a plain call. Always POSTed, whatever the action's method."
            ),
        ),
        "security": BEARER,
        "requestBody": {
            "required": True,
            "content": {
                JSON: {
                    "schema": {
                        "type": "object",
                        "required": ["batch"],
                        "additionalProperties": False,
                        "properties": {
                            "batch": {
                                "type": "array",
                                "minItems": 1,
                                "maxItems": limit,
                                "items": _ref("schemas", names.request),
                            },
                            "combine": _ref("schemas", "Combine"),
                        },
                    }
                }
            },
        },
        "responses": {
            "200": _ok(
                {"anyOf": [{"type": "array", "items": output}, output]},
                "Every element succeeded: every output in order (combine true), or the last",
            ),
            "207": {
                "description": "Some elements failed: their problems, always, and the outputs with null "
                "in a failed element's place",
                "headers": _headers("RateLimit", "RateLimit-Policy"),
                "content": {
                    JSON: {
                        "schema": {
                            "type": "object",
                            "required": ["data", "errors"],
                            "properties": {
                                "data": {
                                    "anyOf": [
                                        {"type": "array", "items": {"anyOf": [output, {"type": "null"}]}},
                                        output,
                                        {"type": "null"},
                                    ]
                                },
                                "errors": {"type": "array", "items": _ref("schemas", "BatchError")},
                            },
                        }
                    }
                },
            },
            **_errors(API_ERRORS),
        },
    }


def _typed_chain(kind: str) -> dict[str, Any]:
    """The chain object of a postchain or prechain (called with PUT, POST or DELETE): `type` is required."""
    return {"allOf": [_ref("schemas", "Chain"), {"required": ["type"], "properties": {"type": {"const": kind}}}]}


def _chain_operations(action: ActionDoc, non_safe_methods: Iterable[str], limit: int) -> dict[str, Any]:
    """A chain starting at `action`: a GET starts a blankchain (GET) or a postchain (called with
    the method of its last, non-safe call); a PUT, POST or DELETE starts a prechain."""
    names = _Names(action)
    chain = _ref("schemas", "Chain")  # a blankchain's: its type may be left out
    answer = {
        "description": "The last link's output, or every link's output in order (combine true)",
        "headers": _headers("RateLimit", "RateLimit-Policy"),
        "content": {JSON: {"schema": {}}},
    }
    errors = _errors(API_ERRORS)
    common = {"tags": [CHAIN_TAG], "security": BEARER}
    parameters = []
    if action.takes_id:
        id_field = next(f for f in action.request if f.name == "id")
        parameters = [
            {
                "name": "id",
                "in": "path",
                "required": True,
                "schema": field_schema(id_field, nullable=False),
                "description": "The first link's id",
            }
        ]
    forms: dict[str, dict[str, Any]] = {}
    if action.is_safe:
        forms["get"] = {
            "operationId": names.operation + ".chain",
            "summary": f"Chain (blankchain): {_summary(action)}, then more GET calls",
            "description": _about(
                action, f"A chain of GET calls only, at most {limit} links, starting with {action.name}."
            ),
            "requestBody": {
                "required": True,
                "content": {
                    JSON: {
                        "schema": {
                            "type": "object",
                            "required": ["chain"],
                            "additionalProperties": False,
                            "properties": {"chain": chain},
                        }
                    }
                },
            },
        }
        for method in sorted(set(non_safe_methods)):
            forms[method.lower()] = {
                "operationId": f"{names.operation}.chain.{method.lower()}",
                "summary": f"Chain (postchain): {_summary(action)}, GET calls, then a {method} call",
                "description": _about(
                    action,
                    (
                        f"Starts with {action.name}; the last of at most {limit} links is the chain's one "
                        f"non-safe call, a {method}, which gets the body's other members as its fields."
                    ),
                ),
                "requestBody": {
                    "required": True,
                    "content": {
                        JSON: {
                            "schema": {
                                "type": "object",
                                "required": ["chain"],
                                "properties": {"chain": _typed_chain("postchain")},
                                "additionalProperties": True,
                            }
                        }
                    },
                },
            }
    else:
        schema = _object(action.request, required=["chain"])
        schema["properties"]["chain"] = _typed_chain("prechain")
        forms[action.method.lower()] = {
            "operationId": names.operation + ".chain",
            "summary": f"Chain (prechain): {_summary(action)}, then GET calls",
            "description": _about(
                action,
                (
                    f"{action.name} runs first with the body's other members as its fields; its `key` field "
                    f"feeds the GET calls that follow (at most {limit} links)."
                ),
            ),
            "requestBody": {"required": True, "content": {JSON: {"schema": schema}}},
        }
    for operation in forms.values():
        operation.update(common)
        if parameters:
            operation["parameters"] = parameters
        operation["responses"] = {"200": answer, **errors}
    return forms


def _marked(action: ActionDoc, operation: dict[str, Any]) -> dict[str, Any]:
    """An operation of a deprecated API version: `deprecated`, the dates and message in its
    description, its Deprecation and Sunset headers, and the 410 it answers after the sunset."""
    deprecation = action.deprecated
    if deprecation is None:
        return operation
    note = (
        f"Deprecated: API version {action.api_version} of {action.controller} is deprecated from "
        f"{iso_time(deprecation.since)}."
    )
    if deprecation.sunset is not None:
        note += f" Sunset {iso_time(deprecation.sunset)}: from then on it answers 410 Gone."
    if deprecation.message:
        note += f" {deprecation.message}"
    operation["deprecated"] = True
    operation["description"] = f"{operation['description']}\n\n{note}"
    names = ("Deprecation", "Sunset") if deprecation.sunset is not None else ("Deprecation",)
    for response in operation["responses"].values():
        if "$ref" not in response:
            response["headers"] = {**response.get("headers", {}), **_headers(*names)}
    if deprecation.sunset is not None:
        operation["responses"] = {**operation["responses"], **_errors(("410",))}
    return operation


def _api_paths(view: ApiView, settings: DocumentSettings) -> tuple[dict[str, Any], dict[str, Any]]:
    paths: dict[str, dict[str, Any]] = {}
    schemas: dict[str, Any] = {}
    actions = list(view.actions())
    non_safe = {action.method for action in actions if not action.is_safe}
    app = settings.version
    for action in actions:
        schemas.update(_action_schemas(action))
        method = action.method.lower()
        paths.setdefault(action.path("v", app), {})[method] = _marked(action, _plain_operation(action, with_id=False))
        if action.takes_id:
            paths.setdefault(action.path("v", app, with_id=True), {})[method] = _marked(
                action, _plain_operation(action, with_id=True)
            )
        if action.batch:
            paths.setdefault(action.path("b", app), {})["post"] = _marked(
                action, _batch_operation(action, settings.batch_limit)
            )
        chain_path = action.path("c", app, with_id=action.takes_id)
        paths.setdefault(chain_path, {}).update(
            {
                form: _marked(action, operation)
                for form, operation in _chain_operations(action, non_safe, settings.chain_limit).items()
            }
        )
    return paths, schemas


# --- the public endpoints ---------------------------------------------------------------------


def _body(properties: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    return {
        "required": True,
        "content": {
            JSON: {
                "schema": {
                    "type": "object",
                    "required": list(properties),
                    "additionalProperties": False,
                    "properties": dict(properties),
                }
            }
        },
    }


def _query(name: str, description: str, required: bool = True) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": required,
        "schema": _TEXT if required else _STRING,
        "description": description,
    }


def _text_answer(description: str) -> dict[str, Any]:
    return {"description": description, "content": {TEXT: {"schema": {"type": "string"}}}}


def _json_answer(description: str, schema: dict[str, Any], *headers: str) -> dict[str, Any]:
    answer: dict[str, Any] = {"description": description, "content": {JSON: {"schema": schema}}}
    if headers:
        answer["headers"] = _headers(*headers)
    return answer


_STRING = {"type": "string"}
_TEXT = {"type": "string", "minLength": 1}  # a required string field: an empty one is refused
_EMAIL = _TYPE_SCHEMAS["Email"]
_NEW_USERNAME = {
    "type": "string",
    "pattern": f"^{USERNAME.pattern}$",
    "description": "3 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit",
}
_NEW_PASSWORD = {
    "type": "string",
    "minLength": PASSWORD_LENGTH[0],
    "maxLength": PASSWORD_LENGTH[1],
    "description": "Not the username",
}
_TOKEN = {
    "type": "object",
    "required": ["token"],
    "properties": {"token": {"type": "string", "description": "A JWT access token"}},
}
_REFRESH_COOKIE = {
    "name": "apid_refresh",
    "in": "cookie",
    "required": False,
    "schema": _STRING,
    "description": "The refresh cookie set at login",
}
_RESET_SENT = "A validation email was sent (the same answer whether or not an account exists)"


def _public_operations() -> dict[tuple[str, str], dict[str, Any]]:
    """The public endpoints (docs/accounts.md): path and method -> operation, without security."""
    return {
        ("/authenticate", "post"): {
            "summary": "Log in",
            "requestBody": _body({"username": _TEXT, "password": _TEXT}),
            "responses": {
                "200": _json_answer("The access token, and the refresh cookie", _TOKEN, "Set-Cookie"),
                **_errors(("400", "401", "429")),
            },
        },
        ("/refreshToken", "get"): {
            "summary": "A new access token for the current one (expired is fine) and the refresh cookie",
            "security": BEARER,  # the current token, even expired, beside the cookie
            "parameters": [_query("name", "Your username"), _REFRESH_COOKIE],
            "responses": {
                "200": _json_answer("A new access token, and a new refresh cookie", _TOKEN, "Set-Cookie"),
                **_errors(("400", "401")),
            },
        },
        ("/logout", "post"): {
            "summary": "End the login: the refresh cookie and every access token of it",
            "security": BEARER,
            "parameters": [_REFRESH_COOKIE],
            "responses": {"204": {"description": "Logged out; the cookie is cleared"}, **_errors(("401",))},
        },
        ("/register", "post"): {
            "summary": "Sign up: a validation email is sent",
            "requestBody": _body({"username": _NEW_USERNAME, "password": _NEW_PASSWORD, "email": _EMAIL}),
            "responses": {"200": _text_answer(_RESET_SENT), **_errors(("400", "429"))},
        },
        ("/validate", "get"): {
            "summary": "Follow an emailed link: validates the account, or opens a password reset",
            "parameters": [_query("id", "The id from the emailed link")],
            "responses": {
                "302": {
                    "description": "To the home page (account validated) or the reset page",
                    "headers": _headers("Location"),
                },
                **_errors(("400",)),
            },
        },
        ("/forgotPassword", "post"): {
            "summary": "Ask for a password reset email",
            "requestBody": _body({"email": _EMAIL}),
            "responses": {"200": _text_answer(_RESET_SENT), **_errors(("400", "429"))},
        },
        ("/validateResetPassword", "get"): {
            "summary": "Whether a reset id is still good",
            "parameters": [_query("id", "The reset id")],
            "responses": {
                "200": _json_answer(
                    "The id is good until expires",
                    {
                        "type": "object",
                        "required": ["valid", "expires"],
                        "properties": {
                            "valid": {"type": "boolean"},
                            "expires": {"type": "string", "format": "date-time"},
                        },
                    },
                ),
                **_errors(("400", "404")),
            },
        },
        ("/resetPassword", "post"): {
            "summary": "Set a new password with a reset id; ends the account's other logins",
            "requestBody": _body({"id": _TEXT, "password": _NEW_PASSWORD}),
            "responses": {"200": _text_answer("The password was changed"), **_errors(("400",))},
        },
        ("/health", "get"): {
            "summary": "Liveness, for load balancers and peers",
            "responses": {
                "200": _json_answer(
                    "Up",
                    {
                        "type": "object",
                        "required": ["status", "version"],
                        "properties": {"status": {"const": "pass"}, "version": _STRING},
                    },
                )
            },
        },
        ("/error", "get"): {
            "summary": "The problem body of a status (for a reverse proxy's error pages)",
            "parameters": [
                {
                    **_query(
                        "status",
                        "A status from 400 to 599 that HTTP names, in three digits (default "
                        "500; anything else is a 400 naming status)",
                        required=False,
                    ),
                    "schema": {"type": "integer", "minimum": 400, "maximum": 599},
                }
            ],
            "responses": {"default": _problem_response("That status's problem")},
        },
        (OPENAPI_PATH, "get"): {
            "summary": "This document: with a token, the API your roles may call; without one, the "
            "endpoints that answer without a token",
            "responses": {
                "200": _json_answer("An OpenAPI 3.1 document", {"type": "object"}),
                **_errors(("401", "429")),
            },
        },
    }


def _is_public(path: str, reserved: frozenset[str]) -> bool:
    """Whether reservedUris makes a path public: the path, or the fixed part before a variable."""
    return (path.split("{", 1)[0].rstrip("/") or "/") in reserved


def _public_paths(settings: DocumentSettings, anonymous: bool) -> dict[str, dict[str, Any]]:
    """The fixed endpoints and plugins' routes: without a token only those in reservedUris;
    with one, all, those not reserved needing the token."""
    operations = {key: {**operation, "tags": [PUBLIC_TAG]} for key, operation in _public_operations().items()}
    for route in settings.routes:
        path = ROUTE_VARIABLE.sub(r"{\1}", route.path)
        operation: dict[str, Any] = {
            "tags": [ROUTES_TAG],
            "summary": route.description or f"A route of {route.owner}",
            "description": f"A route of {route.owner}, outside IO State.",
            "responses": {"200": _json_answer("The route's answer", {}), **_errors(("400", "401", "429"))},
        }
        variables = ROUTE_VARIABLE.findall(route.path)
        if variables:
            operation["parameters"] = [
                {"name": name, "in": "path", "required": True, "schema": _STRING} for name in variables
            ]
        operations[(path, route.method.lower())] = operation
    paths: dict[str, dict[str, Any]] = {}
    for (path, method), operation in operations.items():
        public = _is_public(path, settings.reserved_uris)
        if anonymous and not public:
            continue
        operation = dict(operation)
        operation["operationId"] = f"{method}{path.replace('/', '.')}"
        operation.setdefault("security", NO_TOKEN if public else BEARER)
        if not public and "401" not in operation["responses"]:
            operation["responses"] = {**operation["responses"], **_errors(("401",))}
        paths.setdefault(path, {})[method] = operation
    return paths


# --- the document -----------------------------------------------------------------------------


def build(view: ApiView | None, settings: DocumentSettings, *, token: bool = True) -> dict[str, Any]:
    """The OpenAPI document of what `view`'s roles may call; with no view, or `token` false, of
    a caller without a token: the endpoints that answer without one, and what `view` (the
    anonymous role's, `anonymous_view`) may call."""
    without_token = view is None or not token
    components = _components(sorted({action.name for action in view.actions()}) if view is not None else ())
    paths = _public_paths(settings, anonymous=without_token)
    tags = [{"name": PUBLIC_TAG, "description": "Accounts, sessions and the service's own endpoints"}]
    if settings.routes:
        tags.append({"name": ROUTES_TAG, "description": "Plugins' own paths, outside IO State"})
    if view is None or not token:
        description = (
            "The endpoints that answer without a token. Log in (POST /authenticate) and "
            "send the token to read the API your roles may call."
        )
    else:
        description = (
            f"The API as the roles {', '.join(sorted(view.roles)) or '(none)'} may call it, "
            "from the IO State rules in force."
        )
    if view is not None:
        api_paths, schemas = _api_paths(view, settings)
        if without_token:
            for operations in api_paths.values():
                for operation in operations.values():
                    operation["security"] = NO_TOKEN
        paths.update(api_paths)
        components["schemas"].update(schemas)
        for controller in view.controllers:
            versions = ", ".join(v.name + (" (current)" if v.current else "") for v in controller.versions)
            tags.append(
                {"name": controller.name, "description": f"Controller {controller.name}: API versions {versions}"}
            )
        tags.append({"name": BATCH_TAG, "description": "One endpoint called once per element of a batch (/b...)"})
        tags.append(
            {
                "name": CHAIN_TAG,
                "description": (
                    "Several endpoints in one request (/c...), each output's key feeding the next link's id; "
                    "the path's endpoint is the first link"
                ),
            }
        )
    document: dict[str, Any] = {
        "openapi": OPENAPI_VERSION,
        "info": {"title": "apid", "version": settings.version, "description": description},
    }
    if settings.server_url:
        document["servers"] = [{"url": settings.server_url}]
    document.update({"security": BEARER, "tags": tags, "paths": paths, "components": components})
    return document


class OpenApiDocuments:
    """The documents `/openapi.json` answers, from the rule set in force: each built once per
    rule set and set of roles, and built anew after a reload swaps the rules."""

    MAX_KEPT = 64  # distinct role sets are few; this only bounds a pathological mix

    def __init__(self, rules: Callable[[], RuleSet], settings: DocumentSettings) -> None:
        self._rules = rules
        self._settings = settings
        self._built_from: RuleSet | None = None
        self._documents: dict[frozenset[str] | None, dict[str, Any]] = {}

    def document(self, roles: frozenset[str] | None) -> dict[str, Any]:
        """The document of `roles`, or of a caller without a token for None."""
        rules = self._rules()
        if rules is not self._built_from or len(self._documents) >= self.MAX_KEPT:
            self._documents.clear()
            self._built_from = rules
        if roles not in self._documents:
            if roles is None:
                self._documents[roles] = build(anonymous_view(rules, self._settings), self._settings, token=False)
            else:
                self._documents[roles] = build(api_view(rules, roles, self._settings.version), self._settings)
        return self._documents[roles]
