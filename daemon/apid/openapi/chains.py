"""The chains starting at an action: a blankchain of GET calls (called with GET, or POST, which
browsers' `fetch` can send a body with), a postchain ending in a PUT, POST or DELETE, or a
prechain starting with one, each with its chain object and answers.

Each chain type has one plain schema (`BlankChain`, `PostChain`, `PreChain`) that client
generators can turn into one class, with `order` in both forms: the array of `ChainLink`s,
whose order JSON keeps, and the SPEC's object, whose member order JSON does not promise.
A prechain's body requires what its first call, the non-safe one, requires.

A chain's answer (`ChainAnswer`) is a link's output or every link's: which links, the request
says, so the document can say only that each is a JSON object (`ChainOutput`), a list of them
or null. A union of every output schema would read better but would mislead every generated
client: records have no required member, so a generator's union parser takes any object for
the union's first record type and drops the members that type lacks.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from apid.http.operations import (
    BEARER,
    CHAIN_TAG,
    JSON,
    call_errors,
    header_refs,
    object_body,
    ref,
    schema_body,
)
from apid.openapi.calls import NO_RULES, ActionNames, description_of, required_fields, summary_of
from apid.openapi.fields import field_schema, object_schema, page_bounds
from apid.openapi.view import ActionDoc
from apid.plugin import ActionRules

LINK_PATTERN = "^[A-Za-z_][A-Za-z0-9_]*/[A-Za-z_][A-Za-z0-9_]*$"
CHAIN_SCHEMAS = {"blankchain": "BlankChain", "postchain": "PostChain", "prechain": "PreChain"}
WHERE = {
    "blankchain": "GET calls only",
    "postchain": "GET calls, then the one PUT, POST or DELETE last",
    "prechain": "the one PUT, POST or DELETE first, then GET calls",
}


def chain_schemas(links: Iterable[str]) -> dict[str, Any]:
    """`ChainLink`, one schema per chain type, `ChainOutput` (one link's output) and
    `ChainAnswer` (one link's output or every link's)."""
    names = sorted(links)
    link_name = {"type": "string", "enum": names} if names else {"type": "string", "pattern": LINK_PATTERN}
    order = {
        "description": "Each further link in order with the field of its output passed on, the last link's "
        '"return": an array of ChainLink, or an object "controller/action" -> key in JSON order',
        "anyOf": [
            {"type": "array", "minItems": 1, "items": ref("schemas", "ChainLink")},
            {
                "type": "object",
                "minProperties": 1,
                "propertyNames": link_name,
                "additionalProperties": {"type": "string", "minLength": 1},
            },
        ],
    }
    schemas: dict[str, Any] = {
        "ChainLink": {
            "type": "object",
            "required": ["link", "key"],
            "additionalProperties": False,
            "properties": {
                "link": {**link_name, "description": "The link's endpoint, controller/action"},
                "key": {
                    "type": "string",
                    "minLength": 1,
                    "description": 'The field of its output passed to the next link; "return" on the last link',
                },
            },
        }
    }
    for kind, name in CHAIN_SCHEMAS.items():
        schemas[name] = {
            "type": "object",
            "description": f"A {kind}: {WHERE[kind]}",
            "required": ["key", "type", "order"],
            "additionalProperties": False,
            "properties": {
                "key": {
                    "type": "string",
                    "minLength": 1,
                    "description": "The field of the first link's output passed to the second link",
                },
                "type": {"type": "string", "enum": [kind]},
                "combine": ref("schemas", "Combine"),
                "order": order,
            },
        }
    output = ref("schemas", "ChainOutput")
    schemas["ChainOutput"] = {
        "type": "object",
        "additionalProperties": True,
        "description": "One link's record: the RESPONSE fields your roles receive from that link's action, "
        "as the output schema of its plain call says",
    }
    schemas["ChainAnswer"] = {
        "description": "The last link's output (a record, a list of records or null), or every link's output "
        "in order (combine true)",
        "anyOf": [
            output,
            {"type": "array", "items": {"anyOf": [output, {"type": "array", "items": output}, {"type": "null"}]}},
            {"type": "null"},
        ],
    }
    return schemas


def chain_operations(
    action: ActionDoc, non_safe_methods: Iterable[str], limit: int, rules: ActionRules = NO_RULES
) -> dict[str, Any]:
    """A chain starting at `action`: a GET starts a blankchain (GET or POST) or a postchain
    (called with the method of its last, non-safe call); a PUT, POST or DELETE starts a
    prechain, whose body requires what `action` requires (`rules`) but an id in the path."""
    names = ActionNames(action)
    answer = {
        "description": "The last link's output, or every link's output in order (combine true)",
        "headers": header_refs("RateLimit", "RateLimit-Policy", "X-Request-ID"),
        "content": {JSON: {"schema": ref("schemas", "ChainAnswer")}},
    }
    errors = call_errors(rules.upstream)
    common = {"tags": [CHAIN_TAG], "security": BEARER}
    parameters: list[dict[str, Any]] = [ref("parameters", "RequestId")]
    if action.takes_id:
        id_field = next(f for f in action.request if f.name == "id")
        parameters.append(
            {
                "name": "id",
                "in": "path",
                "required": True,
                "schema": field_schema(id_field, nullable=False),
                "description": "The first link's id",
            }
        )
    forms: dict[str, dict[str, Any]] = {}
    if action.is_safe:
        blank = {
            "summary": f"Chain (blankchain): {summary_of(action)}, then more GET calls",
            "description": description_of(
                action,
                f"A chain of GET calls only, at most {limit} links, starting with {action.name}. "
                "GET and POST alike: POST for clients that cannot send a GET with a body (fetch).",
            ),
            "requestBody": object_body({"chain": ref("schemas", "BlankChain")}, ["chain"]),
        }
        forms["get"] = {"operationId": names.operation + ".chain", **blank}
        methods = sorted(set(non_safe_methods) - {"POST"})
        post_ends = "POST" in set(non_safe_methods)
        for method in methods:
            forms[method.lower()] = _postchain(action, names, method, limit)
        if post_ends:
            # one POST operation: a blankchain, or a postchain ending with a POST, told apart by chain.type
            forms["post"] = {
                "operationId": f"{names.operation}.chain.post",
                "summary": f"Chain (blankchain, or postchain ending with a POST): {summary_of(action)}, ...",
                "description": description_of(
                    action,
                    f"A blankchain (GET calls only), or a postchain whose last of at most {limit} links is the "
                    "chain's one non-safe call, a POST, which gets the body's other members as its fields; "
                    "`chain.type` says which.",
                ),
                "requestBody": schema_body(
                    {
                        "type": "object",
                        "required": ["chain"],
                        "additionalProperties": True,
                        "properties": {"chain": {"anyOf": [ref("schemas", "BlankChain"), ref("schemas", "PostChain")]}},
                    }
                ),
            }
        else:
            forms["post"] = {"operationId": f"{names.operation}.chain.blank", **blank}
    else:
        required = [name for name in required_fields(action, rules) if not (action.takes_id and name == "id")]
        schema = object_schema(
            action.request, required, page_bounds(rules.page), description=f"{action.name}'s fields, and the chain"
        )
        schema["properties"]["chain"] = ref("schemas", "PreChain")
        schema["required"] = [*required, "chain"]
        forms[action.method.lower()] = {
            "operationId": names.operation + ".chain",
            "summary": f"Chain (prechain): {summary_of(action)}, then GET calls",
            "description": description_of(
                action,
                (
                    f"{action.name} runs first with the body's other members as its fields; its `key` field "
                    f"feeds the GET calls that follow (at most {limit} links)."
                ),
            ),
            "requestBody": schema_body(schema),
        }
    for operation in forms.values():
        operation.update(common)
        operation["parameters"] = parameters
        operation["responses"] = {"200": answer, **errors}
    return forms


def _postchain(action: ActionDoc, names: ActionNames, method: str, limit: int) -> dict[str, Any]:
    return {
        "operationId": f"{names.operation}.chain.{method.lower()}",
        "summary": f"Chain (postchain): {summary_of(action)}, GET calls, then a {method} call",
        "description": description_of(
            action,
            (
                f"Starts with {action.name}; the last of at most {limit} links is the chain's one "
                f"non-safe call, a {method}, which gets the body's other members as its fields."
            ),
        ),
        "requestBody": object_body({"chain": ref("schemas", "PostChain")}, ["chain"], others=True),
    }
