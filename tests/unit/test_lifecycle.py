"""apid.plugin_host.lifecycle: the stopping hooks in the reverse order, each bounded by the shutdown's
deadline (or a short grace when the requests took it all), a hook cut or failing logged and
the others run all the same; on the reactor's clock, no sleeping."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.internet.defer import Deferred, ensureDeferred
from twisted.internet.task import Clock
from twisted.logger import LogLevel, globalLogPublisher

from apid.plugin import Controller
from apid.plugin_host.lifecycle import GRACE, HookFailed, PluginLifecycle


class Hooked(Controller):
    """Notes its hooks in `seen`; its stopping hook waits for `wait`; `fails` in "started" or
    "stopping" raises there."""

    def __init__(self, name: str, seen: list[str], wait: Deferred[None] | None = None, fails: str = "") -> None:
        self.name, self._seen, self._wait, self._fails = name, seen, wait, fails

    async def started(self) -> None:
        if self._fails == "started":
            raise RuntimeError("no upstream")
        self._seen.append(f"started {self.name}")

    async def stopping(self) -> None:
        self._seen.append(f"stopping {self.name}")
        if self._wait is not None:
            await self._wait
        if self._fails == "stopping":
            raise RuntimeError("could not close")


@pytest.fixture
def logged():
    events: list[dict[str, Any]] = []
    globalLogPublisher.addObserver(events.append)
    yield events
    globalLogPublisher.removeObserver(events.append)


def lifecycle(clock: Clock, *controllers: Hooked) -> PluginLifecycle:
    named = {controller.name: controller for controller in controllers}
    return PluginLifecycle(
        clock=clock,
        controllers=named,
        labels={name: f"{name} (distribution apid-{name})" for name in named},
        drain=20.0,
    )


def run(clock: Clock, coroutine: Any) -> Deferred[Any]:
    done = ensureDeferred(coroutine)
    clock.advance(0)
    return done


def test_stopping_runs_in_the_reverse_order_and_a_hook_still_running_is_cut_at_the_deadline(logged):
    clock, seen, hanging = Clock(), [], Deferred()
    hooks = lifecycle(clock, Hooked("a", seen), Hooked("b", seen, wait=hanging), Hooked("c", seen))
    run(clock, hooks.start())
    done = run(clock, hooks.stop(clock.seconds() + 10, hurried=False))
    assert seen == ["started a", "started b", "started c", "stopping c", "stopping b"]
    clock.advance(9.9)
    assert not done.called
    clock.advance(0.1)
    assert done.called and seen[-1] == "stopping a"  # the next one stopped all the same
    [cut] = [event for event in logged if event.get("log_namespace") == "apid.lifecycle"]
    assert cut["log_level"] == LogLevel.error and cut["plugin"] == "b (distribution apid-b)"
    assert "log_failure" not in cut  # a hook cut at the deadline is no traceback


def test_the_hooks_get_a_grace_when_the_requests_took_the_whole_drain():
    clock, hanging = Clock(), Deferred()
    hooks = lifecycle(clock, Hooked("a", [], wait=hanging))
    run(clock, hooks.start())
    done = run(clock, hooks.stop(clock.seconds() - 1, hurried=False))
    clock.advance(GRACE - 0.1)
    hanging.callback(None)
    assert done.called


def test_a_hurried_stop_keeps_to_its_deadline():
    clock = Clock()
    hooks = lifecycle(clock, Hooked("a", [], wait=Deferred()))
    run(clock, hooks.start())
    done = run(clock, hooks.stop(clock.seconds(), hurried=True))
    clock.advance(0)
    assert done.called


def test_a_failing_stopping_hook_is_logged_and_the_others_stop(logged):
    clock, seen = Clock(), []
    hooks = lifecycle(clock, Hooked("a", seen), Hooked("b", seen, fails="stopping"))
    run(clock, hooks.start())
    run(clock, hooks.stop(clock.seconds() + 10, hurried=False))
    assert seen[-2:] == ["stopping b", "stopping a"]
    [failed] = [event for event in logged if event.get("log_namespace") == "apid.lifecycle"]
    assert failed["log_failure"].value.args == ("could not close",)


def test_a_failing_start_up_hook_names_the_plugin_and_stops_those_started():
    clock, seen = Clock(), []
    hooks = lifecycle(clock, Hooked("a", seen), Hooked("b", seen, fails="started"), Hooked("c", seen))
    failure = run(clock, hooks.start())
    named = r"plugin b \(distribution apid-b\): started\(\) failed: RuntimeError: no upstream"
    with pytest.raises(HookFailed, match=named):
        failure.result.raiseException()
    failure.addErrback(lambda _: None)
    assert seen == ["started a", "stopping a"]
