"""Plugin coroutines under either reactor (apid.runtime.coroutines): Deferreds awaited in asyncio tasks,
an action's coroutine run as a task and cancelled through its Deferred, and the errors that
say an action awaited asyncio where no asyncio loop runs.

The asyncio side runs on an asyncio loop of its own (the tests' reactor is the default one):
Deferreds need no reactor, and the loop fires them.
"""

from __future__ import annotations

import asyncio
import gc

import httpx
import pytest
from twisted.internet.defer import CancelledError, Deferred, ensureDeferred, fail
from twisted.logger import LogLevel, globalLogPublisher

from apid.runtime.coroutines import asyncio_required, bridge_tasks, end_tasks, needs_asyncio, started


@pytest.fixture
def loop():
    loop = asyncio.new_event_loop()
    bridge_tasks(loop)
    yield loop
    loop.close()


@pytest.fixture
def logged():
    """The error events logged meanwhile (an unhandled error in a Deferred is one)."""
    events: list[dict] = []

    def observe(event: dict) -> None:
        if event.get("log_level") in (LogLevel.error, LogLevel.critical) or event.get("isError"):
            events.append(event)

    globalLogPublisher.addObserver(observe)
    yield events
    globalLogPublisher.removeObserver(observe)


def fired_later(loop, value=None, error: Exception | None = None, delay: float = 0.01) -> Deferred:
    """A Deferred the loop fires after `delay`, as the reactor fires a database read."""
    deferred: Deferred = Deferred()
    loop.call_later(delay, deferred.errback if error else deferred.callback, error or value)
    return deferred


def test_a_task_awaits_a_deferred_and_gets_its_result(loop):
    async def action():
        return await fired_later(loop, 7) + 1

    assert loop.run_until_complete(action()) == 8


def test_a_task_awaiting_a_failing_deferred_gets_its_exception(loop):
    async def action():
        try:
            await fired_later(loop, error=KeyError("gone"))
        except KeyError as exc:
            return f"caught {exc}"

    assert loop.run_until_complete(action()) == "caught 'gone'"


def test_deferreds_and_asyncio_awaitables_mix_in_one_coroutine_and_in_gather(loop):
    async def action():
        first = await fired_later(loop, "deferred")
        await asyncio.sleep(0.01)
        return first, await asyncio.gather(fired_later(loop, 1), asyncio.sleep(0.01, 2), fired_later(loop, 3))

    assert loop.run_until_complete(action()) == ("deferred", [1, 2, 3])


def test_cancelling_a_task_awaiting_a_deferred_cancels_the_deferred(loop, logged):
    cancelled: list[str] = []

    async def action(waited: Deferred):
        try:
            await waited
        except asyncio.CancelledError:
            cancelled.append("action")
            raise

    async def main():
        task = asyncio.get_running_loop().create_task(action(Deferred(lambda _: cancelled.append("deferred"))))
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    loop.run_until_complete(main())
    assert cancelled == ["deferred", "action"]
    gc.collect()
    assert logged == []  # the cancelled Deferred's CancelledError was not left unhandled


def test_started_runs_a_coroutine_as_a_task_and_fires_a_deferred_with_its_result(loop):
    async def action():
        await asyncio.sleep(0.01)
        assert asyncio.current_task() is not None  # what asyncio libraries look for
        return {"id": 1}

    async def main():
        running = started(action())
        assert isinstance(running, Deferred)
        return await running

    assert loop.run_until_complete(main()) == {"id": 1}


def test_started_passes_on_what_the_action_raises(loop):
    async def action():
        await asyncio.sleep(0)
        raise ValueError("bad")

    async def main():
        with pytest.raises(ValueError, match="bad"):
            await started(action())

    loop.run_until_complete(main())


def test_cancelling_the_deferred_of_started_cancels_the_task(loop, logged):
    """The client gone: Klein cancels the request's Deferred, the pipeline's wait for the action
    with it; the action sees asyncio's CancelledError and can clean up."""
    seen: list[str] = []

    async def action():
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    async def main():
        running = started(action())
        await asyncio.sleep(0.01)
        running.cancel()
        with pytest.raises(CancelledError):  # Twisted's, as the pipeline and Klein expect
            await running
        await asyncio.sleep(0.01)

    loop.run_until_complete(main())
    assert seen == ["cancelled"]
    assert logged == []


class LoopClock:
    """The loop's time as Twisted's IReactorTime, for `end_tasks` outside a reactor."""

    def __init__(self, loop) -> None:
        self.loop = loop

    def seconds(self) -> float:
        return self.loop.time()

    def callLater(self, delay, function, *args, **kwargs):
        return self.loop.call_later(delay, lambda: function(*args, **kwargs))


def test_at_shutdown_tasks_get_a_grace_to_end_then_the_rest_is_cancelled_and_cleans_up(loop):
    ended: list[str] = []

    async def finishing():
        await asyncio.sleep(0.02)
        ended.append("finished")

    async def endless():
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            await fired_later(loop, None)  # its cleanup may still await
            ended.append("cancelled, cleaned up")
            raise

    async def main():
        tasks = [asyncio.get_running_loop().create_task(coroutine()) for coroutine in (finishing, endless)]
        started_at = loop.time()
        await ensureDeferred(end_tasks(LoopClock(loop), grace=0.2))
        assert all(task.done() for task in tasks)
        return loop.time() - started_at

    took = loop.run_until_complete(main())
    assert ended == ["finished", "cancelled, cleaned up"]
    assert 0.2 <= took < 0.4  # the grace, then the cancelled cleanup's moment


def test_without_a_running_asyncio_loop_started_leaves_the_coroutine_to_twisted():
    async def action():
        return 1

    coroutine = action()
    assert started(coroutine) is coroutine
    assert ensureDeferred(coroutine).result == 1


def twisted_driven_error(coroutine) -> Exception:
    """What a coroutine raised, driven by Twisted's driver with no asyncio loop running."""
    failure = []
    ensureDeferred(coroutine).addErrback(failure.append)
    return failure[0].value


async def sleeping():
    await asyncio.sleep(0.01)


async def future_awaiting():
    other = asyncio.new_event_loop()
    try:
        await other.create_future()
    finally:
        other.close()


async def fetching():
    async with httpx.AsyncClient() as client:
        await client.get("http://127.0.0.1:9/")


async def anyio_thread_call():
    import anyio.from_thread

    anyio.from_thread.run_sync(lambda: None)  # anyio's NoEventLoopError where no loop runs


@pytest.mark.parametrize("coroutine", [sleeping, future_awaiting, fetching, anyio_thread_call])
def test_awaiting_asyncio_without_a_loop_is_recognised(coroutine):
    assert needs_asyncio(twisted_driven_error(coroutine()))


def test_an_error_raised_from_awaiting_asyncio_is_recognised_too():
    async def wrapped():
        try:
            await sleeping()
        except RuntimeError as exc:
            raise LookupError("the lookup failed") from exc

    assert needs_asyncio(twisted_driven_error(wrapped()))


@pytest.mark.parametrize("error", [RuntimeError("something else"), ValueError("no running event loop")])
def test_other_errors_are_not_taken_for_awaiting_asyncio(error):
    assert not needs_asyncio(twisted_driven_error(fail(error)))


def test_under_the_asyncio_reactor_nothing_is_taken_for_awaiting_asyncio_without_a_loop(loop):
    async def main():
        return needs_asyncio(RuntimeError("no running event loop"))

    assert loop.run_until_complete(main()) is False


def test_the_problem_names_the_setting_to_change():
    problem = asyncio_required("team/audit")
    assert problem.status == 500
    assert "team/audit" in problem.detail and "reactor: asyncio" in problem.detail
