"""Abuse limits on the public account endpoints: logins, registrations, reset requests.

Every attempt first reserves one count in each window that applies to it, before any work is
done (a password verified, a mail sent). When one of them is used up nothing is counted and
the answer is 429 with Retry-After, alike for an account that exists and one that does not.
A reservation is atomic, so of N simultaneous attempts at most the limit get through.

- login: per (account name, address), per account name and per client address. A login that
  succeeds gives its reservation back, so only failures count and the owner's logins never
  do. The tight limit is the pair's: guessing from one address locks that pair, not the owner
  logging in from elsewhere (docs/accounts.md gives the numbers and why).
- register and reset (/forgotPassword): per client address and per email; every request counts.

A client address is an IPv4 address, or an IPv6 address's network of `security.ipv6Prefix`
bits (a /64 by default): a host given a /64 would otherwise have 2^64 fresh addresses.

Windows are fixed: one starts at the first attempt it counts and lasts `window` seconds.
Account names are casefolded and digested in keys. Counts live in a `WindowStore`: in this
process on the reactor's clock (one daemon), or in Redis (shared by every process and daemon
using the server, which `redis.url` turns on); when Redis cannot be reached,
`redis.onFailure` says whether attempts go through uncounted or get a 503.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from apid.auth.accounts import email_key
from apid.config.api import AbuseLimit
from apid.http.proxies import client_group
from apid.problems import TooManyRequests
from apid.store.redis import RedisCircuit, RedisUnreachable, store_unreachable
from apid.telemetry import metrics

if TYPE_CHECKING:
    import txredisapi

log = Logger(namespace="apid.auth.limits")
TOO_MANY = "too many attempts; try again later"


@dataclass(frozen=True)
class Window:
    """One count in the store: its key, and how many attempts it allows per window."""

    key: str
    limit: int


class WindowStore(Protocol):
    def reserve(self, windows: Sequence[Window], seconds: int) -> Deferred[float]:
        """Count one attempt in every window and answer 0 when none is used up; else count
        nothing and answer the seconds until the last of the used-up windows ends. A window
        that counts nothing yet starts now and lasts `seconds`."""

    def release(self, keys: Sequence[str]) -> Deferred[None]:
        """Give one reserved attempt back to each window that still counts one."""


class MemoryWindows:
    """Windows in this process, on the reactor's clock (exact: the reactor runs one thing at a time)."""

    PRUNE_ABOVE = 10000  # entries; ended windows are dropped when the map has doubled since

    def __init__(self, clock: IReactorTime) -> None:
        self._clock = clock
        self._windows: dict[str, tuple[float, int]] = {}  # key -> (when the window ends, count)
        self._prune_at = self.PRUNE_ABOVE

    def _live(self, key: str, now: float) -> tuple[float, int] | None:
        entry = self._windows.get(key)
        return entry if entry is not None and entry[0] > now else None

    def reserve(self, windows: Sequence[Window], seconds: int) -> Deferred[float]:
        now = self._clock.seconds()
        live = {window.key: self._live(window.key, now) for window in windows}
        waits = [
            entry[0] - now for window in windows if (entry := live[window.key]) is not None and entry[1] >= window.limit
        ]
        if waits:
            return succeed(max(waits))
        for window in windows:
            ends, count = live[window.key] or (now + seconds, 0)
            self._windows[window.key] = (ends, count + 1)
        if len(self._windows) > self._prune_at:
            self._windows = {key: entry for key, entry in self._windows.items() if entry[0] > now}
            self._prune_at = max(self.PRUNE_ABOVE, 2 * len(self._windows))
        return succeed(0.0)

    def release(self, keys: Sequence[str]) -> Deferred[None]:
        now = self._clock.seconds()
        for key in keys:
            entry = self._live(key, now)
            if entry is not None and entry[1] > 0:
                self._windows[key] = (entry[0], entry[1] - 1)
        return succeed(None)


# KEYS: one per window. ARGV: the window in milliseconds, then each key's limit in order.
# Returns 0 when every count went up by one, else (counting nothing) the milliseconds until
# the last used-up window ends. A key always carries an expiry: a count never outlives it.
RESERVE_SCRIPT = """
local window, wait = tonumber(ARGV[1]), 0
for i, key in ipairs(KEYS) do
  if tonumber(redis.call('GET', key) or '0') >= tonumber(ARGV[i + 1]) then
    local ttl = redis.call('PTTL', key)
    if ttl < 0 then redis.call('PEXPIRE', key, window); ttl = window end
    if ttl > wait then wait = ttl end
  end
end
if wait > 0 then return wait end
for _, key in ipairs(KEYS) do
  redis.call('INCR', key)
  if redis.call('PTTL', key) < 0 then redis.call('PEXPIRE', key, window) end
end
return 0
"""

# KEYS: the windows to give one attempt back to (never below zero; the expiry stays).
RELEASE_SCRIPT = """
for _, key in ipairs(KEYS) do
  if tonumber(redis.call('GET', key) or '0') > 0 then redis.call('DECR', key) end
end
return 0
"""


class RedisWindows:
    """Windows in Redis, shared by every process and daemon using the same server; each
    reservation is one script, so it is atomic, run through a `RedisCircuit` (the daemon's,
    shared with the rate limits; one of its own made with `timeout` otherwise), so it fails at
    once while Redis cannot be reached."""

    def __init__(
        self,
        *,
        pool: txredisapi.ConnectionHandler,
        clock: IReactorTime,
        timeout: float = 2.0,
        prefix: str = "apid:abuse:",
        circuit: RedisCircuit | None = None,
    ) -> None:
        self._circuit = circuit or RedisCircuit(connect=lambda: pool, clock=clock, timeout=timeout)
        self._prefix = prefix

    def reserve(self, windows: Sequence[Window], seconds: int) -> Deferred[float]:
        keys = [self._prefix + window.key for window in windows]
        args = [seconds * 1000, *(window.limit for window in windows)]
        reserving = self._circuit.run_script(RESERVE_SCRIPT, keys, args)
        return reserving.addCallback(lambda wait_ms: int(wait_ms) / 1000)

    def release(self, keys: Sequence[str]) -> Deferred[None]:
        keys = [self._prefix + key for key in keys]
        return self._circuit.run_script(RELEASE_SCRIPT, keys, []).addCallback(lambda _: None)


def account_key(account: str) -> str:
    """An account name as keys hold it: folded as accounts compare it (every spelling of one
    address is one account) and digested, so that a name of any length costs 32 characters
    and no email address is kept in clear."""
    return hashlib.sha256(email_key(account).encode("utf-8", "surrogatepass")).hexdigest()[:32]


class AbuseLimiter:
    def __init__(
        self, *, store: WindowStore, limits: Mapping[str, AbuseLimit], fail_open: bool = True, ipv6_prefix: int = 64
    ) -> None:
        self._store = store
        self._limits = limits
        self._fail_open = fail_open
        self._ipv6_prefix = ipv6_prefix  # an IPv6 client counts by its network of this many bits

    def windows(self, kind: str, address: str, account: str | None) -> list[Window]:
        """The windows an attempt of `kind` counts in; without an account name, the address's
        only. An IPv6 address counts as its /64 (`security.ipv6Prefix`, `client_group`)."""
        limit = self._limits[kind]
        address = client_group(address, self._ipv6_prefix)
        windows = [Window(f"{kind}:address:{address}", limit.per_address)]
        if account:
            name = account_key(account)
            windows.append(Window(f"{kind}:account:{name}", limit.per_account))
            if limit.per_account_address is not None:
                windows.append(Window(f"{kind}:pair:{name}:{address}", limit.per_account_address))
        return windows

    async def reserve(self, kind: str, address: str, account: str | None) -> bool:
        """Count the attempt in each of its windows, or refuse it with a 429 (counting nothing)
        when one of them is used up. False when the store cannot be reached and the limiter
        fails open: nothing was counted, so there is nothing to release."""
        windows = self.windows(kind, address, account)
        try:
            wait = await self._store.reserve(windows, self._limits[kind].window)
        except Exception as error:
            store_unreachable(log, "abuse limiting", error, self._fail_open)
            return False
        if wait > 0:
            metrics.throttled("abuse", kind)
            raise TooManyRequests(TOO_MANY, headers={"Retry-After": str(max(1, math.ceil(wait)))})
        return True

    async def release(self, kind: str, address: str, account: str | None) -> None:
        """Give a reserved attempt back (a login that succeeded). When the store cannot be
        reached this only logs: the attempt then counts until its windows end."""
        try:
            await self._store.release([window.key for window in self.windows(kind, address, account)])
        except RedisUnreachable:
            return  # the circuit logs the outage, once
        except Exception as error:
            log.error(
                "abuse limiting store unreachable ({error}); a login that succeeded stays counted",
                error=f"{type(error).__name__}: {error}",
            )
