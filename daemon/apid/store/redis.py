"""Redis, for counts that several processes or daemons share: the pool, bounded scripts, and
what to do when the server cannot be reached (`redis.onFailure`).

The rate limiter (`apid.throttle`) and the abuse limiter (`apid.auth.limits`) each keep their
counts with one Lua script per change, so that every change is atomic under concurrency.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from apid.problems import ServiceUnavailable

if TYPE_CHECKING:
    import txredisapi

RETRY_AFTER_UNREACHABLE = 5  # seconds a fail-closed 503 asks the client to wait


def redis_pool(url: str) -> txredisapi.ConnectionHandler:
    """A lazily connecting pool for redis://host:port/db (numbers stay strings)."""
    import txredisapi  # here: a daemon without `redis.url` never loads the client (about 1.5 MiB)

    parts = urlsplit(url)
    return txredisapi.lazyConnectionPool(
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 6379,
        dbid=int(parts.path.strip("/") or 0),
        password=parts.password,
        poolsize=4,
        convertNumbers=False,
        connectTimeout=2,
        replyTimeout=2,
    )


def run_script(
    pool: txredisapi.ConnectionHandler,
    clock: IReactorTime,
    timeout: float,
    script: str,
    keys: Sequence[str],
    args: Sequence[Any],
) -> Deferred[Any]:
    """EVAL `script` (EVALSHA once Redis has it), failing after `timeout` seconds.

    A pool that cannot reach Redis holds commands until it can: without the bound, an
    unreachable Redis would hold the request instead of failing open or closed."""
    return pool.eval(script, keys=list(keys), args=list(args)).addTimeout(timeout, clock)


def store_unreachable(log: Logger, what: str, error: BaseException, fail_open: bool) -> None:
    """Log that `what` (say "rate limiting") could not reach its store; failing open that is
    all, failing closed it raises a 503 problem with Retry-After."""
    log.error(
        "{what} store unreachable ({error}); failing {mode}",
        what=what,
        error=f"{type(error).__name__}: {error}",
        mode="open" if fail_open else "closed",
    )
    if not fail_open:
        raise ServiceUnavailable(
            f"{what} is unavailable; try again shortly", headers={"Retry-After": str(RETRY_AFTER_UNREACHABLE)}
        )
