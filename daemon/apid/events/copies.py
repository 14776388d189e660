"""What one subscriber of the live event stream is sent of one logged change: the webhook
message of the change (`{id, type, timestamp, data}`, apid.hooks.events), its `data` the
subscriber's own RESPONSE fields of the action, or nothing at all.

The same three questions as for a webhook's owner (apid.hooks.events.receiving): do the
endpoint's HOOK roles admit the subscriber's, does the action's own per-record check let it
see this record (apid.plugin_host.record_access), and is the service within an API key's
scopes. One place decides each, for every copy of a record that leaves apid.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from apid.auth.tokens import Principal
from apid.hooks.events import current_endpoint, payload
from apid.iostate import Endpoint, RuleSet
from apid.plugin import Caller
from apid.plugin_host.record_access import may_receive, receiver
from apid.store.changes import Change


@dataclass(frozen=True)
class View:
    """What an endpoint makes of one subscriber, worked out once per endpoint: whether its
    events may reach them at all (HOOK roles, an API key's scopes), who they are to its
    action's per-record check, and the RESPONSE fields their roles see."""

    endpoint: Endpoint
    admitted: bool
    caller: Caller
    fields: frozenset[str]


class Subscriber:
    """Who a stream is for, as their account stands now, and which services they asked for
    (None: every one their roles may hear of). A change is checked against every open stream,
    so each endpoint's view of them is kept (`view`)."""

    def __init__(self, principal: Principal, services: frozenset[str] | None = None) -> None:
        self.principal = principal
        self.services = services
        self._views: dict[str, View] = {}

    def asked_for(self, service: str) -> bool:
        if self.services is None:
            return True
        return service in self.services or service.partition("/")[0] in self.services

    def view(self, endpoint: Endpoint) -> View:
        """`endpoint`'s view of the subscriber (of the rules in force: a reload makes new
        endpoints, and new views)."""
        kept = self._views.get(endpoint.path)
        if kept is not None and kept.endpoint is endpoint:
            return kept
        principal = self.principal
        scopes = principal.key_scopes
        in_scope = scopes is None or endpoint.controller in scopes or endpoint.path in scopes
        made = self._views[endpoint.path] = View(
            endpoint=endpoint,
            admitted=bool(endpoint.hook_roles & principal.roles) and in_scope,
            caller=receiver(endpoint, principal.user_id, principal.username, principal.roles),
            fields=endpoint.response_fields(endpoint.granted(principal.roles)),
        )
        return made


def copy_for(
    subscriber: Subscriber, change: Change, endpoint: Endpoint | None, record: Any, made: dict[frozenset[str], str]
) -> str | None:
    """The message `subscriber` is sent of `change` (of `endpoint`, its record decoded as
    `record`), or None when they may not hear of it. `made` keeps the messages of this change
    already written, by the fields they show: subscribers of the same roles share one."""
    if endpoint is None or not subscriber.asked_for(change.service):
        return None
    view = subscriber.view(endpoint)
    if not view.admitted or not may_receive(endpoint, view.caller, record):
        return None
    message = made.get(view.fields)
    if message is None:
        message = made[view.fields] = payload(
            change.message_id, change.service, change.created_at, shown(record, view.fields)
        )
    return message


def change_endpoint(rules: RuleSet, change: Change) -> Endpoint | None:
    """The endpoint a change was made by, in the rules in force (None: no longer served)."""
    controller, _, action = change.service.partition("/")
    return current_endpoint(rules, controller, action)


def shown(record: Any, allowed: frozenset[str]) -> Any:
    """The record, or each record of a list, cut to `allowed` (its values already in their
    answer's form: the log keeps them so)."""
    if isinstance(record, dict):
        return {key: value for key, value in record.items() if key in allowed}
    if isinstance(record, list):
        return [shown(item, allowed) for item in record]
    return record


def decoded(change: Change) -> Any:
    return orjson.loads(change.record)
