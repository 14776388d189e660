"""Plugin coroutines under either reactor: what an action may await, and where it runs.

Under the default reactor Twisted's driver steps an action's coroutine: it awaits Deferreds
and apid's own coroutines, and nothing of asyncio, for no asyncio loop runs (`needs_asyncio`
recognises the error that awaiting one raises). Whether a loop runs is asked of CPython's
`_get_running_loop`, through `apid.private_apis`. Under the asyncio reactor an action's
coroutine runs as an asyncio task (`started`), so asyncio libraries find the loop and the
task they look for; and every task of that loop steps its coroutine through `_stepped`
(`bridge_tasks`), which waits for an awaited Deferred through a future: apid's Deferreds are
then awaitable in any coroutine of the loop, in `asyncio.gather` and task groups too. At
shutdown `end_tasks` lets the tasks the drain cancelled finish before the loop stops.

Crossings between the two worlds are kept few: an action's result goes back to Twisted in
the task's last step, not a loop turn later; a Deferred awaited in a task costs one future
and one wake-up; nothing of this runs under the default reactor.
"""

from __future__ import annotations

import asyncio
import types
from collections.abc import Awaitable, Coroutine, Generator
from typing import Any, TypeVar

from twisted.internet.defer import CancelledError, Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import deferLater
from twisted.logger import Logger

from apid.private_apis import asyncio_without_loop_messages, running_loop
from apid.problems import InternalError

log = Logger(namespace="apid.coroutines")

T = TypeVar("T")

# What sniffio and anyio raise where they find no async library running (httpx under anyio 4
# raises either, by version), by the name of their types, as apid depends on neither; CPython's
# errors are recognised by `asyncio_without_loop_messages`.
_NO_LOOP_TYPES = frozenset({"AsyncLibraryNotFoundError", "NoEventLoopError"})


def bridge_tasks(loop: asyncio.AbstractEventLoop) -> None:
    """Make every task of `loop` able to await Deferreds (`apid.runtime.reactors` does it for the
    daemon's loop before the reactor is built)."""
    loop.set_task_factory(_bridged_task)


def _bridged_task(loop: asyncio.AbstractEventLoop, coro: Any, **options: Any) -> asyncio.Task[Any]:
    if asyncio.iscoroutine(coro):
        coro = _stepping(coro)
    return asyncio.Task(coro, loop=loop, **options)


async def _stepping(coro: Coroutine[Any, Any, T]) -> T:
    # A native coroutine for the task, as libraries inspect it (anyio: inspect.getcoroutinestate).
    return await _stepped(coro)


@types.coroutine
def _stepped(coro: Coroutine[Any, Any, T]) -> Generator[Any, Any, T]:
    """Step `coro` inside its task: what it yields for asyncio (futures, bare yields) goes to
    the task, a Deferred is waited for here; what the task sends or throws goes back in."""
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            yielded = coro.send(value) if error is None else coro.throw(error)
        except StopIteration as stop:
            return stop.value
        value = error = None
        try:
            if isinstance(yielded, Deferred):
                yield from _fired(yielded)
            else:
                value = yield yielded
        except BaseException as exc:  # cancellation and errors thrown by the task go to `coro`
            error = exc


def _fired(deferred: Deferred[Any]) -> Generator[Any, None, None]:
    """Wait until `deferred` fires, leaving its result to the Deferred's own `__await__`;
    the task cancelled meanwhile cancels it (its outcome then no longer matters)."""
    waiter = asyncio.get_running_loop().create_future()
    deferred.addBoth(_wake, waiter)
    try:
        yield from waiter
    except asyncio.CancelledError:
        deferred.cancel()
        deferred.addErrback(lambda _: None)
        raise


def _wake(result: T, waiter: asyncio.Future[None]) -> T:
    if not waiter.done():
        waiter.set_result(None)
    return result


def started(awaitable: Awaitable[T]) -> Awaitable[T]:
    """What the pipeline awaits for an action's awaitable. Without an asyncio loop running
    (the default reactor) the awaitable itself; under the asyncio reactor a coroutine runs as
    an asyncio task, awaited through a Deferred whose cancelling (the client gone, shutdown)
    cancels the task: the action sees asyncio's CancelledError."""
    loop = running_loop()
    if loop is None or not asyncio.iscoroutine(awaitable):
        return awaitable

    def cancel(_: Deferred[T]) -> None:
        task.cancel()

    done: Deferred[T] = Deferred(cancel)
    task = loop.create_task(_settled(awaitable, done))
    return done


async def _settled(coro: Coroutine[Any, Any, T], done: Deferred[T]) -> None:
    """Run the action in its task and fire `done` with its outcome in the same step."""
    try:
        result = await coro
    except asyncio.CancelledError:
        if not done.called:  # cancelled by something else than `done`: Twisted's kind for the pipeline
            done.errback(CancelledError())
        raise
    except Exception:
        if done.called:
            log.failure("an action failed after its call was cancelled")
        else:
            done.errback()
    else:
        if not done.called:
            done.callback(result)


async def end_tasks(clock: IReactorTime, grace: float = 2.0) -> None:
    """At shutdown under the asyncio reactor, once the drain has closed the connections: wait
    up to `grace` seconds for the loop's tasks to end (the calls whose connections closed are
    being cancelled), then cancel what still runs and wait as long again, so that no task's
    cleanup dies with the loop. Nothing to do under the default reactor."""
    loop = running_loop()
    if loop is None:
        return
    pending = asyncio.all_tasks(loop) - {asyncio.current_task(loop)}
    for cancel in (False, True):
        if cancel:
            for task in pending:
                task.cancel()
        deadline = clock.seconds() + grace
        while (pending := {task for task in pending if not task.done()}) and clock.seconds() < deadline:
            await deferLater(clock, 0.05, lambda: None)


def needs_asyncio(error: BaseException) -> bool:
    """Whether `error` (or one it arose from) is what awaiting an asyncio object raises where
    no asyncio loop runs, that is under the default reactor."""
    if running_loop() is not None:
        return False
    # What awaiting asyncio raises: asyncio.get_running_loop() (sleep, locks, aiohttp, asyncpg...),
    # a future handed to Twisted's driver, and sniffio
    messages = asyncio_without_loop_messages()
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, RuntimeError) and (str(cause) in messages or type(cause).__name__ in _NO_LOOP_TYPES):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


def asyncio_required(path: str) -> InternalError:
    """The 500 of an action that awaited asyncio under the default reactor: it names the setting."""
    return InternalError(
        f"{path} awaits asyncio, which needs the asyncio reactor: the server's operator must set "
        "`reactor: asyncio` in service_server.yml (or run apid serve --reactor asyncio)"
    )
