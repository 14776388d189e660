"""What one subscriber of the live event stream is sent of one logged change: the webhook
message of the change (`{id, type, timestamp, data}`, apid.hooks.events), its `data` the
subscriber's own RESPONSE fields of the action, or nothing at all.

The same three questions as for a webhook's owner (apid.hooks.events.receiving): do the
endpoint's HOOK roles admit the subscriber's, does the action's own per-record check let it
see this record (apid.plugin_host.record_access), and is the service within an API key's
scopes. One place decides each, for every copy of a record that leaves apid.
"""

from __future__ import annotations

from typing import Any

import orjson

from apid.auth.tokens import Principal
from apid.hooks.events import current_endpoint, payload
from apid.iostate import Endpoint, RuleSet
from apid.plugin import Caller
from apid.plugin_host.record_access import may_receive, receiver
from apid.store.changes import Change


class Subscriber:
    """Who a stream is for, as their account stands now, and which services they asked for
    (None: every one their roles may hear of). Each endpoint's view of them is worked out once
    (`receiver`): a change is checked against every open stream."""

    def __init__(self, principal: Principal, services: frozenset[str] | None = None) -> None:
        self.principal = principal
        self.services = services
        self._receivers: dict[str, tuple[Endpoint, Caller]] = {}

    def asked_for(self, service: str) -> bool:
        if self.services is None:
            return True
        return service in self.services or service.partition("/")[0] in self.services

    def receiver(self, endpoint: Endpoint) -> Caller:
        """The subscriber as `endpoint` would see them calling (its rules in force: a reload
        makes new endpoints, and a new view of them)."""
        kept = self._receivers.get(endpoint.path)
        if kept is None or kept[0] is not endpoint:
            principal = self.principal
            kept = self._receivers[endpoint.path] = (
                endpoint,
                receiver(endpoint, principal.user_id, principal.username, principal.roles),
            )
        return kept[1]


def copy_for(
    subscriber: Subscriber, change: Change, rules: RuleSet, record: Any, made: dict[frozenset[str], str]
) -> str | None:
    """The message `subscriber` is sent of `change` (whose record, decoded, is `record`), or
    None when they may not hear of it. `made` keeps the messages of this change already written,
    by the fields they show: subscribers of the same roles share one."""
    if not subscriber.asked_for(change.service):
        return None
    controller, _, action = change.service.partition("/")
    endpoint = current_endpoint(rules, controller, action)
    principal = subscriber.principal
    if endpoint is None or not endpoint.hook_roles & principal.roles:
        return None
    scopes = principal.key_scopes
    if scopes is not None and controller not in scopes and change.service not in scopes:
        return None
    if not may_receive(endpoint, subscriber.receiver(endpoint), record):
        return None
    allowed = endpoint.response_fields(endpoint.granted(principal.roles))
    message = made.get(allowed)
    if message is None:
        message = made[allowed] = payload(change.message_id, change.service, change.created_at, shown(record, allowed))
    return message


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
