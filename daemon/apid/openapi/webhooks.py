"""The webhook messages in a document (OpenAPI 3.1's `webhooks`): one per event type a hook of
these roles may receive, the POST apid sends to the hook's URL, so that a client's generator
types the payloads as it types the answers.

An event type is an action's `controller/action` (of an API version other than the current, its
name says which: `person/create.v1`); the message is Standard Webhooks' (the `webhook-id`,
`webhook-timestamp` and `webhook-signature` headers, docs/webhooks.md) with the body
`{id, type, timestamp, data}`, `data` the record as a subscriber with these roles receives it:
the action's record schema for them, its RESPONSE fields.

Each message is marked `x-internal`: nothing a client calls. openapi-generator (7.26) renders
webhooks as client methods without types, a Python client that does not import; with the mark
it leaves them out, and openapi-python-client and openapi-typescript read them as before.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from apid.http.operations import JSON, ref
from apid.openapi.calls import ActionNames
from apid.openapi.view import ActionDoc

STRING = {"type": "string"}
HEADERS = (
    ("webhook-id", "The message's id, the same in every delivery of it: a receiver keeps those it handled"),
    ("webhook-timestamp", "When this delivery was signed, in Unix seconds"),
    ("webhook-signature", "`v1,` and the base64 HMAC-SHA256 of id.timestamp.body under the hook's secret"),
)


def webhook_messages(actions: Iterable[ActionDoc]) -> dict[str, Any]:
    """The message of each action these roles' hooks may hear of (a change: not a GET)."""
    return {_name(action): {"post": _message(action)} for action in actions if action.hook and not action.is_safe}


def _name(action: ActionDoc) -> str:
    return action.name if action.current else f"{action.name}.v{action.api_version}"


def _message(action: ActionDoc) -> dict[str, Any]:
    names = ActionNames(action)
    return {
        "operationId": f"webhook.{names.operation}",
        "x-internal": True,
        "tags": [action.controller],
        "summary": f"{action.name} changed a record: what a hook of your roles receives",
        "parameters": [
            {"name": name, "in": "header", "required": True, "schema": STRING, "description": description}
            for name, description in HEADERS
        ],
        "requestBody": {
            "required": True,
            "content": {
                JSON: {
                    "schema": {
                        "type": "object",
                        "required": ["id", "type", "timestamp", "data"],
                        "properties": {
                            "id": {**STRING, "description": "The message's id (webhook-id)"},
                            "type": {"const": action.name, "description": "The event type: the action"},
                            "timestamp": {**STRING, "format": "date-time", "description": "When it happened"},
                            "data": ref("schemas", names.record),
                        },
                    }
                }
            },
        },
        "responses": {
            "2XX": {"description": "Received: any 2xx ends the delivery (docs/webhooks.md: what other answers do)"}
        },
    }
