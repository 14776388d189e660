"""A testing kit for plugins: controllers called through the real request path, in memory.

`InMemoryApid` builds what the daemon serves (`apid.server.assembly.assemble`: routing,
authentication with real tokens, standing checks, IO State roles and fields, batch, chain,
link relations, problems) over a temporary SQLite database migrated as the daemon's is, and
calls it with treq's in-memory client (`treq.testing.StubTreq`). There is no port and no
running reactor, so a plain synchronous pytest function can use it:

    with InMemoryApid(controllers=[TeamController]) as apid:
        admin = apid.caller("ROLE_ADMIN")
        reply = apid.post("/v0.1/team/create", {"name": "Core", "leaderId": admin.id}, caller=admin)
        assert reply.status == 200 and apid.events[-1].type == "team/create"

Database and password work runs inline, on the kit's own in-memory reactor: when a call
returns, everything it started has finished. A call still waiting then (an action awaiting
real I/O or a timer) raises `StillWaiting` rather than hanging the test. The kit runs an
asyncio loop of its own by default, as the daemon's `reactor: asyncio` does: a coroutine action
runs as an asyncio task and may await asyncio libraries (httpx, `asyncio.sleep`) doing real
I/O, and a call waits for them up to `timeout` seconds; `reactor="default"` drives coroutines
as the daemon's default reactor does.

The rest of the kit is re-exported here: `ApidDaemon`, the real `apid serve` in a subprocess
(apid.testing.daemon), `WebhookReceiver`, a real HTTP server collecting deliveries
(apid.testing.receiver), and the pytest fixtures over both (apid.testing.pytest_plugin). docs/testing.md
is the reference of every name `apid.testing` exports.
"""

from __future__ import annotations

import asyncio
import ipaddress
import secrets
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Literal, TypeVar, cast
from urllib.parse import urlsplit

from sqlalchemy import Engine
from treq.client import HTTPClient
from treq.testing import StubTreq
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorThreads
from twisted.internet.testing import MemoryReactorClock
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool
from zope.interface import implementer

from apid.auth.sessions import start_family
from apid.auth.tokens import load_secret
from apid.config.files import load as load_config
from apid.hooks.events import EventRecorder, event_data
from apid.hooks.service import Hooks
from apid.iostate import Endpoint, RuleSet
from apid.openapi.docs_page import DocsPage
from apid.plugin import Caller, Controller
from apid.plugin_host.discovery import FoundPlugin, bind, discover, load
from apid.plugin_host.discovery import PluginError as PluginError  # raised at build: apid.testing exports it
from apid.plugin_host.migrations import MIGRATIONS_GROUP, MigrationSource, migration_sources
from apid.runtime.coroutines import bridge_tasks
from apid.runtime.reactors import Reactor, new_loop
from apid.server.assembly import assemble
from apid.store.database import Database, make_engine
from apid.store.migrate import upgrade_all
from apid.testing.calls import ApiCalls, Login, Reply, query_fields, request_headers
from apid.testing.settings import ENVIRONMENT, write_settings

T = TypeVar("T")


class StillWaiting(RuntimeError):
    """A call had not finished once everything the kit runs inline had run: it awaits
    something outside the kit (real network or file I/O, a timer, another thread)."""


@dataclass(frozen=True)
class Event:
    """A webhook event a call emitted, whether or not a hook listens: its `type` (the
    endpoint's `controller/action`, as delivered), the `endpoint`, and `data`, the record
    as the action returned it (before each subscriber's RESPONSE filtering)."""

    type: str
    endpoint: Endpoint
    data: Any


class InMemoryApid(ApiCalls):
    """apid with `controllers` (classes) and its first-party ones (person, hook, server,
    apidoc), in memory. Use it as a context manager, or call `close()`.

    - `migrations`: import packages of Alembic migrations (a plugin's tables), applied after
      apid's own schema, in order.
    - `iostate_dir`: a folder of IO State files, each overriding the one its controller
      ships (the daemon's `iostateDir`).
    - `api_settings`: service_api.yml settings over the kit's (which are apid's defaults, the
      roles of the shipped file and no `reservedUris`), such as `security` with a plugin's roles.
    - `plugin_settings`: each controller's settings by its name, as service_server.yml's
      `plugins` holds them, read and checked as the daemon reads them.
    - `rate_limits`: requests per role and day; given, rate limiting is on (`apiThrottle`).
    - `reactor`: `"asyncio"`, the default (an asyncio loop of the kit's own runs each coroutine
      action as a task, as the daemon's `reactor: asyncio` does), or `"default"` (Twisted's
      coroutine driver, as under the daemon's default reactor: an action awaiting asyncio
      answers the daemon's 500 naming `reactor: asyncio`).
    - `timeout`: under `"asyncio"`, the seconds a call may wait for real I/O before
      `StillWaiting`.

    The controllers' `started()` hooks run as the kit is built, their `stopping()` at `close()`.

    Webhooks are on: every event a call emits is kept in `events`, and messages for hooks
    are written to the outbox table as the daemon writes them; none is ever sent. A hook's
    URL may be on loopback (127.0.0.1, [::1], localhost; any port) whatever
    `cors.allowedOrigins` says, so that a test's receiver can be named; other URLs are
    checked against it as the daemon checks them.

    Attributes: `version`, the application version of every path (`"0.1"` in
    `/v0.1/team/show`); `events`, every `Event` the calls emitted, oldest first (clear it at
    will); `engine`, the SQLAlchemy engine of the database, to assert what was stored.
    """

    def __init__(
        self,
        controllers: Iterable[type[Controller]] = (),
        *,
        migrations: Iterable[str] = (),
        iostate_dir: Path | str | None = None,
        api_settings: Mapping[str, Any] | None = None,
        rate_limits: Mapping[str, int] | None = None,
        reactor: Literal["default", "asyncio"] = "asyncio",
        timeout: float = 30.0,
        plugin_settings: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        if reactor not in ("default", "asyncio"):
            raise ValueError(f'reactor is "default" or "asyncio", not {reactor!r}')
        self._folder = tempfile.TemporaryDirectory(prefix="apid-testing-")
        self._closed = False
        self._timeout = timeout
        self._loop: asyncio.AbstractEventLoop | None = None
        try:
            if reactor == "asyncio":
                self._loop = new_loop()[0]
                bridge_tasks(self._loop)  # its tasks may await Deferreds, as the daemon's may
            self._build(list(controllers), list(migrations), iostate_dir, api_settings, rate_limits, plugin_settings)
        except BaseException:
            self._end_loop()
            self._folder.cleanup()
            raise

    def _build(
        self,
        controllers: list[type[Controller]],
        migrations: list[str],
        iostate_dir: Path | str | None,
        api_settings: Mapping[str, Any] | None,
        rate_limits: Mapping[str, int] | None,
        plugin_settings: Mapping[str, Mapping[str, Any]] | None,
    ) -> None:
        root = Path(self._folder.name)
        server = {
            "apiThrottle": rate_limits is not None,
            "webhookActive": True,
            "database": {"migrate": False},
            "plugins": {name: dict(values) for name, values in (plugin_settings or {}).items()},
        }
        api: dict[str, Any] = {} if iostate_dir is None else {"iostateDir": str(Path(iostate_dir).resolve())}
        if rate_limits is not None:
            api["throttle"] = {"rateLimit": dict(rate_limits)}
        config = load_config(write_settings(root, server, {**api, **(api_settings or {})}), ENVIRONMENT, env={})
        self._config = config
        self.version: str = config.api.version
        self.events: list[Event] = []
        self.engine: Engine = make_engine(config.server.database_url)
        upgrade_all(self.engine, _migration_sources(migrations))
        self._reactor = _InlineReactor()
        self._reactor.advance(time.time())
        bound = bind(load([*_first_party(), *map(_found, controllers)]), config.api.iostate_dir, config.api.security)
        self._parts = assemble(
            # it provides every interface of the reactor that serving uses, processes aside
            cast(Reactor, self._reactor),
            config,
            secret=load_secret(config.server.jwt),
            docs_page=DocsPage(),
            bound=bound,
            engine=self.engine,
            pool=self._reactor.getThreadPool(),
            deliver=False,  # messages wait in the outbox table, never sent
            wrap_events=lambda recorder: _KeptEvents(recorder, self.events.append),
            hooks_class=_LoopbackHooks,
        )
        self._db = self._parts.db
        self._client = StubTreq(self._parts.resource)
        self._db.start()
        self._parts.passwords.start()
        self._settled(lambda: Deferred.fromCoroutine(self._parts.revocations.start()), "reading the revocations")
        self._settled(lambda: Deferred.fromCoroutine(self._parts.plugins.start()), "starting the plugins")

    def caller(self, *roles: str, username: str | None = None) -> Login:
        """A new enabled account holding `roles`, logged in: its access token is real, so
        every call it makes is authenticated, checked against the account's standing and
        authorised for these roles as in production."""
        username = username or f"caller{secrets.token_hex(4)}"
        password = secrets.token_urlsafe(16)
        accounts = self._parts.accounts
        accounts.check(username, password)
        account = self._settled(
            lambda: Deferred.fromCoroutine(accounts.create(username, f"{username}@example.com", password, roles)),
            f"creating account {username}",
        )
        _, session = self._settled(
            lambda: self._db.write(start_family, account.id, self._config.server.jwt.refresh_lifetime),
            "starting its login",
        )
        token = self._parts.tokens.issue(account.id, account.username, account.roles, session)
        return Login(id=account.id, username=account.username, password=password, roles=account.roles, token=token)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: Mapping[str, Any] | None = None,
        caller: Login | None = None,
        headers: Mapping[str, str] | None = None,
        links: bool = False,
    ) -> Reply:
        """Call `path` (`/v0.1/team/show/1`) with `method`: `body` sent as JSON, `query` as the
        query string (a list gives a field several times), with the `caller`'s token, and
        asking for link relations when `links` is true. Raises `StillWaiting` if the call
        has not finished once everything the kit runs inline has run (under `"asyncio"`:
        within `timeout` seconds)."""
        options: dict[str, Any] = {
            "headers": request_headers(caller, links, headers),
            "params": query_fields(query or {}),
        }
        if body is not None:
            options["json"] = body
        self._reactor.advance(max(0.0, time.time() - self._reactor.seconds()))  # its timers, to the wall clock
        what = f"{method} {path}"
        # StubTreq copies treq's functions onto itself, out of the type checker's sight
        client = cast(HTTPClient, self._client)
        response = self._settled(lambda: client.request(method, "http://localhost" + path, **options), what)
        content = self._settled(response.content, what)
        answered = {
            name.decode("latin-1").lower(): ", ".join(value.decode("latin-1") for value in values)
            for name, values in response.headers.getAllRawHeaders()
            if name.lower() != b"content-encoding" or any(values)
        }  # Twisted's decoder adds it empty
        return Reply(status=response.code, headers=answered, text=content.decode("utf-8"))

    def close(self) -> None:
        """Stop what the kit started and delete its database; calling it again does nothing."""
        if self._closed:
            return
        self._closed = True
        try:
            until = self._reactor.seconds() + self._timeout
            self._settled(  # within the kit's `timeout`, no more: hurried
                lambda: Deferred.fromCoroutine(self._parts.plugins.stop(until, hurried=True)), "stopping the plugins"
            )
        finally:
            self._parts.revocations.stop()
            self._db.stop()
            self._parts.passwords.stop()
            self._end_loop()
            self._folder.cleanup()

    def __enter__(self) -> InMemoryApid:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _settled(self, start: Callable[[], Deferred[T]], doing: str) -> T:
        """The result of the Deferred `start()` makes: once the in-memory connections are
        flushed and the timers due have run, as often as that moves anything; under
        `"asyncio"`, started and waited for inside the kit's loop."""
        outcome: list[Any] = []
        if self._loop is None:
            start().addBoth(outcome.append)
            self._pump(outcome)
        else:
            self._loop.run_until_complete(self._awaited(start, outcome))
        if not outcome:
            raise StillWaiting(
                f"{doing} is still waiting after everything the kit runs inline has run: something in it "
                "awaits what the kit does not run (real network or file I/O, a timer, another thread; "
                'InMemoryApid(reactor="asyncio") runs asyncio libraries)'
            )
        if outcome[0] is _TIMED_OUT:
            raise StillWaiting(f"{doing} is still waiting after {self._timeout:g} s (the kit's `timeout`)")
        if isinstance(outcome[0], Failure):
            outcome[0].raiseException()
        return cast(T, outcome[0])

    def _pump(self, outcome: list[Any]) -> None:
        """Flush the in-memory connections and run the timers due until `outcome` is filled or
        nothing moves any more."""
        while not outcome:
            self._client.flush()
            if outcome or not self._run_due():
                break

    async def _awaited(self, start: Callable[[], Deferred[Any]], outcome: list[Any]) -> None:
        """Inside the kit's loop, so that coroutine actions run as its tasks: start the work,
        then let the loop run (the actions' real I/O) between flushing the connections and
        running the timers due by the wall clock, until `outcome` is filled or `timeout`."""
        start().addBoth(outcome.append)
        deadline = time.monotonic() + self._timeout
        turns = 0
        while not outcome:
            self._reactor.advance(max(0.0, time.time() - self._reactor.seconds()))
            self._pump(outcome)
            if outcome:
                return
            if time.monotonic() > deadline:
                outcome.append(_TIMED_OUT)
                return
            turns += 1
            await asyncio.sleep(0 if turns < 50 else 0.001)  # at once while tasks are ready, then I/O

    def _end_loop(self) -> None:
        """Cancel what still runs in the kit's loop (a call given up on) and close it."""
        loop, self._loop = self._loop, None
        if loop is None:
            return
        pending = asyncio.all_tasks(loop)
        for task in pending:
            task.cancel()
        if pending:
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        loop.close()

    def _run_due(self) -> bool:
        """Run the timers due now (a `callLater(0, ...)`); whether there were any."""
        now = self._reactor.seconds()
        if not any(call.getTime() <= now for call in self._reactor.getDelayedCalls()):
            return False
        self._reactor.advance(0)
        return True


_TIMED_OUT = object()


def _on_loopback(url: str | None) -> bool:
    """Whether `url` is an http(s) URL on a loopback host."""
    if url is None:
        return False
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        return parts.scheme in ("http", "https") and (host == "localhost" or ipaddress.ip_address(host).is_loopback)
    except ValueError:
        return False


class _LoopbackHooks(Hooks):
    """apid's hooks, but a URL on loopback is allowed on any port: a test's receiver listens
    on a port chosen when it starts. The kit sends nothing, so nothing reaches it anyway."""

    def __init__(
        self,
        *,
        db: Database,
        allowed_origins: Iterable[str],
        rules: Callable[[], RuleSet],
        wake: Callable[[], None] | None,
    ) -> None:
        super().__init__(db=db, allowed_origins=allowed_origins, rules=rules, wake=wake)
        self._kit = (db, tuple(allowed_origins), rules, wake)

    def _allowing(self, url: str | None) -> Hooks:
        """Hooks that allow `url`'s origin when it is on loopback; else these."""
        db, allowed, rules, wake = self._kit
        return (
            Hooks(db=db, allowed_origins=(*allowed, url), rules=rules, wake=wake) if url and _on_loopback(url) else self
        )

    async def create(self, caller: Caller, url: str, service: str) -> dict[str, Any]:
        return await Hooks.create(self._allowing(url), caller, url, service)

    async def update(
        self, caller: Caller, hook_id: int, url: str | None, service: str | None, version: int | None
    ) -> dict[str, Any]:
        return await Hooks.update(self._allowing(url), caller, hook_id, url, service, version)


@implementer(IReactorThreads)
class _InlineReactor(MemoryReactorClock):
    """The kit's reactor: time and timers in memory, moved on by the kit, and no other
    thread, so what a pool's thread would hand back is handed back at once."""

    def __init__(self) -> None:
        # MemoryReactorClock's __init__ is unannotated (untyped_calls_exclude misses a super() call)
        super().__init__()  # type: ignore[no-untyped-call]
        self._pool = _InlinePool()

    def getThreadPool(self) -> ThreadPool:
        return self._pool

    def callInThread(self, callable: Callable[..., Any], *args: object, **kwargs: object) -> None:
        callable(*args, **kwargs)

    def callFromThread(self, callable: Callable[..., Any], *args: object, **kwargs: object) -> None:
        callable(*args, **kwargs)

    def suggestThreadPoolSize(self, size: int) -> None:
        pass


class _InlinePool(ThreadPool):
    """A thread pool that runs each piece of work at once, in the caller's thread."""

    def __init__(self) -> None:
        super().__init__(minthreads=0, maxthreads=1, name="apid-testing-inline")

    def start(self) -> None:
        self.started = True

    def stop(self) -> None:
        self.started = False

    def callInThreadWithCallback(
        self, onResult: Callable[[bool, Any], object] | None, func: Callable[..., Any], *args: Any, **kw: Any
    ) -> None:
        try:
            result = func(*args, **kw)
        except BaseException:
            if onResult is not None:
                onResult(False, Failure())
        else:
            if onResult is not None:
                onResult(True, result)


class _KeptEvents:
    """The pipeline's `Events`: the daemon's recorder, and each event also kept for the test."""

    def __init__(self, recorder: EventRecorder, keep: Callable[[Event], None]) -> None:
        self._recorder = recorder
        self._keep = keep

    async def record(self, endpoint: Endpoint, output: Any) -> None:
        await self._recorder.record(endpoint, output)
        self._keep(Event(endpoint.path, endpoint, event_data(output)))

    def write(self, endpoint: Endpoint, work: Callable[..., Any], *args: Any) -> Deferred[Any]:
        def kept(result: Any) -> Any:
            self._keep(Event(endpoint.path, endpoint, event_data(result)))
            return result

        return self._recorder.write(endpoint, work, *args).addCallback(kept)


def _migration_sources(packages: list[str]) -> list[MigrationSource]:
    """Each package's revisions, named as the installed plugin announcing them names them
    (so their version table is the daemon's), else after the package's top level."""
    announced = metadata.entry_points(group=MIGRATIONS_GROUP)
    sources = []
    for package in packages:
        found = migration_sources(entry_point for entry_point in announced if entry_point.value == package)
        sources += found or [MigrationSource.from_package(package.split(".")[0].lower(), package)]
    return sources


def _first_party() -> list[FoundPlugin]:
    """apid's own controllers, as its distribution announces them."""
    return [found for found in discover() if found.distribution == "apid"]


def _found(cls: type[Controller]) -> FoundPlugin:
    """A controller class given to the kit, found as if its distribution announced it, so that
    `load` checks it as it checks an installed one."""
    package = cls.__module__.split(".")[0]
    distribution = metadata.packages_distributions().get(package, [package])[0]  # not installed: its package
    return FoundPlugin(
        name=getattr(cls, "name", "") or cls.__qualname__, distribution=distribution, entry_point=_Given(cls)
    )


@dataclass(frozen=True)
class _Given:
    """In the place of an entry point: `load` hands back the class itself, so a class made
    inside a test function (which no entry point could name) is loaded too."""

    cls: type

    @property
    def value(self) -> str:
        return f"{self.cls.__module__}:{self.cls.__qualname__}"

    def load(self) -> type:
        return self.cls
