"""An outage of a dependency (the database, Redis), logged once instead of once per failure.

A dependency that cannot be reached fails every call that needs it, hundreds a second under
load: logging each (with its traceback) buries the log and says nothing new. An `Outage`
logs one error when the first failure comes, then at most every `REPORT_SECONDS` a count of
the failures since, and one line when the dependency answers again. While it lasts it holds a
check of `apid.telemetry.health.Health` failing, when given one, so that /health answers 503 and load
balancers route around the daemon. Given a `probe`, it runs it every `PROBE_SECONDS` while the
outage lasts: calls that succeed say nothing (the answer path stays free of extra work), so
the probe is what finds the end, traffic or none.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from apid.telemetry.health import Health

REPORT_SECONDS = 5.0  # at most one "still unreachable" line this often
PROBE_SECONDS = 1.0  # between two probes while the outage lasts


class Outage:
    """Whether `subject` is out of reach now, and the log lines of its outages.

    `consequence` says in the first line what clients get meanwhile ("calls answer 503").
    """

    def __init__(
        self,
        *,
        clock: IReactorTime,
        log: Logger,
        subject: str,
        consequence: str,
        probe: Callable[[], Deferred[Any]] | None = None,
    ) -> None:
        self._clock = clock
        self._log = log
        self._subject = subject
        self._consequence = consequence
        self._probe = probe
        self._health: tuple[Health, str] | None = None
        self._began: float | None = None  # when the outage began; None while reachable
        self._failures = 0  # since the outage began
        self._reported = 0.0  # when a line last said so
        self._unreported = 0  # failures since that line
        self._probing: IDelayedCall | None = None

    @property
    def down(self) -> bool:
        return self._began is not None

    def report_to(self, health: Health, check: str) -> None:
        """Hold `check` of `health` failing while an outage lasts."""
        self._health = (health, check)
        if self._began is not None:
            health.fail(check, self._output())

    def failed(self, error: BaseException) -> None:
        """One call failed because `subject` could not be reached; in the reactor thread."""
        now = self._clock.seconds()
        if self._began is None:
            self._began = self._reported = now
            self._failures, self._unreported = 1, 0
            self._log.error(
                "{subject} unreachable ({error}); {consequence} until it answers again",
                subject=self._subject,
                error=describe(error),
                consequence=self._consequence,
            )
            if self._health is not None:
                self._health[0].fail(self._health[1], self._output())
            self._schedule_probe()
            return
        self._failures += 1
        self._unreported += 1
        if now - self._reported >= REPORT_SECONDS:
            self._log.warn(
                "{subject} still unreachable after {seconds:.0f} s: {count} calls failed in the last {since:.0f} s",
                subject=self._subject,
                seconds=now - self._began,
                count=self._unreported,
                since=now - self._reported,
                error=describe(error),
            )
            self._reported, self._unreported = now, 0

    def recovered(self) -> None:
        """`subject` answered again: the outage, if one lasted, is over."""
        if self._began is None:
            return
        self._log.info(
            "{subject} reachable again after {seconds:.1f} s; {count} calls failed meanwhile",
            subject=self._subject,
            seconds=self._clock.seconds() - self._began,
            count=self._failures,
        )
        self._began = None
        if self._health is not None:
            self._health[0].passes(self._health[1])
        if self._probing is not None and self._probing.active():
            self._probing.cancel()
        self._probing = None

    def stop(self) -> None:
        """No more probing (the daemon stops)."""
        if self._probing is not None and self._probing.active():
            self._probing.cancel()
        self._probe = None

    def _output(self) -> str:
        return f"{self._subject} unreachable"

    def _schedule_probe(self) -> None:
        if self._probe is not None and (self._probing is None or not self._probing.active()):
            self._probing = self._clock.callLater(PROBE_SECONDS, self._run_probe)

    def _run_probe(self) -> None:
        self._probing = None
        if self._probe is None or self._began is None:
            return
        self._probe().addCallbacks(lambda _: self.recovered(), self._probe_failed)

    def _probe_failed(self, _failure: Failure) -> None:
        if self._began is not None:
            self._schedule_probe()


def describe(error: BaseException) -> str:
    """The error in one line: its type and the first line of its message (a driver's message
    runs over several, and SQLAlchemy adds the SQL and a link)."""
    cause = getattr(error, "orig", None) or error.__cause__ or error
    message = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {message[0]}" if message else type(cause).__name__
