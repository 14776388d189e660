"""The delivery worker against a real SQLite file and a deliverer the test answers by hand:
deliveries in flight together fail as one round, the held messages of a hook that starts
failing go back unsent, one probe goes out per round, and after a success the backlog flows
in order of recording."""

from __future__ import annotations

import time

import pytest
import pytest_twisted
from sqlalchemy import select, update
from twisted.internet import reactor
from twisted.internet.defer import Deferred
from twisted.internet.task import deferLater

from apid.config.server import WebhooksConfig
from apid.hooks.deliverer import HOLD_PER_SLOT, DeliveryWorker
from apid.hooks.queue import Attempt, Claimed, NewMessage, Outcome, insert_messages
from apid.hooks.registry import insert_hook
from apid.store.database import run_read, run_write
from apid.store.tables import hook, hook_message

PER_HOST = 2
SETTINGS = WebhooksConfig(
    timeout=1, per_host=PER_HOST, retry_base=60, retry_factor=2, retry_max=600, lease=30, poll=600, retention_days=30
)


class HandAnswered:
    """A deliverer whose deliveries stay in flight until the test answers them."""

    def __init__(self) -> None:
        self.sent: list[Claimed] = []
        self.most_at_once = 0
        self._open: dict[str, tuple[Claimed, Deferred[Attempt]]] = {}

    async def deliver(self, message: Claimed) -> Attempt:
        self.sent.append(message)
        answered: Deferred[Attempt] = Deferred()
        self._open[message.id] = (message, answered)
        self.most_at_once = max(self.most_at_once, len(self._open))
        return await answered

    @property
    def in_flight(self) -> list[Claimed]:
        return [message for message, _ in self._open.values()]

    def answer(self, outcome: Outcome, status: int | None = None) -> None:
        """Answer every delivery in flight."""
        opened, self._open = self._open, {}
        for message, answered in opened.values():
            answered.callback(Attempt(message.id, message.hook_id, outcome, time.time(), 1.0, status))

    async def close(self) -> None:
        pass


async def until(check, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await deferLater(reactor, 0.01, lambda: None)


@pytest.fixture
def hook_id(engine, alice) -> int:
    return run_write(engine, insert_hook, alice, "http://127.0.0.1:9000/in", "person", "whsec_" + "A" * 44).id


@pytest.fixture
def recorded(engine, hook_id) -> list[str]:
    """Forty messages, recorded a second apart a while ago."""
    start = time.time() - 100
    ids = [f"msg_{n:03d}" for n in range(40)]
    for n, mid in enumerate(ids):
        run_write(engine, insert_messages, [NewMessage(mid, hook_id, "person/create", "{}")], start + n)
    return ids


@pytest.fixture
def deliverer() -> HandAnswered:
    return HandAnswered()


@pytest.fixture
def worker(database, deliverer):
    worker = DeliveryWorker(reactor=reactor, db=database, deliverer=deliverer, config=SETTINGS, max_attempts=3)
    yield worker
    if not worker._stopping:
        pytest_twisted.blockon(Deferred.fromCoroutine(worker.stop(reactor.seconds())))


def leased(engine) -> list[str]:
    return run_read(
        engine,
        lambda c: c.execute(select(hook_message.c.id).where(hook_message.c.lease_owner.is_not(None))).scalars().all(),
    )


def hook_row(engine, hook_id: int):
    return run_read(engine, lambda c: c.execute(select(hook).where(hook.c.id == hook_id)).one())


async def next_probe(engine, hook_id: int, worker: DeliveryWorker, deliverer: HandAnswered) -> Claimed:
    """Let the hook's backoff run out; the one message then sent."""
    run_write(engine, lambda c: c.execute(update(hook).where(hook.c.id == hook_id).values(retry_at=time.time())))
    worker.wake()
    await until(lambda: deliverer.in_flight)
    await deferLater(reactor, 0.1, lambda: None)  # time for more to go out, if they would
    [probe] = deliverer.in_flight
    return probe


@pytest_twisted.ensureDeferred
async def test_a_burst_that_fails_together_is_one_round_and_the_rest_waits_for_one_probe(
    engine, hook_id, recorded, deliverer, worker
):
    worker.start()
    await until(lambda: len(deliverer.in_flight) == PER_HOST)
    assert len(leased(engine)) == HOLD_PER_SLOT * PER_HOST  # held, waiting for a slot
    assert [m.id for m in deliverer.sent] == recorded[:PER_HOST]

    deliverer.answer(Outcome.FAILED)  # the receiver is down: both in flight fail

    await until(lambda: leased(engine) == [] and hook_row(engine, hook_id).attempts)  # the others went back, unsent
    assert len(deliverer.sent) == PER_HOST
    row = hook_row(engine, hook_id)
    assert (row.attempts, row.is_enabled) == (1, True)  # one round, not one per delivery

    probe = await next_probe(engine, hook_id, worker, deliverer)
    assert (probe.id, probe.round) == (recorded[0], 1)  # the oldest, alone
    deliverer.answer(Outcome.FAILED)
    await until(lambda: hook_row(engine, hook_id).attempts == 2)
    probe = await next_probe(engine, hook_id, worker, deliverer)
    assert (probe.id, probe.round) == (recorded[0], 2)

    deliverer.answer(Outcome.DELIVERED, 200)  # the receiver is back: the backlog flows
    while len({m.id for m in deliverer.sent}) < len(recorded) or deliverer.in_flight:
        await until(lambda: deliverer.in_flight)
        deliverer.answer(Outcome.DELIVERED, 200)
    await until(lambda: not leased(engine))

    assert [m.id for m in deliverer.sent[PER_HOST + 2 :]] == recorded[1:]  # in order of recording
    assert deliverer.most_at_once == PER_HOST
    assert hook_row(engine, hook_id).attempts == 0
    delivered = run_read(
        engine,
        lambda c: c.execute(select(hook_message.c.id).where(hook_message.c.state == "delivered")).scalars().all(),
    )
    assert sorted(delivered) == recorded


@pytest_twisted.ensureDeferred
async def test_stopping_finishes_what_is_in_flight_and_hands_back_the_rest(
    engine, hook_id, recorded, deliverer, worker
):
    worker.start()
    await until(lambda: len(deliverer.in_flight) == PER_HOST)
    stopped = Deferred.fromCoroutine(worker.stop(reactor.seconds() + 5))
    await deferLater(reactor, 0.05, lambda: None)
    deliverer.answer(Outcome.DELIVERED, 200)
    await stopped

    assert len(deliverer.sent) == PER_HOST  # nothing new was started once stopping
    assert leased(engine) == []
    states = dict(run_read(engine, lambda c: c.execute(select(hook_message.c.id, hook_message.c.state)).all()))
    assert {mid for mid, state in states.items() if state == "delivered"} == set(recorded[:PER_HOST])
