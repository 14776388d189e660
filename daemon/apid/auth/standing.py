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
next request, a promotion with the next token. Whether the account takes the credential at all
is the one rule of `apid.auth.lifecycle` (`Standing.accepts`), the same for an access token,
a refresh, an API key and a provider's token: the account is active, and the credential was
issued after its last revocation and, for apid's own, after the account was made (an id reused
after a delete). A provider's token (`Principal.issuer`) is made before its account, on its
first call: it is taken only by the account tied to its issuer and subject.

Two rules follow the deployment's settings (`Standings.admit`): with `security.localLogins`
false, an account with no provider identity (a password account) takes no credential at all,
its tokens and keys alike; and an API key of a provider's account is taken only while the
provider vouches for its subject, that is while a token of the subject was admitted within
the issuer's `keysLifetime` (`external_identity.vouched_at`, written at most once a minute
by `apid.auth.identities`, seen here within `ttl`): a key made through a provider stops
within that bound after the provider stops issuing tokens for its subject.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, bindparam, delete, insert, select
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime

from apid.auth.lifecycle import State, accepts, epoch, revoked_before, state_of
from apid.auth.tokens import Principal
from apid.problems import Unauthorized
from apid.store.coalesce import Coalescer
from apid.store.database import Database
from apid.store.tables import account_change, external_identity, person, person_role, role

STANDING_TTL = 60.0
# Changes are read by every daemon within a second; a row older than this has done its work.
CHANGES_KEPT = timedelta(hours=1)
REFUSED = "the access token is no longer valid for this account; log in again"
NO_LOCAL_LOGINS = "password accounts are switched off here (security.localLogins): sign in with your identity provider"
NOT_VOUCHED = (
    "the API key's account has had no token of its identity provider for {seconds:g} seconds: "
    "call once with a token of the provider to use its keys again"
)


@dataclass(frozen=True)
class Standing:
    """What an account's tokens may do now."""

    username: str
    roles: frozenset[str]
    state: State
    valid_after: float  # epoch seconds: apid's own credentials issued before are refused
    revoked_before: float  # epoch seconds: the account's sessions were last ended then (0: never)
    identity: tuple[str, str] | None = None  # (issuer, subject) of a provider's account
    vouched_at: float = 0.0  # epoch seconds: a token of the provider's subject was last admitted then

    @property
    def may_log_in(self) -> bool:
        return self.state is State.ACTIVE

    def accepts(self, principal: Principal) -> bool:
        """Whether the account takes the principal's credential now (`apid.auth.lifecycle`)."""
        if principal.issuer is None:
            return accepts(self.state, State.ACTIVE, principal.issued_at, self.valid_after)
        return (principal.issuer, principal.subject) == self.identity and accepts(
            self.state, State.ACTIVE, principal.issued_at, self.revoked_before
        )


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
        person.c.validated_at,
        person.c.account_locked,
        person.c.account_expired,
        person.c.date_created,
        person.c.tokens_valid_after,
        role.c.authority,
        external_identity.c.issuer,
        external_identity.c.subject,
        external_identity.c.vouched_at,
    )
    .outerjoin(person_role, person_role.c.person_id == person.c.id)
    .outerjoin(role, role.c.id == person_role.c.role_id)
    .outerjoin(external_identity, external_identity.c.person_id == person.c.id)
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
            state=state_of(row),
            # A token's iat is rounded to the millisecond: one issued in the millisecond the
            # account was created may read as just before it.
            valid_after=max(epoch(row.date_created) - 0.001, revoked_before(row)),
            revoked_before=revoked_before(row),
            identity=(row.issuer, row.subject) if row.issuer is not None else None,
            vouched_at=epoch(row.vouched_at),
        )
        for person_id, row in rows.items()
    }


class Standings:
    """The standing of the accounts this daemon serves, read once and kept until it changes."""

    def __init__(
        self,
        *,
        reactor: IReactorTime,
        db: Database,
        ttl: float = STANDING_TTL,
        local_logins: bool = True,
        vouched_for: Mapping[str, float] | None = None,
    ) -> None:
        self._clock = reactor
        self._ttl = ttl
        self._local_logins = local_logins  # false: accounts without a provider identity take nothing
        self._vouched_for = vouched_for or {}  # issuer -> seconds its vouching lasts for its accounts' keys
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
        if standing is None or not standing.accepts(principal):
            raise Unauthorized(REFUSED)
        if standing.identity is None:
            if not self._local_logins:
                raise Unauthorized(NO_LOCAL_LOGINS)
        elif principal.key_id is not None:
            self._vouched(standing.identity[0], standing.vouched_at)
        roles = principal.roles & standing.roles
        if roles == principal.roles and standing.username == principal.username:
            return principal
        return dataclasses.replace(principal, roles=roles, username=standing.username)

    def _vouched(self, issuer: str, vouched_at: float) -> None:
        """A 401 for a provider account's key unless its provider vouched for the subject within
        the issuer's `keysLifetime`; a provider no longer configured vouches for nobody."""
        lasts = self._vouched_for.get(issuer)
        if lasts is None or vouched_at + lasts <= self._clock.seconds():
            raise Unauthorized(NOT_VOUCHED.format(seconds=lasts or 0))

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
