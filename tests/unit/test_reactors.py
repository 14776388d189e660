"""Installing the reactor `reactor` names (apid.runtime.reactors), each in a fresh interpreter: a
process installs one reactor, and the tests' own is already there."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from harness import without_uvloop


def python(code: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)


INSTALL = """
from apid.runtime.reactors import install
print(install({choice!r}))
from twisted.internet import reactor
print(type(reactor).__name__)
"""


def test_the_uvloop_reactor_runs_asyncio_on_uvloop_with_tasks_that_await_deferreds():
    done = python(
        INSTALL.format(choice="uvloop")
        + """
import asyncio
from twisted.internet.defer import Deferred

async def action():
    read = Deferred()
    asyncio.get_running_loop().call_later(0.01, read.callback, 5)
    return type(asyncio.get_running_loop()).__module__, await read

print(*asyncio.get_event_loop().run_until_complete(action()))
"""
    )
    assert done.stdout.splitlines() == ["asyncio on uvloop", "AsyncioReactor", "uvloop 5"], done.stderr


def test_the_asyncio_reactor_runs_on_the_standard_loop_though_uvloop_is_installed():
    """uvloop measured slower in apid's path (docs/benchmarks.md): it is asked for, not preferred."""
    done = python(INSTALL.format(choice="asyncio"))
    assert done.stdout.splitlines() == ["asyncio on the standard event loop", "AsyncioReactor"], done.stderr


def test_the_uvloop_reactor_without_uvloop_is_refused_saying_what_to_install(tmp_path):
    done = python(
        "from apid.runtime.reactors import check_available\ncheck_available('uvloop')",
        env={**os.environ, **without_uvloop(tmp_path)},
    )
    assert "reactor: uvloop needs uvloop installed (pip install 'apid[asyncio]')" in done.stderr


def test_calls_from_threads_run_in_order_on_the_loop_and_one_that_raises_is_logged():
    """apid's asyncio reactor hands a thread's call to the loop itself (not through a
    `callLater(0)`): the calls of a thread run in the order made, in the reactor's thread, and
    one that raises is logged while the next still runs."""
    done = python(
        INSTALL.format(choice="asyncio")
        + """
import threading
from twisted.internet.asyncioreactor import AsyncioSelectorReactor
from twisted.logger import globalLogPublisher

failures = []
globalLogPublisher.addObserver(lambda event: failures.append(event) if event.get("log_failure") else None)
ran, threads = [], set()

def note(n):
    ran.append(n)
    threads.add(threading.get_ident())

def fail():
    raise ValueError("boom")

def work():
    for n in range(50):
        reactor.callFromThread(note, n)
    reactor.callFromThread(fail)
    reactor.callFromThread(note, 50)
    reactor.callFromThread(reactor.stop)

reactor.callWhenRunning(lambda: threading.Thread(target=work).start())
reactor.run()
print(isinstance(reactor, AsyncioSelectorReactor), ran == list(range(51)), threads == {threading.get_ident()})
print(len(failures), failures[0]["log_namespace"], failures[0]["log_failure"].value)
"""
    )
    assert done.stdout.splitlines()[2:] == ["True True True", "1 apid.reactor boom"], done.stderr


def test_the_default_reactor_is_twisteds_epoll_reactor_without_its_log_context():
    done = python(
        INSTALL.format(choice="default")
        + """
from twisted.internet.epollreactor import EPollReactor
print(isinstance(reactor, EPollReactor))
"""
    )
    assert done.stdout.splitlines() == ["default (EPollReactor)", "EPollWithoutLogContext", "True"], done.stderr


def test_apid_serve_imports_no_reactor_before_it_installs_one():
    """`apid serve` loads its configuration, then installs: what it imports until then must
    not import twisted.internet.reactor (which installs the default one)."""
    done = python("""
import sys
import apid.cli.main, apid.config.files, apid.runtime.reactors, twisted.logger
print('twisted.internet.reactor' in sys.modules)
""")
    assert done.stdout.strip() == "False", done.stderr


@pytest.mark.parametrize("choice", ["asyncio", "default"])
def test_a_reactor_installed_too_early_is_named(choice):
    done = python(f"""
import twisted.internet.reactor
from apid.runtime.reactors import ReactorInstalled, install
try:
    install({choice!r})
except ReactorInstalled as exc:
    print(exc)
""")
    assert done.stdout.strip() == (
        f"EPollReactor was installed before apid could install the {choice} reactor: "
        "a module imported twisted.internet.reactor too early"
    ), done.stderr
