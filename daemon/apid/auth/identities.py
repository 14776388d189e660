"""The `person` of each subject of a trusted OpenID provider: found by its issuer and `sub`,
made on its first call (table `external_identity`).

Such an account is an account like any other, so own-record rules, webhooks and rate limits
apply to it unchanged. What it cannot do is sign in at apid: its password column holds `!`,
which no password matches, and its username (`{issuer host}:{digest of issuer and sub}`) and
address (the username `@external.invalid`, a domain no mail reaches, RFC 2606) hold a `:`,
which no name or address given to `/register`, `person/create` or `apid user add` may, so
nobody can take them first.

The provider decides the roles: the account gets those its token maps to when it is made, and
again whenever a token maps to others than the account holds, which is looked at once per
`LINK_TTL` seconds per subject (the verified token itself is kept by `apid.auth.issuers`).
To shut a subject out whatever the provider says, disable its account in apid.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from sqlalchemy import Connection, insert, select

from apid.accounts import insert_account, update_account
from apid.problems import Conflict
from apid.store.database import Database
from apid.store.tables import external_identity, person, person_role, role

if TYPE_CHECKING:
    from apid.auth.sessions import Revocations
    from apid.hooks.events import AccountEvents

LINK_TTL = 60.0  # seconds a subject's account and roles are taken as read
LINKS_KEPT = 100_000  # past that many subjects at once, the memory starts over
NO_PASSWORD = "!"  # no Argon2 hash: no password matches it


@dataclass(frozen=True)
class Linked:
    """A subject's account: its id, its username, and the roles it held when last read."""

    person_id: int
    username: str
    roles: frozenset[str]


def username_for(issuer: str, subject: str) -> str:
    """The username of a subject's account: unique to the pair, readable by its provider's host."""
    host = (urlsplit(issuer).hostname or "issuer")[:39]
    digest = hashlib.sha256(f"{issuer}\n{subject}".encode()).hexdigest()
    return f"{host}:{digest[:24]}"


_LINKED = (
    select(person.c.id, person.c.username, role.c.authority)
    .select_from(external_identity)
    .join(person, person.c.id == external_identity.c.person_id)
    .outerjoin(person_role, person_role.c.person_id == person.c.id)
    .outerjoin(role, role.c.id == person_role.c.role_id)
)


def find_link(connection: Connection, issuer: str, subject: str) -> Linked | None:
    rows = list(
        connection.execute(_LINKED.where(external_identity.c.issuer == issuer, external_identity.c.subject == subject))
    )
    if not rows:
        return None
    held = frozenset(row.authority for row in rows if row.authority is not None)
    return Linked(rows[0].id, rows[0].username, held)


def link(
    connection: Connection, issuer: str, subject: str, roles: frozenset[str], events: AccountEvents | None
) -> Linked:
    """The subject's account holding `roles`: made if it has none, its roles set if they differ;
    either is a `person` event, as `person/create` and `person/update` are."""
    found = find_link(connection, issuer, subject)
    if found is None:
        username = username_for(issuer, subject)
        account = insert_account(connection, username, f"{username}@external.invalid", NO_PASSWORD, roles)
        connection.execute(
            insert(external_identity).values(
                issuer=issuer, subject=subject, person_id=account.id, date_created=datetime.now(UTC)
            )
        )
        action = "create"
    elif found.roles != roles:
        account = update_account(connection, found.person_id, {}, None, None, roles)
        action = "update"
    else:
        return found
    if events is not None:
        events.record(connection, action, account)
    return Linked(account.id, account.username, account.roles)


class ExternalIdentities:
    """The accounts of providers' subjects, read once per `LINK_TTL` and kept in memory."""

    def __init__(
        self,
        db: Database,
        revocations: Revocations,
        events: AccountEvents | None,
        clock: Callable[[], float],
    ) -> None:
        self._db = db
        self._revocations = revocations
        self._events = events
        self._clock = clock
        self._links: dict[tuple[str, str], tuple[Linked, float]] = {}

    async def account(self, issuer: str, subject: str, roles: frozenset[str]) -> Linked:
        """The subject's account, holding `roles` (made, or its roles set, when needed)."""
        key = (issuer, subject)
        kept = self._links.get(key)
        if kept is not None and kept[1] > self._clock() and kept[0].roles == roles:
            return kept[0]
        found = await self._db.read(find_link, issuer, subject)
        if found is None or found.roles != roles:
            found = await self._written(issuer, subject, roles)
            await self._revocations.account_changed(found.person_id)
        if len(self._links) >= LINKS_KEPT:
            self._links.clear()
        self._links[key] = (found, self._clock() + LINK_TTL)
        return found

    async def _written(self, issuer: str, subject: str, roles: frozenset[str]) -> Linked:
        try:
            return await self._db.write(link, issuer, subject, roles, self._events)
        except Conflict:  # another request or daemon made the account first: it is there now
            return await self._db.write(link, issuer, subject, roles, self._events)
