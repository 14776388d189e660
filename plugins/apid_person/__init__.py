"""The `person` controller: accounts as a REST resource, written as any plugin would be.

Roles decide who may call what and which fields they see (iostate/person.json); the field
rules are declared on the actions (required fields, the account policy), so one 400 lists
every bad field; this code adds what neither can say: a caller who is not the superuser
reaches only their own record, and only configured roles may be given. Every change runs in
the call's unit of work (`unit=call`), so it commits together with its webhook events.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from apid.plugin import (
    Call,
    Caller,
    Conflict,
    Controller,
    Forbidden,
    InvalidFields,
    NotFound,
    Page,
    action,
    check_credentials,
)

# Request field -> account attribute, for the fields an update may change.
CHANGEABLE = ("username", "email", "enabled", "accountLocked", "accountExpired", "passwordExpired")
BY_ID = ("id",)
# What every account record answered holds, never null (`Account.to_dict`)
ACCOUNT = ("id", "version", *CHANGEABLE, "roles", "dateCreated", "lastUpdated")


def account_policy(fields: Mapping[str, Any]) -> None:
    """The account policy for the username and password sent, if any: raises InvalidFields."""
    check_credentials(fields.get("username"), fields.get("password"))


def owner_or_administrator(caller: Caller, record: Mapping[str, Any]) -> bool:
    """Who may receive a copy of a person record (a webhook event): as for `show`, its owner
    and administrators."""
    return caller.is_superuser or record.get("id") == caller.id


# What `Account.to_dict` answers, and what the actions read besides (IO State may name no other)
STORED = frozenset(
    {"id", "version", "username", "email", "enabled", "accountLocked", "accountExpired", "passwordExpired"}
    | {"roles", "dateCreated", "lastUpdated", "password", "currentPassword", "cancelled"}
)


class PersonController(Controller, stores=STORED):
    name = "person"

    def _own_or_superuser(self, call: Call) -> int:
        person_id = call.fields["id"]
        if not call.caller.is_superuser and person_id != call.caller.id:
            raise Forbidden("you may only reach your own person record")
        return person_id

    def _known_roles(self, call: Call) -> list[str] | None:
        roles = call.fields.get("roles")
        if roles is None:
            return None
        unknown = [r for r in roles if not isinstance(r, str) or r not in self.services.security.all_roles]
        if unknown:
            raise InvalidFields(errors=[{"field": "roles", "reason": f"unknown roles: {unknown}"}])
        return roles

    @action(
        requires=("username", "password", "email"),
        validate=account_policy,
        answers="record",
        carries=ACCOUNT,
        may_see=owner_or_administrator,
    )
    async def create(self, call: Call) -> dict[str, Any]:
        fields = call.fields
        account = await self.services.accounts.create(
            fields["username"],
            fields["email"],
            fields["password"],
            self._known_roles(call) or [self.services.security.user_role],
            enabled=fields.get("enabled") is not False,
            unit=call,
            by=call.caller,
        )
        return account.to_dict()

    @action(requires=BY_ID, answers="record", carries=ACCOUNT)
    async def show(self, call: Call) -> dict[str, Any]:
        person_id = self._own_or_superuser(call)
        account = await self.services.accounts.get(person_id)
        if account is None:
            raise NotFound(f"no person with id {person_id}")
        return account.to_dict()

    @action(answers="list", page=Page(default=20, maximum=100), carries=ACCOUNT)
    async def list(self, call: Call) -> list[dict[str, Any]]:
        return [account.to_dict() for account in await self.services.accounts.list(*call.page())]

    @action(
        requires=BY_ID,
        validate=account_policy,
        answers="record",
        carries=ACCOUNT,
        may_see=owner_or_administrator,
    )
    async def update(self, call: Call) -> dict[str, Any]:
        """Changing one's own password or e-mail address needs the current password, so a
        stolen token cannot take the account over (`Accounts.update` with `by`)."""
        person_id = self._own_or_superuser(call)
        fields = call.fields
        changes = {name: fields[name] for name in CHANGEABLE if fields.get(name) is not None}
        account = await self.services.accounts.update(
            person_id,
            changes,
            expected_version=fields.get("version"),
            password=fields.get("password"),
            roles=self._known_roles(call),
            by=call.caller,
            current_password=fields.get("currentPassword"),
            unit=call,
        )
        return account.to_dict()

    @action(requires=("id", "currentPassword"), answers="record", carries=("id", "cancelled"))
    async def cancelReverts(self, call: Call) -> dict[str, Any]:
        """The owner, who made a change of address, ends the links mailed to the old address
        that would put it back (`Accounts.cancel_reverts`)."""
        person_id = call.fields["id"]
        cancelled = await self.services.accounts.cancel_reverts(
            person_id, by=call.caller, current_password=call.fields["currentPassword"]
        )
        return {"id": person_id, "cancelled": cancelled}

    @action(requires=BY_ID, answers="record", carries=BY_ID, may_see=owner_or_administrator)
    async def delete(self, call: Call) -> dict[str, Any]:
        person_id = self._own_or_superuser(call)
        if person_id == call.caller.id:
            raise Conflict("you cannot delete your own account")
        if not await self.services.accounts.delete(person_id, unit=call, by=call.caller):
            raise NotFound(f"no person with id {person_id}")
        return {"id": person_id}
