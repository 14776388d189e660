"""Abuse limits (issue 3 item 10, issue 10 item 2): every attempt reserves a count in each of
its fixed windows before any work is done, atomically; logins per (account, address), per
account and per address, registrations and reset requests per address and per email; past a
limit a 429 with Retry-After that says nothing about the account. A login that succeeds gives
its reservation back.

One contract suite runs through the AbuseLimiter on both stores: MemoryWindows on a
`task.Clock`, and RedisWindows on a real redis-server (the module's, from conftest; every test
has its own key prefix). A Clock cannot drive Redis, so there the time-dependent cases wait
for real, with windows of one to three seconds, and Retry-After may be one second short; on
the Clock it is exact. Then what belongs to one store (pruning; key expiry and two pools
sharing counts in Redis), and a store that cannot be reached (fail open, fail closed).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from typing import Any

import pytest
import pytest_twisted
import txredisapi
from twisted.internet import defer, reactor, task
from twisted.logger import LogLevel, globalLogPublisher

from apid.auth.limits import AbuseLimiter, MemoryWindows, RedisWindows
from apid.config.api import AbuseLimit
from apid.problems import ServiceUnavailable, TooManyRequests
from harness import free_port

WINDOW = 60
# A realistic epoch time: the reactor's clock is wall time in the daemon.
START = 1_700_000_000.0
LIMITS = {
    "login": AbuseLimit(per_address=8, per_account=6, window=WINDOW, per_account_address=3),
    "register": AbuseLimit(per_address=2, per_account=4, window=WINDOW),
    "reset": AbuseLimit(per_address=4, per_account=2, window=600),
}
REDIS_SLACK = 1  # second: Redis counts time for real, on a machine that may be loaded


def windows_of(seconds: int, **kinds: int) -> dict[str, AbuseLimit]:
    """LIMITS with windows of `seconds`, or of kinds[kind] seconds for the kinds named."""
    return {kind: replace(limit, window=kinds.get(kind, seconds)) for kind, limit in LIMITS.items()}


@dataclass
class Subject:
    """A store under test, how to let time pass for it, and how exact its Retry-After is."""

    kind: str
    store: Any
    clock: task.Clock | None = None

    def limiter(self, limits: dict[str, AbuseLimit] = LIMITS, fail_open: bool = True) -> AbuseLimiter:
        return AbuseLimiter(store=self.store, limits=limits, fail_open=fail_open)

    async def wait(self, seconds: float) -> None:
        """Let `seconds` go by: on the Clock exactly, on Redis for real and a little more."""
        if self.clock is not None:
            self.clock.advance(seconds)
        else:
            await task.deferLater(reactor, seconds + 0.05, lambda: None)

    def assert_retry_after(self, problem: TooManyRequests, expected: int) -> None:
        low = expected if self.clock is not None else max(1, expected - REDIS_SLACK)
        assert low <= retry_after(problem) <= expected, problem.headers


@pytest.fixture(params=["memory", "redis"])
def subject(request) -> Subject:
    if request.param == "memory":
        clock = task.Clock()
        clock.advance(START)
        return Subject("memory", MemoryWindows(clock), clock)
    pool = request.getfixturevalue("redis_pool")
    return Subject("redis", RedisWindows(pool=pool, clock=reactor, prefix=f"test:{uuid.uuid4().hex}:"))


async def attempt(limiter: AbuseLimiter, kind: str, address: str, account: str | None) -> None:
    """What /register, /forgotPassword and a failed login do: reserve, and keep the count."""
    assert await limiter.reserve(kind, address, account) is True


async def logged_in(limiter: AbuseLimiter, address: str, account: str) -> None:
    """What a login that succeeds does: reserve, then give the count back."""
    assert await limiter.reserve("login", address, account) is True
    await limiter.release("login", address, account)


async def refused(limiter: AbuseLimiter, kind: str, address: str, account: str | None) -> TooManyRequests:
    with pytest.raises(TooManyRequests) as caught:
        await limiter.reserve(kind, address, account)
    return caught.value


def retry_after(problem: TooManyRequests) -> int:
    value = int(problem.headers["Retry-After"])
    assert value >= 1
    return value


async def burst(limiter: AbuseLimiter, attempts: list[tuple[str, str, str | None]]) -> tuple[int, int]:
    """Reserve all `attempts` (kind, address, account) at once: how many were admitted and
    how many refused with a 429 (anything else fails the test)."""
    outcomes = await defer.DeferredList(
        [defer.Deferred.fromCoroutine(limiter.reserve(*one)) for one in attempts], consumeErrors=True
    )
    admitted = [result for ok, result in outcomes if ok]
    refusals = [result for ok, result in outcomes if not ok]
    assert admitted == [True] * len(admitted)
    assert all(failure.check(TooManyRequests) for failure in refusals), refusals
    return len(admitted), len(refusals)


# --- logins: per (account, address), per account, per address ------------------------------------


@pytest_twisted.ensureDeferred
async def test_guessing_from_one_address_locks_that_pair_only(subject):
    limiter = subject.limiter()
    for _ in range(3):
        await attempt(limiter, "login", "10.0.0.1", "alice")
    problem = await refused(limiter, "login", "10.0.0.1", "alice")
    assert problem.status == 429
    assert set(problem.headers) == {"Retry-After"}
    await attempt(limiter, "login", "10.0.0.2", "alice")  # the owner, elsewhere
    await attempt(limiter, "login", "10.0.0.1", "bob")  # another account, from the same address


@pytest_twisted.ensureDeferred
async def test_the_whole_account_limit_holds_across_addresses(subject):
    limiter = subject.limiter()
    for n in range(6):
        await attempt(limiter, "login", f"10.0.0.{n // 3}", "alice")  # 3 from each of two addresses
    await refused(limiter, "login", "10.0.0.9", "alice")
    await attempt(limiter, "login", "10.0.0.9", "bob")


@pytest_twisted.ensureDeferred
async def test_the_address_limit_holds_across_accounts(subject):
    limiter = subject.limiter()
    for n in range(8):
        await attempt(limiter, "login", "192.0.2.7", f"user{n}")
    await refused(limiter, "login", "192.0.2.7", "someone-new")
    # without an account name (a request that names none) the address is still counted
    await refused(limiter, "login", "192.0.2.7", None)
    await attempt(limiter, "login", "192.0.2.8", "someone-new")


@pytest_twisted.ensureDeferred
async def test_refused_attempts_count_nothing(subject):
    """An attacker stuck on a used-up pair adds nothing to the account's or the address's count."""
    limiter = subject.limiter()
    for _ in range(3):
        await attempt(limiter, "login", "10.0.0.1", "alice")
    for _ in range(20):
        await refused(limiter, "login", "10.0.0.1", "alice")
    for _ in range(3):  # the account has 3 of its 6 left, the address 5 of its 8
        await attempt(limiter, "login", "10.0.0.2", "alice")
    await refused(limiter, "login", "10.0.0.3", "alice")
    for n in range(5):
        await attempt(limiter, "login", "10.0.0.1", f"user{n}")
    await refused(limiter, "login", "10.0.0.1", "one-more")


@pytest_twisted.ensureDeferred
async def test_a_burst_of_simultaneous_guesses_admits_exactly_the_pair_limit(subject):
    limiter = subject.limiter()
    assert await burst(limiter, [("login", "10.0.0.1", "alice")] * 100) == (3, 97)
    await refused(limiter, "login", "10.0.0.1", "alice")


@pytest_twisted.ensureDeferred
async def test_a_distributed_burst_admits_exactly_the_account_limit(subject):
    """Guesses at one account from many addresses at once: every window is counted atomically."""
    limiter = subject.limiter()
    assert await burst(limiter, [("login", f"10.0.1.{n % 50}", "alice") for n in range(100)]) == (6, 94)


# --- a login that succeeds gives its count back -----------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_the_owners_logins_never_count(subject):
    limiter = subject.limiter()
    await attempt(limiter, "login", "10.0.0.1", "alice")  # a typo
    for _ in range(10):
        await logged_in(limiter, "10.0.0.1", "alice")
    for n in range(20):  # nor against the address: many accounts behind one gateway
        await logged_in(limiter, "10.0.0.1", f"user{n}")
    for _ in range(2):  # failures still count: with the typo, three
        await attempt(limiter, "login", "10.0.0.1", "alice")
    await refused(limiter, "login", "10.0.0.1", "alice")


@pytest_twisted.ensureDeferred
async def test_giving_back_never_goes_below_zero(subject):
    limiter = subject.limiter()
    for _ in range(5):
        await limiter.release("login", "10.0.0.1", "alice")
    for _ in range(3):
        await attempt(limiter, "login", "10.0.0.1", "alice")
    await refused(limiter, "login", "10.0.0.1", "alice")


# --- account names, other kinds, the answer --------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_account_names_are_case_insensitive(subject):
    limiter = subject.limiter()
    await attempt(limiter, "reset", "10.0.0.1", "Alice@Example.COM")
    await attempt(limiter, "reset", "10.0.0.2", "alice@example.com")
    await refused(limiter, "reset", "10.0.0.3", "ALICE@EXAMPLE.COM")
    await refused(limiter, "reset", "10.0.0.3", "alice@example.com")
    for name in ("Bob", "BOB", "bob"):
        await attempt(limiter, "login", "10.0.0.1", name)
    await refused(limiter, "login", "10.0.0.1", "bOb")


@pytest_twisted.ensureDeferred
async def test_attempts_without_an_account_name_count_for_the_address_only(subject):
    limiter = subject.limiter()
    await attempt(limiter, "register", "192.0.2.7", None)
    await attempt(limiter, "register", "192.0.2.7", "")
    await refused(limiter, "register", "192.0.2.7", None)
    await attempt(limiter, "register", "192.0.2.8", "x@example.com")


@pytest_twisted.ensureDeferred
async def test_registrations_count_per_address_and_per_email(subject):
    limiter = subject.limiter()
    for n in range(2):
        await attempt(limiter, "register", "203.0.113.1", f"u{n}@example.com")
    await refused(limiter, "register", "203.0.113.1", "other@example.com")
    for n in range(4):
        await attempt(limiter, "register", f"203.0.113.{10 + n}", "taken@example.com")
    await refused(limiter, "register", "203.0.113.99", "taken@example.com")


@pytest_twisted.ensureDeferred
async def test_the_answer_is_the_same_for_any_account_name(subject):
    """The 429 carries no hint of the account: same detail for a refused address whatever the name."""
    limiter = subject.limiter()
    for n in range(8):
        await attempt(limiter, "login", "192.0.2.7", f"user{n}")
    first = await refused(limiter, "login", "192.0.2.7", "alice")
    second = await refused(limiter, "login", "192.0.2.7", "no-such-user")
    assert first.to_dict() == second.to_dict()
    assert set(first.headers) == set(second.headers) == {"Retry-After"}
    assert "alice" not in str(first.to_dict())


# --- kinds ---------------------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_kinds_are_counted_apart(subject):
    limiter = subject.limiter()
    for _ in range(3):
        await attempt(limiter, "login", "10.0.0.1", "alice")
    await refused(limiter, "login", "10.0.0.1", "alice")
    # the same name and address are untouched for registration and reset
    await attempt(limiter, "register", "10.0.0.1", "alice")
    await attempt(limiter, "reset", "10.0.0.1", "alice")
    for n in range(2):
        await attempt(limiter, "register", "203.0.113.1", f"u{n}@example.com")
    await refused(limiter, "register", "203.0.113.1", "other@example.com")
    await attempt(limiter, "login", "203.0.113.1", "other")
    await attempt(limiter, "reset", "203.0.113.1", "other@example.com")


# --- Retry-After and the window (short windows: Redis waits for real) -----------------------------


@pytest_twisted.ensureDeferred
async def test_retry_after_is_the_rest_of_the_window(subject):
    limiter = subject.limiter(windows_of(3))
    await attempt(limiter, "login", "10.0.0.1", "alice")
    await subject.wait(1)
    await attempt(limiter, "login", "10.0.0.1", "alice")
    await attempt(limiter, "login", "10.0.0.1", "alice")
    # the window began with the first attempt, a second ago
    subject.assert_retry_after(await refused(limiter, "login", "10.0.0.1", "alice"), 2)


@pytest_twisted.ensureDeferred
async def test_retry_after_is_the_longest_wait_of_the_used_up_windows(subject):
    limits = {**LIMITS, "login": AbuseLimit(per_address=3, per_account=10, window=3, per_account_address=2)}
    limiter = subject.limiter(limits)
    await attempt(limiter, "login", "10.0.0.1", "carol")  # the address's window starts now ...
    await subject.wait(1)
    for _ in range(2):  # ... the pair's a second later; both end up used up
        await attempt(limiter, "login", "10.0.0.1", "alice")
    subject.assert_retry_after(await refused(limiter, "login", "10.0.0.1", "alice"), 3)
    # the address alone is used up for another name, with two seconds left
    subject.assert_retry_after(await refused(limiter, "login", "10.0.0.1", "bob"), 2)


@pytest_twisted.ensureDeferred
async def test_the_window_ends_after_window_seconds_and_a_new_one_starts(subject):
    limiter = subject.limiter(windows_of(1))
    for _ in range(3):
        await attempt(limiter, "login", "10.0.0.1", "alice")
    subject.assert_retry_after(await refused(limiter, "login", "10.0.0.1", "alice"), 1)
    await subject.wait(1)
    for _ in range(3):  # a fresh window, of three attempts again
        await attempt(limiter, "login", "10.0.0.1", "alice")
    subject.assert_retry_after(await refused(limiter, "login", "10.0.0.1", "alice"), 1)


@pytest_twisted.ensureDeferred
async def test_each_kind_keeps_its_own_window(subject):
    limiter = subject.limiter(windows_of(1, reset=3))
    for n in range(2):
        await attempt(limiter, "reset", f"10.0.0.{n}", "alice@example.com")
    for _ in range(3):
        await attempt(limiter, "login", "10.0.0.1", "alice")
    await subject.wait(1)
    await attempt(limiter, "login", "10.0.0.1", "alice")
    subject.assert_retry_after(await refused(limiter, "reset", "10.0.0.9", "alice@example.com"), 2)


# --- in this process: the clock, the keys, the memory -----------------------------------------------


@pytest.fixture
def clock() -> task.Clock:
    clock = task.Clock()
    clock.advance(START)
    return clock


@pytest_twisted.ensureDeferred
async def test_retry_after_is_rounded_up_and_at_least_one_second(clock):
    limiter = AbuseLimiter(store=MemoryWindows(clock), limits=LIMITS)
    for _ in range(3):
        await attempt(limiter, "login", "10.0.0.1", "alice")
    clock.advance(35.5)
    assert retry_after(await refused(limiter, "login", "10.0.0.1", "alice")) == 25  # 24.5 s left
    clock.advance(24.25)
    assert retry_after(await refused(limiter, "login", "10.0.0.1", "alice")) == 1  # 0.25 s left
    clock.advance(0.25)
    await attempt(limiter, "login", "10.0.0.1", "alice")


@pytest_twisted.ensureDeferred
async def test_the_first_window_starts_at_the_first_attempt_on_a_young_clock():
    clock = task.Clock()
    clock.advance(10)
    limiter = AbuseLimiter(store=MemoryWindows(clock), limits=LIMITS)
    for _ in range(3):
        await attempt(limiter, "login", "10.0.0.1", "alice")
    assert retry_after(await refused(limiter, "login", "10.0.0.1", "alice")) == WINDOW


@pytest_twisted.ensureDeferred
async def test_an_unknown_kind_is_a_programming_error(clock):
    with pytest.raises(KeyError):
        await AbuseLimiter(store=MemoryWindows(clock), limits=LIMITS).reserve("signup", "10.0.0.1", "alice")


def test_keys_hold_account_names_casefolded_and_digested(clock):
    limiter = AbuseLimiter(store=MemoryWindows(clock), limits=LIMITS)
    login = limiter.windows("login", "10.0.0.1", "Alice@Example.COM")
    assert [window.key for window in login] == [
        window.key for window in limiter.windows("login", "10.0.0.1", "alice@example.com")
    ]
    assert [window.limit for window in login] == [8, 6, 3]  # address, account, pair
    assert not any("alice" in window.key.lower() for window in login)
    huge = limiter.windows("login", "10.0.0.1", "x" * 500_000)
    assert max(len(window.key) for window in huge) < 100
    # registrations and reset requests: per address and per email, no pair
    assert [window.limit for window in limiter.windows("register", "10.0.0.1", "a@example.com")] == [2, 4]


@pytest_twisted.ensureDeferred
async def test_many_keys_do_not_break_counting_and_ended_windows_are_dropped(clock):
    """Past 10000 entries ended windows are pruned; live ones survive the pruning."""
    store = MemoryWindows(clock)
    limiter = AbuseLimiter(store=store, limits=LIMITS)
    for _ in range(3):
        await attempt(limiter, "login", "10.0.0.1", "alice")
    for n in range(10001):
        await attempt(limiter, "register", f"198.51.{n // 256}.{n % 256}", None)
    await refused(limiter, "login", "10.0.0.1", "alice")
    clock.advance(WINDOW)
    for n in range(30000):  # a steady stream of new addresses, window after window
        if n % 10000 == 0:
            clock.advance(WINDOW)
        await attempt(limiter, "register", f"203.{n // 65536}.{n // 256 % 256}.{n % 256}", None)
    assert len(store._windows) <= 2 * MemoryWindows.PRUNE_ABOVE + 1


# --- in Redis: expiry, several daemons ----------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_redis_keys_expire_with_their_window_and_giving_back_keeps_it(redis_pool):
    prefix = f"test:{uuid.uuid4().hex}:"
    limiter = AbuseLimiter(store=RedisWindows(pool=redis_pool, clock=reactor, prefix=prefix), limits=LIMITS)
    await limiter.reserve("login", "10.0.0.1", "alice")
    keys = [prefix + window.key for window in limiter.windows("login", "10.0.0.1", "alice")]
    for key in keys:
        assert 0 < int(await redis_pool.execute_command("PTTL", key)) <= WINDOW * 1000
    await limiter.release("login", "10.0.0.1", "alice")
    for key in keys:
        assert await redis_pool.get(key) == "0"
        assert 0 < int(await redis_pool.execute_command("PTTL", key)) <= WINDOW * 1000


@pytest_twisted.ensureDeferred
async def test_two_daemons_on_one_redis_share_their_counts(redis_server, redis_pool):
    """Two pools (as two daemons have) on the same server and prefix: one count."""
    other_pool = txredisapi.lazyConnectionPool(
        host="127.0.0.1", port=redis_server.port, poolsize=10, convertNumbers=False, connectTimeout=2, replyTimeout=5
    )
    try:
        prefix = f"test:{uuid.uuid4().hex}:"
        first = AbuseLimiter(store=RedisWindows(pool=redis_pool, clock=reactor, prefix=prefix), limits=LIMITS)
        second = AbuseLimiter(store=RedisWindows(pool=other_pool, clock=reactor, prefix=prefix), limits=LIMITS)
        bursts = await defer.gatherResults(
            [
                defer.Deferred.fromCoroutine(burst(limiter, [("login", "10.0.0.1", "alice")] * 50))
                for limiter in (first, second)
            ]
        )
        assert sum(admitted for admitted, _ in bursts) == 3
        await logged_in(first, "10.0.0.2", "alice")
        for _ in range(2):
            await attempt(second, "login", "10.0.0.2", "alice")
        await logged_in(second, "10.0.0.2", "alice")
        await attempt(first, "login", "10.0.0.2", "alice")  # the third failure from there
        await refused(second, "login", "10.0.0.2", "alice")
    finally:
        await other_pool.disconnect()


# --- a store that cannot be reached -------------------------------------------------------------


class Unreachable:
    """A store whose every call fails, as Redis does when it cannot be reached."""

    def reserve(self, windows, seconds):
        return defer.fail(txredisapi.ConnectionError("Not connected"))

    def release(self, keys):
        return defer.fail(txredisapi.ConnectionError("Not connected"))


@pytest.fixture
def errors_logged():
    events: list[dict] = []

    def observe(event: dict) -> None:
        if event.get("log_namespace") == "apid.auth.limits" and event.get("log_level") == LogLevel.error:
            events.append(event)

    globalLogPublisher.addObserver(observe)
    yield events
    globalLogPublisher.removeObserver(observe)


@pytest_twisted.ensureDeferred
async def test_failing_open_lets_attempts_through_uncounted_and_logs(errors_logged):
    limiter = AbuseLimiter(store=Unreachable(), limits=LIMITS, fail_open=True)
    for _ in range(10):
        assert await limiter.reserve("login", "10.0.0.1", "alice") is False
    assert len(errors_logged) == 10


@pytest_twisted.ensureDeferred
async def test_failing_closed_answers_503_with_retry_after(errors_logged):
    limiter = AbuseLimiter(store=Unreachable(), limits=LIMITS, fail_open=False)
    for kind in ("login", "register", "reset"):
        with pytest.raises(ServiceUnavailable) as caught:
            await limiter.reserve(kind, "10.0.0.1", "alice@example.com")
        assert caught.value.status == 503
        assert int(caught.value.headers["Retry-After"]) >= 1
        assert "alice" not in str(caught.value.to_dict())
    assert len(errors_logged) == 3


@pytest_twisted.ensureDeferred
async def test_giving_back_to_an_unreachable_store_only_logs(errors_logged):
    for fail_open in (True, False):
        await AbuseLimiter(store=Unreachable(), limits=LIMITS, fail_open=fail_open).release(
            "login", "10.0.0.1", "alice"
        )
    assert len(errors_logged) == 2


@pytest_twisted.ensureDeferred
async def test_redis_on_a_closed_port_fails_closed_in_bounded_time():
    pool = txredisapi.lazyConnectionPool(
        host="127.0.0.1", port=free_port(), poolsize=2, convertNumbers=False, connectTimeout=1, replyTimeout=1
    )
    limiter = AbuseLimiter(store=RedisWindows(pool=pool, clock=reactor, timeout=1), limits=LIMITS, fail_open=False)
    started = reactor.seconds()
    try:
        with pytest.raises(ServiceUnavailable):
            # the guard only stops a hang; a hang shows as the time taken
            await defer.Deferred.fromCoroutine(limiter.reserve("login", "10.0.0.1", "alice")).addTimeout(6, reactor)
        assert reactor.seconds() - started < 3
    finally:
        await pool.disconnect()
