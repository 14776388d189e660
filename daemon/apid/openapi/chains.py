"""The chains starting at an action: a blankchain of GET calls, a postchain ending in a PUT,
POST or DELETE, or a prechain starting with one, each with its chain object and answers."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from apid.apidoc import ActionDoc
from apid.openapi.calls import ActionNames, description_of, summary_of
from apid.openapi.fields import field_schema, object_schema
from apid.openapi.parts import (
    API_ERRORS,
    BEARER,
    CHAIN_TAG,
    JSON,
    header_refs,
    object_body,
    problem_answers,
    ref,
    schema_body,
)


def _typed_chain(kind: str) -> dict[str, Any]:
    """The chain object of a postchain or prechain (called with PUT, POST or DELETE): `type` is required."""
    return {"allOf": [ref("schemas", "Chain"), {"required": ["type"], "properties": {"type": {"const": kind}}}]}


def chain_operations(action: ActionDoc, non_safe_methods: Iterable[str], limit: int) -> dict[str, Any]:
    """A chain starting at `action`: a GET starts a blankchain (GET) or a postchain (called with
    the method of its last, non-safe call); a PUT, POST or DELETE starts a prechain."""
    names = ActionNames(action)
    chain = ref("schemas", "Chain")  # a blankchain's: its type may be left out
    answer = {
        "description": "The last link's output, or every link's output in order (combine true)",
        "headers": header_refs("RateLimit", "RateLimit-Policy"),
        "content": {JSON: {"schema": {}}},
    }
    errors = problem_answers(*API_ERRORS)
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
            "summary": f"Chain (blankchain): {summary_of(action)}, then more GET calls",
            "description": description_of(
                action, f"A chain of GET calls only, at most {limit} links, starting with {action.name}."
            ),
            "requestBody": object_body({"chain": chain}, ["chain"]),
        }
        for method in sorted(set(non_safe_methods)):
            forms[method.lower()] = {
                "operationId": f"{names.operation}.chain.{method.lower()}",
                "summary": f"Chain (postchain): {summary_of(action)}, GET calls, then a {method} call",
                "description": description_of(
                    action,
                    (
                        f"Starts with {action.name}; the last of at most {limit} links is the chain's one "
                        f"non-safe call, a {method}, which gets the body's other members as its fields."
                    ),
                ),
                "requestBody": object_body({"chain": _typed_chain("postchain")}, ["chain"], others=True),
            }
    else:
        schema = object_schema(action.request, required=["chain"])
        schema["properties"]["chain"] = _typed_chain("prechain")
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
        if parameters:
            operation["parameters"] = parameters
        operation["responses"] = {"200": answer, **errors}
    return forms
