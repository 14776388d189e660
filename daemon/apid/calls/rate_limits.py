"""Per-role rate limiting (SPEC "Limits"): requests per user over the day, then a lock.

The limit of a user is the largest `throttle.rateLimit` among their roles that have one; a
user with no such role is not limited. A caller without a token has the anonymous role's
rule and is counted per client address. Each request costs one, a batch one per element and a
chain one per link, all charged before anything runs. The request that reaches the limit
still runs and locks the user for `throttle.expires` seconds; while locked, and for a batch
or chain that would cross the limit, the answer is 429 with Retry-After, its detail saying
which: the limit used up, or what the request costs and what is left (none of it counted).
After the lock the count starts over. Every answer to a limited user carries the IETF
`RateLimit-Policy` and `RateLimit` fields (draft-ietf-httpapi-ratelimit-headers), named after
the role's rule.

An endpoint may add its own limit (IO State `RATELIMIT`): calls per window per user, the
most generous rule among the user's roles that have one (`"*"`: none). It is counted by the
same store under a key of its own, the daily limit first: a window starts with the first call,
the call that reaches the limit runs and starts a pause of one whole window, and a batch or
chain that would cross it is refused whole. Its policy, named for the endpoint
(`"team/show"`), is a second item of the same RateLimit fields.

Counts live in a `CounterStore`: in this process (one daemon) or in Redis (several processes
or daemons), where one Lua script makes each charge atomic, so counting is exact under load.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property
from typing import TYPE_CHECKING, Protocol

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from apid.auth.tokens import Principal
from apid.iostate.model import Endpoint
from apid.problems import TooManyRequests
from apid.store.redis import RedisCircuit, store_unreachable
from apid.telemetry import metrics

if TYPE_CHECKING:
    import txredisapi

log = Logger(namespace="apid.throttle")

DAY = 86400


@dataclass(frozen=True)
class Charge:
    """The outcome of charging `amount` requests: allowed or not, what is left, and when."""

    allowed: bool
    remaining: int
    reset: float  # seconds until the count starts over (or the lock ends)


class CounterStore(Protocol):
    def charge(self, user: str, amount: int, limit: int, window: int, lock: int) -> Deferred[Charge]: ...


class MemoryCounters:
    """Counts in this process, on the reactor's clock (exact: the reactor runs one thing at a time)."""

    def __init__(self, clock: IReactorTime) -> None:
        self._clock = clock
        self._counts: dict[str, tuple[int, float]] = {}  # user -> (count, window end)
        self._locks: dict[str, float] = {}  # user -> lock end

    def charge(self, user: str, amount: int, limit: int, window: int, lock: int) -> Deferred[Charge]:
        now = self._clock.seconds()
        locked_until = self._locks.get(user, 0.0)
        if locked_until > now:
            return succeed(Charge(False, 0, locked_until - now))
        count, ends = self._counts.get(user, (0, now + window))
        if ends <= now:
            count, ends = 0, now + window
        if count + amount > limit:
            return succeed(Charge(False, limit - count, ends - now))
        count += amount
        if count >= limit:
            self._locks[user] = now + lock
            self._counts.pop(user, None)
            return succeed(Charge(True, 0, float(lock)))
        self._counts[user] = (count, ends)
        return succeed(Charge(True, limit - count, ends - now))


# KEYS: count, lock. ARGV: amount, limit, window, lock seconds.
# Returns {allowed (0/1), remaining, milliseconds to reset}.
CHARGE_SCRIPT = """
local locked = redis.call('PTTL', KEYS[2])
if locked > 0 then return {0, 0, locked} end
local amount, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
local count = tonumber(redis.call('GET', KEYS[1]) or '0')
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then ttl = tonumber(ARGV[3]) * 1000 end
if count + amount > limit then return {0, limit - count, ttl} end
count = redis.call('INCRBY', KEYS[1], amount)
if count == amount then redis.call('PEXPIRE', KEYS[1], tonumber(ARGV[3]) * 1000) end
if count >= limit then
  redis.call('SET', KEYS[2], '1', 'EX', tonumber(ARGV[4]))
  redis.call('DEL', KEYS[1])
  return {1, 0, tonumber(ARGV[4]) * 1000}
end
return {1, limit - count, ttl}
"""


class RedisCounters:
    """Counts in Redis, shared by every process and daemon that uses the same server.

    Each charge runs through a `RedisCircuit` (the daemon's, shared with the abuse limits; one
    of its own made with `timeout` otherwise): while Redis cannot be reached a charge fails at
    once, and the limiter fails open or closed as configured, instead of holding the request.
    """

    def __init__(
        self,
        *,
        pool: txredisapi.ConnectionHandler,
        clock: IReactorTime,
        timeout: float = 2.0,
        prefix: str = "apid:throttle:",
        circuit: RedisCircuit | None = None,
    ) -> None:
        self._circuit = circuit or RedisCircuit(connect=lambda: pool, clock=clock, timeout=timeout)
        self._prefix = prefix

    def charge(self, user: str, amount: int, limit: int, window: int, lock: int) -> Deferred[Charge]:
        keys = [f"{self._prefix}count:{user}", f"{self._prefix}lock:{user}"]
        charging = self._circuit.run_script(CHARGE_SCRIPT, keys, [amount, limit, window, lock])
        return charging.addCallback(lambda reply: Charge(bool(int(reply[0])), int(reply[1]), int(reply[2]) / 1000))


@dataclass(frozen=True)
class Rule:
    policy: str  # the role whose rule applies, or the endpoint: the policy's name in the RateLimit fields
    limit: int
    window: int = DAY

    @cached_property
    def policy_field(self) -> str:
        return f'"{self.policy}";q={self.limit};w={self.window}'


def endpoint_rule(endpoint: Endpoint, roles: frozenset[str]) -> Rule | None:
    """The endpoint's RATELIMIT for these roles: the most generous (most calls a second, then
    most calls) among the roles that have one; None when none has, or one has `"*"`."""
    if not endpoint.rate_limits:  # most endpoints: asked on every call
        return None
    ruled = [(role, limit.calls, limit.window) for role, limit in endpoint.rate_limits.items() if role in roles]
    counted = [(role, calls, window) for role, calls, window in ruled if calls is not None]
    if not counted or len(counted) < len(ruled):
        return None
    _, calls, window = max(counted, key=lambda item: (Fraction(item[1], item[2]), item[1], item[0]))
    return Rule(policy=endpoint.path, limit=calls, window=window)


class RateLimiter:
    def __init__(
        self, *, store: CounterStore, rate_limits: Mapping[str, int], expires: int, fail_open: bool = True
    ) -> None:
        self._store = store
        self._limits = rate_limits
        self._expires = expires
        self._fail_open = fail_open
        self._known: dict[frozenset[str], Rule | None] = {}  # every request asks; few role sets exist

    def rule(self, roles: frozenset[str]) -> Rule | None:
        """The largest rateLimit among the roles that have one; None when none has."""
        if roles not in self._known:
            ruled = [(limit, role) for role, limit in self._limits.items() if role in roles]
            self._known[roles] = None
            if ruled:
                limit, role = max(ruled)
                self._known[roles] = Rule(policy=role, limit=limit)
        return self._known[roles]

    async def charge(
        self, principal: Principal, amount: int, address: str = "unknown", calls: Iterable[tuple[Endpoint, int]] = ()
    ) -> dict[str, str]:
        """Charge the user `amount` requests of the day, then each endpoint of `calls` its
        number of calls (RATELIMIT); a caller without a token is counted by the client
        `address` (they have no account to count). A person is counted once, whichever of
        their logins and keys calls: more keys never multiply a role's limit.
        The RateLimit fields to answer with, or a 429."""
        counted = f"address:{address}" if principal.anonymous else str(principal.user_id)
        quotas = [
            (rule, "rate", counted, amount, self._expires) for rule in [self.rule(principal.roles)] if rule is not None
        ]
        for endpoint, count in calls:
            rule = endpoint_rule(endpoint, principal.roles)
            if rule is not None:
                quotas.append(
                    (rule, "endpoint", f"{counted}@{endpoint.api_version}/{endpoint.path}", count, rule.window)
                )
        fields: dict[str, str] = {}
        for rule, kind, key, count, lock in quotas:
            try:
                charge = await self._store.charge(key, count, rule.limit, rule.window, lock)
            except Exception as error:
                store_unreachable(log, "rate limiting", error, self._fail_open)
                continue
            reset = max(1, math.ceil(charge.reset))
            fields = _add_item(fields, rule.policy_field, f'"{rule.policy}";r={max(0, charge.remaining)};t={reset}')
            if not charge.allowed:
                metrics.throttled(kind, rule.policy)
                raise TooManyRequests(
                    _refusal(rule, kind, count, charge.remaining, reset),
                    headers={**fields, "Retry-After": str(reset)},
                    violatedPolicies=[rule.policy],
                )
        return fields


def _refusal(rule: Rule, kind: str, cost: int, remaining: int, reset: int) -> str:
    """Why a charge was refused: the limit is used up (the caller is locked), or the request
    costs more than is left, which the store refused whole without counting any of it."""
    quota = (
        f"the request limit of {rule.limit} a day"
        if kind == "rate"
        else f"the limit of {rule.limit} calls of {rule.policy} per {rule.window} seconds"
    )
    if remaining <= 0:
        return f"{quota} is used up; try again in {reset} seconds"
    counts = "a batch counts one per element, a chain one per link"
    if cost > rule.limit:
        return (
            f"this request costs {cost} ({counts}), more than {quota} allows at once: it was refused "
            f"whole, none of it counted against that limit; {remaining} are left, send at most that many"
        )
    return (
        f"this request costs {cost} ({counts}) and {remaining} are left of {quota}: it was refused whole, "
        f"none of it counted against that limit; send at most {remaining}, or this one again in {reset} "
        f"seconds"
    )


def _add_item(fields: dict[str, str], policy: str, state: str) -> dict[str, str]:
    """The RateLimit fields with one more policy: each field is a list, one item per policy."""
    if not fields:
        return {"RateLimit-Policy": policy, "RateLimit": state}
    return {
        "RateLimit-Policy": f"{fields['RateLimit-Policy']}, {policy}",
        "RateLimit": f"{fields['RateLimit']}, {state}",
    }
