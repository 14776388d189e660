"""The JSON Schema of IO State fields: each field's VALUES type (`ValueType.json_schema`), with
null admitted in JSON, the field's description, key and mock data said, and the ranges an
action declares for its paging fields (`Page`), which the daemon enforces."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from apid.openapi.view import FieldDoc
from apid.plugin import Page

Bounds = Mapping[str, Mapping[str, Any]]  # field name -> JSON Schema keywords narrowing its type
NO_BOUNDS: Bounds = {}


def page_bounds(page: Page | None) -> Bounds:
    """The ranges of `offset` and `max` an action's `Page` sets, as the daemon checks them."""
    if page is None:
        return NO_BOUNDS
    return {
        "offset": {"minimum": 0, "default": 0},
        "max": {"minimum": 1, "maximum": page.maximum, "default": page.default},
    }


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
