"""The `apikey` controller: API keys managed through the API, written as any plugin would be.

An account holder creates, lists and revokes their own keys, the superuser anyone's (`userId`).
A key's roles are a subset of its owner's, its scope names controllers or endpoints that exist,
its expiry lies ahead (`apid.auth.apikeys.check_new_key`). The key is in the answer of `create`
only, and never in a webhook event: the changes are written outside the call's unit of work,
and apikey.json gives no HOOK roles. A call made with a key may revoke that key, nothing more.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from apid.auth.apikeys import check_new_key, insert_key, list_keys, refuse_key, revoke_key
from apid.plugin import Call, Controller, Forbidden, NotFound, action


class ApiKeyController(Controller):
    name = "apikey"
    # The fields of a key as `KeyRecord.to_dict` answers them, the key itself, and what the
    # actions read besides (IO State may name no other)
    fields = frozenset(
        {"id", "userId", "name", "prefix", "roles", "scopes", "expiresAt", "dateCreated", "lastUsedAt", "revokedAt"}
        | {"key", "offset", "max"}
    )

    @action(requires=("name", "roles"), answers="record")
    async def create(self, call: Call) -> dict[str, Any]:
        """A new key, shown in this answer once: only its hash is kept."""
        caller, fields = call.caller, call.fields
        refuse_key(caller.api_key, "create keys")
        owner_id = fields.get("userId") or caller.id
        if owner_id != caller.id and not caller.is_superuser:
            raise Forbidden("you may only create keys of your own")
        owner = await self.services.accounts.get(owner_id)
        if owner is None:
            raise NotFound(f"no person with id {owner_id}")
        new = check_new_key(
            fields["name"],
            fields["roles"],
            fields.get("scopes"),
            fields.get("expiresAt"),
            owner.roles,
            self.services.security.all_roles,
            self.services.rules(),
            datetime.now(UTC),
        )
        record, key = await self.services.db.write(insert_key, owner_id, new)
        return {**record.to_dict(), "key": key}

    @action(answers="list")
    async def list(self, call: Call) -> list[dict[str, Any]]:
        """Your keys, every key for the superuser; never the keys themselves."""
        caller = call.caller
        refuse_key(caller.api_key, "list keys")
        owner = None if caller.is_superuser else caller.id
        return [record.to_dict() for record in await self.services.db.read(list_keys, owner, *call.page())]

    @action(requires=("id",), answers="record")
    async def revoke(self, call: Call) -> dict[str, Any]:
        """Revoke one of your keys (the superuser: anyone's; a key: itself), everywhere within a second."""
        caller, key_id = call.caller, call.fields["id"]
        if caller.api_key is not None and caller.api_key != key_id:
            raise Forbidden("an API key may revoke only itself")
        owner = None if caller.is_superuser or caller.api_key is not None else caller.id
        record = await self.services.db.write(revoke_key, key_id, owner)
        if record is None:
            raise NotFound(f"no API key with id {key_id}")
        return record.to_dict()
