"""The JSON Schema of IO State fields: each field's VALUES type (`ValueType.json_schema`), with
null admitted in JSON, the field's description, key and mock data said, and what an action
declares its fields keep (its `Page`, its `Limits`), which the daemon enforces."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from apid.openapi.view import FieldDoc
from apid.plugin import ActionRules

Bounds = Mapping[str, Mapping[str, Any]]  # field name -> JSON Schema keywords narrowing its type
NO_BOUNDS: Bounds = {}


def field_bounds(rules: ActionRules) -> Bounds:
    """What an action declares its fields keep, as the daemon checks it: the ranges of `offset`
    and `max` its `Page` sets, and each field's `Limits`."""
    bounds: dict[str, Mapping[str, Any]] = {name: limits.json_schema() for name, limits in rules.limits.items()}
    if rules.page is not None:
        bounds["offset"] = {"minimum": 0, "default": 0}
        bounds["max"] = {"minimum": 1, "maximum": rules.page.maximum, "default": rules.page.default}
    return bounds


def field_schema(field: FieldDoc, *, nullable: bool = True, bounds: Bounds = NO_BOUNDS) -> dict[str, Any]:
    """The JSON Schema of a field's values, narrowed by its `bounds`. In JSON a type also admits
    null unless `nullable` is false: a request may send null for any field the action does not
    require (null is absent), and IO State does not say which answers never hold one. Text (a
    query parameter, the path's id) cannot be null, and neither can a required field (null is
    missing)."""
    schema = {**field.value_type.json_schema, **bounds.get(field.name, {})}
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


def object_schema(
    fields: Iterable[FieldDoc], required: Iterable[str] = (), bounds: Bounds = NO_BOUNDS, **extra: Any
) -> dict[str, Any]:
    """A JSON object of these fields and no others, the `required` ones never null, each within
    its `bounds`; `extra` adds keywords (`description`)."""
    needed = list(required)
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {f.name: field_schema(f, nullable=f.name not in needed, bounds=bounds) for f in fields},
        "additionalProperties": False,
    }
    if needed:
        schema["required"] = needed
    return {**schema, **extra}


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


# Every string apid reads refuses U+0000 (apid.http.jsonbody, apid.http.requests): PostgreSQL
# stores no NUL in text or jsonb.
NO_NUL = {"pattern": "^[^\\u0000]*$"}
FIXED = frozenset({"pattern", "enum", "const"})  # a string schema that says what it holds already
READ = frozenset({"parameters", "requestBody"})  # what of an operation the daemon reads
SENT = frozenset({"BlankChain", "PostChain", "PreChain", "ChainLink", "Combine"})  # parts of request bodies


def strings_without_nul(node: Any) -> Any:
    """`node` with every string schema under it that has no pattern or fixed values of its own
    saying it holds no U+0000, as the daemon enforces for every string it reads. A copy: the
    shared components are module constants."""
    if isinstance(node, list):
        return [strings_without_nul(item) for item in node]
    if not isinstance(node, dict):
        return node
    copy = {key: strings_without_nul(value) for key, value in node.items()}
    kind = node.get("type")
    if (kind == "string" or (isinstance(kind, list) and "string" in kind)) and not node.keys() & FIXED:
        copy.update(NO_NUL)
    return copy


def read_without_nul(paths: Mapping[str, Any]) -> dict[str, Any]:
    """`paths` with what the daemon reads (each operation's parameters and request body) saying
    it holds no U+0000; the answers as they are (a problem may quote the NUL it refused)."""
    return {
        path: {
            method: {key: strings_without_nul(value) if key in READ else value for key, value in operation.items()}
            for method, operation in item.items()
        }
        for path, item in paths.items()
    }


def components_read_without_nul(components: Mapping[str, Any]) -> dict[str, Any]:
    """`components` with the shared parameters, the request schemas and the chains' saying they
    hold no U+0000."""
    schemas = {
        name: strings_without_nul(schema) if name.endswith(".request") or name in SENT else schema
        for name, schema in components["schemas"].items()
    }
    return {**components, "schemas": schemas, "parameters": strings_without_nul(components["parameters"])}
