"""`Idempotency-Key` on non-safe API calls, with Stripe's semantics: a client that retries a
create after a lost answer gets the first answer again instead of a second record.

The first call with a key claims it, per caller (the account, whichever token or API key
speaks for it), in the database, so every worker and daemon sharing it sees the claim. Its
answer (status, body, and the headers a client reads: Content-Type, ETag, Link, Location) is
kept for 24 hours and replayed byte for byte to a retry of the same request (method, path
and query, and the JSON body, whatever its spacing or member order), marked
`Idempotent-Replayed: true`. The same key with another request is a 422; while the first is
still running, a 409 with `Retry-After: 1`. The same request is the same credential's too,
with the same roles: an answer is never replayed to a caller who may no longer, or may not,
make the call. An answer that did not settle the request is not kept, so a retry runs again:
a 5xx, a 429 (not run) and a 401. Other refusals (400, 403, 404, 409, 412, 422) are kept, as
the request would get them again. A claim still running after five minutes died with its
process and is taken over.

A caller without a token has no key space of its own: the header is refused (400). Safe
calls ignore it, as there is nothing to repeat.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import delete, insert, select, update
from sqlalchemy.exc import IntegrityError
from twisted.web.http import Request

from apid.calls.incoming import Incoming
from apid.calls.pipeline import Writer
from apid.http.answers import write_problem
from apid.problems import BadRequest, Conflict, Problem, Unprocessable
from apid.store.tables import idempotency_key

HEADER = b"idempotency-key"
KEY = re.compile(rb"[\x21-\x7e]{1,255}")  # visible ASCII, as Stripe's and the IETF draft's keys are
KEPT_FOR = timedelta(hours=24)
ABANDONED_AFTER = timedelta(minutes=5)
KEPT_HEADERS = (b"Content-Type", b"ETag", b"Link", b"Location")
NOT_SETTLED = frozenset({401, 429})  # and every 5xx: the request may be tried again
RUNNING, DONE = "running", "done"


@dataclass(frozen=True)
class Kept:
    """The first answer to a key."""

    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes


def valid_key(sent: bytes) -> str:
    if not KEY.fullmatch(sent):
        raise BadRequest("Idempotency-Key must be 1 to 255 visible ASCII characters")
    return sent.decode("ascii")


def fingerprint(incoming: Incoming) -> str:
    """What makes two requests the same one: method, path and query, the body's JSON, and who
    sends it, the credential and the roles it holds now. A kept answer is replayed before the
    call is admitted, so an API key of narrower scope, or the account once demoted, sending the
    same request under a key it guessed must not read it: theirs is another request (a 422)."""
    principal = incoming.principal
    body = json.dumps(incoming.body, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    who = json.dumps([principal.key_id, principal.issuer, sorted(principal.roles)])
    return hashlib.sha256(f"{incoming.method}\n{incoming.uri}\n{body}\n{who}".encode()).hexdigest()


def settles(status: int) -> bool:
    """Whether an answer of `status` is kept for the key: one the same request would get again."""
    return status < 500 and status not in NOT_SETTLED


def claim(connection: Any, person_id: int, key: str, print_: str, now: datetime) -> Kept | str:
    """Claim `key` for the caller: "claimed" when the call may run, "running" or "other" (another
    request under the key) when not, or the kept answer to replay. Expired keys are swept."""
    connection.execute(delete(idempotency_key).where(idempotency_key.c.claimed_at < now - KEPT_FOR))
    mine = (idempotency_key.c.person_id == person_id) & (idempotency_key.c.key == key)
    row = connection.execute(select(idempotency_key).where(mine)).first()
    if row is not None and row.state == RUNNING and _aware(row.claimed_at) < now - ABANDONED_AFTER:
        connection.execute(delete(idempotency_key).where(mine))
        row = None
    if row is None:
        try:
            with connection.begin_nested():
                connection.execute(
                    insert(idempotency_key).values(
                        person_id=person_id, key=key, fingerprint=print_, state=RUNNING, claimed_at=now
                    )
                )
        except IntegrityError:  # another process claimed it in between
            return "running"
        return "claimed"
    if row.fingerprint != print_:
        return "other"
    if row.state == RUNNING:
        return "running"
    return Kept(row.status, tuple((name, value) for name, value in json.loads(row.headers)), row.body)


def settle(connection: Any, person_id: int, key: str, kept: Kept | None) -> None:
    """Keep the first answer under the key, or (None) release the key for a retry."""
    mine = (idempotency_key.c.person_id == person_id) & (idempotency_key.c.key == key)
    if kept is None:
        connection.execute(delete(idempotency_key).where(mine))
        return
    connection.execute(
        update(idempotency_key)
        .where(mine)
        .values(state=DONE, status=kept.status, headers=json.dumps(kept.headers), body=kept.body)
    )


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)  # SQLite gives it back naive


class Idempotency:
    """Runs a non-safe call once per caller and key (the module's docstring)."""

    def __init__(self, db: Writer, now: Callable[[], datetime] = lambda: datetime.now(UTC)) -> None:
        self._db = db
        self._now = now

    async def once(
        self, request: Request, incoming: Incoming, sent: bytes, run: Callable[[], Awaitable[bytes]]
    ) -> bytes:
        key = valid_key(sent)
        principal = incoming.principal
        if principal.anonymous:
            raise BadRequest("Idempotency-Key needs a caller with a token: it is kept per account")
        person_id = principal.user_id
        outcome = await self._db.write(claim, person_id, key, fingerprint(incoming), self._now())
        if isinstance(outcome, Kept):
            return replayed(request, outcome)
        if outcome == "running":
            raise Conflict(
                "a request with this Idempotency-Key is still running: retry in a moment",
                headers={"Retry-After": "1"},
            )
        if outcome == "other":
            raise Unprocessable("this Idempotency-Key was used for another request: use a new key for this one")
        try:
            body = await run()
        except Problem as problem:
            # kept as it is answered, and raised on: the edge answers it as any problem (the
            # same bytes: write_problem again), and names and counts the request as it does
            kept_answer = kept(request, write_problem(request, problem)) if settles(problem.status) else None
            await self._db.write(settle, person_id, key, kept_answer)
            raise
        except BaseException:
            await self._db.write(settle, person_id, key, None)
            raise
        status = request.code
        await self._db.write(settle, person_id, key, kept(request, body) if settles(status) else None)
        return body


def kept(request: Request, body: bytes) -> Kept:
    headers = request.responseHeaders
    return Kept(
        request.code,
        tuple(
            (name.decode(), value.decode("latin-1"))
            for name in KEPT_HEADERS
            for value in headers.getRawHeaders(name, ())
        ),
        body,
    )


def replayed(request: Request, answer: Kept) -> bytes:
    request.setResponseCode(answer.status)
    for name, value in answer.headers:
        request.setHeader(name.encode(), value.encode("latin-1"))
    request.setHeader(b"Idempotent-Replayed", b"true")
    return answer.body
