"""The hook tables' units of work: plain functions of a connection, run in the database thread
pool by the daemon and directly by the command line.

Delivery state lives in the rows, never only in memory: a message is written `pending` before
the call that caused it answers, claimed with a lease (`lease_owner`, `lease_until`) by the
daemon that delivers it, and settled with the attempt's outcome. A daemon that dies holding
a lease simply lets it expire; whoever claims next delivers the message again.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, and_, bindparam, delete, func, insert, or_, select, update

from apid.hooks.signing import new_secret
from apid.hooks.urls import UrlRefused, origin
from apid.problems import Conflict, NotFound
from apid.store.tables import hook, hook_attempt, hook_message, person, person_role, role

PENDING, DELIVERED = "pending", "delivered"


def iso(moment: datetime | float | None) -> str | None:
    """ISO 8601 in UTC, from a stored datetime (naive means UTC) or epoch seconds."""
    if moment is None:
        return None
    if isinstance(moment, (int, float)):
        return datetime.fromtimestamp(moment, UTC).isoformat()
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.isoformat()


@dataclass(frozen=True)
class Hook:
    id: int
    version: int
    user_id: int
    url: str
    service: str
    format: str
    is_enabled: bool
    attempts: int
    disabled_reason: str | None
    date_created: str | None
    last_modified: str | None
    pending: int  # messages recorded and not yet delivered: the hook's backlog

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "version": self.version,
            "userId": self.user_id,
            "url": self.url,
            "service": self.service,
            "format": self.format,
            "isEnabled": self.is_enabled,
            "attempts": self.attempts,
            "disabledReason": self.disabled_reason,
            "dateCreated": self.date_created,
            "lastModified": self.last_modified,
            "pending": self.pending,
        }


def _hook(row: Any) -> Hook:
    return Hook(
        id=row.id,
        version=row.version,
        user_id=row.user_id,
        url=row.url,
        service=row.service,
        format=row.format,
        is_enabled=bool(row.is_enabled),
        attempts=row.attempts,
        disabled_reason=row.disabled_reason,
        date_created=iso(row.date_created),
        last_modified=iso(row.last_modified),
        pending=row.pending,
    )


def _now() -> datetime:
    return datetime.now(UTC)


# --- recording events -----------------------------------------------------------------------


@dataclass(frozen=True)
class Subscriber:
    """A hook subscribed to an endpoint, and its owner's roles."""

    hook_id: int
    user_id: int
    roles: frozenset[str]


_SUBSCRIBERS = (
    select(hook.c.id, hook.c.user_id, role.c.authority)
    .join(person, and_(person.c.id == hook.c.user_id, person.c.enabled.is_(True)))
    .outerjoin(person_role, person_role.c.person_id == hook.c.user_id)
    .outerjoin(role, role.c.id == person_role.c.role_id)
    .where(hook.c.service.in_(bindparam("services", expanding=True)))
)


def subscribers(connection: Connection, controller: str, action: str) -> list[Subscriber]:
    """Hooks on the controller or on this one endpoint whose owner's account is enabled.

    Disabled hooks are included, whether disabled by hand or by failures: their messages are
    recorded and wait, pending, until the hook is enabled again (or `retentionDays` passes)."""
    found: dict[int, tuple[int, set[str]]] = {}
    for hook_id, user_id, authority in connection.execute(
        _SUBSCRIBERS, {"services": [controller, f"{controller}/{action}"]}
    ):
        roles = found.setdefault(hook_id, (user_id, set()))[1]
        if authority is not None:
            roles.add(authority)
    return [Subscriber(hook_id, user_id, frozenset(roles)) for hook_id, (user_id, roles) in found.items()]


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
        or_(hook_message.c.lease_until.is_(None), hook_message.c.lease_until < bindparam("now")),
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
    connection.execute(
        update(hook_message).where(hook_message.c.id.in_(ids)).values(lease_owner=owner, lease_until=now + lease)
    )
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
            change.update(last_modified=_now(), version=hook.c.version + 1)
        connection.execute(update(hook).where(hook.c.id == hook_id).values(**change))
    return disabled


def renew(connection: Connection, owner: str, message_ids: Iterable[str], until: float) -> None:
    """Extend our leases of messages still waiting or in flight here."""
    ids = list(message_ids)
    if ids:
        connection.execute(
            update(hook_message)
            .where(hook_message.c.id.in_(ids), hook_message.c.lease_owner == owner)
            .values(lease_until=until)
        )


def release(connection: Connection, owner: str, message_ids: Iterable[str]) -> None:
    """Give up leases of messages not attempted (a stopping daemon), so others take them now."""
    ids = list(message_ids)
    if ids:
        connection.execute(
            update(hook_message)
            .where(hook_message.c.id.in_(ids), hook_message.c.lease_owner == owner)
            .values(lease_owner=None, lease_until=None)
        )


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


# --- managing hooks (the hook controller and the command line) ------------------------------

_HOOKS = select(
    hook,
    select(func.count())
    .where(hook_message.c.hook_id == hook.c.id, hook_message.c.state == PENDING)
    .correlate(hook)
    .scalar_subquery()
    .label("pending"),
)


def get_hook(connection: Connection, hook_id: int) -> Hook | None:
    row = connection.execute(_HOOKS.where(hook.c.id == hook_id)).first()
    return None if row is None else _hook(row)


def owned_hook(connection: Connection, hook_id: int, user_id: int | None) -> Hook:
    """The hook, if `user_id` owns it (None: anyone's). Another's hook is not found, like a
    missing one: hooks do not reveal that they exist."""
    found = get_hook(connection, hook_id)
    if found is None or (user_id is not None and found.user_id != user_id):
        raise NotFound(f"no hook with id {hook_id}")
    return found


def list_hooks(connection: Connection, user_id: int | None, offset: int, limit: int) -> list[Hook]:
    query = _HOOKS.order_by(hook.c.id).offset(offset).limit(limit)
    if user_id is not None:
        query = query.where(hook.c.user_id == user_id)
    return [_hook(row) for row in connection.execute(query)]


def insert_hook(connection: Connection, user_id: int, url: str, service: str, secret: str) -> Hook:
    if connection.execute(select(person.c.id).where(person.c.id == user_id)).first() is None:
        raise NotFound(f"no person with id {user_id}")
    now = _now()
    key = connection.execute(
        insert(hook).values(
            user_id=user_id,
            url=url,
            service=service,
            secret=secret,
            format="JSON",
            attempts=0,
            is_enabled=True,
            date_created=now,
            last_modified=now,
        )
    ).inserted_primary_key
    if key is None:  # Optional in SQLAlchemy's types; a one-row insert always has its key
        raise RuntimeError("the hook insert returned no primary key")
    return owned_hook(connection, key[0], None)


def change_hook(
    connection: Connection, hook_id: int, user_id: int | None, values: Mapping[str, Any], expected_version: int | None
) -> Hook:
    """Apply column changes to a hook the caller owns, checking `version` when sent."""
    current = owned_hook(connection, hook_id, user_id)
    if expected_version is not None and expected_version != current.version:
        raise Conflict(
            f"hook {hook_id} was changed meanwhile (version {current.version}, you sent {expected_version})",
            currentVersion=current.version,
        )
    connection.execute(
        update(hook).where(hook.c.id == hook_id).values(**values, version=hook.c.version + 1, last_modified=_now())
    )
    return owned_hook(connection, hook_id, None)


def enable_values(enabled: bool) -> dict[str, Any]:
    """Enabling starts afresh: no failures counted, no backoff, no reason to be disabled."""
    if enabled:
        return {"is_enabled": True, "attempts": 0, "retry_at": None, "disabled_reason": None}
    return {"is_enabled": False, "disabled_reason": "disabled by its owner"}


def rotate_secret(connection: Connection, hook_id: int, user_id: int | None, grace_until: float) -> tuple[Hook, str]:
    """A new secret; the old one keeps signing (beside the new) until `grace_until`."""
    current = owned_hook(connection, hook_id, user_id)
    old = connection.execute(select(hook.c.secret).where(hook.c.id == hook_id)).scalar()
    secret = new_secret()
    values: dict[str, Any] = {"secret": secret}
    if old:
        values.update(previous_secret=old, previous_secret_expires=grace_until)
    return change_hook(connection, current.id, user_id, values, None), secret


def delete_hook(connection: Connection, hook_id: int, user_id: int | None) -> None:
    owned_hook(connection, hook_id, user_id)
    connection.execute(delete(hook_attempt).where(hook_attempt.c.hook_id == hook_id))
    connection.execute(delete(hook_message).where(hook_message.c.hook_id == hook_id))
    connection.execute(delete(hook).where(hook.c.id == hook_id))


_ATTEMPTS = select(hook_attempt, hook_message.c.type, hook_message.c.state, hook_message.c.tries).join(
    hook_message, hook_message.c.id == hook_attempt.c.message_id
)


def list_attempts(
    connection: Connection, hook_id: int, user_id: int | None, offset: int, limit: int
) -> list[dict[str, Any]]:
    """The hook's delivery log, newest first."""
    owned_hook(connection, hook_id, user_id)
    rows = connection.execute(
        _ATTEMPTS.where(hook_attempt.c.hook_id == hook_id)
        .order_by(hook_attempt.c.attempted_at.desc(), hook_attempt.c.id.desc())
        .offset(offset)
        .limit(limit)
    )
    return [
        {
            "id": row.id,
            "messageId": row.message_id,
            "type": row.type,
            "attemptedAt": iso(row.attempted_at),
            "statusCode": row.status_code,
            "durationMs": round(row.duration_ms, 1),
            "error": row.error,
            "messageState": row.state,
        }
        for row in rows
    ]


def requeue(connection: Connection, hook_id: int, user_id: int | None, message_id: str) -> dict[str, Any]:
    """Deliver a message of the hook again (same id, so receivers can deduplicate)."""
    owned = owned_hook(connection, hook_id, user_id)
    done = connection.execute(
        update(hook_message)
        .where(hook_message.c.id == message_id, hook_message.c.hook_id == hook_id)
        .values(state=PENDING, lease_owner=None, lease_until=None, delivered_at=None)
    ).rowcount
    if not done:
        raise NotFound(f"hook {hook_id} has no message {message_id!r}")
    return {"messageId": message_id, "hookId": hook_id, "state": PENDING, "hookEnabled": owned.is_enabled}
