"""The hooks users register: creating, reading, changing and deleting them, rotating their
secrets, and reading and replaying their deliveries (the hook controller and the command line),
as plain functions of a connection run in the database thread pool. What is delivered, and
when, is the delivery queue's (`apid.hooks.queue`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Connection, delete, func, insert, select, update

from apid.hooks.queue import PENDING
from apid.hooks.signing import new_secret
from apid.problems import Conflict, NotFound
from apid.store.database import inserted_id
from apid.store.tables import hook, hook_attempt, hook_message, person


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
    hook_id = inserted_id(
        connection,
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
        ),
    )
    return owned_hook(connection, hook_id, None)


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
