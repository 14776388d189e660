"""The API keys as a service for a caller (`services.keys`), which the `apikey` controller
lends to the API: who may make, list and revoke which keys, over the rules of `apikeys`.

A key outlasts the login that makes it, so a password account's caller proves the login is
theirs with their own password (`Accounts.reauthenticate`); a provider account has none here,
and its call carries a fresh token of its provider instead.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from apid.auth.apikeys import check_new_key, insert_key, is_provider_account, list_keys, refuse_key, revoke_key
from apid.problems import Forbidden, NotFound

if TYPE_CHECKING:
    from apid.plugin import Accounts, Caller, Database, RuleSet, SecuritySettings


class ApiKeys:
    """The API keys a caller reaches: their own, the superuser's everyone's; a call made with a
    key reaches only that key, to revoke it. Each dict is a key's record (apikey.json)."""

    def __init__(
        self,
        *,
        db: Database,
        accounts: Accounts,
        security: SecuritySettings,
        rules: Callable[[], RuleSet],
    ) -> None:
        self._db = db
        self._accounts = accounts
        self._security = security
        self._rules = rules  # the rule set in force, which a key's scopes must name

    async def create(
        self,
        caller: Caller,
        *,
        name: Any,
        roles: Any,
        scopes: Any = None,
        expires_at: Any = None,
        owner_id: int | None = None,
        current_password: str | None = None,
    ) -> dict[str, Any]:
        owner_id = owner_id or caller.id
        refuse_key(caller.api_key, "create keys")
        if owner_id != caller.id and not caller.is_superuser:
            raise Forbidden("you may only create keys of your own")
        owner = await self._accounts.get(owner_id)
        if owner is None:
            raise NotFound(f"no person with id {owner_id}")
        new = check_new_key(
            name,
            roles,
            scopes,
            expires_at,
            owner.roles,
            self._security.all_roles,
            self._rules(),
            datetime.now(UTC),
        )
        if not await self._db.read(is_provider_account, caller.id):
            await self._accounts.reauthenticate(caller, current_password, "to create an API key (your own password)")
        record, key = await self._db.write(insert_key, owner_id, new, self._security.api_keys_per_account)
        return {**record.to_dict(), "key": key}

    async def revoke(self, caller: Caller, key_id: int) -> dict[str, Any]:
        if caller.api_key is not None and caller.api_key != key_id:
            raise Forbidden("an API key may revoke only itself")
        owner = None if caller.is_superuser or caller.api_key is not None else caller.id
        record = await self._db.write(revoke_key, key_id, owner)
        if record is None:
            raise NotFound(f"no API key with id {key_id}")
        return record.to_dict()

    # Last: below it, `list` in this class would name the method, not the type.
    async def list(self, caller: Caller, offset: int, limit: int) -> list[dict[str, Any]]:
        refuse_key(caller.api_key, "list keys")
        owner = None if caller.is_superuser else caller.id
        return [record.to_dict() for record in await self._db.read(list_keys, owner, offset, limit)]
