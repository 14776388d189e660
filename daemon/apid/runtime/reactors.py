"""Which Twisted reactor runs the daemon: the `reactor` setting and its installation.

`asyncio` (the default) is apid's AsyncioSelectorReactor on Python's standard event loop, under
which plugin actions may await asyncio libraries (apid.runtime.coroutines); `uvloop` the same
on uvloop (the `asyncio` extra), which apid's own path has measured slower than the standard
loop in every run (docs/benchmarks.md), so it is asked for, not preferred; `default` is
Twisted's reactor for the platform (epoll on Linux), with no asyncio loop. A reactor is
installed once per process, before anything imports twisted.internet.reactor: `apid serve`
installs it before it imports the daemon.
"""

from __future__ import annotations

import asyncio
import sys
from typing import cast

from twisted.internet.interfaces import (
    IReactorCore,
    IReactorProcess,
    IReactorSocket,
    IReactorTCP,
    IReactorThreads,
    IReactorTime,
    IReactorUNIX,
)

from apid.config.kinds import REACTORS


class Reactor(IReactorCore, IReactorTime, IReactorThreads, IReactorTCP, IReactorUNIX, IReactorSocket, IReactorProcess):
    """The reactor's interfaces apid uses, as one type (as Twisted types its global reactor with
    the common ones): both reactors apid installs are PosixReactorBase and provide them all."""


def installed() -> Reactor:
    """The installed reactor (Twisted's default when none is yet)."""
    from twisted.internet import reactor

    # Twisted types its global reactor with fewer interfaces than it provides (no threads, no
    # adopted sockets); apid's reactors are all PosixReactorBase, which provides Reactor
    return cast(Reactor, reactor)


class ReactorInstalled(RuntimeError):
    """A reactor was installed before apid chose one: something imported it too early."""


def install(choice: str) -> str:
    """Install the reactor `choice` names; returns what runs, for the log ("asyncio on uvloop")."""
    if choice not in REACTORS:
        raise ValueError(f"reactor must be one of {', '.join(REACTORS)}, not {choice!r}")
    if "twisted.internet.reactor" in sys.modules:
        from twisted.internet import reactor

        raise ReactorInstalled(
            f"{type(reactor).__name__} was installed before apid could install the {choice} reactor: "
            "a module imported twisted.internet.reactor too early"
        )
    if choice == "default":
        return _install_default()
    from twisted.internet.main import installReactor

    from apid.runtime.asyncio_reactor import AsyncioReactor
    from apid.runtime.coroutines import bridge_tasks

    loop, name = new_loop(uvloop=choice == "uvloop")
    asyncio.set_event_loop(loop)
    bridge_tasks(loop)
    installReactor(AsyncioReactor(loop))
    return f"asyncio on {name}"


def _install_default() -> str:
    """Twisted's reactor for the platform: on Linux its epoll reactor, without the legacy log
    context around every socket event (apid.private_apis.reactor)."""
    import select

    if not hasattr(select, "epoll"):  # not Linux: Twisted's own choice, as it is
        from twisted.internet import default

        default.install()
        from twisted.internet import reactor

        return f"default ({type(reactor).__name__})"
    from twisted.internet.main import installReactor

    from apid.private_apis.reactor import EPollWithoutLogContext

    installReactor(EPollWithoutLogContext())
    return "default (EPollReactor)"


def new_loop(uvloop: bool = False) -> tuple[asyncio.AbstractEventLoop, str]:
    """A new event loop, Python's standard one or uvloop's, and its name."""
    if not uvloop:
        return asyncio.new_event_loop(), "the standard event loop"
    try:
        import uvloop as library
    except ImportError:
        raise ReactorUnavailable(UVLOOP_MISSING) from None
    return library.new_event_loop(), "uvloop"


def check_available(choice: str) -> None:
    """Refuse, before anything starts, a reactor whose library is not installed."""
    if choice == "uvloop":
        try:
            import uvloop  # noqa: F401 (whether it imports: installed, and built for this Python)
        except ImportError:
            raise ReactorUnavailable(UVLOOP_MISSING) from None


UVLOOP_MISSING = (
    "reactor: uvloop needs uvloop installed (pip install 'apid[asyncio]'); reactor: asyncio runs on Python's "
    "standard event loop"
)


class ReactorUnavailable(RuntimeError):
    """The reactor asked for needs a library that is not installed."""
