"""Sessions after login: rotating refresh tokens, and revoking access tokens before expiry.

A refresh token is an opaque random string kept only as its SHA-256. Each use rotates it:
the presented token is marked rotated and a new one joins the same family. A rotated token
presented again after a short grace window means two parties hold the family, so the whole
family is revoked (RFC 9700's reuse detection).

Access tokens are refused before they expire by id (logout puts the token's `jti` on a deny
list until its `exp`), by login (every access token of an ended family: logout, refresh reuse,
the owner's password change ending the other logins) and by account (`apid.auth.standing`:
a password reset refuses every token issued before it). `Revocations` keeps the first two in
memory and re-reads what other processes and daemons wrote every half second, so checking
costs no database query per request.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import Connection, and_, func, insert, select, update
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from apid.auth.onetime import digest, new_secret, now
from apid.auth.standing import Standings, changed_since, note_change, purge_changes
from apid.auth.tokens import Principal
from apid.store.database import Database, DatabaseUnavailable
from apid.store.tables import person, refresh_token, revoked_token

log = Logger(namespace="apid.sessions")

POLL_SECONDS = 0.5
# Rows written by another daemon may carry a timestamp slightly behind ours; look back this far.
POLL_OVERLAP = timedelta(seconds=5)
PURGE_SECONDS = 600.0


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


class Rotation(enum.Enum):
    ROTATED = "rotated"
    UNKNOWN = "unknown"  # not ours, revoked or expired
    REUSED = "reused"  # a rotated token presented again: the family is now revoked


@dataclass(frozen=True)
class RotationOutcome:
    status: Rotation
    secret: str | None = None


def _insert(connection: Connection, person_id: int, family: str, lifetime: int) -> str:
    secret = new_secret()
    moment = now()
    connection.execute(
        insert(refresh_token).values(
            person_id=person_id,
            family=family,
            token_hash=digest(secret),
            date_created=moment,
            expires_at=moment + timedelta(seconds=lifetime),
        )
    )
    return secret


def start_family(connection: Connection, person_id: int, lifetime: int) -> tuple[str, str]:
    """The first refresh token of a new login, and the login's family (its session id)."""
    family = uuid.uuid4().hex
    return _insert(connection, person_id, family, lifetime), family


def rotate(
    connection: Connection, secret: str, person_id: int, session: str | None, lifetime: int, grace: int
) -> RotationOutcome:
    """Trade a refresh token of `session` (the login the access token belongs to) for the next."""
    row = connection.execute(select(refresh_token).where(refresh_token.c.token_hash == digest(secret))).first()
    moment = now()
    if (
        row is None
        or row.person_id != person_id
        or row.family != session
        or row.revoked_at is not None
        or _aware(row.expires_at) <= moment
    ):
        return RotationOutcome(Rotation.UNKNOWN)
    family = and_(refresh_token.c.family == row.family, refresh_token.c.revoked_at.is_(None))
    if row.rotated_at is not None and moment - _aware(row.rotated_at) > timedelta(seconds=grace):
        connection.execute(update(refresh_token).where(family).values(revoked_at=moment))
        log.warn(
            "refresh token reused after rotation: revoked family {family} of person {person}",
            family=row.family,
            person=person_id,
        )
        return RotationOutcome(Rotation.REUSED)
    # Only the newest token of a family is live: within the grace window a client that lost
    # the answer gets a fresh token, and the one it never received stops working.
    connection.execute(
        update(refresh_token).where(and_(family, refresh_token.c.rotated_at.is_(None))).values(rotated_at=moment)
    )
    return RotationOutcome(Rotation.ROTATED, _insert(connection, person_id, row.family, lifetime))


def revoke_session(connection: Connection, session: str, person_id: int) -> None:
    """Every refresh token of one login of the account."""
    connection.execute(
        update(refresh_token)
        .where(
            and_(
                refresh_token.c.family == session,
                refresh_token.c.person_id == person_id,
                refresh_token.c.revoked_at.is_(None),
            )
        )
        .values(revoked_at=now())
    )


def revoke_person(connection: Connection, person_id: int, keep_session: str | None = None) -> None:
    """End the account's logins: every refresh token, and every access token issued until now;
    or, with `keep_session`, every login but that one (a password changed by its owner)."""
    moment = now()
    families = and_(refresh_token.c.person_id == person_id, refresh_token.c.revoked_at.is_(None))
    if keep_session is not None:
        families = and_(families, refresh_token.c.family != keep_session)
    connection.execute(update(refresh_token).where(families).values(revoked_at=moment))
    if keep_session is None:
        connection.execute(update(person).where(person.c.id == person_id).values(tokens_valid_after=moment))
    note_change(connection, person_id)


def deny(connection: Connection, jti: str, expires: int) -> None:
    exists = connection.execute(select(revoked_token.c.jti).where(revoked_token.c.jti == jti)).first()
    if exists is None:
        connection.execute(
            insert(revoked_token).values(jti=jti, expires_at=datetime.fromtimestamp(expires, UTC), date_created=now())
        )


@dataclass(frozen=True)
class Revoked:
    """What was refused since a moment: token ids and logins, each with the time until which
    it is worth remembering (epoch seconds), and the accounts whose standing changed."""

    tokens: dict[str, float]
    sessions: dict[str, float]
    accounts: set[int]


def revoked_since(connection: Connection, since: datetime | None, access_lifetime: int) -> Revoked:
    """What was revoked since `since` (a little before, see POLL_OVERLAP), or from the start.

    An ended login matters while access tokens issued before its end can still be valid.
    """
    moment = now()
    denied = select(revoked_token.c.jti, revoked_token.c.expires_at).where(revoked_token.c.expires_at > moment)
    ended = (
        select(refresh_token.c.family, func.max(refresh_token.c.revoked_at))
        .where(refresh_token.c.revoked_at >= moment - timedelta(seconds=access_lifetime))
        .group_by(refresh_token.c.family)
    )
    accounts: set[int] = set()
    if since is not None:
        denied = denied.where(revoked_token.c.date_created >= since - POLL_OVERLAP)
        ended = ended.where(refresh_token.c.revoked_at >= since - POLL_OVERLAP)
        accounts = changed_since(connection, since - POLL_OVERLAP)
    return Revoked(
        tokens={jti: _aware(expires).timestamp() for jti, expires in connection.execute(denied)},
        sessions={
            family: _aware(ended_at).timestamp() + access_lifetime for family, ended_at in connection.execute(ended)
        },
        accounts=accounts,
    )


class Revocations:
    """What access tokens are refused, kept in memory and refreshed from the database: token
    ids (logout), logins (logout, refresh reuse, a password change), and through `Standings`
    the accounts whose standing changed."""

    def __init__(self, *, reactor: IReactorTime, db: Database, standings: Standings, access_lifetime: int) -> None:
        self._reactor = reactor
        self._db = db
        self._standings = standings
        self._lifetime = access_lifetime
        self._denied: dict[str, float] = {}
        self._ended: dict[str, float] = {}
        self._since: datetime | None = None
        self._poller = LoopingCall(self._poll)
        self._poller.clock = reactor
        self._purged = 0.0
        self._listeners: list[Callable[[Revoked], None]] = []

    def listen(self, listener: Callable[[Revoked], None]) -> None:
        """Tell `listener` of what is refused from now on, as this daemon learns it (its own
        logouts and account changes at once, the other daemons' at the next poll): the live
        event streams end or narrow on it."""
        self._listeners.append(listener)

    def _told(self, revoked: Revoked) -> None:
        for listener in self._listeners:
            listener(revoked)

    def refuses(self, principal: Principal) -> bool:
        return principal.token_id in self._denied or principal.session in self._ended

    async def start(self) -> None:
        await self._poll()
        self._poller.start(POLL_SECONDS, now=False).addErrback(
            lambda failure: log.failure("revocation polling stopped", failure)
        )

    def stop(self) -> None:
        if self._poller.running:
            self._poller.stop()

    async def _poll(self) -> None:
        started = now()
        try:
            revoked = await self._db.read(revoked_since, self._since, self._lifetime)
        except DatabaseUnavailable:
            return  # the outage is logged once, by the database's
        except Exception:
            log.failure("reading revocations failed; trying again")
            return
        self._since = started
        self._denied.update(revoked.tokens)
        self._ended.update(revoked.sessions)
        self._standings.forget(revoked.accounts)
        if revoked.tokens or revoked.sessions or revoked.accounts:
            self._told(revoked)
        moment = self._reactor.seconds()
        self._denied = {jti: until for jti, until in self._denied.items() if until > moment}
        self._ended = {family: until for family, until in self._ended.items() if until > moment}
        if moment - self._purged > PURGE_SECONDS:
            self._purged = moment
            self._db.write(purge_changes).addErrback(
                lambda failure: (
                    None
                    if failure.check(DatabaseUnavailable)  # the outage is logged once, by the database's
                    else log.failure("purging account changes failed", failure)
                )
            )

    async def deny_token(self, principal: Principal) -> None:
        await self._db.write(deny, principal.token_id, principal.expires)
        self._denied[principal.token_id] = float(principal.expires)
        self._told(Revoked(tokens={principal.token_id: float(principal.expires)}, sessions={}, accounts=set()))

    async def end_session(self, principal: Principal) -> None:
        """Log out: the login's refresh tokens and its access tokens, this one included."""
        if principal.session is not None:
            await self._db.write(revoke_session, principal.session, principal.user_id)
            self.ended(principal.session)
        await self.deny_token(principal)

    def ended(self, session: str) -> None:
        """Refuse the login's access tokens here at once (the other daemons on their next poll)."""
        self._ended[session] = self._reactor.seconds() + self._lifetime
        self._told(Revoked(tokens={}, sessions={session: self._ended[session]}, accounts=set()))

    async def revoke_person(self, person_id: int) -> None:
        await self._db.write(revoke_person, person_id)
        await self.account_changed(person_id)

    async def account_changed(self, person_id: int, sessions_ended: bool = False) -> None:
        """Take a change this daemon made to an account into account at once: its standing,
        and the logins it ended (read back now rather than at the next poll)."""
        self._standings.forget([person_id])
        self._told(Revoked(tokens={}, sessions={}, accounts={person_id}))
        if sessions_ended:
            await self._poll()
