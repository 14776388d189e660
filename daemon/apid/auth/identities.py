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

Every token admitted vouches for its subject anew: `external_identity.vouched_at` is written
at most once a minute per subject and process (`VOUCH_INTERVAL`), started and never awaited,
off the answer path. The account's API keys are taken only while that is recent
(`apid.auth.standing`), so a key made through a provider ends with the provider's vouching.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from sqlalchemy import Connection, insert, select, update
from twisted.logger import Logger

from apid.auth.accounts import insert_account, update_account
from apid.problems import Conflict
from apid.store.database import Database, DatabaseUnavailable
from apid.store.tables import external_identity, person, person_role, role

if TYPE_CHECKING:
    from apid.auth.sessions import Revocations
    from apid.hooks.events import AccountEvents

log = Logger(namespace="apid.auth.identities")

LINK_TTL = 60.0  # seconds a subject's account and roles are taken as read
VOUCH_INTERVAL = 60.0  # seconds between two writes of one subject's vouched_at
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
                issuer=issuer,
                subject=subject,
                person_id=account.id,
                date_created=datetime.now(UTC),
                vouched_at=datetime.now(UTC),
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


def vouch(connection: Connection, issuer: str, subject: str, at: datetime) -> None:
    """Note that a token of the subject was admitted `at` (its account's keys need it recent)."""
    connection.execute(
        update(external_identity)
        .where(external_identity.c.issuer == issuer, external_identity.c.subject == subject)
        .values(vouched_at=at)
    )


class ExternalIdentities:
    """The accounts of providers' subjects, read once per `LINK_TTL` and kept in memory."""

    def __init__(
        self,
        *,
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
        self._vouch_due: dict[tuple[str, str], float] = {}  # subject -> when its vouched_at is next worth writing

    async def account(self, issuer: str, subject: str, roles: frozenset[str]) -> Linked:
        """The subject's account, holding `roles` (made, or its roles set, when needed); the
        token asking vouches for the subject (`vouched_at`, written off the answer path)."""
        key = (issuer, subject)
        self._vouch(key)
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

    def _vouch(self, key: tuple[str, str]) -> None:
        """Write the subject's `vouched_at`, at most once per `VOUCH_INTERVAL`: started, never
        awaited (a subject's first token makes its row with it set)."""
        now = self._clock()
        if self._vouch_due.get(key, 0.0) > now:
            return
        if len(self._vouch_due) >= LINKS_KEPT:
            self._vouch_due.clear()
        self._vouch_due[key] = now + VOUCH_INTERVAL
        self._db.write(vouch, *key, datetime.fromtimestamp(now, UTC)).addErrback(
            lambda failure: (
                None
                if failure.check(DatabaseUnavailable)  # the outage is logged once, by the database's
                else log.failure(
                    "noting that {issuer} vouched for {subject} failed", failure, issuer=key[0], subject=key[1]
                )
            )
        )

    async def _written(self, issuer: str, subject: str, roles: frozenset[str]) -> Linked:
        try:
            return await self._db.write(link, issuer, subject, roles, self._events)
        except Conflict:  # another request or daemon made the account first: it is there now
            return await self._db.write(link, issuer, subject, roles, self._events)
