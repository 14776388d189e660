"""Stream tickets: `EventSource` cannot send an Authorization header, so a page asks
`POST /events/ticket` (with its token) for a ticket, and opens `GET /events?ticket=...` with it.

A ticket is a random secret, good once and for `events.ticketLifetime` seconds, standing for
the caller who asked as their token stood then (kept as JSON beside the ticket's SHA-256, in
the database, so that any process of the deployment can take it). The stream it opens is
checked as the token's would be: the token's expiry, its revocation, the account's standing.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import asdict
from typing import Any

from sqlalchemy import Connection, delete, insert

from apid.auth.tokens import Principal
from apid.store.tables import stream_ticket

SETS = ("roles", "key_scopes")  # the principal's fields that are sets, kept as sorted lists


def _digest(ticket: str) -> str:
    return hashlib.sha256(ticket.encode("utf-8")).hexdigest()


def _dumped(principal: Principal) -> str:
    fields: dict[str, Any] = asdict(principal)
    for name in SETS:
        if fields[name] is not None:
            fields[name] = sorted(fields[name])
    return json.dumps(fields)


def _loaded(text: str) -> Principal:
    fields = json.loads(text)
    for name in SETS:
        if fields[name] is not None:
            fields[name] = frozenset(fields[name])
    return Principal(**fields)


def issue(connection: Connection, principal: Principal, lifetime: float, now: float) -> str:
    """A new ticket for `principal`; the expired ones go meanwhile."""
    connection.execute(delete(stream_ticket).where(stream_ticket.c.expires_at <= now))
    ticket = secrets.token_urlsafe(32)
    connection.execute(
        insert(stream_ticket).values(digest=_digest(ticket), principal=_dumped(principal), expires_at=now + lifetime)
    )
    return ticket


def redeem(connection: Connection, ticket: str, now: float) -> Principal | None:
    """The caller `ticket` stands for, once: it is gone after this, used or expired."""
    row = connection.execute(
        delete(stream_ticket)
        .where(stream_ticket.c.digest == _digest(ticket))
        .returning(stream_ticket.c.principal, stream_ticket.c.expires_at)
    ).first()
    if row is None or row.expires_at <= now:
        return None
    return _loaded(row.principal)
