"""The problems as OpenAPI describes them, for the documents and for the public endpoints that
declare their operations (`apid.http.operations`): one schema per problem type
(`apid.problems.PROBLEM_TYPES`, each with the members its class declares), `type` a constant
that tells them apart, and per status the schema of its answers (one type, or `oneOf` them
with a `discriminator` on `type`).
"""

from __future__ import annotations

from typing import Any

from apid.problems import FIELD_ERROR_SCHEMA, PROBLEM_TYPES, Problem, type_page, type_uri


def schema_name(kind: type[Problem]) -> str:
    name = kind.__name__
    return name if name.endswith("Problem") else f"{name}Problem"


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


# The members every problem may carry: RFC 9457's, the request's id, and a failed chain link's.
COMMON_MEMBERS: dict[str, Any] = {
    "title": {"type": "string", "description": "The status's reason phrase"},
    "detail": {"type": "string"},
    "instance": {"type": "string", "description": "The request path"},
    "requestId": {"type": "string", "description": "The request's id, as in the X-Request-ID header"},
    "link": {
        "type": "object",
        "description": "A failed chain link: its position (the first being 0) and endpoint",
        "required": ["position", "endpoint"],
        "properties": {"position": {"type": "integer", "minimum": 0}, "endpoint": {"type": "string"}},
    },
    "nonSafeCallCompleted": {
        "type": "boolean",
        "description": "A failed chain: whether its PUT, POST or DELETE had run",
    },
}
REQUIRED = ["type", "title", "status", "detail"]


def problem_schema(kind: type[Problem]) -> dict[str, Any]:
    """The schema of one problem type; open to further members (RFC 9457 extensions)."""
    return {
        "type": "object",
        "description": " ".join((kind.__doc__ or kind.__name__).split()),
        "externalDocs": {"url": type_page(kind), "description": f"The problem type {kind.slug}"},
        "required": [*REQUIRED, *kind.required_members],
        "properties": {
            "type": {"type": "string", "const": type_uri(kind)},
            "status": {"type": "integer", "const": kind.status},
            **COMMON_MEMBERS,
            **kind.members,
        },
    }


def problem_schemas() -> dict[str, Any]:
    """Every problem type's schema, `FieldError`, `Problem` (what every problem holds) and
    `BatchError` (a failed batch element's problem, with its `index` and, when its call alone
    would have answered Retry-After, `retryAfter`)."""
    schemas: dict[str, Any] = {schema_name(kind): problem_schema(kind) for kind in PROBLEM_TYPES}
    schemas["FieldError"] = dict(FIELD_ERROR_SCHEMA)
    schemas["Problem"] = {
        "type": "object",
        "description": "An RFC 9457 problem: what every problem apid answers holds",
        "required": REQUIRED,
        "properties": {
            "type": {"type": "string", "description": "The problem type: urn:apid:problem:<name>"},
            "status": {"type": "integer", "minimum": 400, "maximum": 599},
            **COMMON_MEMBERS,
        },
    }
    schemas["BatchError"] = {
        "type": "object",
        "description": "A failed batch element: its problem, and its position in `batch`",
        "required": [*REQUIRED, "index"],
        "properties": {
            **schemas["Problem"]["properties"],
            "index": {"type": "integer", "minimum": 0, "description": "The element's position"},
            "retryAfter": {
                "type": "integer",
                "minimum": 0,
                "description": "Seconds to wait before sending the element again: the Retry-After its call "
                "alone would have answered (a 503 or a 429)",
            },
        },
    }
    return schemas


def status_schema(status: int) -> dict[str, Any]:
    """The schema of a problem answered with `status`: its type's, or one of its types', told
    apart by `type`."""
    kinds = [kind for kind in PROBLEM_TYPES if kind.status == status]
    if len(kinds) == 1:
        return _ref(schema_name(kinds[0]))
    return {
        "oneOf": [_ref(schema_name(kind)) for kind in kinds],
        "discriminator": {
            "propertyName": "type",
            "mapping": {type_uri(kind): _ref(schema_name(kind))["$ref"] for kind in kinds},
        },
    }
