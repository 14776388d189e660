"""Abuse limits (issue 3, item 10): per client address and per account name, per kind, in
fixed windows on the reactor's clock; past a limit a 429 with Retry-After that says nothing
about the account."""

from __future__ import annotations

import pytest
from twisted.internet.task import Clock

from apid.auth.limits import AbuseLimiter
from apid.config import AbuseLimit
from apid.problems import TooManyRequests

WINDOW = 60
# A realistic epoch time: the reactor's clock is wall time in the daemon.
START = 1_700_000_000.0
LIMITS = {
    "login": AbuseLimit(per_address=5, per_account=3, window=WINDOW),
    "register": AbuseLimit(per_address=2, per_account=4, window=WINDOW),
    "reset": AbuseLimit(per_address=4, per_account=2, window=600),
}


@pytest.fixture
def clock() -> Clock:
    clock = Clock()
    clock.advance(START)
    return clock


@pytest.fixture
def limiter(clock) -> AbuseLimiter:
    return AbuseLimiter(clock, LIMITS)


def attempt(limiter: AbuseLimiter, kind: str, address: str, account: str | None) -> None:
    """What an endpoint does: check, then count the attempt."""
    limiter.check(kind, address, account)
    limiter.record(kind, address, account)


def refused(limiter: AbuseLimiter, kind: str, address: str, account: str | None) -> TooManyRequests:
    with pytest.raises(TooManyRequests) as caught:
        limiter.check(kind, address, account)
    return caught.value


def retry_after(problem: TooManyRequests) -> int:
    return int(problem.headers["Retry-After"])


# --- per account ---------------------------------------------------------------------------------


def test_per_account_limit_holds_across_addresses(limiter):
    for n in range(3):
        attempt(limiter, "login", f"10.0.0.{n}", "alice")
    problem = refused(limiter, "login", "10.0.0.99", "alice")
    assert problem.status == 429
    assert set(problem.headers) == {"Retry-After"}


def test_under_the_account_limit_nothing_is_refused(limiter):
    for n in range(2):
        attempt(limiter, "login", f"10.0.0.{n}", "alice")
    limiter.check("login", "10.0.0.99", "alice")


def test_another_account_from_other_addresses_is_not_affected(limiter):
    for n in range(3):
        attempt(limiter, "login", f"10.0.0.{n}", "alice")
    limiter.check("login", "10.0.1.1", "bob")


def test_account_names_are_case_insensitive(limiter):
    attempt(limiter, "reset", "10.0.0.1", "Alice@Example.COM")
    attempt(limiter, "reset", "10.0.0.2", "alice@example.com")
    refused(limiter, "reset", "10.0.0.3", "ALICE@EXAMPLE.COM")
    refused(limiter, "reset", "10.0.0.3", "alice@example.com")


# --- per address ---------------------------------------------------------------------------------


def test_per_address_limit_holds_across_accounts(limiter):
    for n in range(5):
        attempt(limiter, "login", "192.0.2.7", f"user{n}")
    refused(limiter, "login", "192.0.2.7", "someone-new")
    # without an account name (a request that names none) the address is still counted
    refused(limiter, "login", "192.0.2.7", None)
    # another address is fine
    limiter.check("login", "192.0.2.8", "someone-new")


def test_attempts_without_an_account_name_count_for_the_address_only(limiter):
    attempt(limiter, "register", "192.0.2.7", None)
    attempt(limiter, "register", "192.0.2.7", "")
    refused(limiter, "register", "192.0.2.7", None)
    limiter.check("register", "192.0.2.8", "x@example.com")


def test_the_answer_is_the_same_for_any_account_name(limiter):
    """The 429 carries no hint of the account: same detail for a refused address whatever the name."""
    for n in range(5):
        attempt(limiter, "login", "192.0.2.7", f"user{n}")
    first = refused(limiter, "login", "192.0.2.7", "alice")
    second = refused(limiter, "login", "192.0.2.7", "no-such-user")
    assert first.to_dict() == second.to_dict()
    assert first.headers == second.headers
    assert "alice" not in str(first.to_dict())


# --- kinds ---------------------------------------------------------------------------------------


def test_kinds_are_counted_apart(limiter):
    for n in range(3):
        attempt(limiter, "login", f"10.0.0.{n}", "alice")
    refused(limiter, "login", "10.0.0.9", "alice")
    # the same name and address are untouched for registration and reset
    limiter.check("register", "10.0.0.0", "alice")
    limiter.check("reset", "10.0.0.0", "alice")
    for n in range(2):
        attempt(limiter, "register", "203.0.113.1", f"u{n}@example.com")
    refused(limiter, "register", "203.0.113.1", "other@example.com")
    limiter.check("login", "203.0.113.1", "other")
    limiter.check("reset", "203.0.113.1", "other@example.com")


def test_an_unknown_kind_is_a_programming_error(limiter):
    with pytest.raises(KeyError):
        limiter.check("signup", "10.0.0.1", "alice")


# --- Retry-After and the window --------------------------------------------------------------------


def test_retry_after_is_the_rest_of_the_window(limiter, clock):
    attempt(limiter, "login", "10.0.0.1", "alice")
    clock.advance(20)
    attempt(limiter, "login", "10.0.0.2", "alice")
    attempt(limiter, "login", "10.0.0.3", "alice")
    # the window began with the first attempt, 20 s ago
    assert retry_after(refused(limiter, "login", "10.0.0.4", "alice")) == WINDOW - 20
    clock.advance(15.5)
    # 24.5 s left: rounded up
    assert retry_after(refused(limiter, "login", "10.0.0.4", "alice")) == 25


def test_retry_after_is_at_least_one_second(limiter, clock):
    for n in range(3):
        attempt(limiter, "login", f"10.0.0.{n}", "alice")
    clock.advance(WINDOW - 0.25)
    assert retry_after(refused(limiter, "login", "10.0.0.9", "alice")) == 1


def test_retry_after_is_the_longer_wait_when_both_limits_are_used_up(limiter, clock):
    # the address window starts now ...
    for n in range(2):
        attempt(limiter, "login", "10.0.0.1", f"other{n}")
    clock.advance(30)
    # ... and the account's 30 s later; both end up used up
    for n in range(3):
        attempt(limiter, "login", "10.0.0.1", "alice")
    assert retry_after(refused(limiter, "login", "10.0.0.1", "alice")) == WINDOW
    # the address alone is used up too, with 30 s left
    assert retry_after(refused(limiter, "login", "10.0.0.1", "carol")) == WINDOW - 30


def test_the_window_resets_after_window_seconds(limiter, clock):
    for n in range(3):
        attempt(limiter, "login", f"10.0.0.{n}", "alice")
    wait = retry_after(refused(limiter, "login", "10.0.0.9", "alice"))
    clock.advance(wait - 0.5)
    refused(limiter, "login", "10.0.0.9", "alice")
    clock.advance(0.5)
    limiter.check("login", "10.0.0.9", "alice")
    # a fresh window: three more attempts, then refused again, for a whole window
    for n in range(3):
        attempt(limiter, "login", f"10.0.0.{n}", "alice")
    assert retry_after(refused(limiter, "login", "10.0.0.9", "alice")) == WINDOW


def test_each_kind_keeps_its_own_window(limiter, clock):
    for n in range(2):
        attempt(limiter, "reset", f"10.0.0.{n}", "alice@example.com")
    for n in range(3):
        attempt(limiter, "login", f"10.0.0.{n}", "alice")
    clock.advance(WINDOW)
    limiter.check("login", "10.0.0.9", "alice")
    problem = refused(limiter, "reset", "10.0.0.9", "alice@example.com")
    assert retry_after(problem) == 600 - WINDOW


def test_refused_attempts_are_not_counted_when_not_recorded(limiter, clock):
    """check() alone never uses up anything: only record() counts."""
    for _ in range(50):
        limiter.check("login", "10.0.0.1", "alice")
    attempt(limiter, "login", "10.0.0.1", "alice")
    attempt(limiter, "login", "10.0.0.1", "alice")
    limiter.check("login", "10.0.0.1", "alice")


def test_many_keys_do_not_break_counting(limiter, clock):
    """Past 10000 keys old windows are pruned; live ones must survive the pruning."""
    for n in range(3):
        attempt(limiter, "login", f"10.0.0.{n}", "alice")
    for n in range(10001):
        limiter.record("register", f"198.51.{n // 256}.{n % 256}", None)
    refused(limiter, "login", "10.0.0.9", "alice")


def test_the_first_window_starts_at_the_first_attempt_on_a_young_clock():
    clock = Clock()
    clock.advance(10)
    limiter = AbuseLimiter(clock, LIMITS)
    for n in range(3):
        attempt(limiter, "login", f"10.0.0.{n}", "alice")
    assert retry_after(refused(limiter, "login", "10.0.0.9", "alice")) == WINDOW
