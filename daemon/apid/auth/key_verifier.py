"""Authenticating a request by API key: `Authorization: Bearer apid_...`.

A client sends the same key with every request, so a key that verified is kept in memory for
`KEY_KEPT` seconds with the principal it stands for, by its text as `TokenService` keeps a
token (hashing it on every request would cost a request more than its token check): a call
with a key then costs what one with an access token does, a dictionary lookup. Only a key
found in the database (its SHA-256 compared in constant time) is kept. Keys asked for
together are read with one query (`Coalescer`). What may change while a key is kept is checked
on every request: its expiry here; by the caller, as for an access token, its revocation
(the deny list of `Revocations`, read by every process and daemon every half second) and its
owner's standing (demoted, disabled, deleted: `Standings`).

When a key was last used is written off the answer path, at most once a minute per key and
process: the write is started, never awaited.

Refusals are cheap. A lookup id found in no row is remembered for `UNKNOWN_KEPT` seconds
(at most `UNKNOWN_MOST` of them, the oldest going first): a key with it is refused unread.
Nothing needs forgetting when a key is made: a new key's lookup id is drawn at random (72
bits), so no id already remembered is ever given to one. And every key refused (unknown, of
a bad shape, revoked, expired) counts against its client address's failed-login window
(`abuseLimits.login.perAddress`, `AbuseLimiter`): past it the address's keys are refused
with 429, as its password guesses are, before the key is looked at. The count is reserved
before the key is checked and given back when it is good, as a login's is; a key kept and good
costs no count at all.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from datetime import UTC, datetime

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from apid.auth.apikeys import (
    KEY_KEPT,
    KEY_SHAPE,
    NO_EXPIRY,
    KeyRecord,
    key_digest,
    keys_by_lookup,
    lookup_id,
    record_use,
    token_id,
)
from apid.auth.limits import AbuseLimiter
from apid.auth.tokens import Principal
from apid.problems import Unauthorized
from apid.store.coalesce import Coalescer
from apid.store.database import Database, DatabaseUnavailable

log = Logger(namespace="apid.apikeys")

NOT_VALID = "the API key is not valid"
REVOKED = "the API key was revoked"
EXPIRED = "the API key has expired"
KEPT_MOST = 2048  # keys kept at once; past that the oldest goes
USE_INTERVAL = 60.0  # seconds between two writes of one key's last use
UNKNOWN_KEPT = 60.0  # seconds a lookup id found in no row is refused without a read
UNKNOWN_MOST = 10_000  # such lookup ids remembered at once; past that the oldest goes
FAILED_AUTH = "login"  # the abuse limit a refused key counts in: the address's failed logins


def principal_of(record: KeyRecord) -> Principal:
    """The caller a key stands for: its owner, with the key's roles and scope."""
    return Principal(
        user_id=record.person_id,
        username=record.username,
        roles=record.roles,
        token_id=token_id(record.id),
        expires=NO_EXPIRY if record.expires_at is None else int(record.expires_at.timestamp()),
        # A key is as old as its creation: a password reset refuses it as it does older tokens.
        issued_at=record.date_created.timestamp(),
        key_id=record.id,
        key_scopes=record.scopes,
    )


@dataclass(slots=True)
class Kept:
    """A key this process verified: its principal or why it is refused, until when it is kept,
    and when its last use is next worth writing."""

    found: Principal | str
    until: float
    use_due: float


class KeyVerifier:
    def __init__(self, reactor: IReactorTime, db: Database, limiter: AbuseLimiter | None = None) -> None:
        self._clock = reactor
        self._db = db
        self._limiter = limiter
        self._kept: dict[str, Kept] = {}  # by the key's text
        self._unknown: dict[str, float] = {}  # lookup id found in no row -> until when it is refused unread
        self._reads: Coalescer[str, tuple[KeyRecord, str]] = Coalescer(
            reactor, lambda lookups: db.read(keys_by_lookup, lookups)
        )

    def kept(self, key: str) -> Principal | None:
        """The principal of a key kept and good, without a coroutine (the path of every request
        but the first in a minute); None when it must be read or is refused (`verify`, which
        counts the refusal)."""
        kept = self._kept.get(key)
        if kept is None or isinstance(kept.found, str):
            return None
        now = self._clock.seconds()
        return None if kept.until <= now or kept.found.expires <= now else self._admitted(kept, now)

    async def verify(self, key: str, address: str = "unknown") -> Principal:
        """The principal of a good key; a 401 for a key unknown, revoked or expired, counted
        against the client `address` (a 429 once its failed-login window is used up)."""
        counted = self._limiter is not None and await self._limiter.reserve(FAILED_AUTH, address, None)
        principal = await self._verified(key)
        if counted and self._limiter is not None:
            await self._limiter.release(FAILED_AUTH, address, None)
        return principal

    async def _verified(self, key: str) -> Principal:
        """The key's principal, from its entry while kept, else from its row (then kept)."""
        now = self._clock.seconds()
        kept = self._kept.get(key)
        if kept is None or kept.until <= now:
            found = await self._read(key)
            now = self._clock.seconds()
            if len(self._kept) >= KEPT_MOST:
                del self._kept[next(iter(self._kept))]
            kept = self._kept[key] = Kept(found, now + KEY_KEPT, now)
        return self._admitted(kept, now)

    def _admitted(self, kept: Kept, now: float) -> Principal:
        """The key's expiry, checked on every request (its revocation and its owner's standing
        are checked next by the caller, as for an access token); its use noted once a minute
        (an entry is kept no longer, so a key read again is not written sooner)."""
        found = kept.found
        if isinstance(found, str):
            raise Unauthorized(found)
        if found.expires <= now:
            raise Unauthorized(EXPIRED)
        if kept.use_due <= now:
            kept.use_due = now + USE_INTERVAL
            self._record_use(found, now)
        return found

    async def _read(self, key: str) -> Principal | str:
        """The key's principal from its row, or why it is refused (kept as well: a revoked
        key stays revoked). An unknown key is refused without being kept; a lookup id found in
        no row is remembered, and refused unread until `UNKNOWN_KEPT` has passed."""
        if not KEY_SHAPE.fullmatch(key):
            raise Unauthorized(NOT_VALID)
        lookup = lookup_id(key)
        if self._unknown.get(lookup, 0.0) > self._clock.seconds():
            raise Unauthorized(NOT_VALID)
        found = await self._reads.get(lookup)
        if found is None:
            self._unknown.pop(lookup, None)  # re-added last: the map stays in order of expiry
            if len(self._unknown) >= UNKNOWN_MOST:
                del self._unknown[next(iter(self._unknown))]
            self._unknown[lookup] = self._clock.seconds() + UNKNOWN_KEPT
            raise Unauthorized(NOT_VALID)
        if not hmac.compare_digest(found[1], key_digest(key)):
            raise Unauthorized(NOT_VALID)
        record = found[0]
        return REVOKED if record.revoked_at is not None else principal_of(record)

    def _record_use(self, principal: Principal, now: float) -> None:
        """Write the key's last use, started and never awaited: off the answer path."""
        key_id = principal.key_id
        self._db.write(record_use, key_id, datetime.fromtimestamp(now, UTC)).addErrback(
            lambda failure: (
                None
                if failure.check(DatabaseUnavailable)  # the outage is logged once, by the database's
                else log.failure("recording the last use of API key {key} failed", failure, key=key_id)
            )
        )
