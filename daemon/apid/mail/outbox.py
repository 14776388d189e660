"""The durable mail outbox: mail is written in the transaction of the change that implies it
and sent after commit, so a hang-up, a crash or a SIGKILL between the change and its mail
loses no mail (nor sends mail for a change rolled back).

`queue_mail` writes a message into `mail_outbox` on the caller's connection. `MailSender`
runs in every daemon: it claims due messages with a lease (`apid.store.leases`), so that
each is sent by one daemon, sends them through the configured mailer and deletes each once
sent. It claims at once when a transaction of this daemon that queued mail commits (the
pool's check-in of its connection, which comes after the commit, whether or not the caller
still waits), and every `POLL` seconds for the rest: mail of other daemons, of a daemon
that died holding a lease (`LEASE`), and retries. A failed send is tried again after each
of `RETRY_DELAYS`, then dropped with an error in the log; a message no server can take
(`Undeliverable`) is dropped at once. Delivery is at least once: a message whose daemon was
killed between the send and its record is sent again once the lease runs out.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, bindparam, delete, event, insert, select, update
from twisted.internet.defer import ensureDeferred
from twisted.internet.interfaces import IDelayedCall
from twisted.internet.task import deferLater
from twisted.logger import Logger

from apid.mail.message import RETRY_DELAYS, Mailer, Message, Undeliverable
from apid.runtime.reactors import Reactor
from apid.store import leases
from apid.store.database import Database, DatabaseUnavailable
from apid.store.tables import mail_outbox

log = Logger(namespace="apid.mail")

PENDING = "pending"
QUEUED = "apid.mail_queued"  # set in a connection's `info` by `queue_mail`, read at its check-in
LEASE = 300.0  # seconds a claim holds a message: well past one send's bound (`mail.SMTP_TIMEOUT`)
POLL = 15.0  # seconds between two looks for mail this daemon was not woken for
IN_FLIGHT = 16  # messages sent at once by one daemon


def queue_mail(connection: Connection, message: Message) -> None:
    """Write `message` in the caller's transaction: it is sent once that commits, never if not."""
    now = time.time()
    connection.execute(
        insert(mail_outbox).values(
            recipient=message.to,
            subject=message.subject,
            body=message.body,
            created_at=now,
            state=PENDING,
            tries=0,
            next_attempt_at=now,
        )
    )
    connection.info[QUEUED] = True


@dataclass(frozen=True)
class Queued:
    """A message this daemon holds the lease of; `tries`: the attempts made before."""

    id: int
    message: Message
    tries: int


_DUE = (
    select(mail_outbox.c.id, mail_outbox.c.recipient, mail_outbox.c.subject, mail_outbox.c.body, mail_outbox.c.tries)
    .where(
        mail_outbox.c.state == PENDING,
        mail_outbox.c.next_attempt_at <= bindparam("now"),
        leases.free(mail_outbox, bindparam("now")),
    )
    .order_by(mail_outbox.c.next_attempt_at, mail_outbox.c.id)
    .limit(bindparam("limit"))
    .with_for_update(skip_locked=True)
)


def any_due(connection: Connection, now: float) -> bool:
    """Whether a message is due that nobody holds: a read, so that a poll finding nothing never
    takes SQLite's write lock (a daemon stopped while holding it would stop every writer)."""
    due = select(mail_outbox.c.id).where(
        mail_outbox.c.state == PENDING,
        mail_outbox.c.next_attempt_at <= now,
        leases.free(mail_outbox, now),
    )
    return connection.execute(due.limit(1)).first() is not None


def claim(connection: Connection, owner: str, now: float, lease: float, limit: int) -> list[Queued]:
    """Lease up to `limit` due messages that nobody holds, the longest waiting first."""
    rows = connection.execute(_DUE, {"now": now, "limit": limit}).all()
    if rows:
        leases.take(connection, mail_outbox, [row.id for row in rows], owner, now + lease)
    return [Queued(row.id, Message(row.recipient, row.subject, row.body), row.tries) for row in rows]


def forget(connection: Connection, message_id: int) -> None:
    """A message sent, or given up on: its row goes."""
    connection.execute(delete(mail_outbox).where(mail_outbox.c.id == message_id))


def postpone(connection: Connection, owner: str, message_id: int, when: float) -> None:
    """A failed attempt: counted, and the message due again at `when`, for any daemon."""
    connection.execute(
        update(mail_outbox)
        .where(mail_outbox.c.id == message_id, mail_outbox.c.lease_owner == owner)
        .values(tries=mail_outbox.c.tries + 1, next_attempt_at=when, lease_owner=None, lease_until=None)
    )


def release(connection: Connection, owner: str, message_ids: list[int]) -> None:
    leases.release(connection, mail_outbox, owner, message_ids)


class MailSender:
    """Sends the outbox's mail from this daemon; see the module's docstring."""

    def __init__(
        self,
        *,
        reactor: Reactor,
        db: Database,
        mailer: Mailer,
        delays: tuple[float, ...] = RETRY_DELAYS,
        poll: float = POLL,
        lease: float = LEASE,
    ) -> None:
        self._reactor = reactor
        self._db = db
        self._mailer = mailer
        self._delays = delays
        self._poll_every = poll
        self._lease = lease
        self.owner = leases.holder_name()
        self.in_flight: set[int] = set()  # claimed, not yet recorded
        self._claiming = False
        self._claim_again = False
        self._full = False  # the last claim took all it had room for: more may wait
        self._stopping = False
        self._timers: list[IDelayedCall] = []

    def start(self) -> None:
        event.listen(self._db.engine, "checkin", self._checked_in)
        self._poll()

    def _checked_in(self, _dbapi_connection: Any, record: Any) -> None:
        """In a database thread, after a unit of work ended: if it queued mail, claim now."""
        if record is not None and record.info.pop(QUEUED, False):
            self._reactor.callFromThread(self.wake)

    def _poll(self) -> None:
        self.wake()
        self._wake_in(self._poll_every, self._poll)

    def _wake_in(self, delay: float, then: Callable[[], None]) -> None:
        if not self._stopping:
            self._timers = [call for call in self._timers if call.active()]
            self._timers.append(self._reactor.callLater(delay, then))

    def wake(self) -> None:
        """Claim now: mail may be due."""
        if self._stopping:
            return
        if self._claiming:
            self._claim_again = True
            return
        ensureDeferred(self._claim())

    async def _claim(self) -> None:
        self._claiming = True
        try:
            while not self._stopping:
                self._claim_again = False
                room = IN_FLIGHT - len(self.in_flight)
                if room <= 0:
                    self._full = True  # a send that ends claims again
                    break
                if not await self._db.read(any_due, time.time()):
                    if self._claim_again:  # woken while it read: mail committed meanwhile
                        continue
                    break
                claimed = await self._db.write(claim, self.owner, time.time(), self._lease, room)
                if self._stopping:  # stopped meanwhile: another daemon, or this one restarted, sends them
                    await self._db.write(release, self.owner, [queued.id for queued in claimed])
                    break
                self._full = len(claimed) == room
                for queued in claimed:
                    self.in_flight.add(queued.id)
                    ensureDeferred(self._send(queued))
                if not self._claim_again and not self._full:
                    break
        except DatabaseUnavailable:
            pass  # the outage is logged once, by the database's; claimed again at the next poll
        except Exception:
            log.failure("claiming mail to send failed; trying again at the next poll")
        finally:
            self._claiming = False

    async def _send(self, queued: Queued) -> None:
        try:
            retry = await self._attempt(queued)
            if retry is None:
                await self._db.write(forget, queued.id)
            else:
                await self._db.write(postpone, self.owner, queued.id, time.time() + retry)
                self._wake_in(retry, self.wake)
        except DatabaseUnavailable:
            pass  # logged once, by the database's; the lease runs out and the message is sent again
        except Exception:
            log.failure("recording the send of mail {id} failed; its lease will run out", id=queued.id)
        finally:
            self.in_flight.discard(queued.id)
        if self._full:
            self.wake()

    async def _attempt(self, queued: Queued) -> float | None:
        """Send once; the delay before the next try, or None: sent, or not to be tried again."""
        message, attempt = queued.message, queued.tries + 1
        try:
            await self._mailer.send(message)
            return None
        except Undeliverable as error:
            log.error(
                "mail ({subject!r}) to {to} cannot be sent, and is dropped: {error}",
                subject=message.subject,
                to=message.to,
                error=str(error),
            )
            return None
        except Exception as error:
            log.warn(
                "sending mail ({subject!r}) failed, attempt {attempt}: {error}",
                subject=message.subject,
                attempt=attempt,
                error=str(error) or type(error).__name__,
            )
        if attempt > len(self._delays):
            log.error(
                "giving up on mail ({subject!r}) to {to} after {attempt} attempts",
                subject=message.subject,
                to=message.to,
                attempt=attempt,
            )
            return None
        return self._delays[attempt - 1]

    async def stop(self, deadline: float) -> None:
        """Stop claiming; let sends in flight finish until `deadline` (reactor time) and hand
        back the leases of the rest, so that another daemon (or this one, restarted) sends
        them without waiting for the lease to run out. Mail not yet claimed waits in the table."""
        self._stopping = True
        for call in self._timers:
            if call.active():
                call.cancel()
        if event.contains(self._db.engine, "checkin", self._checked_in):
            event.remove(self._db.engine, "checkin", self._checked_in)
        while (self.in_flight or self._claiming) and self._reactor.seconds() < deadline:
            await deferLater(self._reactor, 0.05, lambda: None)
        if self.in_flight:
            try:
                await self._db.write(release, self.owner, list(self.in_flight))
            except DatabaseUnavailable:
                pass  # logged once, by the database's; the leases run out
            except Exception:
                log.failure("handing back mail leases failed; they run out in {s} s", s=self._lease)
