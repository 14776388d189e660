"""The channel between the parent and its workers (apid.server.workers.channel): two workers' ends
counting in the parent's one store, and passing a change of cached answers on to each other,
over AMP on an in-memory connection (twisted's iosim)."""

from __future__ import annotations

import orjson
from twisted.internet.defer import Deferred, succeed
from twisted.internet.error import ConnectionDone, ConnectionLost
from twisted.internet.task import Clock
from twisted.python.failure import Failure
from twisted.test.iosim import connect, makeFakeClient, makeFakeServer

from apid.auth.limits import MemoryWindows, Window
from apid.calls.rate_limits import MemoryCounters
from apid.server.workers.channel import (
    DropAnswers,
    ParentCounters,
    ParentSide,
    ParentWindows,
    Ready,
    SiblingWorkers,
    WorkerSide,
)


class Parent:
    def __init__(self) -> None:
        self.clock = Clock()
        self.counters = MemoryCounters(self.clock)
        self.windows = MemoryWindows(self.clock)
        self.ready: list[tuple[int, str]] = []
        self.workers_lost_parent = 0
        self.changes: list[list[str]] = []
        self.passing_on: Deferred[None] = succeed(None)  # what passing a change on to the others waits for

    def worker(self):
        """A worker's end connected to a new parent end of this parent: (worker end, pump)."""
        parent_end = ParentSide(
            counters=self.counters,
            windows=self.windows,
            ready=lambda *ready: self.ready.append(ready),
            changed=self._changed,
        )
        worker_end = WorkerSide(lost=self._lose)
        pump = connect(parent_end, makeFakeServer(parent_end), worker_end, makeFakeClient(worker_end))
        return worker_end, pump

    def _changed(self, controllers) -> Deferred[None]:
        self.changes.append(list(controllers))
        return self.passing_on

    def _lose(self) -> None:
        self.workers_lost_parent += 1


def result_of(deferred, pump):
    pump.flush()
    results = []
    deferred.addBoth(results.append)
    assert results, "no answer came back"
    return results[0]


def test_two_workers_charge_one_count_and_the_one_reaching_the_limit_locks_both():
    parent = Parent()
    (first, first_pump), (second, second_pump) = parent.worker(), parent.worker()
    charges = []
    for n in range(5):
        worker, pump = (first, first_pump) if n % 2 == 0 else (second, second_pump)
        charges.append(result_of(ParentCounters(worker).charge("7", 1, 5, 86400, 60), pump))
    assert [charge.allowed for charge in charges] == [True] * 5
    assert [charge.remaining for charge in charges] == [4, 3, 2, 1, 0]
    refused = result_of(ParentCounters(second).charge("7", 1, 5, 86400, 60), second_pump)
    assert (refused.allowed, refused.remaining, refused.reset) == (False, 0, 60.0)
    other = result_of(ParentCounters(first).charge("8", 1, 5, 86400, 60), first_pump)
    assert (other.allowed, other.remaining) == (True, 4)


def sent_batches(worker) -> list[int]:
    """The number of charges in each message `worker` sends to its parent, as it sends them."""
    sizes: list[int] = []
    call = worker.callRemote

    def counted(command, **arguments):
        sizes.append(len(orjson.loads(arguments["charges"])))
        return call(command, **arguments)

    worker.callRemote = counted
    return sizes


def test_charges_asked_while_one_is_on_its_way_go_together_and_count_in_order():
    parent = Parent()
    worker, pump = parent.worker()
    sizes = sent_batches(worker)
    counters = ParentCounters(worker)
    answers = [counters.charge("7", 1, 5, 86400, 60) for _ in range(7)]
    charges = [result_of(answer, pump) for answer in answers]
    assert sizes == [1, 6]  # the first alone, the six asked meanwhile in the next message
    assert [(charge.allowed, charge.remaining) for charge in charges] == [
        (True, 4),
        (True, 3),
        (True, 2),
        (True, 1),
        (True, 0),
        (False, 0),
        (False, 0),
    ]
    assert result_of(counters.charge("8", 1, 5, 86400, 60), pump).remaining == 4  # alone again once idle
    assert sizes == [1, 6, 1]


def test_charges_waiting_when_the_parent_is_gone_fail_each_one():
    parent = Parent()
    worker, pump = parent.worker()
    counters = ParentCounters(worker)
    answers = [counters.charge("7", 1, 5, 86400, 60) for _ in range(3)]
    worker.transport.loseConnection()  # after the first charge was sent, before the others were
    first, *waiting = [result_of(answer, pump) for answer in answers]
    assert first.allowed and first.remaining == 4
    assert len(waiting) == 2 and all(isinstance(failure, Failure) for failure in waiting), waiting
    for failure in waiting:
        failure.trap(ConnectionDone, ConnectionLost)


def test_windows_reserved_by_one_worker_are_used_up_for_the_other_and_released_by_either():
    parent = Parent()
    (first, first_pump), (second, second_pump) = parent.worker(), parent.worker()
    windows = [Window("login:pair:a", 2), Window("login:address:x", 50)]
    assert result_of(ParentWindows(first).reserve(windows, 900), first_pump) == 0.0
    assert result_of(ParentWindows(second).reserve(windows, 900), second_pump) == 0.0
    assert result_of(ParentWindows(first).reserve(windows, 900), first_pump) == 900.0
    assert result_of(ParentWindows(second).release(["login:pair:a"]), second_pump) is None
    assert result_of(ParentWindows(first).reserve(windows, 900), first_pump) == 0.0


def test_a_worker_says_when_it_serves_and_learns_when_its_parent_is_gone():
    parent = Parent()
    worker, pump = parent.worker()
    assert result_of(worker.callRemote(Ready, index=1, reactor="default (EPollReactor)"), pump) == {}
    assert parent.ready == [(1, "default (EPollReactor)")]
    pump.server.transport.loseConnection()
    pump.flush()
    assert parent.workers_lost_parent == 1


def test_a_workers_change_is_answered_once_the_parent_passed_it_on():
    parent = Parent()
    worker, pump = parent.worker()
    parent.passing_on = Deferred()
    answered = []
    SiblingWorkers(worker).changed(["team", "person"]).addCallback(answered.append)
    pump.flush()
    assert parent.changes == [["team", "person"]] and answered == []  # the others have not dropped theirs yet
    parent.passing_on.callback(None)
    pump.flush()
    assert answered == [None]


def test_a_worker_drops_the_answers_the_parent_says_another_changed():
    parent = Parent()
    worker, pump = parent.worker()
    dropped = []
    SiblingWorkers(worker).on_change(dropped.append)
    assert result_of(pump.server.callRemote(DropAnswers, controllers=["team"]), pump) == {}
    assert dropped == [["team"]]


def test_a_change_told_to_a_parent_that_is_gone_does_not_fail_the_write():
    parent = Parent()
    worker, pump = parent.worker()
    pump.server.transport.loseConnection()
    pump.flush()
    assert result_of(SiblingWorkers(worker).changed(["team"]), pump) is None
