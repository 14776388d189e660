"""The public plugin API: everything a controller plugin imports comes from this module.

A controller is a class with a `name` (its IO State NAME) and methods marked `@action`.
An action receives a `Call` (the request fields already filtered for the caller's role and
typed, the caller, the services) and returns data, a Deferred or a coroutine. What it
returns is filtered to the caller's RESPONSE fields by the daemon, never by the plugin.

This module is the whole contract. What the daemon lends a controller (`Services`) is named
by small protocols defined here, which the daemon's own classes keep, so the module imports
nothing of the daemon but its problems (`apid.problems`), the declaration of settings
(`apid.config.plugin_settings`, over `apid.config.settings`) and the account policy
(`apid.config.account_policy`), which import nothing else of apid, and the daemon's inner
modules depend on it, never the other way round.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from apid.config.account_policy import check_credentials
from apid.config.plugin_settings import setting, settings
from apid.declarations.actions import (
    ACTION_MARK,
    ROUTE_MARK,
    ActionRules,
    Answers,
    Caller,
    Limits,
    Page,
    RecordCheck,
    Validator,
    action,
    route,
)
from apid.declarations.actions import action_rules as action_rules  # read by plugins' own tests since 0.1
from apid.problems import (
    BadGateway,
    BadRequest,
    Conflict,
    FieldError,
    Forbidden,
    GatewayTimeout,
    InvalidFields,
    NotFound,
    Problem,
    ServiceUnavailable,
    Unprocessable,
)

if TYPE_CHECKING:
    from sqlalchemy import Select, Table
    from twisted.internet.defer import Deferred

__all__ = [
    "Account",
    "Accounts",
    "ActionRules",
    "Answers",
    "BadGateway",
    "BadRequest",
    "Call",
    "Caller",
    "Conflict",
    "Controller",
    "Database",
    "Endpoint",
    "FieldError",
    "Forbidden",
    "GatewayTimeout",
    "Hooks",
    "InvalidFields",
    "Keys",
    "Limits",
    "NotFound",
    "Page",
    "PeerPinger",
    "Problem",
    "RecordCheck",
    "RouteCall",
    "RuleSet",
    "SecuritySettings",
    "ServiceUnavailable",
    "Services",
    "UnitOfWork",
    "Unprocessable",
    "Validator",
    "action",
    "check_credentials",
    "route",
    "setting",
    "settings",
]

T = TypeVar("T")


class Endpoint(Protocol):
    """The IO State endpoint a call is for (`call.endpoint`), in the API version called."""

    @property
    def controller(self) -> str: ...

    @property
    def action(self) -> str: ...

    @property
    def api_version(self) -> str: ...

    @property
    def method(self) -> str: ...

    @property
    def path(self) -> str:
        """`controller/action`."""

    @property
    def is_safe(self) -> bool:
        """A GET: it changes nothing and is no webhook event."""


class RuleSet(Protocol):
    """The IO State rules in force: each controller's NAME to its rules, the model of
    docs/iostate.md. `services.api_view` describes them for a caller's roles."""

    @property
    def controllers(self) -> Mapping[str, Any]: ...


class UnitOfWork(Protocol):
    """Runs `work(connection, *args)` in one write transaction, off the reactor thread."""

    def write(self, work: Callable[..., T], *args: Any) -> Deferred[T]: ...


class Database(UnitOfWork, Protocol):
    """The database handle (`services.db`). A unit of work is a plain function of a SQLAlchemy
    `Connection` and any arguments, run in one transaction in the database thread pool, never
    on the reactor thread; `write` rolls back when it raises."""

    def read(self, work: Callable[..., T], *args: Any) -> Deferred[T]:
        """Run `work(connection, *args)` in a read transaction."""

    def prepare(self, statement: Select[Any]) -> Any:
        """`statement` compiled once, for `select`: the fastest read of one row by key."""

    def select(self, prepared: Any, **values: Any) -> Deferred[list[Any]]:
        """The rows (named tuples) of a `prepare`d statement for these parameter values."""


class Account(Protocol):
    """An account as `services.accounts` answers it; it never carries the password hash."""

    @property
    def id(self) -> int: ...

    @property
    def username(self) -> str: ...

    @property
    def email(self) -> str: ...

    @property
    def roles(self) -> frozenset[str]: ...

    def to_dict(self) -> dict[str, Any]:
        """The account under the field names of person.json, as the `person` controller answers it."""


class Accounts(Protocol):
    """The accounts (`services.accounts`), hashing passwords off the reactor thread. A change
    made for a call passes `unit=call`, so that it commits with the call's webhook events."""

    def get(self, account_id: int) -> Awaitable[Account | None]: ...

    def list(self, offset: int, limit: int) -> Awaitable[Sequence[Account]]: ...

    async def create(
        self,
        username: str,
        email: str,
        password: str,
        roles: Iterable[str],
        enabled: bool = True,
        *,
        unit: UnitOfWork | None = None,
        by: Caller | None = None,
    ) -> Account:
        """Pass `by=call.caller`: an API key never creates an account (403)."""

    async def update(
        self,
        account_id: int,
        changes: Mapping[str, Any],
        expected_version: int | None = None,
        password: str | None = None,
        roles: Iterable[str] | None = None,
        *,
        by: Caller | None = None,
        current_password: str | None = None,
        keep_session: str | None = None,
        unit: UnitOfWork | None = None,
    ) -> Account:
        """`changes` maps the account's attribute names to new values; a stale `expected_version`
        is a 409. Pass `by=call.caller`: when the caller is the account's owner, a new password
        or e-mail address needs `current_password` (400 without, 403 when wrong, counted as a
        failed login), a new password ends the account's other logins, and the old address is
        told of a new one. Otherwise a new password ends all of its logins but `keep_session`.
        An API key changes no account (403); an administrator's own account, and the last active
        administrator, are never demoted, disabled, locked or expired (409)."""

    async def delete(self, account_id: int, *, unit: UnitOfWork | None = None, by: Caller | None = None) -> bool:
        """False when there was no such account. Pass `by=call.caller`: an API key never deletes
        an account (403), and the last active administrator is never deleted (409)."""

    async def cancel_reverts(self, account_id: int, *, by: Caller, current_password: str | None) -> int:
        """The owner (`by`, proving it with `current_password`) ends the pending links that would
        put an earlier e-mail address back; how many there were."""

    async def reauthenticate(self, by: Caller, current_password: str | None, purpose: str) -> None:
        """The caller proves the login is theirs with their own `current_password` before an act
        a stolen token must not do (`purpose`: "to create an API key"): 400 without it, 403 when
        wrong, counted as a failed login."""

    async def login(self, username: str, password: str) -> Account | None:
        """The account if the name and password match and it may log in."""

    def check(self, username: str | None, password: str | None) -> None:
        """The account policy for a new username or password (either may be None): raises
        InvalidFields listing every breach."""


class SecuritySettings(Protocol):
    """The role settings of service_api.yml (`services.security`)."""

    @property
    def user_role(self) -> str:
        """The role of an account created without roles."""

    @property
    def all_roles(self) -> frozenset[str]:
        """Every role the configuration knows."""

    @property
    def api_keys_per_account(self) -> int:
        """How many live API keys one account may hold (`security.apiKeysPerAccount`)."""


class PeerPinger(Protocol):
    """The peer API servers of the deployment (`services.pinger`), for the `server` controller."""

    async def ping_all(self) -> dict[str, Any]:
        """Every peer of `servers` (service_server.yml) asked at once for its /health."""


class Hooks(Protocol):
    """The caller's webhooks (`services.hooks`), for the `hook` controller: a caller reaches only
    their own hooks, the superuser everyone's, and subscribes only to what their roles may
    receive. Each dict is a hook (or delivery) under the field names of hook.json."""

    def services(self, caller: Caller) -> list[str]:
        """The controllers and endpoints whose changes the caller's roles may receive."""

    async def show(self, caller: Caller, hook_id: int) -> dict[str, Any]: ...

    async def create(self, caller: Caller, url: str, service: str) -> dict[str, Any]:
        """The new hook with its secret, which is shown only here and by `rotate_secret`."""

    async def update(
        self, caller: Caller, hook_id: int, url: str | None, service: str | None, version: int | None
    ) -> dict[str, Any]: ...

    async def delete(self, caller: Caller, hook_id: int) -> dict[str, Any]: ...

    async def enable(self, caller: Caller, hook_id: int, enabled: bool) -> dict[str, Any]: ...

    async def rotate_secret(self, caller: Caller, hook_id: int) -> dict[str, Any]: ...

    async def deliveries(self, caller: Caller, hook_id: int, offset: int, limit: int) -> list[dict[str, Any]]: ...

    async def redeliver(self, caller: Caller, hook_id: int, message: str) -> dict[str, Any]: ...

    async def ping(self, caller: Caller, hook_id: int) -> dict[str, Any]:
        """Queue a `hook/ping` message, delivered like any other, to test the receiver."""

    # Last: below it, `list` in this class would name the method, not the type.
    async def list(self, caller: Caller, offset: int, limit: int) -> list[dict[str, Any]]: ...


class Keys(Protocol):
    """The caller's API keys (`services.keys`), for the `apikey` controller: a caller reaches
    their own keys, the superuser everyone's, and a call made with a key only that key, to
    revoke it (any other use is a 403). Each dict is a key's record under the field names of
    apikey.json; only `create`'s answer carries the key itself (`key`)."""

    async def create(
        self,
        caller: Caller,
        *,
        name: Any,
        roles: Any,
        scopes: Any = None,
        expires_at: Any = None,
        owner_id: int | None = None,
        current_password: str | None = None,
    ) -> dict[str, Any]:
        """A new key of `owner_id` (the caller when None): its roles at most its owner's, its
        scopes controllers or endpoints that exist, its expiry ahead (one 400 names every bad
        field); a password account's caller proves the login with `current_password`; the
        owner holds at most `security.apiKeysPerAccount` live keys (409) and is mailed."""

    async def revoke(self, caller: Caller, key_id: int) -> dict[str, Any]:
        """The key's record once revoked, everywhere within a second; 404 when the caller
        reaches no such key."""

    # Last: below it, `list` in this class would name the method, not the type.
    async def list(self, caller: Caller, offset: int, limit: int) -> list[dict[str, Any]]:
        """Never the keys themselves."""


@dataclass(frozen=True)
class Services:
    """What the daemon lends a controller: the database, the accounts, the role settings, the
    pinger of the peer servers, the hooks and the API keys (for the first-party `server`,
    `hook` and `apikey` controllers), the IO State rule set in force, the application version and the API view of
    it for some roles (for `apidoc`), and the controller's own settings (`Controller.settings`)."""

    db: Database
    accounts: Accounts
    security: SecuritySettings
    pinger: PeerPinger
    hooks: Hooks
    rules: Callable[[], RuleSet]  # the rule set in force now: call it each time, a reload swaps it
    version: str  # the application version of every path, MAJOR.MINOR ("0.1" in /v0.1/...)
    settings: Any = None  # the controller's `settings_class`, read from plugins.<name>; None without one
    # The API these roles may call, from the rule set in force, as the `apidoc` controller answers it
    api_view: Callable[[Iterable[str]], dict[str, Any]] = field(kw_only=True)
    keys: Keys = field(kw_only=True)  # the caller's API keys, for the `apikey` controller


@dataclass(frozen=True)
class Call:
    endpoint: Endpoint
    fields: Mapping[str, Any]
    caller: Caller
    unit: UnitOfWork | None = None  # set by the daemon for every call
    paging: Page | None = None  # what the action declared (`@action(page=...)`), set by the daemon
    # (offset, limit) of the page `page()` chose: the daemon builds a list answer's links from it
    paged: tuple[int, int] | None = field(default=None, init=False, repr=False, compare=False)

    def write(self, work: Callable[..., T], *args: Any) -> Deferred[T]:
        """Run `work(connection, *args)` (a SQLAlchemy connection, in a database thread) in one
        transaction with this call's webhook events: the change and its events commit together
        or not at all, so a crash never leaves one without the other (the outbox pattern).

        The events carry what `work` returns, filtered for each subscriber like an answer (an
        object with `to_dict()`, such as an `Account`, as that dict): return the changed record
        from `work`, and answer it from the action. A `work` that returns None changed nothing
        (the record was not found, say): no event is recorded.
        """
        if self.unit is None:
            raise RuntimeError("this call has no unit of work: it was not made by the daemon")
        return self.unit.write(work, *args)

    def require(self, *names: str) -> None:
        """Refuse the call with one 400 naming every listed field that was not sent. For fields
        an action always needs, declare `@action(requires=...)` instead: their absence is then
        reported with every other bad field of the call."""
        missing = [name for name in names if self.fields.get(name) is None]
        if missing:
            raise InvalidFields(
                f"required fields missing: {', '.join(missing)}",
                errors=[{"field": name, "reason": "is required"} for name in missing],
            )

    def page(self, default: int | None = None, maximum: int | None = None) -> tuple[int, int]:
        """(offset, limit) from the `offset` and `max` fields, for actions that list records,
        within the action's `@action(page=...)` (else `Page()`: 20 and 100), whose `default` and
        `maximum` the arguments override; the answer then gets `next`/`prev`/`first` links
        (apid.calls.links.page_links). Declare the page instead: the API documents then say it."""
        declared = self.paging or Page()
        page = Page(declared.default if default is None else default, declared.maximum if maximum is None else maximum)
        errors = page.errors(self.fields)
        if errors:
            raise InvalidFields(errors=errors)
        window = page.window(self.fields)
        object.__setattr__(self, "paged", window)
        return window


@dataclass(frozen=True)
class RouteCall:
    """The argument of a `@route` method: the query and JSON body as sent (IO State does not
    govern these paths), and the caller, or None on a public (reserved) path."""

    query: Mapping[str, list[str]]
    body: Mapping[str, Any]
    caller: Caller | None


class Controller:
    """Base class of controllers: subclasses set `name`, mark actions with `@action`, and declare
    the fields their code stores and answers as a keyword of the class statement (so that no
    attribute a plugin names for itself, as 0.1's had `table` and `fields`, means anything to
    apid): `class Team(Controller, stores=(team_table, "led")):`, a Table's column keys and
    names; an action's paging fields count without. IO State may name no other field, so rules
    needing new code wait for it; an undeclared controller is not checked. It may declare its
    settings (`settings_class`, read from `plugins.<name>` into `settings`) and open and close
    what its actions share in `started` and `stopping`, awaited as the daemon starts and stops."""

    name: str = ""
    settings_class: ClassVar[type[Any] | None] = None
    settings: Any
    __apid_stores__: ClassVar[Table | Iterable[Table | str] | None] = None

    def __init_subclass__(cls, *, stores: Table | Iterable[Table | str] | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if stores is not None:
            cls.__apid_stores__ = stores

    def __init__(self, services: Services) -> None:
        self.services = services
        # a plugin's own tests may build a controller with a stub of `Services` made before
        # plugins had settings (or with None): it has none
        self.settings = getattr(services, "settings", None)

    async def started(self) -> None:
        """Awaited once the daemon's database is reachable, before it listens: a failure stops the start."""

    async def stopping(self) -> None:
        """Awaited once the requests in flight have finished, within the shutdown's deadline."""

    @classmethod
    def actions(cls) -> Mapping[str, Callable[..., Any]]:
        return {attr: getattr(cls, attr) for attr in dir(cls) if getattr(getattr(cls, attr, None), ACTION_MARK, False)}

    @classmethod
    def routes(cls) -> Mapping[str, tuple[str, str]]:
        """Method name -> (path, HTTP method) of every `@route` method."""
        return {
            attr: getattr(getattr(cls, attr), ROUTE_MARK)
            for attr in dir(cls)
            if getattr(getattr(cls, attr, None), ROUTE_MARK, None)
        }
