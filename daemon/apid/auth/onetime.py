"""One-time ids for emailed links: account validation and password reset.

An id is 256 random bits from the operating system's CSPRNG; only its SHA-256 is stored, so
a copy of the database opens no account. Each id has a purpose, expires, and is used once.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from sqlalchemy import Connection, and_, insert, select, update

from apid.store.tables import account_token

VALIDATE = "validate"
RESET = "reset"


def new_secret() -> str:
    return secrets.token_urlsafe(32)


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def now() -> datetime:
    return datetime.now(timezone.utc)


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)


@dataclass(frozen=True)
class LiveId:
    person_id: int
    purpose: str
    expires_at: datetime


def issue(connection: Connection, person_id: int, purpose: str, lifetime: int) -> str:
    """A new id for `purpose`; the person's earlier unused ids of that purpose stop working."""
    moment = now()
    connection.execute(
        update(account_token)
        .where(and_(account_token.c.person_id == person_id, account_token.c.purpose == purpose,
                    account_token.c.used_at.is_(None)))
        .values(used_at=moment)
    )
    secret = new_secret()
    connection.execute(insert(account_token).values(
        person_id=person_id, purpose=purpose, token_hash=digest(secret),
        date_created=moment, expires_at=moment + timedelta(seconds=lifetime),
    ))
    return secret


def find_live(connection: Connection, secret: str) -> LiveId | None:
    """The id's owner and purpose if it is known, unused and not expired; it stays unused."""
    row = connection.execute(
        select(account_token).where(account_token.c.token_hash == digest(secret))
    ).first()
    if row is None or row.used_at is not None or _aware(row.expires_at) <= now():
        return None
    return LiveId(person_id=row.person_id, purpose=row.purpose, expires_at=_aware(row.expires_at))


def consume(connection: Connection, secret: str, purpose: str) -> LiveId | None:
    """Use the id once: only one caller ever gets it back, however many try at the same time."""
    live = find_live(connection, secret)
    if live is None or live.purpose != purpose:
        return None
    used = connection.execute(
        update(account_token)
        .where(and_(account_token.c.token_hash == digest(secret), account_token.c.used_at.is_(None)))
        .values(used_at=now())
    )
    return live if used.rowcount == 1 else None
