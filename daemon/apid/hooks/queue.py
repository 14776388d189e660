"""The delivery queue: the messages of the hooks' events, as plain functions of a connection
run in the database thread pool. Hooks themselves are managed in `apid.hooks.registry`.

Delivery state lives in the rows, never only in memory: a message is written `pending` before
the call that caused it answers, claimed with a lease (`lease_owner`, `lease_until`) by the
daemon that delivers it, and settled with the attempt's outcome. A daemon that dies holding
a lease simply lets it expire; whoever claims next delivers the message again.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, and_, bindparam, delete, func, insert, or_, select, update

from apid.hooks.signing import new_secret
from apid.hooks.urls import UrlRefused, origin
from apid.store import leases
from apid.store.tables import hook, hook_attempt, hook_message, person, person_role, role

PENDING, DELIVERED = "pending", "delivered"


# --- recording events -----------------------------------------------------------------------


@dataclass(frozen=True)
class Subscriber:
    """A hook subscribed to an endpoint, and its owner's roles and name."""

    hook_id: int
    user_id: int
    roles: frozenset[str]
    username: str = ""


_SUBSCRIBERS = (
    select(hook.c.id, hook.c.user_id, person.c.username, role.c.authority)
    .join(person, and_(person.c.id == hook.c.user_id, person.c.enabled.is_(True)))
    .outerjoin(person_role, person_role.c.person_id == hook.c.user_id)
    .outerjoin(role, role.c.id == person_role.c.role_id)
    .where(hook.c.service.in_(bindparam("services", expanding=True)))
)


def subscribers(connection: Connection, controller: str, action: str) -> list[Subscriber]:
    """Hooks on the controller or on this one endpoint whose owner's account is enabled.

    Disabled hooks are included, whether disabled by hand or by failures: their messages are
    recorded and wait, pending, until the hook is enabled again (or `retentionDays` passes)."""
    found: dict[int, tuple[int, str, set[str]]] = {}
    for hook_id, user_id, username, authority in connection.execute(
        _SUBSCRIBERS, {"services": [controller, f"{controller}/{action}"]}
    ):
        roles = found.setdefault(hook_id, (user_id, username, set()))[2]
        if authority is not None:
            roles.add(authority)
    return [
        Subscriber(hook_id, user_id, frozenset(roles), username)
        for hook_id, (user_id, username, roles) in found.items()
    ]


@dataclass(frozen=True)
class NewMessage:
    id: str
    hook_id: int
    type: str
    payload: str


def insert_messages(connection: Connection, messages: list[NewMessage], now: float) -> None:
    connection.execute(
        insert(hook_message),
        [
            {
                "id": m.id,
                "hook_id": m.hook_id,
                "type": m.type,
                "payload": m.payload,
                "state": PENDING,
                "tries": 0,
                "created_at": now,
            }
            for m in messages
        ],
    )


# --- claiming and settling deliveries --------------------------------------------------------


@dataclass(frozen=True)
class Claimed:
    """A message this daemon holds the lease of, with what delivering it needs."""

    id: str
    hook_id: int
    url: str
    host: str  # the key deliveries are counted under for the per-host limit
    secrets: tuple[str, ...]
    payload: bytes
    # The hook's failed rounds (`attempts`) when this was claimed: its failure counts only if no
    # other delivery of the same round has been counted yet (see `settle`).
    round: int = 0
    claimed_at: float = 0.0

    @property
    def is_probe(self) -> bool:
        """Claimed while the hook was failing: the one message that tries the receiver."""
        return self.round > 0


def host_key(url: str) -> str:
    try:
        scheme, host, port = origin(url)
    except UrlRefused:
        return url
    return f"{scheme}://{host}:{port}"


# Small columns only: most candidates of a busy host are passed over, so their payloads are
# read only for the messages taken.
_CANDIDATES = (
    select(
        hook_message.c.id,
        hook_message.c.hook_id,
        hook.c.url,
        hook.c.secret,
        hook.c.previous_secret,
        hook.c.previous_secret_expires,
        hook.c.attempts,
    )
    .join(hook, hook.c.id == hook_message.c.hook_id)
    .where(
        hook_message.c.state == PENDING,
        leases.free(hook_message, bindparam("now")),
        hook.c.is_enabled.is_(True),
        or_(hook.c.retry_at.is_(None), hook.c.retry_at <= bindparam("now")),
    )
    .order_by(hook_message.c.created_at)
    .limit(bindparam("limit"))
    .with_for_update(skip_locked=True, of=hook_message)
)
_PAYLOADS = select(hook_message.c.id, hook_message.c.payload).where(
    hook_message.c.id.in_(bindparam("ids", expanding=True))
)


def claim(
    connection: Connection,
    owner: str,
    now: float,
    lease: float,
    limit: int,
    room: Callable[[str], int],
) -> list[Claimed]:
    """Lease up to `limit` due messages, oldest first, at most `room(host)` per host.

    Messages of disabled hooks are never claimed. A hook that is failing (its `attempts`, the
    count of its failed rounds, above 0) gets one message, its oldest: a probe. Its other
    messages wait, unclaimed, until the probe settles: delivered, the backlog flows again at
    full parallelism; failed, one more round is counted and the hook backs off. So a receiver
    that is down costs one attempt per backoff step, not one per waiting message. `retry_at`
    holds the probe's place meanwhile; the hold is taken only if no other daemon took it
    first, so a hook has one probe at a time across daemons.
    """
    hosts: dict[int, str] = {}
    left: dict[str, int] = {}
    secrets: dict[int, tuple[str, ...]] = {}
    fresh_secrets: dict[int, str] = {}
    rounds: dict[int, int] = {}
    chosen: list[tuple[str, int, str]] = []
    for row in connection.execute(_CANDIDATES, {"now": now, "limit": limit}):
        if rounds.get(row.hook_id, 0) > 0:
            continue  # its probe is chosen
        host = hosts.get(row.hook_id) or hosts.setdefault(row.hook_id, host_key(row.url))
        if left.setdefault(host, room(host)) <= 0:
            continue
        left[host] -= 1
        rounds[row.hook_id] = row.attempts
        if row.hook_id not in secrets:
            current = row.secret or fresh_secrets.setdefault(row.hook_id, new_secret())
            previous = row.previous_secret if (row.previous_secret_expires or 0) > now else None
            secrets[row.hook_id] = (current, previous) if previous else (current,)
        chosen.append((row.id, row.hook_id, row.url))
    beaten = {
        hook_id for hook_id, failed in rounds.items() if failed > 0 and not _hold_probe(connection, hook_id, now, lease)
    }
    chosen = [entry for entry in chosen if entry[1] not in beaten]
    if not chosen:
        return []
    for hook_id, secret in fresh_secrets.items():
        connection.execute(update(hook).where(hook.c.id == hook_id, hook.c.secret.is_(None)).values(secret=secret))
    ids = [message_id for message_id, _, _ in chosen]
    leases.take(connection, hook_message, ids, owner, now + lease)
    payloads = dict(connection.execute(_PAYLOADS, {"ids": ids}).all())
    return [
        Claimed(
            message_id,
            hook_id,
            url,
            hosts[hook_id],
            secrets[hook_id],
            payloads[message_id].encode("utf-8"),
            rounds[hook_id],
            now,
        )
        for message_id, hook_id, url in chosen
    ]


def _hold_probe(connection: Connection, hook_id: int, now: float, lease: float) -> bool:
    """Keep a failing hook's other messages (and other daemons) off it while its probe is out;
    False when another daemon's probe got there first (PostgreSQL re-reads the row once that
    daemon commits)."""
    return (
        connection.execute(
            update(hook)
            .where(hook.c.id == hook_id, hook.c.attempts > 0, or_(hook.c.retry_at.is_(None), hook.c.retry_at <= now))
            .values(retry_at=now + lease)
        ).rowcount
        == 1
    )


class Outcome(enum.Enum):
    DELIVERED = "delivered"  # 2xx
    FAILED = "failed"  # anything else: counts toward the hook's attempts
    GONE = "gone"  # 410: the receiver asks to stop; the hook is disabled at once
    DEFERRED = "deferred"  # 429 or 503 with Retry-After: wait as asked, not a failure
    REFUSED = "refused"  # the URL may not be contacted: the hook is disabled at once


@dataclass(frozen=True)
class Attempt:
    message_id: str
    hook_id: int
    outcome: Outcome
    attempted_at: float
    duration_ms: float
    status_code: int | None = None
    error: str | None = None
    retry_after: float | None = None
    round: int | None = None  # the claim's `Claimed.round`; None: unknown, a failure counts


def settle(
    connection: Connection,
    owner: str,
    attempts: list[Attempt],
    max_attempts: int,
    backoff: Callable[[int], float],
    now: float,
) -> list[int]:
    """Record the attempts and what follows from them; the hooks this disabled.

    A hook's `attempts` counts its failed rounds, not its failed deliveries. A success resets
    it; a failure of the current round (`Attempt.round` equal to the count: no delivery
    claimed with it has failed yet) raises it, delays the hook by `backoff(count)` and
    disables it when the count reaches `max_attempts`. A failure of a delivery claimed in a
    round already counted (it was in flight with the one that failed first) changes nothing.
    Messages not delivered go back to pending, their lease released.
    """
    known = set(
        connection.execute(
            select(hook_message.c.id).where(hook_message.c.id.in_([a.message_id for a in attempts]))
        ).scalars()
    )
    attempts = [a for a in attempts if a.message_id in known]  # a deleted hook took its messages along
    if not attempts:
        return []
    connection.execute(
        insert(hook_attempt),
        [
            {
                "message_id": a.message_id,
                "hook_id": a.hook_id,
                "attempted_at": a.attempted_at,
                "status_code": a.status_code,
                "duration_ms": a.duration_ms,
                "error": a.error,
            }
            for a in attempts
        ],
    )
    delivered = [a.message_id for a in attempts if a.outcome is Outcome.DELIVERED]
    if delivered:
        connection.execute(
            update(hook_message)
            .where(hook_message.c.id.in_(delivered))
            .values(
                state=DELIVERED, delivered_at=now, tries=hook_message.c.tries + 1, lease_owner=None, lease_until=None
            )
        )
    undelivered = [a.message_id for a in attempts if a.outcome is not Outcome.DELIVERED]
    if undelivered:
        connection.execute(
            update(hook_message)
            .where(hook_message.c.id.in_(undelivered), hook_message.c.lease_owner == owner)
            .values(tries=hook_message.c.tries + 1, lease_owner=None, lease_until=None)
        )
    return _settle_hooks(connection, attempts, max_attempts, backoff, now)


def _settle_hooks(
    connection: Connection, attempts: list[Attempt], max_attempts: int, backoff: Callable[[int], float], now: float
) -> list[int]:
    hook_ids = {a.hook_id for a in attempts}
    counts = dict(connection.execute(select(hook.c.id, hook.c.attempts).where(hook.c.id.in_(hook_ids))).all())
    changes: dict[int, dict[str, Any]] = {}
    disabled: list[int] = []
    for attempt in attempts:  # in the order they finished: the last word on a hook wins
        if attempt.hook_id not in counts:
            continue
        if attempt.outcome is Outcome.FAILED and attempt.round is not None and attempt.round < counts[attempt.hook_id]:
            continue  # its round has already been counted
        change = changes.setdefault(attempt.hook_id, {})
        if attempt.outcome is Outcome.DELIVERED:
            counts[attempt.hook_id] = 0
            change.update(attempts=0, retry_at=None)
        elif attempt.outcome is Outcome.DEFERRED:
            change.update(retry_at=now + (attempt.retry_after or 0))
        elif attempt.outcome in (Outcome.GONE, Outcome.REFUSED):
            change.update(is_enabled=False, retry_at=None, disabled_reason=attempt.error)
        else:
            count = counts[attempt.hook_id] = counts[attempt.hook_id] + 1
            change.update(attempts=count, retry_at=now + backoff(count))
            if count >= max_attempts:
                change.update(
                    is_enabled=False,
                    retry_at=None,
                    disabled_reason=f"{count} consecutive failed rounds of delivery; the last: {attempt.error}",
                )
    for hook_id, change in changes.items():
        if change.get("is_enabled") is False:
            disabled.append(hook_id)
            change.update(last_modified=datetime.now(UTC), version=hook.c.version + 1)
        connection.execute(update(hook).where(hook.c.id == hook_id).values(**change))
    return disabled


def renew(connection: Connection, owner: str, message_ids: Iterable[str], until: float) -> None:
    """Extend our leases of messages still waiting or in flight here."""
    leases.renew(connection, hook_message, owner, message_ids, until)


def release(connection: Connection, owner: str, message_ids: Iterable[str]) -> None:
    """Give up leases of messages not attempted (a stopping daemon), so others take them now."""
    leases.release(connection, hook_message, owner, message_ids)


def pending_counts(connection: Connection) -> dict[int, int]:
    """How many messages wait for delivery, per hook (a hook with none is left out)."""
    return dict(
        connection.execute(
            select(hook_message.c.hook_id, func.count())
            .where(hook_message.c.state == PENDING)
            .group_by(hook_message.c.hook_id)
        ).all()
    )


def purge(connection: Connection, before: float) -> int:
    """Forget messages delivered before `before` and messages recorded before it and still
    pending (a hook disabled for longer than the retention keeps only its recent backlog),
    with their attempts."""
    old = select(hook_message.c.id).where(
        or_(
            and_(hook_message.c.state == DELIVERED, hook_message.c.delivered_at < before),
            and_(hook_message.c.state == PENDING, hook_message.c.created_at < before),
        )
    )
    connection.execute(delete(hook_attempt).where(hook_attempt.c.message_id.in_(old)))
    return connection.execute(delete(hook_message).where(hook_message.c.id.in_(old))).rowcount
