"""Redis, for counts that several processes or daemons share: the pool, bounded scripts, a
circuit that fails fast while the server cannot be reached, and what to do then
(`redis.onFailure`).

The rate limiter (`apid.throttle`) and the abuse limiter (`apid.auth.limits`) each keep their
counts with one Lua script per change, so that every change is atomic under concurrency.

txredisapi's lazy pool holds a command until it has a connection: with Redis down, every call
waited for its timeout (2 s) before failing open or closed. A `RedisCircuit` opens on the first
failure: for `PROBE_SECONDS` every script fails at once, then one call goes through as a probe
(the rest still fail at once); the probe's answer closes the circuit. A pool that knows it has
no connection (it had one and lost it) fails the call at once instead of letting it wait. The
outage is logged once, when it starts and when it ends (`apid.store.outage`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from twisted.internet.defer import CancelledError, Deferred, TimeoutError, fail
from twisted.internet.error import ConnectError
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from apid.problems import ServiceUnavailable
from apid.store.outage import Outage

if TYPE_CHECKING:
    import txredisapi

log = Logger(namespace="apid.store.redis")

RETRY_AFTER_UNREACHABLE = 5  # seconds a fail-closed 503 asks the client to wait
PROBE_SECONDS = 1.0  # how long an open circuit fails calls at once before one probes
RECONNECT_SECONDS = 2.0  # the pool's longest wait between two connection attempts (txredisapi's: 10 s)


class RedisUnreachable(Exception):
    """Redis did not answer (refused, timed out, connection lost), or the circuit is open."""


def redis_pool(url: str) -> txredisapi.ConnectionHandler:
    """A lazily connecting pool for redis://host:port/db (numbers stay strings)."""
    import txredisapi  # here: a daemon without `redis.url` never loads the client (about 1.5 MiB)

    parts = urlsplit(url)
    pool = txredisapi.lazyConnectionPool(
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 6379,
        dbid=int(parts.path.strip("/") or 0),
        password=parts.password,
        poolsize=4,
        convertNumbers=False,
        connectTimeout=2,
        replyTimeout=2,
    )
    # connected again within 2 s of Redis coming back, not after up to 10 s of the pool's backoff
    pool._factory.maxDelay = RECONNECT_SECONDS
    return pool


def _disconnected(pool: txredisapi.ConnectionHandler) -> bool:
    """Whether the pool knows it has no connection: it was connected once (its first-connection
    Deferred fired) and has none now. A pool still making its first connections does not know."""
    factory = pool._factory
    return factory.size == 0 and factory.deferred is None


def _unreachable(failure: Failure) -> bool:
    """Whether a script failed for want of Redis rather than for its own error (a script error
    is Redis answering)."""
    import txredisapi

    return failure.check(txredisapi.ConnectionError, TimeoutError, ConnectError, ConnectionError) is not None


class RedisCircuit:
    """Runs scripts on one pool, failing them at once while Redis is out of reach (see the
    module's docstring); shared by every store on the pool, so one outage is one. `fail_open`
    (`redis.onFailure`) is only said in the log: the limiters decide."""

    def __init__(
        self, pool: txredisapi.ConnectionHandler, clock: IReactorTime, timeout: float = 2.0, fail_open: bool = True
    ) -> None:
        self.pool = pool
        self._clock = clock
        self._timeout = timeout
        consequence = (
            "limits failing open (calls and logins go through uncounted)"
            if fail_open
            else "limits failing closed (limited calls and logins answer 503)"
        )
        self.outage = Outage(clock, log, "Redis", consequence)
        self._open_until: float | None = None  # None: closed, calls go to Redis
        self._probing = False

    def run_script(self, script: str, keys: Sequence[str], args: Sequence[Any]) -> Deferred[Any]:
        """EVAL `script` (EVALSHA once Redis has it): its reply, or `RedisUnreachable` at once
        while the circuit is open, or after `timeout` seconds when Redis does not answer."""
        if self._open_until is not None:
            if self._probing or self._clock.seconds() < self._open_until:
                return self._refuse(RedisUnreachable("Redis is unreachable; the circuit is open"))
            if _disconnected(self.pool):
                return self._trip(RedisUnreachable("the pool has no connection to Redis"))
            self._probing = True
        elif _disconnected(self.pool):
            return self._trip(RedisUnreachable("the pool lost its connections to Redis"))
        running = self.pool.eval(script, keys=list(keys), args=list(args)).addTimeout(self._timeout, self._clock)
        return running.addCallbacks(self._answered, self._failed)

    def _answered(self, reply: Any) -> Any:
        if self._open_until is not None:
            self._open_until, self._probing = None, False
            self.outage.recovered()
        return reply

    def _failed(self, failure: Failure) -> Any:
        if _unreachable(failure):
            error = failure.value
            return self._trip(error if isinstance(error, Exception) else RedisUnreachable(str(error)))
        if failure.check(CancelledError):  # the caller gave up: says nothing of Redis
            self._probing = False
        else:
            self._answered(None)  # Redis answered, with an error of the script's
        return failure

    def _trip(self, error: Exception) -> Deferred[Any]:
        """Open the circuit (again) for PROBE_SECONDS."""
        self._open_until, self._probing = self._clock.seconds() + PROBE_SECONDS, False
        return self._refuse(error)

    def _refuse(self, error: Exception) -> Deferred[Any]:
        self.outage.failed(error)
        unreachable = (
            error if isinstance(error, RedisUnreachable) else RedisUnreachable(f"{type(error).__name__}: {error}")
        )
        return fail(unreachable)


def store_unreachable(log: Logger, what: str, error: BaseException, fail_open: bool) -> None:
    """`what` (say "rate limiting") could not use its store: failing open that is all, failing
    closed it raises a 503 problem with Retry-After. An outage of Redis is logged once, by the
    circuit; any other error (a script's) is logged here."""
    if not isinstance(error, RedisUnreachable):
        log.error(
            "{what} store failed ({error}); failing {mode}",
            what=what,
            error=f"{type(error).__name__}: {error}",
            mode="open" if fail_open else "closed",
        )
    if not fail_open:
        raise ServiceUnavailable(
            f"{what} is unavailable; try again shortly", headers={"Retry-After": str(RETRY_AFTER_UNREACHABLE)}
        )
