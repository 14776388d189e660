"""One-time ids for emailed links: account validation, password reset, and an owner's change
of e-mail address (the new address confirming it, the old one putting itself back).

An id is 256 random bits from the operating system's CSPRNG; only its SHA-256 is stored, so
a copy of the database opens no account. Each id has a purpose, expires, and is used once;
an id of an address change also carries the address it sets. Like every credential, an id is
good only while its account is in the state its purpose needs (a validation: pending; the
others: active) and only if it was issued after the account's last revocation
(`apid.auth.lifecycle`), a revert link excepted (`OUTLIVES_REVOCATION`).
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode

from sqlalchemy import Connection, and_, insert, select, update

from apid.auth.lifecycle import State, accepts, epoch, revoked_before, state_of
from apid.store.tables import account_token, person

VALIDATE = "validate"
RESET = "reset"
EMAIL_CONFIRM = "email-confirm"  # the new address confirms an owner's change to it
EMAIL_REVERT = "email-revert"  # the old address puts itself back
BAD_LINK = "this link is not valid: it is unknown, already used or expired"
# The state an account must be in for an id of each purpose to work.
NEEDS = {VALIDATE: State.PENDING, RESET: State.ACTIVE, EMAIL_CONFIRM: State.ACTIVE, EMAIL_REVERT: State.ACTIVE}
# A revert link outlives revocations: it is the old address's way back from whoever took the
# account, and their password reset or their own revert ends sessions (`apid.auth.address_change`).
OUTLIVES_REVOCATION = frozenset({EMAIL_REVERT})


def link(base_url: str, secret: str) -> str:
    """The emailed link of an id: every purpose is opened through `/validate`."""
    return f"{base_url}/validate?{urlencode({'id': secret})}"


def page(url: str, secret: str) -> str:
    """A page of the site (the reset page) given the id as its `id` query parameter."""
    return f"{url}{'&' if '?' in url else '?'}{urlencode({'id': secret})}"


def duration(seconds: int) -> str:
    """A lifetime in the largest whole unit that states it exactly: "24 hours", "90 seconds"."""
    for unit, size in (("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds % size == 0:
            count = seconds // size
            return f"{count} {unit}{'s' if count != 1 else ''}"
    return f"{seconds} second{'s' if seconds != 1 else ''}"


def new_secret() -> str:
    return secrets.token_urlsafe(32)


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def now() -> datetime:
    return datetime.now(UTC)


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


@dataclass(frozen=True)
class LiveId:
    person_id: int
    purpose: str
    expires_at: datetime
    address: str | None = None
    row_id: int = 0  # ids of one person and purpose are issued in this order


def issue(
    connection: Connection,
    person_id: int,
    purpose: str,
    lifetime: int,
    address: str | None = None,
    *,
    replaces: bool = True,
) -> str:
    """A new id for `purpose`; unless `replaces` is false, the person's earlier unused ids of
    that purpose stop working."""
    moment = withdraw(connection, person_id, purpose) if replaces else now()
    secret = new_secret()
    connection.execute(
        insert(account_token).values(
            person_id=person_id,
            purpose=purpose,
            token_hash=digest(secret),
            date_created=moment,
            expires_at=moment + timedelta(seconds=lifetime),
            address=address,
        )
    )
    return secret


def withdraw(connection: Connection, person_id: int, purpose: str, issued_after: int | None = None) -> datetime:
    """The person's unused ids of `purpose` stop working (marked used now), or only those issued
    after the id whose `row_id` is `issued_after`; now."""
    moment = now()
    unused = and_(
        account_token.c.person_id == person_id,
        account_token.c.purpose == purpose,
        account_token.c.used_at.is_(None),
    )
    if issued_after is not None:
        unused = and_(unused, account_token.c.id > issued_after)
    connection.execute(update(account_token).where(unused).values(used_at=moment))
    return moment


_LIVE = select(
    account_token,
    person.c.validated_at,
    person.c.enabled,
    person.c.account_locked,
    person.c.account_expired,
    person.c.tokens_valid_after,
).join(person, person.c.id == account_token.c.person_id)


def find_live(connection: Connection, secret: str) -> LiveId | None:
    """The id's owner and purpose if it is known, unused, not expired, and its account takes it
    now (`NEEDS`, `apid.auth.lifecycle`); it stays unused."""
    row = connection.execute(_LIVE.where(account_token.c.token_hash == digest(secret))).first()
    if row is None or row.used_at is not None or _aware(row.expires_at) <= now():
        return None
    needed = NEEDS.get(row.purpose)
    valid_after = 0.0 if row.purpose in OUTLIVES_REVOCATION else revoked_before(row)
    if needed is None or not accepts(state_of(row), needed, epoch(row.date_created), valid_after):
        return None
    return LiveId(
        person_id=row.person_id,
        purpose=row.purpose,
        expires_at=_aware(row.expires_at),
        address=row.address,
        row_id=row.id,
    )


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
