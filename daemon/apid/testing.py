"""A testing kit for plugins: controllers called through the real request path, in memory.

`InMemoryApid` builds what the daemon serves (`apid.assembly.assemble`: routing,
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
real I/O or a timer) raises `StillWaiting` rather than hanging the test.
"""

from __future__ import annotations

import json
import re
import secrets
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar, cast

import yaml
from sqlalchemy import Engine
from treq.client import HTTPClient
from treq.testing import StubTreq
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorThreads
from twisted.internet.testing import MemoryReactorClock
from twisted.python.failure import Failure
from twisted.python.threadpool import ThreadPool
from zope.interface import implementer

from apid.assembly import assemble
from apid.auth.passwords import Passwords
from apid.auth.sessions import start_family
from apid.auth.tokens import load_secret
from apid.config import load as load_config
from apid.docspage import DocsPage
from apid.hooks.events import EventRecorder, event_data
from apid.iostate import Endpoint
from apid.plugin import Controller
from apid.plugins import MIGRATIONS_GROUP, FoundPlugin, MigrationSource, bind, discover, load, migration_sources
from apid.reactors import Reactor
from apid.store.database import Database, make_engine
from apid.store.migrate import upgrade_all

__all__ = ["Event", "InMemoryApid", "Login", "Reply", "StillWaiting"]

T = TypeVar("T")

# The roles of the service_api.yml apid ships; `api_settings={"security": ...}` replaces them.
SECURITY = {
    "superuserRole": "ROLE_ADMIN",
    "userRole": "ROLE_USER",
    "networkGroups": ["open", "public", "private"],
    "networkRoles": {
        "open": ["ROLE_ADMIN", "ROLE_USER", "ROLE_ANONYMOUS"],
        "public": ["ROLE_ADMIN", "ROLE_USER"],
        "private": ["ROLE_ADMIN"],
    },
}
_LINK = re.compile(r'<(?P<href>[^>]*)>(?P<params>(?:\s*;\s*[^;,=\s]+\s*=\s*(?:"[^"]*"|[^;,\s]*))*)')
_LINK_PARAM = re.compile(r';\s*([^;,=\s]+)\s*=\s*(?:"([^"]*)"|([^;,\s]*))')


class StillWaiting(RuntimeError):
    """A call had not finished once everything the kit runs inline had run: it awaits
    something outside the kit (real network or file I/O, a timer, another thread)."""


@dataclass(frozen=True)
class Login:
    """An account made by `InMemoryApid.caller`, and the access token it calls with."""

    id: int
    username: str
    password: str
    roles: frozenset[str]
    token: str


@dataclass(frozen=True)
class Event:
    """A webhook event a call emitted, whether or not a hook listens: its `type` (the
    endpoint's `controller/action`, as delivered), the `endpoint`, and `data`, the record
    as the action returned it (before each subscriber's RESPONSE filtering)."""

    type: str
    endpoint: Endpoint
    data: Any


@dataclass(frozen=True)
class Reply:
    """An answer: its status, its headers (lower-case names, repeated ones joined by ", ")
    and its body as text, with the JSON, problem and link views of it."""

    status: int
    headers: Mapping[str, str]
    text: str

    @property
    def media_type(self) -> str:
        """The Content-Type without its parameters, in lower case (`application/json`)."""
        return self.headers.get("content-type", "").split(";")[0].strip().lower()

    @property
    def json(self) -> Any:
        """The body parsed, when its media type is JSON (`application/json`, `...+json`); else None."""
        if self.media_type == "application/json" or self.media_type.endswith("+json"):
            return json.loads(self.text)
        return None

    @property
    def problem(self) -> dict[str, Any] | None:
        """The RFC 9457 problem, when the answer is one (`application/problem+json`); else None."""
        return self.json if self.media_type == "application/problem+json" else None

    @property
    def links(self) -> list[dict[str, str]]:
        """The `Link` header (sent when the call asked with `links=True`), one dict per link:
        `{"href": ..., "rel": ..., "method": ...}`; empty without the header."""
        found = []
        for link in _LINK.finditer(self.headers.get("link", "")):
            params = {name: quoted or bare for name, quoted, bare in _LINK_PARAM.findall(link["params"])}
            found.append({"href": link["href"], **params})
        return found


class InMemoryApid:
    """apid with `controllers` (classes) and its first-party ones (person, hook, server,
    apidoc), in memory. Use it as a context manager, or call `close()`.

    - `migrations`: import packages of Alembic migrations (a plugin's tables), applied after
      apid's own schema, in order.
    - `iostate_dir`: a folder of IO State files, each overriding the one its controller
      ships (the daemon's `iostateDir`).
    - `api_settings`: service_api.yml settings over the kit's (which are apid's defaults, the
      roles of the shipped file and no `reservedUris`), such as `security` with a plugin's roles.
    - `rate_limits`: requests per role and day; given, rate limiting is on (`apiThrottle`).

    Webhooks are on: every event a call emits is kept in `events`, and messages for hooks
    are written to the outbox table as the daemon writes them; none is ever sent.

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
    ) -> None:
        self._folder = tempfile.TemporaryDirectory(prefix="apid-testing-")
        self._closed = False
        try:
            self._build(list(controllers), list(migrations), iostate_dir, api_settings, rate_limits)
        except BaseException:
            self._folder.cleanup()
            raise

    def _build(
        self,
        controllers: list[type[Controller]],
        migrations: list[str],
        iostate_dir: Path | str | None,
        api_settings: Mapping[str, Any] | None,
        rate_limits: Mapping[str, int] | None,
    ) -> None:
        root = Path(self._folder.name)
        config = load_config(_write_settings(root, iostate_dir, api_settings, rate_limits), "test", env={})
        self._config = config
        self.version: str = config.api.version
        self.events: list[Event] = []
        self.engine: Engine = make_engine(config.server.database_url)
        upgrade_all(self.engine, _migration_sources(migrations))
        bound = bind(load([*_first_party(), *map(_found, controllers)]), config.api.iostate_dir, config.api.security)
        self._reactor = _InlineReactor()
        self._reactor.advance(time.time())
        pool = self._reactor.getThreadPool()
        self._db = Database(self._reactor, self.engine, 1, pool=pool)
        self._passwords = Passwords(self._reactor, 1, pool=pool)
        self._parts = assemble(
            # it provides every interface of the reactor that serving uses, processes aside
            cast(Reactor, self._reactor),
            config,
            secret=load_secret(config.server.jwt),
            docs_page=DocsPage(),
            bound=bound,
            db=self._db,
            passwords=self._passwords,
            wake=lambda: None,
            wrap_events=lambda recorder: _KeptEvents(recorder, self.events.append),
        )
        self._client = StubTreq(self._parts.resource)
        self._db.start()
        self._passwords.start()
        self._settled(Deferred.fromCoroutine(self._parts.revocations.start()), "reading the revocations")

    def caller(self, *roles: str, username: str | None = None) -> Login:
        """A new enabled account holding `roles`, logged in: its access token is real, so
        every call it makes is authenticated, checked against the account's standing and
        authorised for these roles as in production."""
        username = username or f"caller{secrets.token_hex(4)}"
        password = secrets.token_urlsafe(16)
        accounts = self._parts.accounts
        accounts.check(username, password)
        account = self._settled(
            Deferred.fromCoroutine(accounts.create(username, f"{username}@example.com", password, roles)),
            f"creating account {username}",
        )
        _, session = self._settled(
            self._db.write(start_family, account.id, self._config.server.jwt.refresh_lifetime), "starting its login"
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
        has not finished once everything the kit runs inline has run."""
        sent = dict(headers or {})
        if caller is not None:
            sent["Authorization"] = f"Bearer {caller.token}"
        if links:
            sent["X-LINK_RELATIONS"] = "true"
        options: dict[str, Any] = {"headers": sent, "params": _query(query or {})}
        if body is not None:
            options["json"] = body
        self._reactor.advance(max(0.0, time.time() - self._reactor.seconds()))  # its timers, to the wall clock
        what = f"{method} {path}"
        # StubTreq copies treq's functions onto itself, out of the type checker's sight
        client = cast(HTTPClient, self._client)
        response = self._settled(client.request(method, "http://localhost" + path, **options), what)
        content = self._settled(response.content(), what)
        answered = {
            name.decode("latin-1").lower(): ", ".join(value.decode("latin-1") for value in values)
            for name, values in response.headers.getAllRawHeaders()
            if name.lower() != b"content-encoding" or any(values)
        }  # Twisted's decoder adds it empty
        return Reply(status=response.code, headers=answered, text=content.decode("utf-8"))

    def get(
        self, path: str, query: Mapping[str, Any] | None = None, *, caller: Login | None = None, links: bool = False
    ) -> Reply:
        """A GET of `path`, the fields in the query string (see `request`)."""
        return self.request("GET", path, query=query, caller=caller, links=links)

    def post(self, path: str, body: Any = None, *, caller: Login | None = None, links: bool = False) -> Reply:
        """A POST of `body` as JSON to `path` (see `request`)."""
        return self.request("POST", path, body, caller=caller, links=links)

    def put(self, path: str, body: Any = None, *, caller: Login | None = None, links: bool = False) -> Reply:
        """A PUT of `body` as JSON to `path` (see `request`)."""
        return self.request("PUT", path, body, caller=caller, links=links)

    def delete(self, path: str, body: Any = None, *, caller: Login | None = None, links: bool = False) -> Reply:
        """A DELETE of `path`, with `body` as JSON if given (see `request`)."""
        return self.request("DELETE", path, body, caller=caller, links=links)

    def batch(
        self, target: str, elements: Iterable[Mapping[str, Any]], *, caller: Login | None = None, combine: bool = False
    ) -> Reply:
        """`POST /b{version}/{target}` (`target` as `team/create`): one call per element,
        every output answered when `combine` is true, else the last one."""
        body: dict[str, Any] = {"batch": list(elements)}
        if combine:
            body["combine"] = True
        return self.request("POST", f"/b{self.version}/{target}", body, caller=caller)

    def chain(
        self,
        method: str,
        target: str,
        chain: Mapping[str, Any],
        fields: Mapping[str, Any] | None = None,
        *,
        caller: Login | None = None,
    ) -> Reply:
        """`/c{version}/{target}` (`target` as `team/show/1`, the first link) called with
        `method`: `chain` is the body's `chain` object (`key`, `order`, `type`, `combine`),
        `fields` the request fields of the chain's non-safe call."""
        return self.request(
            method, f"/c{self.version}/{target}", {**(fields or {}), "chain": dict(chain)}, caller=caller
        )

    def close(self) -> None:
        """Stop what the kit started and delete its database; calling it again does nothing."""
        if self._closed:
            return
        self._closed = True
        self._parts.revocations.stop()
        self._db.stop()
        self._passwords.stop()
        self._folder.cleanup()

    def __enter__(self) -> InMemoryApid:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _settled(self, deferred: Deferred[T], doing: str) -> T:
        """The result of `deferred`, once the in-memory connections are flushed and the
        timers due have run, as often as that moves anything."""
        outcome: list[Any] = []
        deferred.addBoth(outcome.append)
        while not outcome:
            self._client.flush()
            if outcome or not self._run_due():
                break
        if not outcome:
            raise StillWaiting(
                f"{doing} is still waiting after everything the kit runs inline has run: something in it "
                "awaits what the kit does not run (real network or file I/O, a timer, another thread)"
            )
        if isinstance(outcome[0], Failure):
            outcome[0].raiseException()
        return cast(T, outcome[0])

    def _run_due(self) -> bool:
        """Run the timers due now (a `callLater(0, ...)`); whether there were any."""
        now = self._reactor.seconds()
        if not any(call.getTime() <= now for call in self._reactor.getDelayedCalls()):
            return False
        self._reactor.advance(0)
        return True


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


def _write_settings(
    root: Path,
    iostate_dir: Path | str | None,
    api_settings: Mapping[str, Any] | None,
    rate_limits: Mapping[str, int] | None,
) -> Path:
    """The kit's etc/ folder: read by apid's own configuration loader, so every setting the
    kit does not choose has the daemon's default."""
    etc = root / "etc"
    etc.mkdir()
    server = {
        "webhookActive": True,
        "apiThrottle": rate_limits is not None,
        "database": {"url": f"sqlite:///{root / 'apid.db'}", "migrate": False},
        "mail": {"backend": "file", "outbox": str(root / "outbox")},
        "jwt": {"secret": secrets.token_urlsafe(48)},
        "accessLog": False,
    }
    api: dict[str, Any] = {
        "security": SECURITY,
        "iostateDir": str(Path(iostate_dir).resolve() if iostate_dir is not None else root / "iostate"),
    }
    if rate_limits is not None:
        api["throttle"] = {"rateLimit": dict(rate_limits)}
    api.update(api_settings or {})
    (etc / "service_server.yml").write_text(yaml.safe_dump({"test": server}), encoding="utf-8")
    (etc / "service_api.yml").write_text(yaml.safe_dump(api), encoding="utf-8")
    return etc


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
    distribution = metadata.packages_distributions().get(cls.__module__.split(".")[0], ["unknown"])[0]
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


def _query(fields: Mapping[str, Any]) -> dict[str, list[str]]:
    """Query fields as text: strings as they are, other values as JSON (`true`, `3`)."""
    return {
        name: [
            value if isinstance(value, str) else json.dumps(value)
            for value in (values if isinstance(values, (list, tuple)) else [values])
        ]
        for name, values in fields.items()
    }
