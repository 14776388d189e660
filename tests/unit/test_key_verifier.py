"""Unknown API keys are refused cheaply (issue 33, item 7): a lookup id found in no row is
refused without a database read for `UNKNOWN_KEPT` seconds (at most `UNKNOWN_MOST` of them),
and every refused key counts against its client address's failed-login window, past which
the address's key attempts get 429 before any read. Against a real SQLite database; only the
thread pool is left out (each read runs at once and is counted)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from twisted.internet import defer, task
from twisted.python.failure import Failure

from apid.auth import key_verifier
from apid.auth.accounts import insert_account
from apid.auth.apikeys import NewKey, insert_key, new_key
from apid.auth.key_verifier import UNKNOWN_KEPT, KeyVerifier
from apid.auth.limits import AbuseLimiter, MemoryWindows
from apid.auth.tokens import Principal
from apid.config.api import AbuseLimit
from apid.problems import TooManyRequests, Unauthorized
from apid.store.database import make_engine, run_read, run_write
from apid.store.migrate import upgrade

ADDRESS = "203.0.113.7"


class CountedDatabase:
    """The real SQLite database, each read run at once on the caller's thread and counted."""

    def __init__(self, path: Path) -> None:
        self.engine = make_engine(f"sqlite:///{path}")
        upgrade(self.engine)
        self.reads = 0

    def read(self, work: Callable[..., Any], *args: Any) -> defer.Deferred[Any]:
        self.reads += 1
        return defer.succeed(run_read(self.engine, work, *args))

    def write(self, work: Callable[..., Any], *args: Any) -> defer.Deferred[Any]:
        return defer.succeed(run_write(self.engine, work, *args))


@pytest.fixture
def database(tmp_path):
    db = CountedDatabase(tmp_path / "apid.db")
    yield db
    db.engine.dispose()


def a_key(database: CountedDatabase) -> str:
    account = run_write(database.engine, insert_account, "alice", "alice@example.com", "x", ["ROLE_USER"])
    _, key = run_write(database.engine, insert_key, account.id, NewKey("ci", frozenset({"ROLE_USER"}), None, None))
    return key


def verified(clock: task.Clock, verifier: KeyVerifier, key: str, address: str = ADDRESS) -> Principal | Failure:
    """What `verify` answers once the reads it waits for (coalesced on the next turn) ran."""
    outcome: list[Principal | Failure] = []
    defer.ensureDeferred(verifier.verify(key, address)).addBoth(outcome.append)
    clock.advance(0)
    (answer,) = outcome
    return answer


def refused_with(answer: Principal | Failure, problem: type) -> bool:
    return isinstance(answer, Failure) and answer.check(problem) is not None


def test_an_unknown_lookup_id_is_read_once_then_refused_unread_until_its_time_passes(database):
    clock = task.Clock()
    verifier = KeyVerifier(clock, database)  # type: ignore[arg-type]
    made_up = [new_key() for _ in range(20)]
    for key in made_up:
        assert refused_with(verified(clock, verifier, key), Unauthorized)
    assert database.reads == 20  # one read each, the first time
    for key in made_up:
        assert refused_with(verified(clock, verifier, key), Unauthorized)
    assert database.reads == 20  # a repeat: none
    real = a_key(database)
    principal = verified(clock, verifier, real)
    assert isinstance(principal, Principal) and principal.username == "alice"  # a real key is untouched
    assert database.reads == 21
    clock.advance(UNKNOWN_KEPT + 1)
    assert refused_with(verified(clock, verifier, made_up[0]), Unauthorized)
    assert database.reads == 22  # remembered for a while only


def test_the_unknown_lookup_ids_remembered_are_bounded_the_oldest_going_first(database, monkeypatch):
    monkeypatch.setattr(key_verifier, "UNKNOWN_MOST", 3)
    clock = task.Clock()
    verifier = KeyVerifier(clock, database)  # type: ignore[arg-type]
    made_up = [new_key() for _ in range(4)]
    for key in made_up:
        verified(clock, verifier, key)
    assert database.reads == 4
    verified(clock, verifier, made_up[3])
    verified(clock, verifier, made_up[1])
    assert database.reads == 4
    verified(clock, verifier, made_up[0])  # the oldest went when the fourth came
    assert database.reads == 5


def test_refused_keys_count_against_their_address_and_past_the_limit_get_429_unread(database):
    clock = task.Clock()
    limits = {"login": AbuseLimit(per_address=5, per_account=100, window=60, per_account_address=5)}
    verifier = KeyVerifier(clock, database, AbuseLimiter(store=MemoryWindows(clock), limits=limits))  # type: ignore[arg-type]
    real = a_key(database)
    for _ in range(3):  # a good key gives its count back
        assert isinstance(verified(clock, verifier, real), Principal)
    made_up = [new_key() for _ in range(5)]
    for key in made_up:
        assert refused_with(verified(clock, verifier, key), Unauthorized)
    reads = database.reads
    refused = verified(clock, verifier, new_key())
    assert refused_with(refused, TooManyRequests)
    assert isinstance(refused, Failure) and int(refused.value.headers["Retry-After"]) > 0
    assert refused_with(verified(clock, verifier, real), TooManyRequests)  # the address's keys, good or not
    assert database.reads == reads  # refused before any read
    assert isinstance(verified(clock, verifier, real, "203.0.113.8"), Principal)  # another address is apart
    clock.advance(61)
    assert isinstance(verified(clock, verifier, real), Principal)  # the window ended
