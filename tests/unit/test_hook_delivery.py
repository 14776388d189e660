"""The Deliverer against real receivers on loopback, many deliveries each, no attempt lost.

Every kind of receiver a user may run: HTTP/1.1 with keep-alive, HTTP/1.0 as Python's
http.server answers by default (204, no Connection header, then it closes), one answering
`Connection: close`, one closing connections idle for a second (deliveries spaced around that
second), a slow one, and a 301 (not followed: a failed delivery by design). Then raw servers
that drop a pooled connection without answering (replaced once) or every connection (a
failure, never sent twice).
"""

from __future__ import annotations

import pytest
import pytest_twisted
from twisted.internet import reactor, task
from twisted.internet.defer import Deferred, gatherResults

from apid.hooks.delivery import Deliverer
from apid.hooks.queue import Attempt, Claimed, Outcome, host_key
from apid.hooks.signing import new_secret
from receiver import Answer, RawReceiver, Receiver

PER_HOST = 8
SECRET = new_secret()
_ids = iter(range(1, 1_000_000))


def messages(url: str, count: int) -> list[Claimed]:
    return [Claimed(f"msg_{next(_ids)}", 1, url, host_key(url), (SECRET,), b'{"type":"test"}') for _ in range(count)]


async def deliver(deliverer: Deliverer, url: str, count: int) -> list[Attempt]:
    """`count` messages handed to the deliverer at once, as the worker does with a backlog."""
    return await gatherResults([Deferred.fromCoroutine(deliverer.deliver(m)) for m in messages(url, count)])


def outcomes(attempts: list[Attempt]) -> set[tuple[Outcome, int | None, str | None]]:
    return {(a.outcome, a.status_code, a.error) for a in attempts}


@pytest.fixture
def receivers():
    """Receivers made by the test, closed after it."""
    made = []
    yield made
    for receiver in made:
        receiver.close()


def deliverer_for(receiver: Receiver | RawReceiver, timeout: float = 5, per_host: int = PER_HOST) -> Deliverer:
    return Deliverer(reactor=reactor, allowed_origins=[receiver.origin], timeout=timeout, per_host=per_host)


async def closing(deliverer: Deliverer, attempts: list[Attempt]) -> list[Attempt]:
    await deliverer.close()
    return attempts


@pytest.mark.parametrize(
    "kind, receiver_args, status, connections",
    [
        ("HTTP/1.1 keep-alive", {}, 200, "pooled"),
        ("HTTP/1.0 default", {"protocol": "HTTP/1.0", "default": Answer(204)}, 204, "one each"),
        ("HTTP/1.0 with a body", {"protocol": "HTTP/1.0"}, 200, "one each"),
        ("Connection: close", {"default": Answer(200, {"Connection": "close"})}, 200, "one each"),
    ],
)
@pytest_twisted.ensureDeferred
async def test_a_thousand_deliveries_to_each_kind_of_receiver_all_arrive(
    receivers, kind, receiver_args, status, connections
):
    receiver = Receiver(**receiver_args)
    receivers.append(receiver)
    deliverer = deliverer_for(receiver)
    attempts = await closing(deliverer, await deliver(deliverer, receiver.origin + "/in", 1000))

    assert outcomes(attempts) == {(Outcome.DELIVERED, status, None)}
    assert len({r.headers["webhook-id"] for r in receiver.received}) == len(receiver.received) == 1000
    if connections == "pooled":
        assert receiver.connections <= PER_HOST
    else:
        assert receiver.connections == 1000


@pytest_twisted.ensureDeferred
async def test_a_receiver_closing_idle_connections_after_a_second_loses_nothing(receivers):
    receiver = Receiver(idle_timeout=1.0)
    receivers.append(receiver)
    deliverer = deliverer_for(receiver)
    attempts = []
    # pauses around the receiver's second, so that pooled connections go idle and are closed,
    # some of them at the moment the next delivery takes them
    for pause in (0.0, 1.0, 1.02, 1.05, 0.99, 1.1, 1.0, 1.01, 1.2, 1.0):
        await task.deferLater(reactor, pause, lambda: None)
        attempts += await deliver(deliverer, receiver.origin + "/in", 100)
    await deliverer.close()

    assert outcomes(attempts) == {(Outcome.DELIVERED, 200, None)}
    assert len(attempts) == 1000
    assert receiver.connections > PER_HOST  # idle connections were closed and replaced


@pytest_twisted.ensureDeferred
async def test_a_slow_receiver_answering_within_the_timeout_loses_nothing(receivers):
    receiver = Receiver(default=Answer(200, delay=2.0))
    receivers.append(receiver)
    deliverer = deliverer_for(receiver, timeout=5, per_host=250)
    attempts = await closing(deliverer, await deliver(deliverer, receiver.origin + "/in", 1000))

    assert outcomes(attempts) == {(Outcome.DELIVERED, 200, None)}
    assert min(a.duration_ms for a in attempts) >= 1900
    assert receiver.connections <= 250


@pytest_twisted.ensureDeferred
async def test_a_redirect_is_a_failed_delivery_and_is_not_followed(receivers):
    receiver = Receiver(default=Answer(301))
    receivers.append(receiver)
    receiver.scripts["/in"] = [Answer(301, {"Location": receiver.origin + "/elsewhere"})]
    deliverer = deliverer_for(receiver)
    attempts = await closing(deliverer, await deliver(deliverer, receiver.origin + "/in", 1000))

    assert outcomes(attempts) == {(Outcome.FAILED, 301, "the receiver answered HTTP 301")}
    assert {r.path for r in receiver.received} == {"/in"}
    assert receiver.connections <= PER_HOST  # a 3xx's body is read: its connection is kept


@pytest_twisted.ensureDeferred
async def test_pooled_connections_dropped_before_answering_are_replaced_once(receivers):
    receiver = RawReceiver(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", answers_per_connection=1)
    receivers.append(receiver)
    deliverer = deliverer_for(receiver)
    attempts = await closing(deliverer, await deliver(deliverer, receiver.origin + "/in", 1000))

    assert outcomes(attempts) == {(Outcome.DELIVERED, 200, None)}
    assert receiver.connections == 1000  # each delivery answered on a connection of its own
    assert receiver.requests < 2000  # at most one resend each


@pytest_twisted.ensureDeferred
async def test_a_fresh_connection_closed_without_an_answer_is_a_failure_sent_once(receivers):
    receiver = RawReceiver(b"", answers_per_connection=0)
    receivers.append(receiver)
    deliverer = deliverer_for(receiver)
    attempts = await closing(deliverer, await deliver(deliverer, receiver.origin + "/in", 50))

    assert outcomes(attempts) == {(Outcome.FAILED, None, "the connection closed without an answer")}
    assert receiver.requests == receiver.connections == 50
