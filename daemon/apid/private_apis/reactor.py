"""The private state of Twisted's epoll reactor that apid relies on (see `apid.private_apis`
for why it is fenced, and tests/unit/test_private_apis.py for its tests). Imported only by
`apid.runtime.reactors`, before any reactor is installed.
"""

from __future__ import annotations

import errno

from twisted.internet.epollreactor import EPollReactor
from twisted.logger import Logger

__all__ = ["EPollWithoutLogContext"]

log = Logger(namespace="apid.reactor")


class EPollWithoutLogContext(EPollReactor):
    """Twisted's epoll reactor, without the legacy log context it sets around every event of
    every socket. EPollReactor.doPoll calls each ready selectable's `_doReadOrWrite` through
    `twisted.python.log.callWithLogger`, which asks the selectable its `logPrefix()` and runs
    the call inside `callWithContext({"system": ...})`: 8% of a `person/show` request's time
    (docs/benchmarks.md, the profile by function), spent for `twisted.python.log.msg`, the
    legacy API, which then names the connection a message came from. apid logs through
    `twisted.logger`, which never reads that context; a legacy message from Twisted's own code
    names its system `-` instead. `_poller`, `_selectables` and `_doReadOrWrite` are
    EPollReactor's private state. Checked against Twisted 25.5.0 and 26.10.0."""

    def doPoll(self, timeout: float | None) -> None:
        try:
            ready = self._poller.poll(-1 if timeout is None else timeout, len(self._selectables))
        except OSError as err:
            if err.errno == errno.EINTR:
                return
            raise
        selectables = self._selectables
        for fd, event in ready:
            selectable = selectables.get(fd)
            if selectable is None:
                continue
            try:
                self._doReadOrWrite(selectable, fd, event)
            except KeyboardInterrupt:
                raise
            except BaseException:  # as callWithLogger did: one selectable's failure ends no other's turn
                log.failure("handling an event of {selectable!r} failed", selectable=selectable)

    doIteration = doPoll
