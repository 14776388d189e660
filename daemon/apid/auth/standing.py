"""Whether an account may still use its access tokens, and with which roles.

A token says who logged in and with which roles at that moment; the account may have changed
since: demoted, disabled, locked, expired, deleted, its sessions revoked. Every authenticated
request is checked against the account's current *standing*, which each daemon keeps in
memory so that the check costs no query per request:

- every change apid makes to an account writes a row to `account_change` in the same
  transaction (`note_change`); the daemon that made it forgets the account at once, and every
  daemon reads the rows written since its last look every half second (`Revocations`), so
  the others forget it within a second;
- an entry is also forgotten after `ttl` seconds, so a change made by hand in SQL is seen
  within that time.

The roles a request uses are those both in the token and held now: a demotion counts on the
next request, a promotion with the next token. Tokens issued before the account existed (an
id reused after a delete) or before its sessions were revoked are refused; a provider's token
(`Principal.issuer`) only by the latter, since its account is made after it, on its first call.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, bindparam, delete, insert, select
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime

from apid.auth.tokens import Principal
from apid.problems import Unauthorized
from apid.store.coalesce import Coalescer
from apid.store.database import Database
from apid.store.tables import account_change, person, person_role, role

STANDING_TTL = 60.0
# Changes are read by every daemon within a second; a row older than this has done its work.
CHANGES_KEPT = timedelta(hours=1)
REFUSED = "the access token is no longer valid for this account; log in again"


@dataclass(frozen=True)
class Standing:
    """What an account's tokens may do now."""

    username: str
    roles: frozenset[str]
    may_log_in: bool
    valid_after: float  # epoch seconds: tokens issued before are refused
    revoked_before: float  # epoch seconds: the account's sessions were last ended then (0: never)

    def accepts_from(self, principal: Principal) -> float:
        """When the tokens the account accepts begin: a provider's token need only follow the
        last end of the account's sessions, since the account is made after it."""
        return self.revoked_before if principal.issuer else self.valid_after


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def note_change(connection: Connection, person_id: int) -> None:
    """Record that the account's standing changed, for every daemon to re-read it."""
    connection.execute(insert(account_change).values(person_id=person_id, changed_at=datetime.now(UTC)))


def changed_since(connection: Connection, since: datetime) -> set[int]:
    return set(
        connection.execute(select(account_change.c.person_id).where(account_change.c.changed_at >= since)).scalars()
    )


def purge_changes(connection: Connection) -> None:
    connection.execute(delete(account_change).where(account_change.c.changed_at < datetime.now(UTC) - CHANGES_KEPT))


_STANDINGS = (
    select(
        person.c.id,
        person.c.username,
        person.c.enabled,
        person.c.account_locked,
        person.c.account_expired,
        person.c.date_created,
        person.c.tokens_valid_after,
        role.c.authority,
    )
    .outerjoin(person_role, person_role.c.person_id == person.c.id)
    .outerjoin(role, role.c.id == person_role.c.role_id)
    .where(person.c.id.in_(bindparam("ids", expanding=True)))
)


def standings_of(connection: Connection, ids: list[int]) -> dict[int, Standing]:
    rows: dict[int, Any] = {}
    roles: dict[int, set[str]] = {}
    for row in connection.execute(_STANDINGS, {"ids": ids}):
        rows.setdefault(row.id, row)
        if row.authority is not None:
            roles.setdefault(row.id, set()).add(row.authority)
    return {
        person_id: Standing(
            username=row.username,
            roles=frozenset(roles.get(person_id, ())),
            may_log_in=row.enabled and not (row.account_locked or row.account_expired),
            # A token's iat is rounded to the millisecond: one issued in the millisecond the
            # account was created may read as just before it.
            valid_after=max(
                _aware(row.date_created).timestamp() - 0.001,
                _aware(row.tokens_valid_after or row.date_created).timestamp(),
            ),
            revoked_before=_aware(row.tokens_valid_after).timestamp() if row.tokens_valid_after else 0.0,
        )
        for person_id, row in rows.items()
    }


class Standings:
    """The standing of the accounts this daemon serves, read once and kept until it changes."""

    def __init__(self, reactor: IReactorTime, db: Database, ttl: float = STANDING_TTL) -> None:
        self._clock = reactor
        self._ttl = ttl
        self._entries: dict[int, tuple[Standing | None, float]] = {}
        self._generation = 0  # raised by every forget: a read begun before it is not kept
        self._reads: Coalescer[int, Standing] = Coalescer(reactor, lambda ids: db.read(standings_of, ids))

    async def admit(self, principal: Principal) -> Principal:
        """The principal as the account stands now; 401 when it may no longer use the token."""
        entry = self._entries.get(principal.user_id)
        if entry is not None and entry[1] > self._clock.seconds():
            standing = entry[0]
        else:
            standing = await self._read(principal.user_id)
        if standing is None or not standing.may_log_in or principal.issued_at < standing.accepts_from(principal):
            raise Unauthorized(REFUSED)
        roles = principal.roles & standing.roles
        if roles == principal.roles and standing.username == principal.username:
            return principal
        return dataclasses.replace(principal, roles=roles, username=standing.username)

    def _read(self, person_id: int) -> Deferred[Standing | None]:
        generation = self._generation

        def keep(standing: Standing | None) -> Standing | None:
            if generation == self._generation:
                if len(self._entries) >= 100_000:
                    self._entries.clear()
                self._entries[person_id] = (standing, self._clock.seconds() + self._ttl)
            return standing

        return self._reads.get(person_id).addCallback(keep)

    def forget(self, person_ids: Iterable[int]) -> None:
        forgotten = list(person_ids)
        if forgotten:  # the poll calls this every half second, mostly with nothing
            self._generation += 1
        for person_id in forgotten:
            self._entries.pop(person_id, None)
