"""The delivery worker: claims due messages, delivers them, records the outcomes.

It runs in every daemon when `webhookActive` is true. It claims when woken (an event was
recorded, a hook re-enabled, a message requeued) and every `poll` seconds (messages of other
daemons, backoff that has run out, leases left by a crashed daemon), up to `CAPACITY` held in
memory and `HOLD_PER_SLOT` times `per_host` per host, so that deliveries never wait for the
database. Held messages wait here, in order, for one of their host's `per_host` slots. Leases
of held messages are renewed while they wait or are in flight, so only a daemon that died
loses them. Outcomes are written in batches: one transaction settles every attempt that
finished while the previous one was being written, and counted in the metrics once written;
the backlog per hook is read for them every `COUNT_EVERY` seconds.

When a delivery to a hook does not succeed (it failed, was deferred or disabled the hook),
the hook's messages held here that were claimed before that outcome was recorded are handed
back unsent: while a hook is failing only its probe goes out (see `claim`), and the others
wait in the database until the probe succeeds.
"""

from __future__ import annotations

import math
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace

from twisted.internet.defer import Deferred, ensureDeferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.internet.task import deferLater
from twisted.logger import Logger

from apid.config.server import WebhooksConfig
from apid.hooks.delivery import Deliverer
from apid.hooks.queue import Attempt, Claimed, Outcome, claim, pending_counts, purge, release, renew, settle
from apid.store import leases
from apid.store.database import Database, DatabaseUnavailable
from apid.telemetry import metrics

log = Logger(namespace="apid.hooks")

CAPACITY = 1024
HOLD_PER_SLOT = 8
CLAIM_AT_MOST = 256  # candidates read per claim: a busy host's are passed over
PURGE_EVERY = 3600.0
COUNT_EVERY = 15.0  # seconds between two readings of the backlog (a usual scrape interval)


def backoff(
    base: float, factor: float, ceiling: float, failures: int, rng: Callable[[], float] = random.random
) -> float:
    """Seconds before the next try after `failures` consecutive failed rounds: `base`
    multiplied by `factor` per further round, capped at `ceiling`, then spread by jitter over its upper
    half so that receivers coming back are not met by every sender at the same moment.
    The defaults (5 s, x6, 1 h) follow Standard Webhooks' schedule: 5 s, 30 s, 3 min, 18 min,
    then hourly."""
    delay = min(ceiling, base * factor ** (failures - 1))
    return delay / 2 + rng() * delay / 2


class DeliveryWorker:
    def __init__(
        self, *, reactor: IReactorTime, db: Database, deliverer: Deliverer, config: WebhooksConfig, max_attempts: int
    ) -> None:
        self._reactor = reactor
        self._db = db
        self._deliverer = deliverer
        self._config = config
        self._max_attempts = max_attempts
        self.owner = leases.holder_name()
        self._held: dict[str, Claimed] = {}  # leased, not yet settled
        self._waiting: dict[str, deque[Claimed]] = {}  # held, not yet sent, per host
        self._sending: dict[str, int] = {}  # deliveries in flight per host
        # hook -> its held messages claimed before this moment go back unsent (inf: until the
        # failure that set it is recorded)
        self._hand_back_before: dict[int, float] = {}
        self._finished: list[Attempt] = []
        self._claiming = False
        self._claim_again = False
        self._settling: Deferred[None] | None = None
        self._poll_call: IDelayedCall | None = None
        self._stopping = False
        self._last_purge = 0.0
        self._last_count = 0.0
        self._last_renewal = time.time()

    def start(self) -> None:
        self._schedule_poll(0)

    def wake(self) -> None:
        """Claim now: something became deliverable in this daemon."""
        if self._stopping:
            return
        if self._claiming:
            self._claim_again = True
            return
        ensureDeferred(self._claim())

    def _schedule_poll(self, delay: float) -> None:
        if not self._stopping:
            self._poll_call = self._reactor.callLater(delay, self._poll)

    def _poll(self) -> None:
        self.wake()
        now = time.time()
        if now - self._last_renewal > self._config.lease / 3:
            self._last_renewal = now
            ensureDeferred(self._chore(renew, self.owner, list(self._held), now + self._config.lease))
        if now - self._last_purge > PURGE_EVERY:
            self._last_purge = now
            ensureDeferred(self._chore(purge, now - self._config.retention_days * 86400))
        if now - self._last_count > COUNT_EVERY:
            self._last_count = now
            ensureDeferred(self._count_pending())
        self._forget_hand_backs()
        self._schedule_poll(self._config.poll)

    def _forget_hand_backs(self) -> None:
        """Drop the marks no held message is old enough for any more (recorded ones only)."""
        marked = self._hand_back_before
        if marked:
            old = {m.hook_id for m in self._held.values() if m.claimed_at < marked.get(m.hook_id, -math.inf)}
            self._hand_back_before = {h: t for h, t in marked.items() if t == math.inf or h in old}

    def _room(self, host: str) -> int:
        held = self._sending.get(host, 0) + len(self._waiting.get(host, ()))
        return max(0, HOLD_PER_SLOT * self._config.per_host - held)

    async def _claim(self) -> None:
        self._claiming = True
        try:
            while not self._stopping:
                self._claim_again = False
                room = min(CLAIM_AT_MOST, CAPACITY - len(self._held))
                if room <= 0:
                    break
                claimed = await self._db.write(claim, self.owner, time.time(), self._config.lease, room, self._room)
                for message in claimed:
                    self._held[message.id] = message
                    self._waiting.setdefault(message.host, deque()).append(message)
                for host in {message.host for message in claimed}:
                    self._send(host)
                if not self._claim_again and len(claimed) < room:
                    break
        except DatabaseUnavailable:
            pass  # the outage is logged once, by the database's; claimed again at the next poll
        except Exception:
            log.failure("claiming webhook deliveries failed; trying again at the next poll")
        finally:
            self._claiming = False

    def _send(self, host: str) -> None:
        """Start the host's waiting messages, oldest first, while it has a free slot; hand back
        those of hooks whose deliveries stopped succeeding after they were claimed."""
        waiting = self._waiting.get(host)
        handed_back = []
        while waiting and self._sending.get(host, 0) < self._config.per_host and not self._stopping:
            message = waiting.popleft()
            if message.claimed_at < self._hand_back_before.get(message.hook_id, -math.inf):
                del self._held[message.id]
                handed_back.append(message.id)
                continue
            self._sending[host] = self._sending.get(host, 0) + 1
            ensureDeferred(self._deliver(message))
        if not waiting:
            self._waiting.pop(host, None)
        if handed_back:
            ensureDeferred(self._chore(release, self.owner, handed_back))

    async def _deliver(self, message: Claimed) -> None:
        try:
            attempt: Attempt | None = replace(await self._deliverer.deliver(message), round=message.round)
        except Exception:
            log.failure("delivering {id} failed unexpectedly; its lease will expire", id=message.id)
            self._held.pop(message.id, None)  # no longer renewed
            attempt = None
        self._sending[message.host] -= 1
        if not self._sending[message.host]:
            del self._sending[message.host]
        if attempt is not None:
            if attempt.outcome is not Outcome.DELIVERED:
                self._hand_back_before[message.hook_id] = math.inf
            self._finished.append(attempt)
            if self._settling is None:
                self._settling = ensureDeferred(self._settle())
        self._send(message.host)

    async def _settle(self) -> None:
        try:
            while self._finished:
                batch, self._finished = self._finished, []
                now = time.time()
                try:
                    disabled = await self._db.write(settle, self.owner, batch, self._max_attempts, self._backoff, now)
                except DatabaseUnavailable:
                    pass  # the outage is logged once, by the database's; the leases will expire
                except Exception:
                    log.failure("recording {n} webhook attempts failed; their leases will expire", n=len(batch))
                else:
                    for hook_id in disabled:
                        log.warn("webhook {hook} disabled after its deliveries failed", hook=hook_id)
                    for attempt in batch:
                        metrics.delivery_recorded(attempt.hook_id, attempt.outcome.value)
                for attempt in batch:
                    self._held.pop(attempt.message_id, None)
                # Recorded: what is claimed from now on sees the hook failing (one probe) or
                # disabled (nothing); what was claimed before goes back unsent.
                unrecorded = {a.hook_id for a in self._finished if a.outcome is not Outcome.DELIVERED}
                for attempt in batch:
                    if attempt.outcome is not Outcome.DELIVERED and attempt.hook_id not in unrecorded:
                        self._hand_back_before[attempt.hook_id] = now
        finally:
            self._settling = None
        self.wake()

    def _backoff(self, failures: int) -> float:
        settings = self._config
        return backoff(settings.retry_base, settings.retry_factor, settings.retry_max, failures)

    async def _count_pending(self) -> None:
        try:
            metrics.webhooks_pending(await self._db.read(pending_counts))
        except DatabaseUnavailable:
            pass  # the outage is logged once, by the database's
        except Exception:
            log.failure("reading the webhook backlog for the metrics failed")

    async def _chore(self, work: Callable[..., object], *args: object) -> None:
        """Lease renewal and purging: a failure is logged and tried again next time."""
        try:
            await self._db.write(work, *args)
        except DatabaseUnavailable:
            pass  # the outage is logged once, by the database's; tried again next time
        except Exception:
            log.failure("webhook upkeep ({work}) failed", work=work.__name__)

    def _busy(self) -> bool:
        """Deliveries in flight, or outcomes not yet recorded."""
        return bool(self._sending or self._finished or self._settling is not None)

    async def stop(self, deadline: float) -> None:
        """Stop claiming and sending; let deliveries in flight finish until `deadline` (reactor
        time), record them, and hand back the leases of the rest so that another daemon (or
        this one, restarted) delivers them without waiting for the lease to run out."""
        self._stopping = True
        if self._poll_call is not None and self._poll_call.active():
            self._poll_call.cancel()
        while self._busy() and self._reactor.seconds() < deadline:
            await deferLater(self._reactor, 0.05, lambda: None)
        try:
            await self._db.write(release, self.owner, list(self._held))
        except DatabaseUnavailable:
            pass  # the outage is logged once, by the database's; the leases expire
        except Exception:
            log.failure("handing back webhook leases failed; they expire in {s} s", s=self._config.lease)
        await self._deliverer.close()
