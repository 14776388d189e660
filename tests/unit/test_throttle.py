"""Rate limiting (DESIGN 4.11, issue 6): the counter stores and the RateLimiter.

One contract suite runs against both stores: MemoryCounters on a `task.Clock`, and
RedisCounters on a real redis-server started once for the module (through txredisapi, on the
real reactor, numbers kept as strings). A Clock cannot drive Redis, so on Redis the few
time-dependent cases wait for real (one or two seconds, with one-second windows and locks)
and the reset values are compared with a small tolerance; on the Clock they are exact.

Then the RateLimiter on MemoryCounters and a Clock: which rule applies, the IETF RateLimit
fields, the 429, and what a failing store gives (fail-open or fail-closed). Last, many
simultaneous charges on Redis admit exactly the limit.
"""

from __future__ import annotations

import itertools
import re
import uuid
from dataclasses import dataclass
from typing import Any

import pytest
import pytest_twisted
import txredisapi
from prometheus_client import REGISTRY
from twisted.internet import defer, reactor, task
from twisted.python import failure

from apid.auth.tokens import Principal
from apid.calls.rate_limits import DAY, Charge, MemoryCounters, RateLimiter, RedisCounters, Rule, endpoint_rule
from apid.iostate.model import CallLimit, Endpoint, RoleFields
from apid.problems import ServiceUnavailable, TooManyRequests
from apid.telemetry import metrics
from harness import free_port

REDIS_TOLERANCE = 1.0  # seconds: Redis timers run on real time, on a machine that may be loaded
_users = itertools.count(1)


def a_user() -> str:
    return f"user{next(_users)}"


# --- the stores ------------------------------------------------------------------------------


@dataclass
class Store:
    """A store under test, with how to let time pass for it and how exact its resets are."""

    kind: str
    counters: Any
    clock: task.Clock | None = None

    async def wait(self, seconds: float) -> float:
        """Let `seconds` go by (on Redis for real, a little more); how many went by."""
        if self.clock is not None:
            self.clock.advance(seconds)
            return seconds
        started = reactor.seconds()
        await task.deferLater(reactor, seconds + 0.1, lambda: None)
        return reactor.seconds() - started

    def assert_reset(self, charge: Charge, expected: float) -> None:
        if self.clock is not None:
            assert charge.reset == pytest.approx(expected), charge
        else:
            # Redis counts time left in whole milliseconds: allow one for the rounding
            assert expected - REDIS_TOLERANCE <= charge.reset <= expected + 0.001, charge

    async def charge(self, user: str, amount: int = 1, *, limit: int, window: int = 100, lock: int = 10) -> Charge:
        return await self.counters.charge(user, amount, limit, window, lock)


@pytest.fixture(params=["memory", "redis"])
def store(request) -> Store:
    if request.param == "memory":
        clock = task.Clock()
        clock.advance(1000)  # a clock that does not start at zero
        return Store("memory", MemoryCounters(clock), clock)
    pool = request.getfixturevalue("redis_pool")
    return Store("redis", RedisCounters(pool=pool, clock=reactor, prefix=f"test:{uuid.uuid4().hex}:"))


# --- the contract both stores keep -------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_each_charge_counts_and_tells_what_remains_and_when_the_window_ends(store):
    user = a_user()
    first = await store.charge(user, limit=5, window=100)
    assert first.allowed and first.remaining == 4
    store.assert_reset(first, 100)
    assert [(c.allowed, c.remaining) for c in [await store.charge(user, limit=5, window=100) for _ in range(2)]] == [
        (True, 3),
        (True, 2),
    ]
    two = await store.charge(user, 2, limit=10, window=100)  # amounts add up; the limit is the caller's
    assert two.allowed and two.remaining == 10 - 5
    store.assert_reset(two, 100)


@pytest_twisted.ensureDeferred
async def test_users_are_counted_apart(store):
    alice, bob = a_user(), a_user()
    for _ in range(3):
        await store.charge(alice, limit=3)
    assert not (await store.charge(alice, limit=3)).allowed
    bobs = await store.charge(bob, limit=3)
    assert bobs.allowed and bobs.remaining == 2


@pytest_twisted.ensureDeferred
async def test_the_charge_that_reaches_the_limit_is_allowed_and_locks(store):
    user = a_user()
    assert (await store.charge(user, limit=3, lock=10)).remaining == 2
    assert (await store.charge(user, limit=3, lock=10)).remaining == 1
    reaching = await store.charge(user, limit=3, lock=10)
    assert reaching.allowed and reaching.remaining == 0
    store.assert_reset(reaching, 10)  # the reset is now the lock, not the window
    after = await store.charge(user, limit=3, lock=10)
    assert not after.allowed and after.remaining == 0
    store.assert_reset(after, 10)


@pytest_twisted.ensureDeferred
async def test_a_charge_of_several_that_lands_exactly_on_the_limit_is_allowed_and_locks(store):
    user = a_user()
    await store.charge(user, 1, limit=4, lock=10)
    reaching = await store.charge(user, 3, limit=4, lock=10)
    assert reaching.allowed and reaching.remaining == 0
    store.assert_reset(reaching, 10)
    assert not (await store.charge(user, 1, limit=4, lock=10)).allowed


@pytest_twisted.ensureDeferred
async def test_while_locked_every_charge_is_refused_with_the_lock_left_as_reset(store):
    user = a_user()
    for _ in range(2):
        await store.charge(user, limit=2, lock=2)
    refused = await store.charge(user, limit=2, lock=2)
    assert not refused.allowed and refused.remaining == 0
    store.assert_reset(refused, 2)
    waited = await store.wait(1)  # about one second of the two-second lock goes by
    later = await store.charge(user, limit=2, lock=2)
    assert not later.allowed and later.remaining == 0
    store.assert_reset(later, 2 - waited)  # what is left of it: refusals do not extend the lock


@pytest_twisted.ensureDeferred
async def test_a_charge_that_would_cross_the_limit_is_refused_whole_and_counts_nothing(store):
    user = a_user()
    assert (await store.charge(user, 3, limit=5, window=100)).remaining == 2
    crossing = await store.charge(user, 3, limit=5, window=100)
    assert not crossing.allowed and crossing.remaining == 2
    store.assert_reset(crossing, 100)  # not locked: the reset is the window's
    fits = await store.charge(user, 2, limit=5, window=100)  # the refused 3 were not counted
    assert fits.allowed and fits.remaining == 0


@pytest_twisted.ensureDeferred
async def test_a_charge_larger_than_the_limit_is_refused_and_does_not_lock(store):
    user = a_user()
    too_big = await store.charge(user, 6, limit=5, window=100)
    assert not too_big.allowed and too_big.remaining == 5
    store.assert_reset(too_big, 100)
    one = await store.charge(user, 1, limit=5, window=100)
    assert one.allowed and one.remaining == 4


@pytest_twisted.ensureDeferred
async def test_after_the_lock_ends_the_count_starts_over(store):
    user = a_user()
    for _ in range(3):
        await store.charge(user, limit=3, window=100, lock=1)
    assert not (await store.charge(user, limit=3, window=100, lock=1)).allowed
    await store.wait(1)
    again = await store.charge(user, limit=3, window=100, lock=1)
    assert again.allowed and again.remaining == 2  # not 0: the old count is gone
    store.assert_reset(again, 100)  # and a fresh window began


@pytest_twisted.ensureDeferred
async def test_the_window_runs_from_the_first_charge_and_then_the_count_starts_over(store):
    user = a_user()
    assert (await store.charge(user, 3, limit=5, window=2)).remaining == 2
    waited = await store.wait(1)
    later = await store.charge(user, 1, limit=5, window=2)
    assert later.allowed and later.remaining == 1
    store.assert_reset(later, 2 - waited)  # a later charge does not push the window back
    await store.wait(1.3)  # past the window's end with a margin for a loaded machine
    fresh = await store.charge(user, 1, limit=5, window=2)
    assert fresh.allowed and fresh.remaining == 4
    store.assert_reset(fresh, 2)


# --- RateLimiter on MemoryCounters and a Clock -----------------------------------------------

LIMITS = {"ROLE_USER": 5, "ROLE_ADMIN": 1000}
EXPIRES = 60
POLICY = re.compile(r'^"(?P<name>[A-Z_]+)";q=(?P<q>\d+);w=(?P<w>\d+)$')
STATE = re.compile(r'^"(?P<name>[A-Z_]+)";r=(?P<r>\d+);t=(?P<t>\d+)$')


def principal(user_id: int, *roles: str) -> Principal:
    return Principal(
        user_id=user_id,
        username=f"user{user_id}",
        roles=frozenset(roles),
        token_id=f"t{user_id}",
        expires=0,
        issued_at=0.0,
    )


class Recording:
    """A store that remembers what it was asked and passes it on to MemoryCounters."""

    def __init__(self, clock: task.Clock) -> None:
        self.inner = MemoryCounters(clock)
        self.calls: list[tuple] = []

    def charge(self, user, amount, limit, window, lock):
        self.calls.append((user, amount, limit, window, lock))
        return self.inner.charge(user, amount, limit, window, lock)


class Unreachable:
    """A store whose every charge fails, as Redis does when it cannot be reached."""

    def __init__(self) -> None:
        self.calls = 0

    def charge(self, user, amount, limit, window, lock):
        self.calls += 1
        return defer.fail(txredisapi.ConnectionError("Not connected"))


@pytest.fixture
def clock() -> task.Clock:
    return task.Clock()


@pytest.fixture
def store_seen(clock) -> Recording:
    return Recording(clock)


@pytest.fixture
def limiter(store_seen) -> RateLimiter:
    return RateLimiter(store=store_seen, rate_limits=LIMITS, expires=EXPIRES)


def state(fields: dict[str, str]) -> dict[str, Any]:
    match = STATE.match(fields["RateLimit"])
    assert match, fields
    return {"name": match["name"], "r": int(match["r"]), "t": int(match["t"])}


def test_the_rule_is_the_largest_limit_among_the_ruled_roles():
    limiter = RateLimiter(
        store=MemoryCounters(task.Clock()),
        rate_limits={"ROLE_ADMIN": 1000, "ROLE_USER": 5, "ROLE_GUEST": 50},
        expires=60,
    )
    assert limiter.rule(frozenset({"ROLE_USER"})) == Rule("ROLE_USER", 5)
    assert limiter.rule(frozenset({"ROLE_USER", "ROLE_ADMIN"})) == Rule("ROLE_ADMIN", 1000)
    assert limiter.rule(frozenset({"ROLE_USER", "ROLE_GUEST"})) == Rule("ROLE_GUEST", 50)
    assert limiter.rule(frozenset({"ROLE_USER", "ROLE_OTHER"})) == Rule("ROLE_USER", 5)  # unruled roles ignored
    assert limiter.rule(frozenset({"ROLE_OTHER"})) is None
    assert limiter.rule(frozenset()) is None


@pytest_twisted.ensureDeferred
async def test_a_user_with_several_ruled_roles_is_held_to_the_largest_limit(clock):
    limiter = RateLimiter(store=MemoryCounters(clock), rate_limits={"ROLE_USER": 2, "ROLE_ADMIN": 4}, expires=EXPIRES)
    both = principal(7, "ROLE_USER", "ROLE_ADMIN")
    answers = [state(await limiter.charge(both, 1)) for _ in range(4)]
    assert [a["r"] for a in answers] == [3, 2, 1, 0]
    assert {a["name"] for a in answers} == {"ROLE_ADMIN"}
    with pytest.raises(TooManyRequests):
        await limiter.charge(both, 1)


@pytest_twisted.ensureDeferred
async def test_no_ruled_role_means_no_limit_no_fields_and_no_counting(clock, store_seen, limiter):
    nobody = principal(3, "ROLE_OTHER")
    for _ in range(50):
        assert await limiter.charge(nobody, 1) == {}
    assert await limiter.charge(principal(4), 10) == {}  # no role at all
    assert store_seen.calls == []


@pytest_twisted.ensureDeferred
async def test_the_fields_name_the_policy_and_tell_what_remains(clock, store_seen, limiter):
    user = principal(11, "ROLE_USER")
    fields = await limiter.charge(user, 1)
    assert fields == {"RateLimit-Policy": '"ROLE_USER";q=5;w=86400', "RateLimit": '"ROLE_USER";r=4;t=86400'}
    assert store_seen.calls == [("11", 1, 5, DAY, EXPIRES)]
    clock.advance(100.5)
    fields = await limiter.charge(user, 2)
    assert fields == {"RateLimit-Policy": '"ROLE_USER";q=5;w=86400', "RateLimit": '"ROLE_USER";r=2;t=86300'}
    admin = await limiter.charge(principal(12, "ROLE_ADMIN", "ROLE_USER"), 1)
    assert admin == {"RateLimit-Policy": '"ROLE_ADMIN";q=1000;w=86400', "RateLimit": '"ROLE_ADMIN";r=999;t=86400'}


@pytest_twisted.ensureDeferred
async def test_the_request_that_reaches_the_limit_answers_r_0_and_the_lock_as_t(clock, limiter):
    user = principal(13, "ROLE_USER")
    for _ in range(4):
        await limiter.charge(user, 1)
    fields = await limiter.charge(user, 1)
    assert fields["RateLimit"] == f'"ROLE_USER";r=0;t={EXPIRES}'
    assert POLICY.match(fields["RateLimit-Policy"])


@pytest_twisted.ensureDeferred
async def test_a_locked_user_gets_429_with_retry_after_the_lock_left(clock, limiter):
    user = principal(14, "ROLE_USER")
    await limiter.charge(user, 5)
    with pytest.raises(TooManyRequests) as caught:
        await limiter.charge(user, 1)
    problem = caught.value
    assert problem.status == 429
    assert problem.headers["Retry-After"] == str(EXPIRES)
    assert problem.headers["RateLimit-Policy"] == '"ROLE_USER";q=5;w=86400'
    assert problem.headers["RateLimit"] == f'"ROLE_USER";r=0;t={EXPIRES}'
    assert problem.extensions["violatedPolicies"] == ["ROLE_USER"]
    assert problem.detail == f"the request limit of 5 a day is used up; try again in {EXPIRES} seconds"
    body = problem.to_dict("/v0.1/person/show")
    assert body["status"] == 429 and body["violatedPolicies"] == ["ROLE_USER"]
    assert body["type"] == "urn:apid:problem:too-many-requests"
    clock.advance(EXPIRES - 10.5)
    with pytest.raises(TooManyRequests) as caught:
        await limiter.charge(user, 1)
    assert caught.value.headers["Retry-After"] == "11"  # seconds rounded up, never early
    assert caught.value.headers["RateLimit"] == '"ROLE_USER";r=0;t=11'
    clock.advance(10.4)
    with pytest.raises(TooManyRequests) as caught:
        await limiter.charge(user, 1)
    assert caught.value.headers["Retry-After"] == "1"  # a tenth of a second left is still one
    clock.advance(0.1)
    assert state(await limiter.charge(user, 1))["r"] == 4  # lock over, count started over


@pytest_twisted.ensureDeferred
async def test_a_charge_that_would_cross_the_limit_is_429_and_counts_nothing(clock, limiter):
    user = principal(15, "ROLE_USER")
    assert state(await limiter.charge(user, 3))["r"] == 2
    with pytest.raises(TooManyRequests) as caught:
        await limiter.charge(user, 3)
    assert state(caught.value.headers)["r"] == 2
    reset = caught.value.headers["Retry-After"]
    assert int(reset) >= 1 and state(caught.value.headers)["t"] == int(reset)
    assert caught.value.extensions["violatedPolicies"] == ["ROLE_USER"]
    assert caught.value.detail == (  # not "used up": what it costs, what is left, that nothing was counted
        "this request costs 3 (a batch counts one per element, a chain one per link) and 2 are left of the "
        f"request limit of 5 a day: it was refused whole, none of it counted against that limit; send at most 2, "
        f"or this one again in {reset} seconds"
    )
    assert state(await limiter.charge(user, 2))["r"] == 0  # the 3 refused were not counted


@pytest_twisted.ensureDeferred
async def test_a_charge_larger_than_the_whole_limit_says_so_and_counts_nothing(clock, limiter):
    user = principal(18, "ROLE_USER")
    with pytest.raises(TooManyRequests) as caught:
        await limiter.charge(user, 10_000)
    assert state(caught.value.headers)["r"] == 5
    assert caught.value.detail == (
        "this request costs 10000 (a batch counts one per element, a chain one per link), more than the request "
        "limit of 5 a day allows at once: it was refused whole, none of it counted against that limit; 5 are "
        "left, send at most that many"
    )
    assert state(await limiter.charge(user, 1))["r"] == 4


@pytest_twisted.ensureDeferred
async def test_each_user_has_their_own_count(clock, limiter):
    await limiter.charge(principal(16, "ROLE_USER"), 5)
    with pytest.raises(TooManyRequests):
        await limiter.charge(principal(16, "ROLE_USER"), 1)
    assert state(await limiter.charge(principal(17, "ROLE_USER"), 1))["r"] == 4


@pytest_twisted.ensureDeferred
async def test_a_failing_store_fails_open_by_default():
    unreachable = Unreachable()
    limiter = RateLimiter(store=unreachable, rate_limits=LIMITS, expires=EXPIRES)
    assert await limiter.charge(principal(18, "ROLE_USER"), 1) == {}
    assert unreachable.calls == 1


@pytest_twisted.ensureDeferred
async def test_a_failing_store_fails_closed_with_503_and_retry_after():
    limiter = RateLimiter(store=Unreachable(), rate_limits=LIMITS, expires=EXPIRES, fail_open=False)
    with pytest.raises(ServiceUnavailable) as caught:
        await limiter.charge(principal(19, "ROLE_USER"), 1)
    assert caught.value.status == 503
    assert int(caught.value.headers["Retry-After"]) >= 1
    assert "RateLimit" not in caught.value.headers


@pytest_twisted.ensureDeferred
async def test_a_failing_store_is_not_asked_for_users_without_a_rule():
    unreachable = Unreachable()
    limiter = RateLimiter(store=unreachable, rate_limits=LIMITS, expires=EXPIRES, fail_open=False)
    assert await limiter.charge(principal(20, "ROLE_OTHER"), 1) == {}
    assert unreachable.calls == 0


@pytest_twisted.ensureDeferred
async def test_redis_counters_on_a_closed_port_fail_closed_in_bounded_time():
    pool = txredisapi.lazyConnectionPool(
        host="127.0.0.1", port=free_port(), poolsize=2, convertNumbers=False, connectTimeout=1, replyTimeout=1
    )
    limiter = RateLimiter(
        store=RedisCounters(pool=pool, clock=reactor, timeout=1), rate_limits=LIMITS, expires=EXPIRES, fail_open=False
    )
    answer = defer.Deferred.fromCoroutine(limiter.charge(principal(21, "ROLE_USER"), 1))
    first: defer.Deferred = defer.Deferred()  # the answer or, after 4 s, "no answer" (nothing is cancelled)
    answer.addBoth(lambda result: first.called or first.callback([result]))
    timer = reactor.callLater(4, lambda: first.called or first.callback(["no answer"]))
    try:
        [outcome] = await first
        assert isinstance(outcome, failure.Failure), outcome
        assert outcome.check(ServiceUnavailable), outcome
    finally:
        if timer.active():
            timer.cancel()
        if not answer.called:
            answer.addErrback(lambda _: None)
            answer.cancel()
        await pool.disconnect()


# --- exact under concurrency on Redis --------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_two_hundred_simultaneous_charges_on_redis_admit_exactly_the_limit(redis_pool):
    counters = RedisCounters(pool=redis_pool, clock=reactor, prefix=f"test:{uuid.uuid4().hex}:")
    charges = await defer.gatherResults(
        [counters.charge("crowded", 1, 50, 100, 30) for _ in range(200)], consumeErrors=True
    )
    allowed = [c for c in charges if c.allowed]
    assert len(allowed) == 50
    assert sorted(c.remaining for c in allowed) == list(range(50))  # each count handed out once
    assert all(c.remaining == 0 for c in charges if not c.allowed)
    assert not (await counters.charge("crowded", 1, 50, 100, 30)).allowed  # and the user is locked


@pytest_twisted.ensureDeferred
async def test_simultaneous_batches_on_redis_never_cross_the_limit(redis_pool):
    counters = RedisCounters(pool=redis_pool, clock=reactor, prefix=f"test:{uuid.uuid4().hex}:")
    charges = await defer.gatherResults(
        [counters.charge("batches", 3, 50, 100, 30) for _ in range(40)], consumeErrors=True
    )
    allowed = [c for c in charges if c.allowed]
    assert len(allowed) == 16  # 16 * 3 = 48; a 17th would make 51
    assert sorted(c.remaining for c in allowed) == list(range(2, 50, 3))
    last = await counters.charge("batches", 2, 50, 100, 30)
    assert last.allowed and last.remaining == 0  # exactly 48 were counted


# --- an endpoint's own limit (IO State RATELIMIT) ----------------------------------------------


def limited_endpoint(limits: dict[str, CallLimit], action: str = "show") -> Endpoint:
    no_fields = RoleFields(permit_all=frozenset(), by_role={})
    return Endpoint(
        controller="team",
        action=action,
        api_version="1",
        method="GET",
        description="",
        roles=frozenset({"ROLE_USER", "ROLE_ADMIN", "ROLE_GUEST"}),
        batch_roles=frozenset(),
        hook_roles=frozenset(),
        request=no_fields,
        response=no_fields,
        rate_limits=limits,
    )


def test_the_endpoint_rule_is_the_most_generous_among_the_ruled_roles():
    endpoint = limited_endpoint(
        {"ROLE_USER": CallLimit(10, 600), "ROLE_GUEST": CallLimit(2, 60), "ROLE_ADMIN": CallLimit(None, 600)}
    )
    assert endpoint_rule(endpoint, frozenset({"ROLE_USER"})) == Rule("team/show", 10, 600)
    # 2 a minute is 20 per 10 minutes: more generous than 10 per 10 minutes
    assert endpoint_rule(endpoint, frozenset({"ROLE_USER", "ROLE_GUEST"})) == Rule("team/show", 2, 60)
    assert endpoint_rule(endpoint, frozenset({"ROLE_USER", "ROLE_ADMIN"})) is None  # "*": no endpoint limit
    assert endpoint_rule(endpoint, frozenset({"ROLE_OTHER"})) is None  # no ruled role
    assert endpoint_rule(limited_endpoint({}), frozenset({"ROLE_USER"})) is None
    same_rate = limited_endpoint({"ROLE_USER": CallLimit(10, 600), "ROLE_GUEST": CallLimit(1, 60)})
    assert endpoint_rule(same_rate, frozenset({"ROLE_USER", "ROLE_GUEST"})) == Rule("team/show", 10, 600)


@pytest_twisted.ensureDeferred
async def test_an_endpoint_limit_is_a_second_policy_in_the_same_fields(clock, store_seen, limiter):
    show = limited_endpoint({"ROLE_USER": CallLimit(3, 600)})
    fields = await limiter.charge(principal(30, "ROLE_USER"), 1, calls=[(show, 1)])
    assert fields == {
        "RateLimit-Policy": '"ROLE_USER";q=5;w=86400, "team/show";q=3;w=600',
        "RateLimit": '"ROLE_USER";r=4;t=86400, "team/show";r=2;t=600',
    }
    # counted apart from the day's count, per user, endpoint and API version; locked for a window
    assert store_seen.calls == [("30", 1, 5, DAY, EXPIRES), ("30@1/team/show", 1, 3, 600, 600)]


@pytest_twisted.ensureDeferred
async def test_past_an_endpoint_limit_the_call_is_429_naming_the_endpoint_until_the_window_passes(clock):
    def rejections() -> float:
        labels = {"kind": "endpoint", "policy": "team/show"}
        return REGISTRY.get_sample_value("apid_throttle_rejections_total", labels) or 0

    metrics.count()  # as a daemon whose metrics are read does
    rejected = rejections()
    limiter = RateLimiter(store=MemoryCounters(clock), rate_limits={"ROLE_ADMIN": 1000}, expires=EXPIRES)
    show = limited_endpoint({"ROLE_USER": CallLimit(2, 60)})
    other = limited_endpoint({}, action="list")
    user = principal(31, "ROLE_USER")
    assert await limiter.charge(user, 1, calls=[(show, 1)]) == {
        "RateLimit-Policy": '"team/show";q=2;w=60',
        "RateLimit": '"team/show";r=1;t=60',
    }
    clock.advance(10)
    reached = await limiter.charge(user, 1, calls=[(show, 1)])
    assert reached["RateLimit"] == '"team/show";r=0;t=60'  # the call that reaches the limit runs
    with pytest.raises(TooManyRequests) as caught:
        await limiter.charge(user, 1, calls=[(show, 1)])
    problem = caught.value
    assert problem.headers == {
        "RateLimit-Policy": '"team/show";q=2;w=60',
        "RateLimit": '"team/show";r=0;t=60',
        "Retry-After": "60",
    }
    assert rejections() == rejected + 1
    assert problem.extensions["violatedPolicies"] == ["team/show"]
    assert "2 calls of team/show per 60 seconds" in problem.detail
    assert await limiter.charge(user, 1, calls=[(other, 1)]) == {}  # other endpoints are not affected
    assert await limiter.charge(principal(32, "ROLE_USER"), 1, calls=[(show, 1)])  # nor other users
    clock.advance(60)
    assert (await limiter.charge(user, 1, calls=[(show, 1)]))["RateLimit"] == '"team/show";r=1;t=60'


@pytest_twisted.ensureDeferred
async def test_a_batch_crossing_an_endpoint_limit_is_refused_whole_and_counts_nothing_there(clock, store_seen, limiter):
    show = limited_endpoint({"ROLE_USER": CallLimit(3, 600)})
    user = principal(33, "ROLE_USER")
    with pytest.raises(TooManyRequests) as caught:
        await limiter.charge(user, 4, calls=[(show, 4)])
    assert caught.value.headers["RateLimit"] == '"ROLE_USER";r=1;t=86400, "team/show";r=3;t=600'
    assert caught.value.extensions["violatedPolicies"] == ["team/show"]
    assert caught.value.detail.startswith(
        "this request costs 4 (a batch counts one per element, a chain one per "
        "link), more than the limit of 3 calls of team/show per 600 seconds "
        "allows at once: it was refused whole, none of it counted against that "
        "limit; 3 are left"
    )
    fields = await limiter.charge(user, 1, calls=[(show, 3)])
    assert fields["RateLimit"] == '"ROLE_USER";r=0;t=60, "team/show";r=0;t=600'


@pytest_twisted.ensureDeferred
async def test_a_locked_day_is_refused_before_any_endpoint_is_counted(clock, store_seen, limiter):
    show = limited_endpoint({"ROLE_USER": CallLimit(3, 600)})
    user = principal(34, "ROLE_USER")
    await limiter.charge(user, 5)
    with pytest.raises(TooManyRequests) as caught:
        await limiter.charge(user, 1, calls=[(show, 1)])
    assert caught.value.extensions["violatedPolicies"] == ["ROLE_USER"]
    assert [call[0] for call in store_seen.calls] == ["34", "34"]  # team/show never charged
