"""Redis, for counts that several processes or daemons share: the pool, bounded scripts, a
circuit that fails fast while the server cannot be reached, and what to do then
(`redis.onFailure`).

The rate limiter (`apid.calls.rate_limits`) and the abuse limiter (`apid.auth.limits`) each keep their
counts with one Lua script per change, so that every change is atomic under concurrency.

txredisapi's pool holds a command until it has a connection: with Redis down, every call
waited for its timeout (2 s) before failing open or closed. A `RedisCircuit` opens on the first
failure, and while it is open every script fails at once. It does not count on the pool to
come back: txredisapi stops reconnecting for good when AUTH or SELECT fails, which is what a
frozen server (SIGSTOP, a long fork, a stalled VM) does to a new connection, since it still
accepts TCP but answers nothing. So the circuit probes on its own schedule (`PROBE_DELAYS`): it
builds a fresh pool and PINGs through it; on PONG the fresh pool replaces the old one (closed)
and the circuit closes, else the attempt is closed and the next waits longer. A pool that knows
it has no connection (it had one and lost it) fails the call at once instead of letting it
wait. The outage is logged once, when it starts and when it ends (`apid.store.outage`); the
attempts between say nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from twisted.internet.defer import Deferred, TimeoutError, fail
from twisted.internet.error import ConnectError
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from apid.problems import ServiceUnavailable
from apid.store.outage import Outage

if TYPE_CHECKING:
    import txredisapi

log = Logger(namespace="apid.store.redis")

RETRY_AFTER_UNREACHABLE = 5  # seconds a fail-closed 503 asks the client to wait
PROBE_DELAYS = (0.5, 1.0, 2.0, 4.0)  # seconds before each probe of an outage; the last repeats
RECONNECT_SECONDS = 2.0  # the pool's longest wait between two connection attempts (txredisapi's: 10 s)


class RedisUnreachable(Exception):
    """Redis did not answer (refused, timed out, connection lost), or the circuit is open."""


def redis_pool(url: str) -> txredisapi.ConnectionHandler:
    """A pool of 4 connections to redis://[:password@]host:port/db (numbers stay strings),
    connecting in the background: a command waits for a connection. Built as txredisapi's
    non-lazy pools are, so that a failed connection or AUTH logs nothing of its own (the
    circuit logs the outage)."""
    import txredisapi  # here: a daemon without `redis.url` never loads the client (about 1.5 MiB)

    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 6379
    factory = txredisapi.RedisFactory(
        f"{host}:{port}",
        int(parts.path.strip("/") or 0),
        4,
        isLazy=False,
        password=parts.password,
        replyTimeout=2,
        convertNumbers=False,
    )
    # connected again within 2 s of Redis coming back, not after up to 10 s of the pool's backoff
    factory.maxDelay = RECONNECT_SECONDS
    factory.deferred.addErrback(lambda _: None)  # a failed connection: the circuit's PING finds it
    factory.startConnecting(txredisapi._makeEndpoint(host, port, connectTimeout=2))
    return factory.handler


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


def _close(pool: txredisapi.ConnectionHandler) -> None:
    """Close `pool` and stop its reconnecting; nothing waits for it to finish."""
    pool.disconnect().addErrback(lambda _: None)


class RedisCircuit:
    """Runs scripts on the pool `connect` makes, failing them at once while Redis is out of
    reach and making a new pool when it answers again (see the module's docstring); shared by
    every store, so one outage is one. `fail_open` (`redis.onFailure`) is only said in the log:
    the limiters decide."""

    def __init__(
        self,
        *,
        connect: Callable[[], txredisapi.ConnectionHandler],
        clock: IReactorTime,
        timeout: float = 2.0,
        fail_open: bool = True,
    ) -> None:
        self._connect = connect
        self._pool = connect()
        self._clock = clock
        self._timeout = timeout
        consequence = (
            "limits failing open (calls and logins go through uncounted)"
            if fail_open
            else "limits failing closed (limited calls and logins answer 503)"
        )
        self.outage = Outage(clock=clock, log=log, subject="Redis", consequence=consequence)
        self._open = False
        self._probes = 0  # made in this outage
        self._probing: IDelayedCall | None = None
        self._stopped = False

    @property
    def pool(self) -> txredisapi.ConnectionHandler:
        """The pool in use now: read it each time, a probe replaces it."""
        return self._pool

    def run_script(self, script: str, keys: Sequence[str], args: Sequence[Any]) -> Deferred[Any]:
        """EVAL `script` (EVALSHA once Redis has it): its reply, or `RedisUnreachable` at once
        while the circuit is open, or after `timeout` seconds when Redis does not answer."""
        if self._open:
            return self._refuse(RedisUnreachable("Redis is unreachable; the circuit is open"))
        pool = self._pool
        if _disconnected(pool):
            return self._trip(RedisUnreachable("the pool lost its connections to Redis"))
        running = pool.eval(script, keys=list(keys), args=list(args)).addTimeout(self._timeout, self._clock)
        return running.addErrback(self._failed, pool)

    def stop(self) -> Deferred[None]:
        """No more probing; the pool closed (the daemon stops)."""
        self._stopped = True
        if self._probing is not None and self._probing.active():
            self._probing.cancel()
        self.outage.stop()
        return self._pool.disconnect()

    def _failed(self, failure: Failure, pool: txredisapi.ConnectionHandler) -> Any:
        if not _unreachable(failure):
            return failure  # Redis answered, with an error of the script's; or the caller gave up
        error = failure.value if isinstance(failure.value, Exception) else RedisUnreachable(str(failure.value))
        if pool is not self._pool:  # a pool already replaced, closing: says nothing of Redis now
            return fail(RedisUnreachable(f"{type(error).__name__}: {error}"))
        return self._trip(error)

    def _trip(self, error: Exception) -> Deferred[Any]:
        """Open the circuit, and start probing, unless it is open already."""
        if not self._open:
            self._open, self._probes = True, 0
            self._schedule_probe()
        return self._refuse(error)

    def _refuse(self, error: Exception) -> Deferred[Any]:
        self.outage.failed(error)
        unreachable = (
            error if isinstance(error, RedisUnreachable) else RedisUnreachable(f"{type(error).__name__}: {error}")
        )
        return fail(unreachable)

    def _schedule_probe(self) -> None:
        if self._stopped:
            return
        delay = PROBE_DELAYS[min(self._probes, len(PROBE_DELAYS) - 1)]
        self._probes += 1
        self._probing = self._clock.callLater(delay, self._probe)

    def _probe(self) -> None:
        """PING through a fresh pool: the old one may be stuck (txredisapi gave up on it)."""
        self._probing = None
        fresh = self._connect()
        pinging = fresh.ping().addTimeout(self._timeout, self._clock)
        pinging.addCallbacks(lambda _: self._reconnected(fresh), lambda _: self._probe_failed(fresh))

    def _reconnected(self, fresh: txredisapi.ConnectionHandler) -> None:
        if self._stopped:
            _close(fresh)
            return
        old, self._pool, self._open = self._pool, fresh, False
        if old is not fresh:
            _close(old)
        self.outage.recovered()

    def _probe_failed(self, fresh: txredisapi.ConnectionHandler) -> None:
        if fresh is not self._pool:
            _close(fresh)
        self._schedule_probe()


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
