"""The accounts service controllers and the public endpoints use (`Services.accounts`): every
call runs off the reactor thread, and an owner's change of their own password or address is
proven with the current password, counted as a login (`apid.auth.limits`), a new address told
to the old one (`apid.auth.address_change`). The rows themselves are `apid.auth.accounts`'.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime

from apid.auth.accounts import (
    PERSON_WITH_ROLES_BY_ID,
    Account,
    accounts_with_roles,
    delete_account,
    email_key,
    find_login,
    get_account,
    get_accounts,
    insert_account,
    list_accounts,
    password_hash_of,
    removes_use,
    update_account,
)
from apid.auth.address_change import AddressChanges
from apid.auth.limits import AbuseLimiter
from apid.auth.passwords import Passwords
from apid.auth.sessions import Revocations
from apid.config.account_policy import check_credentials
from apid.problems import Conflict, Forbidden, InvalidFields, NotFound
from apid.store.coalesce import Coalescer
from apid.store.database import Database

if TYPE_CHECKING:
    from apid.plugin import Caller, UnitOfWork

WRONG_PASSWORD = "the current password is wrong"
KEY_CANNOT_ADMINISTER = (
    "administering accounts needs an interactive login: an API key may read accounts but never create, "
    "change or delete one"
)


def refuse_key_administering(by: Caller | None) -> None:
    """A 403 when the caller is an API key: creating, changing or deleting an account (its roles,
    password, address, standing) needs an interactive login, so that a leaked key, whatever its
    roles, cannot make an administrator or take an account over. A key still reads accounts."""
    if by is not None and by.api_key is not None:
        raise Forbidden(KEY_CANNOT_ADMINISTER)


class Accounts:
    """The accounts service controllers use: every call runs off the reactor thread."""

    def __init__(
        self,
        *,
        reactor: IReactorTime,
        db: Database,
        passwords: Passwords,
        revocations: Revocations,
        limiter: AbuseLimiter | None = None,
        addresses: AddressChanges | None = None,
        superuser_role: str | None = None,
    ) -> None:
        self._db = db
        # kept by an administrator's own account and by the last active one (`keep_an_administrator`)
        self._superuser_role = superuser_role
        self._passwords = passwords
        self._revocations = revocations
        self._limiter = limiter  # counts an owner's wrong currentPassword as a failed login
        self._addresses = addresses  # mails the links of an owner's change of e-mail address
        self._person_by_id = db.prepare(PERSON_WITH_ROLES_BY_ID)
        self._by_id: Coalescer[int, Account] = Coalescer(reactor, self._fetch)

    check = staticmethod(check_credentials)

    def get(self, account_id: int) -> Deferred[Account | None]:
        """One account; gets made together are served by one query."""
        return self._by_id.get(account_id)

    def _fetch(self, ids: list[int]) -> Deferred[Mapping[int, Account]]:
        """One id (a single call, a chain link) is the common case and the one prepared read;
        the ids of a batch are one query."""
        if len(ids) == 1:
            return self._db.select(self._person_by_id, id=ids[0]).addCallback(accounts_with_roles)
        return self._db.read(get_accounts, ids)

    def list(self, offset: int, limit: int) -> Deferred[list[Account]]:
        return self._db.read(list_accounts, offset, limit)

    async def create(
        self,
        username: str,
        email: str,
        password: str,
        roles: Iterable[str],
        enabled: bool = True,
        *,
        unit: UnitOfWork | None = None,
        by: Caller | None = None,
    ) -> Account:
        """Create an account. In a controller pass `unit=call` so that the account and the
        call's webhook events commit together (`Call.write`), and `by=call.caller`: an API
        key never creates an account (403, `refuse_key_administering`)."""
        refuse_key_administering(by)
        password_hash = await self._passwords.hash(password)
        account = await (unit or self._db).write(
            insert_account, username, email, password_hash, frozenset(roles), enabled
        )
        await self._revocations.account_changed(account.id)
        return account

    async def update(
        self,
        account_id: int,
        changes: Mapping[str, Any],
        expected_version: int | None = None,
        password: str | None = None,
        roles: Iterable[str] | None = None,
        *,
        by: Caller | None = None,
        current_password: str | None = None,
        keep_session: str | None = None,
        unit: UnitOfWork | None = None,
    ) -> Account:
        """Change an account. In a controller pass `unit=call`, as for `create`, and
        `by=call.caller`, whoever makes the change.

        When `by` is the account's owner, a new password or e-mail address needs
        `current_password`, so that a stolen access token cannot take the account: a 400
        without it; a wrong one is a 403, counted as a failed login of the account from
        `by.address` under the limits of `/authenticate`. A new password then ends every
        other login of the account (all but `by.session`); a new address is told to the old
        one, with a link that puts it back (and with `accounts.confirmEmailChange`, takes
        effect only once the new address confirms it by a link). An administrator changing
        another account needs none of this, and a new password ends all of its logins.
        Without `by`, a `current_password` given is checked (uncounted) and `keep_session` kept.
        """
        changes = dict(changes)
        refuse_key_administering(by)
        superuser_role = self._superuser_role
        new_address = None
        if by is not None and by.id == account_id:
            if by.is_superuser and superuser_role is not None and removes_use(changes, roles, superuser_role):
                raise Conflict("you cannot demote, disable, lock or expire your own account")
            current = await self.get(account_id)
            if current is None:
                raise NotFound(f"no person with id {account_id}")
            if changes.get("email") is not None and email_key(changes["email"]) != email_key(current.email):
                new_address = changes["email"]
            if password is not None or new_address is not None:
                await self._reauthenticate(current, current_password, by.address)
            if password is not None and keep_session is None:
                keep_session = by.session
            if new_address is not None and self._addresses is not None and self._addresses.confirmed_first:
                del changes["email"]
        elif current_password is not None:
            stored = await self._db.read(password_hash_of, account_id)
            if not await self._passwords.verify(stored, current_password):
                raise Forbidden(WRONG_PASSWORD, field="currentPassword")
        password_hash = await self._passwords.hash(password) if password is not None else None
        addresses = self._addresses

        def change(connection: Connection) -> Account:
            before = get_account(connection, account_id)
            account = update_account(
                connection,
                account_id,
                changes,
                expected_version,
                password_hash,
                None if roles is None else frozenset(roles),
                keep_session,
                superuser_role,
            )
            if new_address is not None and before is not None and addresses is not None:
                addresses.issue(connection, account, before.email, new_address)  # its mail, in this transaction
            return account

        account = await (unit or self._db).write(change)
        await self._revocations.account_changed(account_id, sessions_ended=password is not None)
        return account

    async def cancel_reverts(self, account_id: int, *, by: Caller, current_password: str | None) -> int:
        """The owner, proving it with `current_password` as for a change of address, ends the
        pending links that would put an earlier address back (`address_change.cancel_reverts`);
        how many there were. Another account's links are its owner's way back: a 403."""
        refuse_key_administering(by)
        if by.id != account_id:
            raise Forbidden("only the account's owner may cancel its revert links")
        current = await self.get(account_id)
        if current is None:
            raise NotFound(f"no person with id {account_id}")
        await self._reauthenticate(current, current_password, by.address)
        return 0 if self._addresses is None else await self._addresses.cancel_reverts(account_id)

    async def reauthenticate(self, by: Caller, current_password: str | None, purpose: str) -> None:
        """The caller proves, with their own `current_password`, that the login is theirs before
        an act a stolen token must not do (`purpose`, e.g. "to create an API key"): 400 without
        it, 403 when wrong, counted as a failed login as for a change of address."""
        current = await self.get(by.id)
        if current is None:
            raise NotFound(f"no person with id {by.id}")
        await self._reauthenticate(current, current_password, by.address, purpose)

    async def _reauthenticate(
        self,
        account: Account,
        current_password: str | None,
        address: str,
        purpose: str = "to change your own password or e-mail address, or cancel revert links",
    ) -> None:
        """The owner's proof for an identity change: `current_password`, counted like a login
        (before it is verified, so simultaneous guesses cannot slip past the limit; a right
        one gives its count back)."""
        if current_password is None:  # an empty one is a wrong one: verified and counted
            raise InvalidFields(errors=[{"field": "currentPassword", "reason": f"is required {purpose}"}])
        limiter = self._limiter
        counted = limiter is not None and await limiter.reserve("login", address, account.username)
        stored = await self._db.read(password_hash_of, account.id)
        if not await self._passwords.verify(stored, current_password):
            raise Forbidden(WRONG_PASSWORD, field="currentPassword")
        if limiter is not None and counted:
            await limiter.release("login", address, account.username)

    async def delete(self, account_id: int, *, unit: UnitOfWork | None = None, by: Caller | None = None) -> bool:
        """Delete an account; False when there was none. In a controller pass `unit=call` and
        `by=call.caller` (an API key never deletes one). The last active administrator is kept (409)."""
        refuse_key_administering(by)
        deleted = await (unit or self._db).write(delete_account, account_id, self._superuser_role)
        await self._revocations.account_changed(account_id)
        return deleted is not None

    async def login(self, username: str, password: str) -> Account | None:
        """The account if the name and password match and it may log in; else None.

        A missing account still costs one hash verification, so timing tells nothing.
        """
        found = await self._db.read(find_login, username)
        account, stored = found if found else (None, None)
        matches = await self._passwords.verify(stored, password)
        return account if matches and account is not None and account.may_log_in else None
