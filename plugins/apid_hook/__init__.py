"""The `hook` controller: webhooks managed through the API, written as any plugin would be.

Who may subscribe to what, which URLs are allowed and who reaches which hook is decided by
`services.hooks`; this controller maps the IO State actions onto it.
"""

from __future__ import annotations

from typing import Any

from apid.plugin import Call, Controller, action

def _id(call: Call) -> int:
    call.require("id")
    return call.fields["id"]


class HookController(Controller):
    name = "hook"

    @action
    async def list(self, call: Call) -> list[dict[str, Any]]:
        return await self.services.hooks.list(call.caller, *call.page())

    @action
    async def show(self, call: Call) -> dict[str, Any]:
        return await self.services.hooks.show(call.caller, _id(call))

    @action
    async def create(self, call: Call) -> dict[str, Any]:
        call.require("url", "service")
        return await self.services.hooks.create(call.caller, call.fields["url"], call.fields["service"])

    @action
    async def update(self, call: Call) -> dict[str, Any]:
        fields = call.fields
        return await self.services.hooks.update(
            call.caller, _id(call), fields.get("url"), fields.get("service"), fields.get("version")
        )

    @action
    async def delete(self, call: Call) -> dict[str, Any]:
        return await self.services.hooks.delete(call.caller, _id(call))

    @action
    async def enable(self, call: Call) -> dict[str, Any]:
        return await self.services.hooks.enable(call.caller, _id(call), True)

    @action
    async def disable(self, call: Call) -> dict[str, Any]:
        return await self.services.hooks.enable(call.caller, _id(call), False)

    @action
    async def rotateSecret(self, call: Call) -> dict[str, Any]:
        return await self.services.hooks.rotate_secret(call.caller, _id(call))

    @action
    async def deliveries(self, call: Call) -> list[dict[str, Any]]:
        return await self.services.hooks.deliveries(call.caller, _id(call), *call.page())

    @action
    async def redeliver(self, call: Call) -> dict[str, Any]:
        call.require("id", "messageId")
        return await self.services.hooks.redeliver(call.caller, call.fields["id"], call.fields["messageId"])

    @action
    async def ping(self, call: Call) -> dict[str, Any]:
        return await self.services.hooks.ping(call.caller, _id(call))

    @action
    async def hookable(self, call: Call) -> dict[str, Any]:
        return {"services": self.services.hooks.services(call.caller)}
