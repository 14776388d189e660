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
    def __init__(self, reactor: IReactorTime, db: Database) -> None:
        self._clock = reactor
        self._db = db
        self._kept: dict[str, Kept] = {}  # by the key's text
        self._reads: Coalescer[str, tuple[KeyRecord, str]] = Coalescer(
            reactor, lambda lookups: db.read(keys_by_lookup, lookups)
        )

    def kept(self, key: str) -> Principal | None:
        """The principal of a key kept and good, without a coroutine (the path of every request
        but the first in a minute); None when it must be read (`verify`). A 401 as `verify`."""
        kept = self._kept.get(key)
        if kept is None:
            return None
        now = self._clock.seconds()
        return None if kept.until <= now else self._admitted(kept, now)

    async def verify(self, key: str) -> Principal:
        """The principal of a good key, read from its row; a 401 for a key unknown, revoked or expired."""
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
        key stays revoked). An unknown key is refused without being kept."""
        if not KEY_SHAPE.fullmatch(key):
            raise Unauthorized(NOT_VALID)
        found = await self._reads.get(lookup_id(key))
        if found is None or not hmac.compare_digest(found[1], key_digest(key)):
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
