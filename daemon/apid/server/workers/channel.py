"""The channel between the parent of the worker processes and each worker: AMP over a socket
pair the parent makes for the worker when it starts it.

A worker tells the parent when it serves (`Ready`). Without Redis, the parent keeps the counts
that must be exact across workers, rate limits (`Charge`) and abuse limits (`Reserve`,
`Release`), in the same in-process stores one daemon uses: the parent's reactor runs one
charge at a time, so N workers count exactly as one process does. With `redis.url` set the
workers count in Redis, as separate daemons do.

A worker whose write changed a controller with cached answers tells the parent
(`AnswersChanged`), which has every other worker drop them (`DropAnswers`) before the write is
answered: no worker of the daemon serves an answer the write made old (`apid.calls.caching`).

The parent asks each worker whether it answers (`Alive`, for systemd's watchdog: the
worker's reactor answers it) and has one worker reload the IO State everywhere (`Reload`)
and the others swap the new rules in at once (`CatchUp`), so that it tells systemd how the
reload went once every worker serves its outcome.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence
from typing import TypeVar

import orjson
from twisted.internet.defer import Deferred, gatherResults
from twisted.internet.interfaces import IReactorSocket
from twisted.internet.protocol import ServerFactory, connectionDone
from twisted.protocols import amp
from twisted.python.failure import Failure

from apid.auth.limits import MemoryWindows, Window
from apid.calls.rate_limits import Charge, MemoryCounters

P = TypeVar("P", bound=amp.AMP)


class Ready(amp.Command):
    """Worker `index` serves, on `reactor` (as `apid.runtime.reactors.install` described it)."""

    arguments = [(b"index", amp.Integer()), (b"reactor", amp.Unicode())]
    response = []


class ChargeCalls(amp.Command):
    """`CounterStore.charge`s, counted by the parent in the order sent: those a worker's calls
    asked for while its previous ones were on their way (`ParentCounters`)."""

    arguments = [(b"charges", amp.String())]  # JSON: [[key, amount, limit, window, lock], ...]
    response = [(b"charges", amp.String())]  # JSON: [[allowed, remaining, reset], ...]


class ReserveAttempt(amp.Command):
    """`WindowStore.reserve`, counted by the parent: the wait in seconds, 0 when reserved."""

    arguments = [
        (b"keys", amp.ListOf(amp.Unicode())),
        (b"limits", amp.ListOf(amp.Integer())),
        (b"seconds", amp.Integer()),
    ]
    response = [(b"wait", amp.Float())]


class ReleaseAttempt(amp.Command):
    """`WindowStore.release`, counted by the parent."""

    arguments = [(b"keys", amp.ListOf(amp.Unicode()))]
    response = []


class AnswersChanged(amp.Command):
    """A write of this worker changed `controllers`: the parent answers once every other
    worker dropped their cached answers."""

    arguments = [(b"controllers", amp.ListOf(amp.Unicode()))]
    response = []


class DropAnswers(amp.Command):
    """Drop the cached answers of `controllers`: another worker changed them."""

    arguments = [(b"controllers", amp.ListOf(amp.Unicode()))]
    response = []


class Alive(amp.Command):
    """Answered by a worker whose reactor turns: the parent's liveness check (`apid.server.systemd`)."""

    arguments = []
    response = []


class Reload(amp.Command):
    """Reload the IO State of every daemon process (SIGHUP to the parent): why the rules in
    force stay, if they do."""

    arguments = []
    response = [(b"refused", amp.Unicode(optional=True))]


class CatchUp(amp.Command):
    """Swap in the rules another worker's reload just announced, now rather than at the next
    poll: the parent tells systemd READY=1 once every worker serves them."""

    arguments = []
    response = []


class ParentSide(amp.AMP):
    """The parent's end of one worker's channel: every worker's end shares `counters` and
    `windows`; `changed` passes a worker's change on to the others."""

    def __init__(
        self,
        *,
        counters: MemoryCounters,
        windows: MemoryWindows,
        ready: Callable[[int, str], None],
        changed: Callable[[Sequence[str]], Deferred[None]],
    ) -> None:
        super().__init__()
        self._counters = counters
        self._windows = windows
        self._ready = ready
        self._changed = changed

    @Ready.responder
    def ready(self, index: int, reactor: str) -> dict:
        self._ready(index, reactor)
        return {}

    @ChargeCalls.responder
    def charge(self, charges: bytes) -> Deferred[dict]:
        counting = gatherResults([self._counters.charge(*each) for each in orjson.loads(charges)])
        return counting.addCallback(
            lambda counted: {"charges": orjson.dumps([[c.allowed, c.remaining, c.reset] for c in counted])}
        )

    @ReserveAttempt.responder
    def reserve(self, keys: list[str], limits: list[int], seconds: int) -> Deferred[dict]:
        windows = [Window(key, limit) for key, limit in zip(keys, limits, strict=True)]
        return self._windows.reserve(windows, seconds).addCallback(lambda wait: {"wait": wait})

    @ReleaseAttempt.responder
    def release(self, keys: list[str]) -> Deferred[dict]:
        return self._windows.release(keys).addCallback(lambda _: {})

    @AnswersChanged.responder
    def answers_changed(self, controllers: list[str]) -> Deferred[dict]:
        return self._changed(controllers).addCallback(lambda _: {})


class WorkerSide(amp.AMP):
    """A worker's end of its channel; `lost` runs when the parent is gone (the worker then
    stops); `drop_answers`, once its cache exists, drops what another worker changed;
    `reload`, once it serves, reloads the IO State everywhere, and `catch_up` swaps in a
    reload another worker announced."""

    def __init__(self, lost: Callable[[], None]) -> None:
        super().__init__()
        self._lost = lost
        self.drop_answers: Callable[[Sequence[str]], None] = lambda controllers: None
        self.reload: Callable[[], Deferred[str | None]] | None = None
        self.catch_up: Callable[[], Deferred[None]] | None = None

    @DropAnswers.responder
    def drop(self, controllers: list[str]) -> dict:
        self.drop_answers(controllers)
        return {}

    @Alive.responder
    def alive(self) -> dict:
        return {}

    @Reload.responder
    def reload_everywhere(self) -> Deferred[dict] | dict:
        if self.reload is None:
            return {"refused": "this worker does not serve yet"}
        return self.reload().addCallback(lambda refused: {"refused": refused})

    @CatchUp.responder
    def catch_up_rules(self) -> Deferred[dict] | dict:
        if self.catch_up is None:  # not serving yet: it reads the generation when it starts
            return {}
        return self.catch_up().addCallback(lambda _: {})

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        super().connectionLost(reason)
        self._lost()


class ParentCounters:
    """A `CounterStore` (apid.calls.rate_limits) whose counts the parent keeps. One message at a
    time is on its way: the charges asked meanwhile go together in the next, so that under load
    the parent's one core answers many charges per message rather than one (docs/benchmarks.md,
    the parent's channel), and a charge waits at most one round trip more than alone."""

    def __init__(self, channel: amp.AMP) -> None:
        self._channel = channel
        self._asked: list[tuple[tuple[str, int, int, int, int], Deferred[Charge]]] = []
        self._sending = False

    def charge(self, user: str, amount: int, limit: int, window: int, lock: int) -> Deferred[Charge]:
        answer: Deferred[Charge] = Deferred()
        self._asked.append(((user, amount, limit, window, lock), answer))
        if not self._sending:
            self._send()
        return answer

    def _send(self) -> None:
        batch, self._asked = self._asked, []
        self._sending = True
        sent = self._channel.callRemote(ChargeCalls, charges=orjson.dumps([charge for charge, _ in batch]))

        def answered(reply: dict) -> None:
            for (_, answer), (allowed, remaining, reset) in zip(batch, orjson.loads(reply["charges"]), strict=True):
                answer.callback(Charge(allowed, remaining, reset))

        def failed(failure: Failure) -> None:
            for _, answer in batch:
                answer.errback(failure)

        def next_batch(_: object) -> None:
            self._sending = False
            if self._asked:
                self._send()

        sent.addCallbacks(answered, failed).addBoth(next_batch)


class ParentWindows:
    """A `WindowStore` (apid.auth.limits) whose windows the parent keeps."""

    def __init__(self, channel: amp.AMP) -> None:
        self._channel = channel

    def reserve(self, windows: Sequence[Window], seconds: int) -> Deferred[float]:
        reserving = self._channel.callRemote(
            ReserveAttempt,
            keys=[window.key for window in windows],
            limits=[window.limit for window in windows],
            seconds=seconds,
        )
        return reserving.addCallback(lambda reply: reply["wait"])

    def release(self, keys: Sequence[str]) -> Deferred[None]:
        return self._channel.callRemote(ReleaseAttempt, keys=list(keys)).addCallback(lambda _: None)


class SiblingWorkers:
    """The other workers of this daemon, as `apid.calls.caching.AnswerCache` tells them of changes."""

    def __init__(self, channel: WorkerSide) -> None:
        self._channel = channel

    def changed(self, controllers: Sequence[str]) -> Deferred[None]:
        """Fires once the others dropped their answers of `controllers`; never fails: without a
        parent this worker is stopping, and the write it answers is done."""
        telling = self._channel.callRemote(AnswersChanged, controllers=list(controllers))
        return telling.addCallbacks(lambda _: None, lambda _: None)

    def on_change(self, drop: Callable[[Sequence[str]], None]) -> None:
        self._channel.drop_answers = drop


def adopt(reactor: IReactorSocket, fd: int, protocol: P) -> P:
    """Run `protocol` over the connected Unix socket `fd` (the reactor keeps a copy of it)."""
    factory: ServerFactory = ServerFactory()  # the type adoptStreamConnection takes
    factory.protocol = lambda: protocol
    factory.noisy = False
    reactor.adoptStreamConnection(fd, socket.AF_UNIX, factory)
    return protocol
