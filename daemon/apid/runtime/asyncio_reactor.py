"""The asyncio reactor apid installs: Twisted's AsyncioSelectorReactor, with a thread's call
handed to the loop directly.

Twisted's `callFromThread` under asyncio asks the loop to schedule, in the reactor's thread, a
`callLater(0, ...)`: a DelayedCall, a scan of the reactor's timers and the loop's timer handle
cancelled and made again, then one more turn of the loop before the call runs. apid hands
every database answer back that way, once per request at least (docs/benchmarks.md measures
it). Here the call goes on the loop's queue itself, in order with the other threads' calls,
and a call that raises is logged as the reactor logs a failed DelayedCall.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from twisted.internet.asyncioreactor import AsyncioSelectorReactor
from twisted.logger import Logger

log = Logger(namespace="apid.reactor")


class AsyncioReactor(AsyncioSelectorReactor):
    """AsyncioSelectorReactor on `loop`, its calls from threads run by the loop directly."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self._loop = loop

    # Twisted names the first parameter `f` in ReactorBase and `callable` in AsyncioSelectorReactor,
    # so no name overrides both (Twisted's own ReactorBase ignores the same mismatch)
    def callFromThread(self, f: Callable[..., Any], *args: object, **kwargs: object) -> None:  # type: ignore[override]
        self._loop.call_soon_threadsafe(_run, f, args, kwargs)


def _run(f: Callable[..., Any], args: tuple[object, ...], kwargs: dict[str, object]) -> None:
    try:
        f(*args, **kwargs)
    except BaseException:
        log.failure("a call from a thread failed: {call!r}", call=f)
