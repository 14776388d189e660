"""Sessions after login: rotating refresh tokens, and revoking access tokens before expiry.

A refresh token is an opaque random string kept only as its SHA-256. Each use rotates it:
the presented token is marked rotated and a new one joins the same family. A rotated token
presented again after a short grace window means two parties hold the family, so the whole
family is revoked (RFC 9700's reuse detection).

Access tokens are refused before they expire in two ways: by id (logout puts the token's
`jti` on a deny list until its `exp`) and by account (a password reset refuses every token
issued before it). `Revocations` keeps both in memory and re-reads what other processes and
daemons wrote every half second, so checking costs no database query per request.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from sqlalchemy import Connection, and_, insert, select, update
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from apid.auth.onetime import digest, new_secret, now
from apid.auth.tokens import Principal
from apid.store.database import Database
from apid.store.tables import person, refresh_token, revoked_token

log = Logger(namespace="apid.sessions")

POLL_SECONDS = 0.5
# Rows written by another daemon may carry a timestamp slightly behind ours; look back this far.
POLL_OVERLAP = timedelta(seconds=5)


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


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
    connection.execute(insert(refresh_token).values(
        person_id=person_id, family=family, token_hash=digest(secret),
        date_created=moment, expires_at=moment + timedelta(seconds=lifetime),
    ))
    return secret


def start_family(connection: Connection, person_id: int, lifetime: int) -> tuple[str, str]:
    """The first refresh token of a new login, and the login's family (its session id)."""
    family = uuid.uuid4().hex
    return _insert(connection, person_id, family, lifetime), family


def rotate(connection: Connection, secret: str, person_id: int, session: str | None,
           lifetime: int, grace: int) -> RotationOutcome:
    """Trade a refresh token of `session` (the login the access token belongs to) for the next."""
    row = connection.execute(select(refresh_token).where(refresh_token.c.token_hash == digest(secret))).first()
    moment = now()
    if (row is None or row.person_id != person_id or row.family != session
            or row.revoked_at is not None or _aware(row.expires_at) <= moment):
        return RotationOutcome(Rotation.UNKNOWN)
    family = and_(refresh_token.c.family == row.family, refresh_token.c.revoked_at.is_(None))
    if row.rotated_at is not None and moment - _aware(row.rotated_at) > timedelta(seconds=grace):
        connection.execute(update(refresh_token).where(family).values(revoked_at=moment))
        log.warn("refresh token reused after rotation: revoked family {family} of person {person}",
                 family=row.family, person=person_id)
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
        .where(and_(refresh_token.c.family == session, refresh_token.c.person_id == person_id,
                    refresh_token.c.revoked_at.is_(None)))
        .values(revoked_at=now())
    )


def revoke_person(connection: Connection, person_id: int) -> datetime:
    """Every refresh token of the account, and every access token issued until now."""
    moment = now()
    connection.execute(
        update(refresh_token)
        .where(and_(refresh_token.c.person_id == person_id, refresh_token.c.revoked_at.is_(None)))
        .values(revoked_at=moment)
    )
    connection.execute(update(person).where(person.c.id == person_id).values(tokens_valid_after=moment))
    return moment


def deny(connection: Connection, jti: str, expires: int) -> None:
    exists = connection.execute(select(revoked_token.c.jti).where(revoked_token.c.jti == jti)).first()
    if exists is None:
        connection.execute(insert(revoked_token).values(
            jti=jti, expires_at=datetime.fromtimestamp(expires, timezone.utc), date_created=now()))


def revoked_since(connection: Connection, since: datetime | None) -> tuple[dict[str, float], dict[int, float]]:
    """Denied token ids (with their expiry) and accounts' "valid after" marks written since."""
    moment = now()
    denied = select(revoked_token.c.jti, revoked_token.c.expires_at).where(revoked_token.c.expires_at > moment)
    marks = select(person.c.id, person.c.tokens_valid_after).where(person.c.tokens_valid_after.is_not(None))
    if since is not None:
        denied = denied.where(revoked_token.c.date_created >= since - POLL_OVERLAP)
        marks = marks.where(person.c.tokens_valid_after >= since - POLL_OVERLAP)
    return (
        {jti: _aware(expires).timestamp() for jti, expires in connection.execute(denied)},
        {person_id: _aware(after).timestamp() for person_id, after in connection.execute(marks)},
    )


class Revocations:
    """What access tokens are refused, kept in memory and refreshed from the database."""

    def __init__(self, reactor: IReactorTime, db: Database) -> None:
        self._reactor = reactor
        self._db = db
        self._denied: dict[str, float] = {}
        self._valid_after: dict[int, float] = {}
        self._since: datetime | None = None
        self._poller = LoopingCall(self._poll)
        self._poller.clock = reactor

    def refuses(self, principal: Principal) -> bool:
        if principal.token_id in self._denied:
            return True
        return principal.issued_at < self._valid_after.get(principal.user_id, float("-inf"))

    async def start(self) -> None:
        await self._poll()
        self._poller.start(POLL_SECONDS, now=False).addErrback(
            lambda failure: log.failure("revocation polling stopped", failure))

    def stop(self) -> None:
        if self._poller.running:
            self._poller.stop()

    async def _poll(self) -> None:
        started = now()
        try:
            denied, marks = await self._db.read(revoked_since, self._since)
        except Exception:
            log.failure("reading revocations failed; trying again")
            return
        self._merge(denied, marks)
        self._since = started
        moment = self._reactor.seconds()
        self._denied = {jti: expires for jti, expires in self._denied.items() if expires > moment}

    def _merge(self, denied: dict[str, float], marks: dict[int, float]) -> None:
        self._denied.update(denied)
        for person_id, after in marks.items():
            self._valid_after[person_id] = max(after, self._valid_after.get(person_id, after))

    async def deny_token(self, principal: Principal) -> None:
        await self._db.write(deny, principal.token_id, principal.expires)
        self._denied[principal.token_id] = float(principal.expires)

    async def revoke_person(self, person_id: int) -> None:
        moment = await self._db.write(revoke_person, person_id)
        self._merge({}, {person_id: moment.timestamp()})
