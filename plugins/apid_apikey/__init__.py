"""The `apikey` controller: API keys managed through the API, written as any plugin would be.

An account holder creates, lists and revokes their own keys, the superuser anyone's (`userId`).
A key's roles are a subset of its owner's, its scope names controllers or endpoints that exist,
its expiry lies ahead (`apid.auth.apikeys.check_new_key`). The key is in the answer of `create`
only, and never in a webhook event: apikey.json gives no HOOK roles, and should it, a key's
record goes to its owner and administrators only, and the record carrying the key itself to
nobody (`may_see`). A call made with a key may revoke that key, nothing more.

A key outlasts the login that makes it, so a stolen access token must not be enough: a
password account's caller (an administrator too, making a key for another account) proves the
login is theirs with `currentPassword`, counted as a failed login when wrong
(`Accounts.reauthenticate`). A provider account has no password here; its call carries a fresh
token of its provider. The owner is mailed when a key is made or revoked, and holds at most
`security.apiKeysPerAccount` live keys (`apid.auth.apikeys.insert_key`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from apid.auth.apikeys import check_new_key, insert_key, is_provider_account, list_keys, refuse_key, revoke_key
from apid.plugin import Call, Caller, Controller, Forbidden, NotFound, action


def owner_or_administrator(caller: Caller, record: Mapping[str, Any]) -> bool:
    """Who may receive a copy of a key's record: its owner and administrators; nobody the one
    that carries the key itself, which only the answer of `create` shows."""
    return "key" not in record and (caller.is_superuser or record.get("userId") == caller.id)


class ApiKeyController(Controller):
    name = "apikey"
    # The fields of a key as `KeyRecord.to_dict` answers them, the key itself, and what the
    # actions read besides (IO State may name no other)
    fields = frozenset(
        {"id", "userId", "name", "prefix", "roles", "scopes", "expiresAt", "dateCreated", "lastUsedAt", "revokedAt"}
        | {"key", "offset", "max", "currentPassword"}
    )

    # currentPassword is not in `requires`: a provider account creates keys without one
    @action(requires=("name", "roles"), answers="record", may_see=owner_or_administrator)
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
        if not await self.services.db.read(is_provider_account, caller.id):
            await self.services.accounts.reauthenticate(
                caller, fields.get("currentPassword"), "to create an API key (your own password)"
            )
        record, key = await self.services.db.write(
            insert_key, owner_id, new, self.services.security.api_keys_per_account
        )
        return {**record.to_dict(), "key": key}

    @action(answers="list")
    async def list(self, call: Call) -> list[dict[str, Any]]:
        """Your keys, every key for the superuser; never the keys themselves."""
        caller = call.caller
        refuse_key(caller.api_key, "list keys")
        owner = None if caller.is_superuser else caller.id
        return [record.to_dict() for record in await self.services.db.read(list_keys, owner, *call.page())]

    @action(requires=("id",), answers="record", may_see=owner_or_administrator)
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
