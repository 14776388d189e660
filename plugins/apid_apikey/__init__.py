"""The `apikey` controller: API keys managed through the API, written as any plugin would be.

An account holder creates, lists and revokes their own keys, the superuser anyone's (`userId`).
A key's roles are a subset of its owner's, its scope names controllers or endpoints that exist,
its expiry lies ahead: `services.keys` keeps these rules and those below. The key is in the
answer of `create` only, and never in a webhook event: apikey.json gives no HOOK roles, and
should it, a key's record goes to its owner and administrators only, and the record carrying
the key itself to nobody (`may_see`). A call made with a key may revoke that key, nothing more.

A key outlasts the login that makes it, so a stolen access token must not be enough: a
password account's caller (an administrator too, making a key for another account) proves the
login is theirs with `currentPassword`, counted as a failed login when wrong
(`services.accounts.reauthenticate`). A provider account has no password here; its call
carries a fresh token of its provider. The owner is mailed when a key is made or revoked, and
holds at most `security.apiKeysPerAccount` live keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from apid.plugin import Call, Caller, Controller, Limits, Page, action

# What every key's record answered holds, never null (`KeyRecord.to_dict`)
KEY = ("id", "userId", "name", "prefix", "roles", "dateCreated")


def owner_or_administrator(caller: Caller, record: Mapping[str, Any]) -> bool:
    """Who may receive a copy of a key's record: its owner and administrators; nobody the one
    that carries the key itself, which only the answer of `create` shows."""
    return "key" not in record and (caller.is_superuser or record.get("userId") == caller.id)


# The fields of a key as `KeyRecord.to_dict` answers them, the key itself, and what the actions
# read besides (IO State may name no other)
STORED = frozenset(
    {"id", "userId", "name", "prefix", "roles", "scopes", "expiresAt", "dateCreated", "lastUsedAt", "revokedAt"}
    | {"key", "offset", "max", "currentPassword"}
)


class ApiKeyController(Controller, stores=STORED):
    name = "apikey"

    # currentPassword is not in `requires`: a provider account creates keys without one
    @action(
        requires=("name", "roles"),
        limits={"name": Limits(min_length=1, max_length=100, pattern=r"\S"), "roles": Limits(min_items=1)},
        answers="record",
        carries=(*KEY, "key"),
        may_see=owner_or_administrator,
    )
    async def create(self, call: Call) -> dict[str, Any]:
        """A new key, shown in this answer once: only its hash is kept."""
        fields = call.fields
        return await self.services.keys.create(
            call.caller,
            name=fields["name"],
            roles=fields["roles"],
            scopes=fields.get("scopes"),
            expires_at=fields.get("expiresAt"),
            owner_id=fields.get("userId"),
            current_password=fields.get("currentPassword"),
        )

    @action(answers="list", page=Page(default=20, maximum=100), carries=KEY)
    async def list(self, call: Call) -> list[dict[str, Any]]:
        """Your keys, every key for the superuser; never the keys themselves."""
        return await self.services.keys.list(call.caller, *call.page())

    @action(requires=("id",), answers="record", carries=KEY, may_see=owner_or_administrator)
    async def revoke(self, call: Call) -> dict[str, Any]:
        """Revoke one of your keys (the superuser: anyone's; a key: itself), everywhere within a second."""
        return await self.services.keys.revoke(call.caller, call.fields["id"])
