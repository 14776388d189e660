"""The change log (`change_event`): every change of an event-emitting endpoint, written in the
change's own transaction, read in order by every process that has a live event stream open
(apid.events).

Positions only grow. On SQLite one writer at a time commits them in order. On PostgreSQL two
transactions may commit out of the order they took their positions in, so a reader can see 7
before 6 exists: `Gaps` remembers the positions a read skipped and asks for them again until
they appear or are old enough to be a rolled-back transaction's, never seen by anyone. Two
changes of one record cannot cross: the second waits for the first's row lock, which its
commit releases, so a record's changes keep their order.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy import Connection, delete, func, insert, select

from apid.store.tables import change_event

# How many changes one read returns at most: a stream catching up reads in pages.
PAGE = 500
# Built once: one more row in every change's transaction, a fifth of the time of building it
# each time (13 against 57 us, SQLite)
APPEND = insert(change_event)


@dataclass(frozen=True)
class Change:
    """One logged change: its position, the message id every subscriber's copy carries, the
    service (`person/update`), the record as JSON text, and when it was made (epoch seconds)."""

    position: int
    message_id: str
    service: str
    record: str
    created_at: float


def append(connection: Connection, message_id: str, service: str, record: str, now: float) -> None:
    """Log a change, in the transaction that made it."""
    connection.execute(APPEND, {"message_id": message_id, "service": service, "record": record, "created_at": now})


def _changes(rows: Iterable) -> list[Change]:
    return [Change(row.position, row.message_id, row.service, row.record, row.created_at) for row in rows]


def after(connection: Connection, position: int, limit: int = PAGE) -> list[Change]:
    """The changes after `position`, oldest first, at most `limit`."""
    query = select(change_event).where(change_event.c.position > position).order_by(change_event.c.position)
    return _changes(connection.execute(query.limit(limit)))


def at(connection: Connection, positions: Sequence[int]) -> list[Change]:
    """The changes at these positions that exist now (a reader's gaps, filled), oldest first."""
    query = select(change_event).where(change_event.c.position.in_(positions)).order_by(change_event.c.position)
    return _changes(connection.execute(query))


def bounds(connection: Connection) -> tuple[int, int]:
    """The oldest position kept and the newest (0 and 0 for an empty log): a client's
    Last-Event-ID older than the oldest has missed changes no longer kept."""
    oldest, newest = connection.execute(
        select(func.min(change_event.c.position), func.max(change_event.c.position))
    ).one()
    return oldest or 0, newest or 0


def sweep(connection: Connection, before: float, keep: int) -> int:
    """Drop the changes made before `before` and all but the newest `keep`; how many went.
    The newest stays whatever its age, so that `bounds` always knows the last position given:
    a client's Last-Event-ID below the oldest kept then means changes were missed."""
    newest = connection.execute(select(func.max(change_event.c.position))).scalar()
    if newest is None:
        return 0
    last = max(keep, 1)
    old = (change_event.c.created_at < before) | (change_event.c.position <= newest - last)
    return connection.execute(delete(change_event).where(old, change_event.c.position < newest)).rowcount
