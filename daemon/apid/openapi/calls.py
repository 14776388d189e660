"""The operations of one action the roles may call: the plain call (`/v...`, and its `/{id}`
form), the batch (`/b...`), each with the schemas of its request and output, and the marks of
a deprecated API version. Chains starting at an action are in `apid.openapi.chains`."""

from __future__ import annotations

from typing import Any

from apid.apidoc import ActionDoc, iso_time
from apid.openapi.fields import field_schema, object_schema
from apid.openapi.parts import API_ERRORS, BATCH_TAG, BEARER, JSON, header_refs, object_body, problem_answers, ref


class ActionNames:
    """Component and operation names of one action."""

    def __init__(self, action: ActionDoc) -> None:
        version = "" if action.current else f".v{action.api_version}"
        self.operation = f"{action.controller}{version}.{action.action}"
        base = f"{action.controller}.{action.api_version}.{action.action}"
        self.request = f"{base}.request"
        self.record = f"{base}.record"
        self.output = f"{base}.output"


def action_schemas(action: ActionDoc) -> dict[str, Any]:
    names = ActionNames(action)
    return {
        names.request: object_schema(action.request, description=f"The fields your roles may send to {action.name}"),
        names.record: object_schema(action.response, description=f"The fields your roles receive from {action.name}"),
        names.output: {
            "description": "One record, or a list of them (IO State does not say which an action answers)",
            "anyOf": [ref("schemas", names.record), {"type": "array", "items": ref("schemas", names.record)}],
        },
    }


def summary_of(action: ActionDoc) -> str:
    return action.description or action.name


def description_of(action: ActionDoc, form: str) -> str:
    lines = [form]
    if action.hook:
        lines.append("Your roles may receive webhooks for this endpoint (HOOK).")
    if not action.current:
        lines.append(f"API version {action.api_version} of {action.controller}.")
    return "\n\n".join(lines)


def ok_answer(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {
        "description": description,
        "headers": header_refs("RateLimit", "RateLimit-Policy", "Link"),
        "content": {JSON: {"schema": schema}},
    }


def plain_operation(action: ActionDoc, with_id: bool) -> dict[str, Any]:
    names = ActionNames(action)
    parameters: list[dict[str, Any]] = [ref("parameters", "LinkRelations")]
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
        "summary": summary_of(action),
        "description": description_of(
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
                "content": {JSON: {"schema": ref("schemas", names.request)}},
            }
    elif action.request:
        operation["requestBody"] = {"required": False, "content": {JSON: {"schema": ref("schemas", names.request)}}}
    operation["parameters"] = parameters
    operation["responses"] = {
        "200": ok_answer(ref("schemas", names.output), "The output, with your roles' RESPONSE fields only"),
        **problem_answers(*API_ERRORS),
    }
    return operation


def batch_operation(action: ActionDoc, limit: int) -> dict[str, Any]:
    names = ActionNames(action)
    output = ref("schemas", names.output)
    return {
        "operationId": names.operation + ".batch",
        "tags": [BATCH_TAG],
        "summary": f"Batch: {summary_of(action)}",
        "description": description_of(
            action,
            (
                f"Calls {action.name} once per element of `batch` (at most {limit}), each element checked "
                "like a plain call. Always POSTed, whatever the action's method."
            ),
        ),
        "security": BEARER,
        "requestBody": object_body(
            {
                "batch": {"type": "array", "minItems": 1, "maxItems": limit, "items": ref("schemas", names.request)},
                "combine": ref("schemas", "Combine"),
            },
            ["batch"],
        ),
        "responses": {
            "200": ok_answer(
                {"anyOf": [{"type": "array", "items": output}, output]},
                "Every element succeeded: every output in order (combine true), or the last",
            ),
            "207": {
                "description": "Some elements failed: their problems, always, and the outputs with null "
                "in a failed element's place",
                "headers": header_refs("RateLimit", "RateLimit-Policy"),
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
                                "errors": {"type": "array", "items": ref("schemas", "BatchError")},
                            },
                        }
                    }
                },
            },
            **problem_answers(*API_ERRORS),
        },
    }


def with_deprecation(action: ActionDoc, operation: dict[str, Any]) -> dict[str, Any]:
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
            response["headers"] = {**response.get("headers", {}), **header_refs(*names)}
    if deprecation.sunset is not None:
        operation["responses"] = {**operation["responses"], **problem_answers("410")}
    return operation
