"""Leases on outbox rows: how several daemons sharing one database share out work.

A row of an outbox (`hook_message`, `mail_outbox`) with `lease_owner` and `lease_until` is held
by the daemon named until that time; a daemon that dies holding it simply lets it run out, and
whoever claims next takes the row again. Claims read with FOR UPDATE SKIP LOCKED (PostgreSQL;
SQLite's writers take turns), so two daemons never take the same row.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterable
from typing import Any

from sqlalchemy import ColumnElement, Connection, Table, or_, update


def free(table: Table, now: Any) -> ColumnElement[bool]:
    """Rows nobody holds at `now` (a value or a bind parameter)."""
    return or_(table.c.lease_until.is_(None), table.c.lease_until < now)


def take(connection: Connection, table: Table, ids: Iterable[Any], owner: str, until: float) -> None:
    """Lease these rows (just read as `free`, locked) to `owner` until `until`."""
    connection.execute(update(table).where(table.c.id.in_(list(ids))).values(lease_owner=owner, lease_until=until))


def renew(connection: Connection, table: Table, owner: str, ids: Iterable[Any], until: float) -> None:
    """Extend `owner`'s leases of these rows (rows another daemon took meanwhile stay its)."""
    held = list(ids)
    if held:
        connection.execute(
            update(table).where(table.c.id.in_(held), table.c.lease_owner == owner).values(lease_until=until)
        )


def release(connection: Connection, table: Table, owner: str, ids: Iterable[Any]) -> None:
    """Give up `owner`'s leases of these rows, so that any daemon takes them now."""
    held = list(ids)
    if held:
        connection.execute(
            update(table)
            .where(table.c.id.in_(held), table.c.lease_owner == owner)
            .values(lease_owner=None, lease_until=None)
        )


def holder_name() -> str:
    """This daemon's name in `lease_owner`: its host, its process and a random part (a pid
    is reused after a restart, and a restarted daemon must not think it holds its past leases)."""
    return f"{socket.gethostname()[:32]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
