"""Claiming and settling deliveries against a migrated SQLite database (and PostgreSQL, for
two daemons claiming at once)."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import select, update

from apid.auth.accounts import insert_account
from apid.hooks.queue import (
    Attempt,
    NewMessage,
    Outcome,
    claim,
    insert_messages,
    pending_counts,
    purge,
    release,
    settle,
    subscribers,
)
from apid.hooks.registry import change_hook, enable_values, get_hook, insert_hook, list_hooks, requeue
from apid.problems import NotFound
from apid.store.database import make_engine, run_read, run_write
from apid.store.migrate import upgrade
from apid.store.tables import hook, hook_attempt, hook_message, person

NOW = 1_800_000_000.0
LEASE = 30.0
MAX_ATTEMPTS = 3


def unlimited(_host: str) -> int:
    return 1000


@pytest.fixture
def hook_id(engine, alice) -> int:
    return run_write(engine, insert_hook, alice, "http://127.0.0.1:9000/in", "person", "whsec_" + "A" * 44).id


def add_messages(engine, hook_id: int, count: int, start: float = NOW) -> list[str]:
    ids = [f"msg_{hook_id}_{start}_{n}" for n in range(count)]
    for n, mid in enumerate(ids):
        run_write(engine, insert_messages, [NewMessage(mid, hook_id, "person/create", "{}")], start + n)
    return ids


def take(engine, owner: str = "a", now: float = NOW, limit: int = 100, room=unlimited) -> list[str]:
    return [m.id for m in run_write(engine, claim, owner, now, LEASE, limit, room)]


def attempt(mid: str, hook_id: int, outcome: Outcome, **extra) -> Attempt:
    return Attempt(mid, hook_id, outcome, NOW, 5.0, **extra)


def settle_now(engine, attempts, owner: str = "a", now: float = NOW) -> list[int]:
    return run_write(engine, settle, owner, attempts, MAX_ATTEMPTS, lambda n: 10.0 * n, now)


def hook_state(engine, hook_id: int):
    return run_read(engine, lambda c: c.execute(select(hook).where(hook.c.id == hook_id)).one())


def message_state(engine, mid: str):
    return run_read(engine, lambda c: c.execute(select(hook_message).where(hook_message.c.id == mid)).one())


def test_a_claim_leases_oldest_first_and_nobody_else_gets_them_until_the_lease_ends(engine, hook_id):
    ids = add_messages(engine, hook_id, 3)
    assert take(engine, "a", limit=2) == ids[:2]
    assert take(engine, "b") == ids[2:]
    assert take(engine, "c", now=NOW + LEASE - 1) == []
    assert take(engine, "c", now=NOW + LEASE + 1) == ids  # the leases ran out: a crashed daemon's work


def test_a_claim_respects_the_room_per_host(engine, hook_id):
    add_messages(engine, hook_id, 5)
    assert len(take(engine, room=lambda host: 2 if host == "http://127.0.0.1:9000" else 0)) == 2


def test_a_claim_gives_a_hook_without_secret_one_and_keeps_it(engine, alice):
    plain = run_write(engine, insert_hook, alice, "http://127.0.0.1:9000/in", "person", "x").id
    run_write(engine, lambda c: c.execute(update(hook).where(hook.c.id == plain).values(secret=None)))
    add_messages(engine, plain, 2)
    claimed = run_write(engine, claim, "a", NOW, LEASE, 10, unlimited)
    assert claimed[0].secrets == claimed[1].secrets
    assert claimed[0].secrets[0].startswith("whsec_") and hook_state(engine, plain).secret == claimed[0].secrets[0]


def test_success_marks_delivered_releases_the_lease_and_resets_the_count(engine, hook_id):
    run_write(engine, lambda c: c.execute(update(hook).where(hook.c.id == hook_id).values(attempts=2)))
    [mid] = add_messages(engine, hook_id, 1)
    take(engine)
    settle_now(engine, [attempt(mid, hook_id, Outcome.DELIVERED, status_code=200)])
    message = message_state(engine, mid)
    assert (message.state, message.tries, message.lease_owner, message.delivered_at) == ("delivered", 1, None, NOW)
    assert (hook_state(engine, hook_id).attempts, hook_state(engine, hook_id).retry_at) == (0, None)


def test_failures_back_off_and_disable_the_hook_at_max_attempts(engine, hook_id):
    [mid] = add_messages(engine, hook_id, 1)
    for count in range(1, MAX_ATTEMPTS + 1):
        now = NOW + count * 100
        assert take(engine, now=now) == [mid]
        disabled = settle_now(
            engine, [attempt(mid, hook_id, Outcome.FAILED, status_code=500, error="HTTP 500")], now=now
        )
        state = hook_state(engine, hook_id)
        assert state.attempts == count
        if count < MAX_ATTEMPTS:
            assert disabled == [] and state.is_enabled and state.retry_at == now + 10.0 * count
            assert take(engine, now=now + 10.0 * count - 1) == []  # backing off
    assert disabled == [hook_id] and not state.is_enabled and "3 consecutive failed rounds" in state.disabled_reason
    assert message_state(engine, mid).state == "pending" and take(engine, now=NOW + 10_000) == []


def test_a_failing_hook_is_probed_with_one_message_at_a_time(engine, hook_id):
    first = add_messages(engine, hook_id, 4)[0]
    take(engine)
    settle_now(engine, [attempt(first, hook_id, Outcome.FAILED, error="down")])
    retry_at = hook_state(engine, hook_id).retry_at
    assert take(engine, now=retry_at) == [first]  # one probe, not four attempts
    assert take(engine, "b", now=retry_at + 1) == []  # the probe holds the hook for other daemons too


def claimed(engine, owner: str = "a", now: float = NOW, limit: int = 100):
    return run_write(engine, claim, owner, now, LEASE, limit, unlimited)


def outcome_of(message, outcome: Outcome, **extra) -> Attempt:
    """The attempt of a claimed message, as the worker passes it on: with the claim's round."""
    return Attempt(message.id, message.hook_id, outcome, NOW, 5.0, round=message.round, **extra)


def test_deliveries_in_flight_together_fail_as_one_round(engine, hook_id):
    add_messages(engine, hook_id, 6)
    first, second = claimed(engine, "a", limit=4), claimed(engine, "b", limit=2)  # two daemons
    assert {m.round for m in first + second} == {0} and not any(m.is_probe for m in first + second)

    settle_now(engine, [outcome_of(m, Outcome.FAILED, error="down") for m in first])  # one batch
    settle_now(engine, [outcome_of(m, Outcome.FAILED, error="down") for m in second], owner="b", now=NOW + 1)

    state = hook_state(engine, hook_id)
    assert (state.attempts, state.retry_at, state.is_enabled) == (1, NOW + 10.0, True)  # 6 failures, one round


def test_each_failed_probe_is_one_more_round_and_a_success_lets_the_backlog_flow_in_order(engine, hook_id):
    ids = add_messages(engine, hook_id, 5)
    settle_now(engine, [outcome_of(m, Outcome.FAILED, error="down") for m in claimed(engine, limit=3)])
    now = NOW
    for round_ in range(1, MAX_ATTEMPTS - 1):  # each probe fails, short of disabling the hook
        now = hook_state(engine, hook_id).retry_at
        [probe] = claimed(engine, now=now)
        assert (probe.id, probe.round, probe.is_probe) == (ids[0], round_, True)  # the oldest, alone
        assert claimed(engine, "b", now=now) == []  # the others wait, unclaimed, here and elsewhere
        settle_now(engine, [outcome_of(probe, Outcome.FAILED, error="down")], now=now)
        assert hook_state(engine, hook_id).attempts == round_ + 1
    now = hook_state(engine, hook_id).retry_at
    [probe] = claimed(engine, now=now)
    settle_now(engine, [outcome_of(probe, Outcome.DELIVERED, status_code=200)], now=now)

    assert (hook_state(engine, hook_id).attempts, hook_state(engine, hook_id).retry_at) == (0, None)
    backlog = claimed(engine, now=now)
    assert [m.id for m in backlog] == ids[1:] and {m.round for m in backlog} == {0}  # all at once, in order


def test_a_late_failure_of_a_round_already_counted_changes_nothing(engine, hook_id):
    add_messages(engine, hook_id, 3)
    slow, *others = claimed(engine)
    settle_now(engine, [outcome_of(m, Outcome.FAILED, error="down") for m in others])
    retry_at = hook_state(engine, hook_id).retry_at
    [probe] = claimed(engine, now=retry_at)
    settle_now(engine, [outcome_of(probe, Outcome.FAILED, error="down")], now=retry_at)
    counted = hook_state(engine, hook_id)

    settle_now(engine, [outcome_of(slow, Outcome.FAILED, error="timed out")], now=retry_at + 1)  # round 0, finally

    assert (hook_state(engine, hook_id).attempts, hook_state(engine, hook_id).retry_at) == (2, counted.retry_at)


def test_a_disabled_hook_records_its_events_and_keeps_them_until_enabled(engine, alice, hook_id):
    run_write(engine, change_hook, hook_id, None, enable_values(False), None)
    assert [s.hook_id for s in run_read(engine, subscribers, "person", "create")] == [hook_id]
    ids = add_messages(engine, hook_id, 3)

    assert take(engine) == []  # never claimed while disabled
    assert run_read(engine, get_hook, hook_id).pending == 3
    assert [h.pending for h in run_read(engine, list_hooks, None, 0, 10)] == [3]
    run_write(engine, change_hook, hook_id, None, enable_values(True), None)
    assert take(engine) == ids  # in order of recording
    assert run_read(engine, get_hook, hook_id).to_dict()["pending"] == 3  # claimed is not delivered


def test_a_hook_disabled_by_failures_keeps_recording(engine, hook_id):
    [mid] = add_messages(engine, hook_id, 1)
    for count in range(MAX_ATTEMPTS):
        now = NOW + count * 100
        [message] = claimed(engine, now=now)
        settle_now(engine, [outcome_of(message, Outcome.FAILED, error="down")], now=now)
    assert not hook_state(engine, hook_id).is_enabled
    assert [s.hook_id for s in run_read(engine, subscribers, "person", "update")] == [hook_id]
    later = add_messages(engine, hook_id, 2, start=NOW + 1000)
    assert run_read(engine, get_hook, hook_id).pending == 3 and take(engine, now=NOW + 2000) == []
    run_write(engine, change_hook, hook_id, None, enable_values(True), None)
    assert take(engine, now=NOW + 2000) == [mid, *later]


def test_subscribers_leave_out_hooks_of_disabled_accounts(engine, alice, hook_id):
    run_write(engine, lambda c: c.execute(update(person).where(person.c.id == alice).values(enabled=False)))
    assert run_read(engine, subscribers, "person", "create") == []


def test_410_and_a_refused_url_disable_at_once_and_keep_the_message(engine, hook_id):
    for outcome, reason in ((Outcome.GONE, "410 Gone"), (Outcome.REFUSED, "not contacted: not allowed")):
        run_write(engine, lambda c: c.execute(update(hook).where(hook.c.id == hook_id).values(is_enabled=True)))
        [mid] = add_messages(engine, hook_id, 1, start=NOW + len(reason))
        take(engine)
        assert settle_now(engine, [attempt(mid, hook_id, outcome, error=reason)]) == [hook_id]
        state = hook_state(engine, hook_id)
        assert (state.is_enabled, state.attempts, state.disabled_reason) == (False, 0, reason)
        assert message_state(engine, mid).state == "pending"


def test_a_deferral_waits_as_asked_without_counting(engine, hook_id):
    [mid] = add_messages(engine, hook_id, 1)
    take(engine)
    settle_now(engine, [attempt(mid, hook_id, Outcome.DEFERRED, status_code=429, retry_after=120.0)])
    state = hook_state(engine, hook_id)
    assert (state.attempts, state.retry_at, state.is_enabled) == (0, NOW + 120.0, True)


def test_settling_a_deleted_hooks_message_records_nothing(engine, hook_id):
    [mid] = add_messages(engine, hook_id, 1)
    take(engine)
    run_write(engine, lambda c: c.execute(hook_message.delete()))
    assert settle_now(engine, [attempt(mid, hook_id, Outcome.DELIVERED)]) == []
    assert run_read(engine, lambda c: c.execute(select(hook_attempt)).all()) == []


def test_pending_counts_are_per_hook_and_leave_out_the_delivered(engine, alice, hook_id):
    other = run_write(engine, insert_hook, alice, "http://127.0.0.1:9001/in", "person", "whsec_" + "B" * 44).id
    first, *_ = add_messages(engine, hook_id, 3)
    add_messages(engine, other, 2)
    assert run_read(engine, pending_counts) == {hook_id: 3, other: 2}
    take(engine)
    settle_now(engine, [attempt(first, hook_id, Outcome.DELIVERED)])
    assert run_read(engine, pending_counts) == {hook_id: 2, other: 2}  # leased ones still wait


def test_release_hands_back_only_our_own_leases(engine, hook_id):
    ids = add_messages(engine, hook_id, 2)
    take(engine, "a", limit=1)
    take(engine, "b", limit=1)
    run_write(engine, release, "a", ids)
    assert take(engine, "c") == ids[:1]


def test_requeue_and_purge(engine, hook_id, bob):
    [mid] = add_messages(engine, hook_id, 1)
    take(engine)
    settle_now(engine, [attempt(mid, hook_id, Outcome.DELIVERED)])
    with pytest.raises(NotFound):
        run_write(engine, requeue, hook_id, bob, mid)  # not bob's hook
    assert run_write(engine, requeue, hook_id, None, mid)["state"] == "pending"
    assert take(engine, now=NOW + 1) == [mid]
    settle_now(engine, [attempt(mid, hook_id, Outcome.DELIVERED)])
    assert run_write(engine, purge, NOW - 1) == 0
    assert run_write(engine, purge, NOW + 1) == 1
    assert run_read(engine, lambda c: c.execute(select(hook_attempt)).all()) == []


def test_purge_forgets_pending_messages_older_than_the_retention_too(engine, hook_id):
    old = add_messages(engine, hook_id, 2, start=NOW)
    recent = add_messages(engine, hook_id, 1, start=NOW + 100)
    run_write(engine, change_hook, hook_id, None, enable_values(False), None)
    assert run_write(engine, purge, NOW + 50) == 2
    remaining = run_read(engine, lambda c: c.execute(select(hook_message.c.id)).scalars().all())
    assert remaining == recent and not set(old) & set(remaining)
    assert run_read(engine, get_hook, hook_id).pending == 1


@pytest.mark.postgresql
def test_two_daemons_claiming_a_failing_hook_at_once_send_one_probe_on_postgresql(postgres, tmp_path):
    engine = make_engine(postgres.new_database(tmp_path.name.lower()))
    upgrade(engine)
    owner = run_write(engine, insert_account, "alice", "alice@example.com", "not-a-real-hash", ["ROLE_USER"]).id
    hook_id = run_write(engine, insert_hook, owner, "http://127.0.0.1:9000/in", "person", "whsec_" + "A" * 44).id
    ids = add_messages(engine, hook_id, 3)
    run_write(engine, lambda c: c.execute(update(hook).where(hook.c.id == hook_id).values(attempts=1, retry_at=NOW)))
    try:
        with engine.connect() as first, engine.connect() as second:
            first.begin()
            # not committed yet; it read (and locked) one candidate, as when the backlog is longer
            # than a claim reads
            probe = claim(first, "a", NOW, LEASE, 1, unlimited)
            elsewhere: list = []

            def other_daemon() -> None:
                with second.begin():
                    elsewhere.extend(claim(second, "b", NOW, LEASE, 10, unlimited))

            thread = threading.Thread(target=other_daemon)
            thread.start()
            thread.join(0.5)
            assert thread.is_alive()  # it skipped the locked probe, chose the next: waits for the hook's row
            first.commit()
            thread.join(10)
        assert [m.id for m in probe] == ids[:1] and elsewhere == []  # one probe, not two
    finally:
        engine.dispose()
