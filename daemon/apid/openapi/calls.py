"""The operations of one action the roles may call: the plain call (`/v...`, and its `/{id}`
form), the batch (`/b...`), each with the schemas of its request and output, and the marks of
a deprecated API version. Chains starting at an action are in `apid.openapi.chains`.

What an action requires, answers and pages comes from its `@action` declaration
(`ActionRules`): its required fields are required (and never null) in its request, its paging
fields within its `Page`, and its answer is one record, a list of them or null; an action that
does not say answers either a record or a list. The fields it carries (`carries=`) are required
and never null in its record.
"""

from __future__ import annotations

from typing import Any

from apid.calls.preconditions import SHOW
from apid.http.operations import (
    API_ERRORS,
    BATCH_TAG,
    BEARER,
    JSON,
    NOT_MODIFIED,
    call_errors,
    header_refs,
    object_body,
    problem_answers,
    ref,
)
from apid.openapi.fields import field_bounds, field_schema, object_schema
from apid.openapi.view import ID, ActionDoc, iso_time
from apid.plugin import ActionRules

NO_RULES = ActionRules()
# what the 200 of each `answers` holds, given the reference to the action's record
ANSWERS: dict[str | None, tuple[str, Any]] = {
    "record": ("One record", lambda record: record),
    "list": ("A list of records", lambda record: {"type": "array", "items": record}),
    "nothing": ("Nothing: null", lambda record: {"type": "null"}),
    None: (
        "One record, or a list of them (the action does not declare which)",
        lambda record: {"anyOf": [record, {"type": "array", "items": record}]},
    ),
}


class ActionNames:
    """Component and operation names of one action. A shape's name says the roles whose own
    REQUEST or RESPONSE fields it holds (`person.1.show.ROLE_ADMIN.record`), so one name means
    one shape in every document, whoever reads it."""

    def __init__(self, action: ActionDoc) -> None:
        version = "" if action.current else f".v{action.api_version}"
        self.operation = f"{action.controller}{version}.{action.action}"
        base = ".".join((action.controller, action.api_version, action.action, *action.shape_roles))
        self.request = f"{base}.request"
        self.record = f"{base}.record"
        self.output = f"{base}.output"


def required_fields(action: ActionDoc, rules: ActionRules) -> list[str]:
    """The request fields the action requires (`@action(requires=...)`) that the roles may send."""
    sendable = {field.name for field in action.request}
    return [name for name in rules.requires if name in sendable]


def carried_fields(action: ActionDoc, rules: ActionRules) -> list[str]:
    """The response fields every record of the action holds (`@action(carries=...)`) that the
    roles receive: required and never null in its record."""
    received = {field.name for field in action.response}
    return [name for name in rules.carries if name in received]


def action_schemas(action: ActionDoc, rules: ActionRules) -> dict[str, Any]:
    names = ActionNames(action)
    description, output = ANSWERS[rules.answers]
    return {
        names.request: object_schema(
            action.request,
            required_fields(action, rules),
            field_bounds(rules),
            description=f"The fields your roles may send to {action.name}",
        ),
        names.record: object_schema(
            action.response,
            carried_fields(action, rules),
            description=f"The fields your roles receive from {action.name}",
        ),
        names.output: {"description": description, **output(ref("schemas", names.record))},
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


def ok_answer(schema: dict[str, Any], description: str, *headers: str) -> dict[str, Any]:
    return {
        "description": description,
        "headers": header_refs("RateLimit", "RateLimit-Policy", "Link", "X-Request-ID", *headers),
        "content": {JSON: {"schema": schema}},
    }


def honours_if_match(action: ActionDoc, actions: list[ActionDoc]) -> bool:
    """Whether a write compares If-Match (`apid.calls.preconditions`): it names its record by
    the controller's key, whose ETag is that of the controller's `show` in the same API
    version, which the roles may call."""
    return (
        not action.is_safe
        and any(field.key == "PKEY" for field in action.request)
        and any(
            (other.controller, other.api_version, other.action) == (action.controller, action.api_version, SHOW)
            for other in actions
        )
    )


def plain_operation(
    action: ActionDoc,
    with_id: bool,
    rules: ActionRules = NO_RULES,
    links: dict[str, Any] | None = None,
    *,
    conditional: bool = False,
) -> dict[str, Any]:
    """A plain call; `links` are the OpenAPI links of its 200 (a create's to the calls of the
    record it made); a `conditional` write takes If-Match and may answer 412."""
    names = ActionNames(action)
    required = required_fields(action, rules)
    bounds = field_bounds(rules)
    parameters: list[dict[str, Any]] = [ref("parameters", "LinkRelations"), ref("parameters", "RequestId")]
    if action.is_safe:
        parameters.append(ref("parameters", "IfNoneMatch"))
    else:
        parameters.append(ref("parameters", "IdempotencyKey"))
    if conditional:
        parameters.append(ref("parameters", "IfMatch"))
    if with_id:
        id_field = next(f for f in action.request if f.name == ID)
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
                        "required": field.name in required,
                        "schema": field_schema(field, nullable=False, bounds=bounds),
                    }
                )
        if any(field.type == "Map" for field in body_fields):
            operation["requestBody"] = {
                "required": False,
                "content": {JSON: {"schema": ref("schemas", names.request)}},
            }
    elif body_fields:  # a write by id with nothing else to send has no body
        body, needed = ref("schemas", names.request), required
        if with_id and ID in required:  # the path holds the id: the body need not
            needed = [name for name in required if name != ID]
            body = object_schema(body_fields, needed, bounds)
        operation["requestBody"] = {"required": bool(needed), "content": {JSON: {"schema": body}}}
    operation["parameters"] = parameters
    ok = ok_answer(
        ref("schemas", names.output),
        "The output, with your roles' RESPONSE fields only",
        "ETag" if action.is_safe else "Idempotent-Replayed",
        *(("Next-Offset",) if rules.page is not None else ()),
    )
    if links:
        ok["links"] = links
    operation["responses"] = {"200": ok, **call_errors(rules.upstream)}
    if conditional:
        operation["responses"].update(problem_answers("412"))
    if action.is_safe:
        operation["responses"]["304"] = ref("responses", NOT_MODIFIED)
    return operation


def record_links(created: ActionDoc, actions: list[ActionDoc]) -> dict[str, Any]:
    """The OpenAPI links of a create's answer: the show, update and delete of the record it
    made (its `id`), in the same API version, that the roles may call by id."""
    if created.action != "create" or not any(field.name == ID for field in created.response):
        return {}
    return {
        target.action: {
            "operationId": ActionNames(target).operation + ".byId",
            "parameters": {ID: f"$response.body#/{ID}"},
            "description": f"{target.name} of the record created",
        }
        for target in actions
        if (target.controller, target.api_version) == (created.controller, created.api_version)
        and target.action in ("show", "update", "delete")
        and target.takes_id
    }


def batch_operation(action: ActionDoc, limit: int) -> dict[str, Any]:
    """A batch call: its elements are request bodies, so each holds the fields the action requires."""
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
        "parameters": [ref("parameters", "RequestId"), ref("parameters", "IdempotencyKey")],
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
                "headers": header_refs("RateLimit", "RateLimit-Policy", "X-Request-ID"),
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
