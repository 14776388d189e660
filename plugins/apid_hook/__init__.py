"""The `hook` controller: webhooks managed through the API, written as any plugin would be.

Who may subscribe to what, which URLs are allowed and who reaches which hook is decided by
`services.hooks`; this controller maps the IO State actions onto it, and declares who may
receive copies of the hooks it changes (webhook events on `hook`, should IO State name HOOK roles).
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from typing import Any

from apid.plugin import Call, Caller, Controller, Page, action

# What the actions on one hook require: its id.
BY_ID = ("id",)
# What every hook record answered holds, never null (`Hook.to_dict`); a new secret's answer adds it
HOOK = ("id", "version", "userId", "url", "service", "format", "isEnabled", "attempts", "pending")
WITH_SECRET = (*HOOK, "secret")
QUEUED = ("messageId", "hookId", "state", "hookEnabled")  # a message queued for a hook


def owner_or_administrator(caller: Caller, record: Mapping[str, Any]) -> bool:
    """Who may receive a copy of a hook record: as for `show`, its owner and administrators;
    nobody one that carries the secret, which only the answer that made it shows."""
    return "secret" not in record and (caller.is_superuser or record.get("userId") == caller.id)


# The fields of a hook and of a delivery as `services.hooks` answers them, and what the actions
# read besides (IO State may name no other)
STORED = frozenset(
    {"id", "version", "userId", "url", "service", "format", "isEnabled", "attempts", "disabledReason"}
    | {"dateCreated", "lastModified", "pending", "secret"}
    | {"messageId", "hookId", "hookEnabled", "type", "state", "messageState", "attemptedAt", "statusCode"}
    | {"durationMs", "error", "services"}
)


class HookController(Controller, stores=STORED):
    name = "hook"

    @action(answers="list", page=Page(default=20, maximum=100), carries=HOOK)
    async def list(self, call: Call) -> list[dict[str, Any]]:
        return await self.services.hooks.list(call.caller, *call.page())

    @action(requires=BY_ID, answers="record", carries=HOOK)
    async def show(self, call: Call) -> dict[str, Any]:
        return await self.services.hooks.show(call.caller, call.fields["id"])

    @action(requires=("url", "service"), answers="record", carries=WITH_SECRET, may_see=owner_or_administrator)
    async def create(self, call: Call) -> dict[str, Any]:
        return await self.services.hooks.create(call.caller, call.fields["url"], call.fields["service"])

    @action(requires=BY_ID, answers="record", carries=HOOK, may_see=owner_or_administrator)
    async def update(self, call: Call) -> dict[str, Any]:
        fields = call.fields
        return await self.services.hooks.update(
            call.caller, fields["id"], fields.get("url"), fields.get("service"), fields.get("version")
        )

    @action(requires=BY_ID, answers="record", carries=BY_ID, may_see=owner_or_administrator)
    async def delete(self, call: Call) -> dict[str, Any]:
        return await self.services.hooks.delete(call.caller, call.fields["id"])

    @action(requires=BY_ID, answers="record", carries=HOOK, may_see=owner_or_administrator)
    async def enable(self, call: Call) -> dict[str, Any]:
        return await self.services.hooks.enable(call.caller, call.fields["id"], True)

    @action(requires=BY_ID, answers="record", carries=HOOK, may_see=owner_or_administrator)
    async def disable(self, call: Call) -> dict[str, Any]:
        return await self.services.hooks.enable(call.caller, call.fields["id"], False)

    @action(requires=BY_ID, answers="record", carries=WITH_SECRET, may_see=owner_or_administrator)
    async def rotateSecret(self, call: Call) -> dict[str, Any]:
        return await self.services.hooks.rotate_secret(call.caller, call.fields["id"])

    @action(
        requires=BY_ID,
        answers="list",
        page=Page(default=20, maximum=100),
        carries=("id", "messageId", "type", "messageState"),
    )
    async def deliveries(self, call: Call) -> builtins.list[dict[str, Any]]:
        return await self.services.hooks.deliveries(call.caller, call.fields["id"], *call.page())

    @action(requires=("id", "messageId"), answers="record", carries=QUEUED, may_see=owner_or_administrator)
    async def redeliver(self, call: Call) -> dict[str, Any]:
        return await self.services.hooks.redeliver(call.caller, call.fields["id"], call.fields["messageId"])

    @action(requires=BY_ID, answers="record", carries=QUEUED, may_see=owner_or_administrator)
    async def ping(self, call: Call) -> dict[str, Any]:
        return await self.services.hooks.ping(call.caller, call.fields["id"])

    @action(answers="record", carries=("services",))
    async def hookable(self, call: Call) -> dict[str, Any]:
        return {"services": self.services.hooks.services(call.caller)}
