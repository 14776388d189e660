"""The plugins' start-up and shutdown hooks: `Controller.started` and `Controller.stopping`.

The daemon (and the testing kit) awaits each controller's `started()` in the order of the
controllers' names once its pools run and before its port listens, so a plugin may open what
its actions share (an `httpx.AsyncClient`, a connection pool) and may use the database; a hook
that fails stops the start, naming the plugin, after the controllers already started were
stopped. At shutdown, once the requests in flight have finished and before the pools close,
each `stopping()` is awaited in the reverse order, all of them within the shutdown's deadline
(`shutdown.healthDrain` + `shutdown.drain`), or within `GRACE` seconds when the requests took
it all (unless the stop is hurried: nobody waits for the process): one still running then is
cancelled and one that fails is logged, and the next is stopped all the same. Under the
asyncio reactor each hook runs as an asyncio task, as an action does
(`apid.runtime.coroutines.started`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

from twisted.internet.defer import TimeoutError, ensureDeferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from apid.plugin import Controller
from apid.plugin_host.discovery import PluginError
from apid.runtime.coroutines import started

log = Logger(namespace="apid.lifecycle")

# Seconds the stopping hooks get when the requests in flight used up the drain: closing a
# client or a pool takes a moment, and is worth it (as `apid.runtime.coroutines.end_tasks` gives tasks).
GRACE = 2.0


class HookFailed(PluginError):
    """A controller's `started()` failed; the message names its plugin. A `PluginError`, as a
    plugin that cannot load is: the kit (`apid.testing.PluginError`) raises either."""


class PluginLifecycle:
    """Starts and stops the controllers, each named in messages by its plugin's label."""

    def __init__(
        self, *, clock: IReactorTime, controllers: Mapping[str, Controller], labels: Mapping[str, str], drain: float
    ) -> None:
        self._clock = clock
        self._drain = drain
        self._order = [(labels[name], controllers[name]) for name in sorted(controllers)]
        self._started: list[tuple[str, Controller]] = []

    async def start(self) -> None:
        """Each controller's `started()`, in order; if one fails, those started are stopped
        (within `drain` seconds) and HookFailed names the plugin."""
        for label, controller in self._order:
            try:
                await _run(controller.started)
            except Exception as exc:
                await self.stop(self._clock.seconds() + self._drain, hurried=False)
                raise HookFailed(f"plugin {label}: started() failed: {type(exc).__name__}: {exc}") from exc
            self._started.append((label, controller))

    async def stop(self, deadline: float, hurried: bool) -> None:
        """Each started controller's `stopping()`, in the reverse order, until `deadline`
        (reactor seconds), or `GRACE` seconds from now if that is later and the stop is not
        `hurried`; a failure or a hook cut at the deadline is logged, not raised."""
        if not hurried:
            deadline = max(deadline, self._clock.seconds() + GRACE)
        while self._started:
            label, controller = self._started.pop()
            running = ensureDeferred(_run(controller.stopping))
            running.addTimeout(max(0.0, deadline - self._clock.seconds()), self._clock)
            try:
                await running
            except TimeoutError:
                log.error(
                    "plugin {plugin}: stopping() was cancelled, still running at the shutdown's deadline", plugin=label
                )
            except Exception:
                log.failure("plugin {plugin}: stopping() failed", plugin=label)


async def _run(hook: Callable[[], Awaitable[None]]) -> None:
    """A hook's coroutine, as an asyncio task under the asyncio reactor."""
    await started(hook())
