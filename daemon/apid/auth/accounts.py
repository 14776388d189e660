"""Accounts (the `person` table and its roles): the one place that reads and writes them.

The units of work are plain functions of a connection, so the command line runs them
directly and the daemon runs them in the database thread pool through
`apid.auth.account_service.Accounts`.
"""

from __future__ import annotations

import string
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, bindparam, delete, func, insert, select, update
from sqlalchemy.exc import IntegrityError

from apid.auth.sessions import revoke_person
from apid.auth.standing import note_change
from apid.problems import Conflict, NotFound
from apid.store.database import inserted_id
from apid.store.tables import person, person_role, role

if TYPE_CHECKING:
    from apid.hooks.events import AccountEvents

# Account attributes whose value takes an account's use away: an administrator's own, or the
# last administrator's, stays as it is (`keep_an_administrator`).
REMOVING = {"enabled": False, "accountLocked": True, "accountExpired": True}

# Account attribute -> person column, for the fields an update may change.
COLUMNS = {
    "username": "username",
    "email": "email",
    "enabled": "enabled",
    "accountLocked": "account_locked",
    "accountExpired": "account_expired",
    "passwordExpired": "password_expired",
}


@dataclass(frozen=True)
class Account:
    """An account as plain data; the password hash never leaves this module."""

    id: int
    version: int
    username: str
    email: str
    enabled: bool
    account_locked: bool
    account_expired: bool
    password_expired: bool
    roles: frozenset[str]
    date_created: str  # ISO 8601, formatted once where the row is read
    last_updated: str

    @property
    def may_log_in(self) -> bool:
        return self.enabled and not (self.account_locked or self.account_expired)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "version": self.version,
            "username": self.username,
            "email": self.email,
            "enabled": self.enabled,
            "accountLocked": self.account_locked,
            "accountExpired": self.account_expired,
            "passwordExpired": self.password_expired,
            "roles": sorted(self.roles),
            "dateCreated": self.date_created,
            "lastUpdated": self.last_updated,
        }


def email_key(address: str) -> str:
    """What makes two e-mail addresses one identity: Unicode canonical caseless matching
    (toNFC(toCasefold(toNFD(address))), Unicode D145 stored in NFC).

    SQLite's lower() folds ASCII only, so `ÄRGER@example.com` and `ärger@example.com` were two
    accounts, and mail about one could reach the other (GitHub's 2019 Unicode case collision).
    casefold() folds every script (ß and SS alike); NFD first makes the spellings of one
    letter alike (é precomposed or e + U+0301, ś or ſ + U+0301: normalizing to NFC before
    folding would miss the latter). Turkish dotless ı stays apart from i, as casefold says.
    The address is stored as typed, mail goes there; this key is only compared, and it is
    unique in `person.email_key`. A change to this function needs a migration recomputing
    every key (0004 fills them with it).
    """
    return unicodedata.normalize("NFC", unicodedata.normalize("NFD", address).casefold())


# str.lower() folds every script; usernames fold ASCII letters only (see `username_key`).
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)


def username_key(username: str) -> str:
    """What makes two usernames one identity: the name with its ASCII letters lowercased.

    Usernames are ASCII by policy (`apid.config.account_policy.USERNAME`), so this is their whole case fold, and it
    folds nothing more: str.lower() would make the Kelvin sign (U+212A) a `k`, so a name typed
    with it would find, or take, the account of the ASCII name. It agrees with SQLite's lower(),
    which folds ASCII only too. The name is stored as typed; this key is only compared, and it
    is unique in `person.username_key`: an index that login, registration and the uniqueness
    check read through, and that settles two concurrent creates of `Bob` and `bob`. A change
    to this function needs a migration recomputing every key (0009 fills them with it).
    """
    return username.translate(_ASCII_LOWER)


def _iso(moment: datetime) -> str:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.isoformat()


def _now() -> datetime:
    return datetime.now(UTC)


# Built once: SQLAlchemy then reuses their compiled form instead of rebuilding them per call.
# A person with their roles in one statement: a row per role (or one row with no role), with
# the columns an Account holds (never the password hash).
_PEOPLE_WITH_ROLES = (
    select(
        person.c.id,
        person.c.version,
        person.c.username,
        person.c.email,
        person.c.enabled,
        person.c.account_locked,
        person.c.account_expired,
        person.c.password_expired,
        person.c.date_created,
        person.c.last_updated,
        role.c.authority,
    )
    .outerjoin(person_role, person_role.c.person_id == person.c.id)
    .outerjoin(role, role.c.id == person_role.c.role_id)
)
# One id (a single call, a chain link) is the common case, and `=` needs no IN list rendered.
PERSON_WITH_ROLES_BY_ID = _PEOPLE_WITH_ROLES.where(person.c.id == bindparam("id"))
_PEOPLE_WITH_ROLES_BY_IDS = _PEOPLE_WITH_ROLES.where(person.c.id.in_(bindparam("ids", expanding=True)))
_PERSON_BY_USERNAME_KEY = select(person).where(person.c.username_key == bindparam("key"))
_ROLES_BY_PERSON = (
    select(person_role.c.person_id, role.c.authority)
    .join(role, role.c.id == person_role.c.role_id)
    .where(person_role.c.person_id.in_(bindparam("ids", expanding=True)))
)


def _roles_of(connection: Connection, ids: list[int]) -> dict[int, frozenset[str]]:
    rows = connection.execute(_ROLES_BY_PERSON, {"ids": ids})
    found: dict[int, set[str]] = {i: set() for i in ids}
    for person_id, authority in rows:
        found[person_id].add(authority)
    return {i: frozenset(r) for i, r in found.items()}


def _account(row: Any, roles: frozenset[str]) -> Account:
    return Account(
        id=row.id,
        version=row.version,
        username=row.username,
        email=row.email,
        enabled=row.enabled,
        account_locked=row.account_locked,
        account_expired=row.account_expired,
        password_expired=row.password_expired,
        roles=roles,
        date_created=_iso(row.date_created),
        last_updated=_iso(row.last_updated),
    )


def _accounts(connection: Connection, rows: list[Any]) -> list[Account]:
    roles = _roles_of(connection, [row.id for row in rows])
    return [_account(row, roles[row.id]) for row in rows]


def _set_roles(connection: Connection, person_id: int, roles: Iterable[str]) -> None:
    connection.execute(delete(person_role).where(person_role.c.person_id == person_id))
    for authority in sorted(set(roles)):
        role_id = connection.execute(select(role.c.id).where(role.c.authority == authority)).scalar()
        if role_id is None:
            role_id = inserted_id(connection, insert(role).values(authority=authority))
        connection.execute(insert(person_role).values(person_id=person_id, role_id=role_id))


def taken(connection: Connection, username: str | None, email: str | None, other_than: int | None) -> None:
    """Raise Conflict naming the first of username and email that another account holds,
    each compared by its key (`username_key`, `email_key`), through that key's unique index."""
    checks = []
    if username is not None:
        checks.append(("username", person.c.username_key == username_key(username)))
    if email is not None:
        checks.append(("email", person.c.email_key == email_key(email)))
    for name, same in checks:
        query = select(person.c.id).where(same)
        if other_than is not None:
            query = query.where(person.c.id != other_than)
        if connection.execute(query).first() is not None:
            raise Conflict(f"the {name} is already taken", field=name)


def _duplicate(error: IntegrityError) -> Conflict:
    """The 409 for a unique constraint that a concurrent transaction got to first (the
    check in `taken` and the write are not atomic on PostgreSQL), naming the field when the
    database names the constraint."""
    diagnostics = getattr(error.orig, "diag", None)  # psycopg: the constraint, without values
    constraint = getattr(diagnostics, "constraint_name", None) or str(error.orig)  # SQLite: "person.email_key"
    for name in ("email", "username"):
        if name in constraint:
            return Conflict(f"the {name} is already taken", field=name)
    return Conflict("the username or email is already taken")


def get_account(connection: Connection, account_id: int) -> Account | None:
    return get_accounts(connection, [account_id]).get(account_id)


def _written(connection: Connection, account_id: int) -> Account:
    """The account this transaction just wrote, as it stands now."""
    account = get_account(connection, account_id)
    if account is None:  # cannot be within the transaction that wrote it
        raise NotFound(f"no person with id {account_id}")
    return account


def get_accounts(connection: Connection, account_ids: list[int]) -> dict[int, Account]:
    if len(account_ids) == 1:
        return accounts_with_roles(connection.execute(PERSON_WITH_ROLES_BY_ID, {"id": account_ids[0]}))
    return accounts_with_roles(connection.execute(_PEOPLE_WITH_ROLES_BY_IDS, {"ids": account_ids}))


def accounts_with_roles(result: Iterable[Any]) -> dict[int, Account]:
    """The accounts in rows of `_PEOPLE_WITH_ROLES`, by id."""
    rows: dict[int, Any] = {}
    roles: dict[int, set[str]] = {}
    for row in result:
        rows.setdefault(row.id, row)
        held = roles.setdefault(row.id, set())
        if row.authority is not None:
            held.add(row.authority)
    return {person_id: _account(row, frozenset(roles[person_id])) for person_id, row in rows.items()}


def find_login(connection: Connection, username: str) -> tuple[Account, str] | None:
    """The account named `username` in any ASCII letter case (as uniqueness compares
    usernames) and its password hash, for verifying a login: one row through the unique index
    of `username_key`, however many accounts there are (docs/benchmarks.md)."""
    row = connection.execute(_PERSON_BY_USERNAME_KEY, {"key": username_key(username)}).first()
    return (_accounts(connection, [row])[0], row.password) if row else None


def list_accounts(connection: Connection, offset: int, limit: int) -> list[Account]:
    rows = list(connection.execute(select(person).order_by(person.c.id).offset(offset).limit(limit)))
    return _accounts(connection, rows)


def insert_account(
    connection: Connection,
    username: str,
    email: str,
    password_hash: str,
    roles: Iterable[str],
    enabled: bool = True,
    pending: bool = False,
) -> Account:
    """A new account, validated at once unless `pending` (a sign-up waiting for its link,
    `apid.auth.lifecycle`)."""
    taken(connection, username, email, None)
    now = _now()
    try:
        person_id = inserted_id(
            connection,
            insert(person).values(
                username=username,
                username_key=username_key(username),
                email=email,
                email_key=email_key(email),
                password=password_hash,
                enabled=enabled,
                validated_at=None if pending else now,
                date_created=now,
                last_updated=now,
            ),
        )
    except IntegrityError as error:
        raise _duplicate(error) from None
    _set_roles(connection, person_id, roles)
    note_change(connection, person_id)  # the id may be one a deleted account held
    return _written(connection, person_id)


def removes_use(changes: Mapping[str, Any], roles: Iterable[str] | None, superuser_role: str) -> bool:
    """Whether a change disables, locks or expires an account, or leaves it without `superuser_role`."""
    if roles is not None and superuser_role not in roles:
        return True
    return any(changes.get(name) is value for name, value in REMOVING.items())


def keep_an_administrator(connection: Connection, account_id: int, superuser_role: str) -> None:
    """A 409 when `account_id` is the last active account (enabled, neither locked nor expired)
    holding `superuser_role`: call it, in the transaction, before a change that takes that away.

    Race-free: the role's row is locked first (FOR UPDATE on PostgreSQL; SQLite's writes are
    serialised whole by BEGIN IMMEDIATE), so two transactions each removing one of the last two
    administrators run one after the other, and the second counts what the first committed
    (READ COMMITTED reads anew at each statement) and is refused."""
    role_id = connection.execute(select(role.c.id).where(role.c.authority == superuser_role).with_for_update()).scalar()
    if role_id is None:
        return
    active = (
        select(person.c.id)
        .join(person_role, person_role.c.person_id == person.c.id)
        .where(
            person_role.c.role_id == role_id,
            person.c.enabled.is_(True),
            person.c.account_locked.is_(False),
            person.c.account_expired.is_(False),
        )
        .limit(2)
    )
    if list(connection.execute(active).scalars()) == [account_id]:
        raise Conflict(
            f"person {account_id} is the last active administrator ({superuser_role}): "
            "make another one first, or use `apid user add` on the server"
        )


def update_account(
    connection: Connection,
    account_id: int,
    changes: Mapping[str, Any],
    expected_version: int | None,
    password_hash: str | None,
    roles: Iterable[str] | None,
    keep_session: str | None = None,
    superuser_role: str | None = None,
) -> Account:
    """Change the account; a new password ends its logins, all but `keep_session` (the one
    its owner changed it from). With `superuser_role`, the last active administrator keeps
    that role and its use (`keep_an_administrator`)."""
    current = connection.execute(select(person.c.version).where(person.c.id == account_id)).scalar()
    if current is None:
        raise NotFound(f"no person with id {account_id}")
    if expected_version is not None and expected_version != current:
        raise Conflict(
            f"person {account_id} was changed meanwhile (version {current}, you sent {expected_version})",
            currentVersion=current,
        )
    if superuser_role is not None and removes_use(changes, roles, superuser_role):
        keep_an_administrator(connection, account_id, superuser_role)
    taken(connection, changes.get("username"), changes.get("email"), account_id)
    values = {COLUMNS[name]: value for name, value in changes.items()}
    if "username" in changes:
        values["username_key"] = username_key(changes["username"])
    if "email" in changes:
        values["email_key"] = email_key(changes["email"])
    if password_hash is not None:
        values["password"] = password_hash
    if changes.get("enabled") is True:  # an administrator enabling a pending sign-up validates it
        values["validated_at"] = func.coalesce(person.c.validated_at, _now())
    values.update(version=current + 1, last_updated=_now())
    try:
        connection.execute(update(person).where(person.c.id == account_id).values(**values))
    except IntegrityError as error:
        raise _duplicate(error) from None
    if roles is not None:
        _set_roles(connection, account_id, roles)
    if password_hash is not None:
        revoke_person(connection, account_id, keep_session)
    else:
        note_change(connection, account_id)
    return _written(connection, account_id)


def change_account(connection: Connection, person_id: int, events: AccountEvents | None, **values: Any) -> Account:
    """Update the account as `person/update` would (a new version, lastUpdated), noting the
    change for every daemon and recording its events in the same transaction: for the
    changes emailed links make (validation, reset, an address change)."""
    connection.execute(
        update(person)
        .where(person.c.id == person_id)
        .values(version=person.c.version + 1, last_updated=_now(), **values)
    )
    note_change(connection, person_id)
    account = _written(connection, person_id)
    if events is not None:
        events.record(connection, "update", account)
    return account


def delete_account(connection: Connection, account_id: int, superuser_role: str | None = None) -> Account | None:
    """Delete the account; what it was (its webhook events carry it), or None if there was none.
    With `superuser_role`, the last active administrator is not deleted (`keep_an_administrator`)."""
    if superuser_role is not None:
        keep_an_administrator(connection, account_id, superuser_role)
    account = get_account(connection, account_id)
    if account is not None:
        connection.execute(delete(person).where(person.c.id == account_id))
        note_change(connection, account_id)
    return account


def password_hash_of(connection: Connection, account_id: int) -> str | None:
    return connection.execute(select(person.c.password).where(person.c.id == account_id)).scalar()
