"""What the `hook` controller (and any plugin) may do with hooks, for a given caller.

A caller reaches only their own hooks, the superuser everyone's. A hook may subscribe only to
a controller or endpoint whose HOOK roles include one of the caller's roles, and only to a URL
`check_url` accepts. The secret leaves this module twice: when a hook is created and when its
secret is rotated.
"""

from __future__ import annotations

import builtins
import time
from collections.abc import Callable, Iterable
from typing import Any

from apid.hooks.events import message_id, payload
from apid.hooks.queue import NewMessage, insert_messages
from apid.hooks.registry import (
    change_hook,
    delete_hook,
    enable_values,
    insert_hook,
    list_attempts,
    list_hooks,
    owned_hook,
    requeue,
    rotate_secret,
)
from apid.hooks.signing import new_secret
from apid.hooks.urls import UrlRefused, check_url
from apid.iostate import RuleSet
from apid.plugin import Caller
from apid.problems import Conflict, InvalidFields
from apid.store.database import Database

ROTATION_GRACE = 24 * 3600.0  # the old secret signs beside the new one for a day
PING_TYPE = "hook/ping"


def hookable(rules: RuleSet, roles: Iterable[str]) -> list[str]:
    """The endpoints (`controller/action`) whose changes these roles may receive."""
    roles = frozenset(roles)
    return sorted(
        {
            endpoint.path
            for state in rules.controllers.values()
            for version in state.versions.values()
            for endpoint in version.endpoints.values()
            if not endpoint.is_safe and endpoint.hook_roles & roles
        }
    )


def check_hook(
    url: str | None, service: str | None, roles: Iterable[str], allowed_origins: Iterable[str], rules: RuleSet
) -> dict[str, Any]:
    """The hook columns to save, once the URL is allowed and the service is one whose changes
    these roles may receive; otherwise one 400 naming each refused field."""
    errors, values = [], {}
    if url is not None:
        try:
            check_url(url, allowed_origins)
            values["url"] = url
        except UrlRefused as refused:
            errors.append({"field": "url", "reason": str(refused)})
    if service is not None:
        choices = hookable(rules, roles)
        if service in choices or service in {path.partition("/")[0] for path in choices}:
            values["service"] = service
        else:
            errors.append(
                {
                    "field": "service",
                    "reason": (
                        f"{service!r} is no controller or controller/action whose changes these roles may receive; "
                        f"they may receive: {', '.join(choices) or 'nothing'}"
                    ),
                }
            )
    if errors:
        raise InvalidFields(
            "the hook cannot be saved: " + "; ".join(f"{e['field']} {e['reason']}" for e in errors), errors=errors
        )
    return values


class Hooks:
    def __init__(
        self,
        *,
        db: Database,
        allowed_origins: Iterable[str],
        rules: Callable[[], RuleSet],
        wake: Callable[[], None] | None,
    ) -> None:
        self._db = db
        self._allowed = tuple(allowed_origins)
        self._rules = rules
        self._wake = wake  # None: webhookActive is false here, nothing is sent

    @staticmethod
    def _scope(caller: Caller) -> int | None:
        return None if caller.is_superuser else caller.id

    def services(self, caller: Caller) -> list[str]:
        return hookable(self._rules(), caller.roles)

    async def list(self, caller: Caller, offset: int, limit: int) -> list[dict[str, Any]]:
        return [h.to_dict() for h in await self._db.read(list_hooks, self._scope(caller), offset, limit)]

    async def show(self, caller: Caller, hook_id: int) -> dict[str, Any]:
        return (await self._db.read(owned_hook, hook_id, self._scope(caller))).to_dict()

    async def create(self, caller: Caller, url: str, service: str) -> dict[str, Any]:
        values = check_hook(url, service, caller.roles, self._allowed, self._rules())
        secret = new_secret()
        created = await self._db.write(insert_hook, caller.id, values["url"], values["service"], secret)
        return {**created.to_dict(), "secret": secret}

    async def update(
        self, caller: Caller, hook_id: int, url: str | None, service: str | None, version: int | None
    ) -> dict[str, Any]:
        values = check_hook(url, service, caller.roles, self._allowed, self._rules())
        changed = await self._db.write(change_hook, hook_id, self._scope(caller), values, version)
        return changed.to_dict()

    async def delete(self, caller: Caller, hook_id: int) -> dict[str, Any]:
        await self._db.write(delete_hook, hook_id, self._scope(caller))
        return {"id": hook_id}

    async def enable(self, caller: Caller, hook_id: int, enabled: bool) -> dict[str, Any]:
        changed = await self._db.write(change_hook, hook_id, self._scope(caller), enable_values(enabled), None)
        self._kick()
        return changed.to_dict()

    async def rotate_secret(self, caller: Caller, hook_id: int) -> dict[str, Any]:
        changed, secret = await self._db.write(
            rotate_secret, hook_id, self._scope(caller), time.time() + ROTATION_GRACE
        )
        return {**changed.to_dict(), "secret": secret}

    async def deliveries(self, caller: Caller, hook_id: int, offset: int, limit: int) -> builtins.list[dict[str, Any]]:
        return await self._db.read(list_attempts, hook_id, self._scope(caller), offset, limit)

    async def redeliver(self, caller: Caller, hook_id: int, message: str) -> dict[str, Any]:
        self._require_active()
        queued = await self._db.write(requeue, hook_id, self._scope(caller), message)
        self._kick()
        return queued

    async def ping(self, caller: Caller, hook_id: int) -> dict[str, Any]:
        """Queue a `hook/ping` message, delivered like any other, to test the receiver."""
        self._require_active()
        now = time.time()
        mid = message_id()

        def queue(connection: Any) -> dict[str, Any]:
            owned = owned_hook(connection, hook_id, self._scope(caller))
            body = payload(mid, PING_TYPE, now, {"hookId": hook_id, "service": owned.service})
            insert_messages(connection, [NewMessage(mid, hook_id, PING_TYPE, body)], now)
            return {"messageId": mid, "hookId": hook_id, "state": "pending", "hookEnabled": owned.is_enabled}

        queued = await self._db.write(queue)
        self._kick()
        return queued

    def _require_active(self) -> None:
        if self._wake is None:
            raise Conflict("webhooks are switched off here (webhookActive is false): nothing would be sent")

    def _kick(self) -> None:
        if self._wake is not None:
            self._wake()
