"""The change log the live event stream reads (apid.store.changes), on SQLite and PostgreSQL,
and the order the feed hands positions out in (apid.events.feed.InOrder)."""

from __future__ import annotations

from apid.events.feed import InOrder
from apid.store.changes import Change, after, append, at, bounds, sweep
from apid.store.database import run_read, run_write


def log(engine, count: int, now: float = 1000.0) -> None:
    for n in range(count):
        run_write(engine, append, f"msg_{n}", "person/update", '{"id": 1}', now + n)


def positions(changes: list[Change]) -> list[int]:
    return [change.position for change in changes]


def test_changes_come_back_in_order_after_a_position(engine_of_each_database):
    engine = engine_of_each_database
    assert run_read(engine, bounds) == (0, 0)
    log(engine, 5)
    assert positions(run_read(engine, after, 0)) == [1, 2, 3, 4, 5]
    assert positions(run_read(engine, after, 3)) == [4, 5]
    assert positions(run_read(engine, after, 0, 2)) == [1, 2]
    assert positions(run_read(engine, at, [5, 2, 9])) == [2, 5]
    first = run_read(engine, after, 0)[0]
    assert (first.message_id, first.service, first.record, first.created_at) == (
        "msg_0",
        "person/update",
        '{"id": 1}',
        1000.0,
    )
    assert run_read(engine, bounds) == (1, 5)


def test_the_sweep_keeps_the_newest_and_positions_are_never_given_again(engine_of_each_database):
    """A client's Last-Event-ID names one change for good: after a sweep, even of every old
    change, the next position follows the last one given, and the newest stays known."""
    engine = engine_of_each_database
    log(engine, 4, now=1000.0)
    assert run_write(engine, sweep, 2000.0, 100) == 3  # all older than 2000, but the newest
    assert run_read(engine, bounds) == (4, 4)
    log(engine, 1, now=3000.0)
    assert run_read(engine, bounds) == (4, 5)
    log(engine, 3, now=3001.0)
    assert run_write(engine, sweep, 0.0, 2) == 3  # by count: the newest 2 stay
    assert run_read(engine, bounds) == (7, 8)
    assert run_write(engine, sweep, 0.0, 2) == 0


def changes(*numbers: int) -> list[Change]:
    return [Change(n, f"msg_{n}", "person/update", "{}", 0.0) for n in numbers]


def test_positions_are_handed_out_without_skipping_a_gap_early():
    order = InOrder(last=3, wait=2.0)
    assert positions(order.ready(changes(4, 5), now=10.0)) == [4, 5]
    # 6 is not committed yet (PostgreSQL): 7 waits for it
    assert positions(order.ready(changes(7, 8), now=11.0)) == []
    assert positions(order.ready(changes(7, 8), now=12.9)) == []
    assert positions(order.ready(changes(6, 7, 8), now=12.95)) == [6, 7, 8]  # it came
    assert order.last == 8
    # 9 never comes (a rolled-back transaction's): after the wait the feed goes past it
    assert positions(order.ready(changes(10), now=20.0)) == []
    assert positions(order.ready(changes(10, 12), now=22.0)) == [10]
    assert positions(order.ready(changes(12), now=23.9)) == []  # a new gap, its own wait
    assert positions(order.ready(changes(12), now=24.0)) == [12]
