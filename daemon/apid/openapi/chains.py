"""The chains starting at an action: a blankchain of GET calls (POSTed, which every client can
send a body with; the GET with a body the daemon serves as well is told in prose only), a
postchain ending in a PUT, POST or DELETE, whose body holds that call's fields, typed, or a
prechain starting with one, each with its chain object, an example that runs, and its answers.

Each chain type has one plain schema (`BlankChain`, `PostChain`, `PreChain`) that client
generators can turn into one class, with `order` in both forms: the array of `ChainLink`s,
whose order JSON keeps, and the SPEC's object, whose member order JSON does not promise.
A prechain's body requires what its first call, the non-safe one, requires.

A chain's answer (`ChainAnswer`) is a link's output or every link's: which links, the request
says, so the document can say only that it is a JSON object (`ChainOutput`), a list (of
records, or of every link's output) or null; the list's items are any JSON, as a union of
records, lists and null in them made openapi-generator drop every member. A union of every
output schema would read better but would mislead every generated client: records have no
required member, so a generator's union parser takes any object for the union's first record
type and drops the members that type lacks.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from apid.http.operations import (
    BEARER,
    CHAIN_TAG,
    JSON,
    call_errors,
    header_refs,
    ref,
    schema_body,
)
from apid.openapi.calls import NO_RULES, ActionNames, description_of, required_fields, summary_of
from apid.openapi.fields import field_bounds, field_schema, object_schema
from apid.openapi.view import ID, ActionDoc
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
            # any JSON items: a union of records, lists and null loses their members in openapi-generator
            {
                "type": "array",
                "items": {},
                "description": "A list of records, or every link's output (each one of the three)",
            },
            {"type": "null"},
        ],
    }
    return schemas


def chain_operations(
    action: ActionDoc, actions: Sequence[ActionDoc], limit: int, rules: ActionRules = NO_RULES
) -> dict[str, Any]:
    """A chain starting at `action`, among the `actions` the roles may call: a GET starts a
    blankchain (POSTed: a GET with a body is served too, but no client generated from the
    document could send one) or a postchain (called with the method of its last, non-safe
    call); a PUT, POST or DELETE starts a prechain, whose body requires what `action` requires
    (`rules`) but an id in the path. Each body has an example that runs as shown."""
    names = ActionNames(action)
    answer = {
        "description": "The last link's output, or every link's output in order (combine true)",
        "headers": header_refs("RateLimit", "RateLimit-Policy", "X-Request-ID"),
        "content": {JSON: {"schema": ref("schemas", "ChainAnswer")}},
    }
    errors = call_errors(rules.upstream)
    common = {"tags": [CHAIN_TAG], "security": BEARER}
    parameters: list[dict[str, Any]] = [ref("parameters", "RequestId"), ref("parameters", "IdempotencyKey")]
    if action.takes_id:
        id_field = next(f for f in action.request if f.name == ID)
        parameters.append(
            {
                "name": "id",
                "in": "path",
                "required": True,
                "schema": field_schema(id_field, nullable=False),
                "description": "The first link's id",
            }
        )
    # every link is called in the path's API version
    peers = [other for other in actions if other.api_version == action.api_version]
    reads = [other for other in peers if other.is_safe]
    forms: dict[str, dict[str, Any]] = {}
    if action.is_safe:
        writes: dict[str, list[ActionDoc]] = {}
        for other in actions:
            if not other.is_safe:
                writes.setdefault(other.method, []).append(other)
        for method in sorted(set(writes) - {"POST"}):
            forms[method.lower()] = _postchain(action, names, method, limit, _ending(action, peers, method))
        blank = {
            "type": "object",
            "required": ["chain"],
            "additionalProperties": False,
            "properties": {"chain": ref("schemas", "BlankChain")},
        }
        if "POST" in writes:
            # one POST operation: a blankchain, or a postchain ending with a POST, told apart by chain.type
            ending = _ending(action, peers, "POST")
            forms["post"] = {
                "operationId": f"{names.operation}.chain.post",
                "summary": f"Chain (blankchain, or postchain ending with a POST): {summary_of(action)}, ...",
                "description": description_of(
                    action,
                    f"A blankchain (GET calls only), or a postchain whose last of at most {limit} links is the "
                    "chain's one non-safe call, a POST, which gets the body's other members as its fields; "
                    f"`chain.type` says which. {BLANK_BY_GET}",
                ),
                "requestBody": _with_example(
                    {
                        **ending.body,
                        "properties": {
                            **ending.body["properties"],
                            "chain": {"anyOf": [ref("schemas", "BlankChain"), ref("schemas", "PostChain")]},
                        },
                    },
                    _chain_example(action, reads, "blankchain") or ending.example,
                ),
            }
        else:
            forms["post"] = {
                "operationId": f"{names.operation}.chain.blank",
                "summary": f"Chain (blankchain): {summary_of(action)}, then more GET calls",
                "description": description_of(
                    action,
                    f"A chain of GET calls only, at most {limit} links, starting with {action.name}. {BLANK_BY_GET}",
                ),
                "requestBody": _with_example(blank, _chain_example(action, reads, "blankchain")),
            }
    else:
        required = [name for name in required_fields(action, rules) if not (action.takes_id and name == ID)]
        schema = object_schema(
            action.request, required, field_bounds(rules), description=f"{action.name}'s fields, and the chain"
        )
        schema["properties"]["chain"] = ref("schemas", "PreChain")
        schema["required"] = [*required, "chain"]
        example = _chain_example(action, reads, "prechain")
        if example is not None:
            fields = {f.name: f.mock for f in action.request if f.name in required and f.mock is not None}
            example = {**fields, **example}
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
            "requestBody": _with_example(schema, example),
        }
    for operation in forms.values():
        operation.update(common)
        operation["parameters"] = parameters
        operation["responses"] = {"200": answer, **errors}
    return forms


BLANK_BY_GET = (
    "A blankchain is served with GET and the same body too, for clients that can send a GET with a body; "
    "the document shows the POST, which every client can send."
)


@dataclass(frozen=True)
class Ending:
    """The body of a postchain ending with one method: the chain, and the fields of the calls
    it may end with, typed; with an example that runs, when one can be made."""

    body: dict[str, Any]
    example: dict[str, Any] | None


def _ending(first: ActionDoc, peers: Sequence[ActionDoc], method: str) -> Ending:
    """The members of a postchain's body: the chain, and the fields of whichever call of
    `method` ends it (the last link gets them), each typed as that call's field is."""
    enders = [other for other in peers if other.method == method]
    properties: dict[str, Any] = {}
    for ender in enders:
        for field in ender.request:
            schema = field_schema(field)
            known = properties.get(field.name)
            if known is None:
                properties[field.name] = schema
            elif known != schema:
                properties[field.name] = {"anyOf": [*known.get("anyOf", [known]), schema]}
    properties["chain"] = ref("schemas", "PostChain")
    body = {"type": "object", "required": ["chain"], "additionalProperties": False, "properties": properties}
    return Ending(body, _chain_example(first, enders, "postchain"))


def _chain_example(first: ActionDoc, nexts: Sequence[ActionDoc], kind: str) -> dict[str, Any] | None:
    """A two-link chain of `kind` from `first` to one of `nexts` that takes a field of its
    answer (its key first, and the same controller's calls first), or None when none does."""
    answered = [field.name for field in first.response]
    answered.sort(key=lambda name: name != ID)
    ordered = sorted(nexts, key=lambda other: other.controller != first.controller)
    for name in answered:
        for other in ordered:
            if any(field.name == name for field in other.request):
                order = [{"link": other.name, "key": "return"}]
                return {"chain": {"key": name, "type": kind, "order": order}}
    return None


def _with_example(schema: dict[str, Any], example: dict[str, Any] | None) -> dict[str, Any]:
    body = schema_body(schema)
    if example is not None:
        body["content"][JSON]["example"] = example
    return body


def _postchain(action: ActionDoc, names: ActionNames, method: str, limit: int, ending: Ending) -> dict[str, Any]:
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
        "requestBody": _with_example(ending.body, ending.example),
    }
