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
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, TypeVar, overload

from apid.config.account_policy import check_credentials
from apid.config.plugin_settings import setting, settings
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

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")
_ACTION_MARK = "__apid_action__"
_ROUTE_MARK = "__apid_route__"

Validator = Callable[[Mapping[str, Any]], Iterable[FieldError] | None]
"""What `@action(validate=...)` takes: the admitted, typed fields to the field errors found."""

Answers = Literal["record", "list", "nothing"]
"""What `@action(answers=...)` declares an action answers: one record (a JSON object), a list
of records, or nothing (`null`). The API documents type the action's answer from it."""


@dataclass(frozen=True)
class Page:
    """How an action that lists records pages them, declared beside it with
    `@action(page=Page(default=20, maximum=100))`: `max` records a page, 1 to `maximum`
    (`default` when not sent), from `offset`, 0 or more. The daemon checks both fields with the
    call's others (one 400), `call.page()` reads them, and the API documents state the same
    ranges: one declaration for the three."""

    default: int = 20
    maximum: int = 100

    def window(self, fields: Mapping[str, Any]) -> tuple[int, int]:
        """(offset, limit) of the fields sent; an absent or null one is the first page, or `default` records."""
        offset, limit = fields.get("offset"), fields.get("max")
        return (0 if offset is None else offset, self.default if limit is None else limit)

    def errors(self, fields: Mapping[str, Any]) -> list[FieldError]:
        """What is out of range in the window of the fields sent."""
        offset, limit = self.window(fields)
        errors: list[FieldError] = []
        if offset < 0:
            errors.append({"field": "offset", "reason": "must be at least 0"})
        if not 1 <= limit <= self.maximum:
            errors.append({"field": "max", "reason": f"must be 1 to {self.maximum}"})
        return errors


@dataclass(frozen=True)
class ActionRules:
    """What an action declares, checked by the daemon with the IO State checks before it runs
    (one 400 lists every bad field) and told in the API documents.

    `requires`: fields that must be sent (not null). `validate(fields)`: the action's own field
    rules; it receives the admitted, typed fields (any may be absent) and returns field errors,
    or raises `InvalidFields` with them. `caller_independent`: the answer depends on nothing of
    the caller but the roles the endpoint granted (no own-record check, no `call.caller`), so
    an IO State `CACHE` may say `"shared": true`: a cached answer skips the action and its
    checks of who calls, so the daemon refuses a shared cache unless the action says this.
    `answers`: what it answers (`Answers`), or None, so the documents type its answer exactly.
    `page`: how a list action pages (`Page`), or None. `upstream`: it calls a service of its
    own, so it may answer 502, 503 (with Retry-After) and 504, which the documents list.

    `may_see(caller, record)`: who may receive a copy of a record the action answers other than
    its caller, such as a webhook's owner (`RecordCheck`): the action's own per-record check
    (person: the owner and administrators), which every such copy passes. Without it, a
    `caller_independent` action's records go to every holder of the roles IO State names, and
    any other action's to administrators only: IO State may give such an action's HOOK no
    other role."""

    requires: tuple[str, ...] = ()
    validate: Validator | None = None
    caller_independent: bool = False
    answers: Answers | None = None
    page: Page | None = None
    may_see: RecordCheck | None = None
    upstream: bool = False


@overload
def action(method: F) -> F: ...


@overload
def action(
    *,
    requires: Iterable[str] = (),
    validate: Validator | None = None,
    caller_independent: bool = False,
    answers: Answers | None = None,
    page: Page | None = None,
    may_see: RecordCheck | None = None,
    upstream: bool = False,
) -> Callable[[F], F]: ...


def action(
    method: Any = None,
    *,
    requires: Iterable[str] = (),
    validate: Validator | None = None,
    caller_independent: bool = False,
    answers: Answers | None = None,
    page: Page | None = None,
    may_see: RecordCheck | None = None,
    upstream: bool = False,
) -> Any:
    """Mark a controller method as an action that IO State may expose: `@action`, or
    `@action(requires=("name",), answers="record", ...)` to declare its `ActionRules`."""
    if answers not in (None, "record", "list", "nothing"):
        raise ValueError(f'@action(answers=...) is "record", "list" or "nothing", not {answers!r}')
    if page is not None and not 1 <= page.default <= page.maximum:
        raise ValueError(f"@action(page=...): the default is 1 to the maximum, not {page}")
    rules = ActionRules(
        requires=tuple(requires),
        validate=validate,
        caller_independent=caller_independent,
        answers=answers,
        page=page,
        may_see=may_see,
        upstream=upstream,
    )

    def mark(handler: F) -> F:
        setattr(handler, _ACTION_MARK, rules)
        return handler

    return mark if method is None else mark(method)


def action_rules(handler: Callable[..., Any]) -> ActionRules:
    """The rules an `@action` declared (none for a bare `@action`)."""
    rules: ActionRules = getattr(handler, _ACTION_MARK)
    return rules


def route(path: str, method: str = "GET") -> Callable[[F], F]:
    """Map a controller method to a fixed path and HTTP method, outside IO State.

    The path answers without a token only when it is listed in `reservedUris` of
    service_api.yml; otherwise it needs a token like any private endpoint. The method
    receives a `RouteCall` and returns JSON data.
    """
    if not path.startswith("/"):
        raise ValueError(f"a route path starts with /, not {path!r}")

    def mark(handler: F) -> F:
        setattr(handler, _ROUTE_MARK, (path.rstrip("/") or "/", method.upper()))
        return handler

    return mark


@dataclass(frozen=True)
class Caller:
    """Who is calling: the account id and name, and the roles the endpoint granted."""

    id: int
    username: str
    roles: frozenset[str]
    is_superuser: bool
    # The login this request belongs to: a password changed by its owner ends every other one.
    session: str | None = None
    # Every current role of the caller, whether this endpoint admits it or not (`apidoc`
    # describes what all of them may call); `roles` is what decides this call.
    all_roles: frozenset[str] = frozenset()
    # The client's address, as the per-address abuse limits count it (`Accounts.update` counts
    # an owner's wrong `currentPassword` there, as a failed login).
    address: str = ""
    # The API key the call is made with (its id), None for a login's access token: a key never
    # changes a password or an e-mail address (`Accounts.update`), nor manages keys.
    api_key: int | None = None


RecordCheck = Callable[[Caller, Any], bool]
"""What `@action(may_see=...)` takes: whether a principal (a `Caller`: the receiver of a copy,
such as a webhook's owner) may see a record the action answered (as it answered it, before any
field filtering). A plain function of its arguments: it runs inside the change's transaction,
in a database thread, so it reads nothing and awaits nothing."""


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
        from `work`, and answer it from the action.
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
        return {attr: getattr(cls, attr) for attr in dir(cls) if getattr(getattr(cls, attr, None), _ACTION_MARK, False)}

    @classmethod
    def routes(cls) -> Mapping[str, tuple[str, str]]:
        """Method name -> (path, HTTP method) of every `@route` method."""
        return {
            attr: getattr(getattr(cls, attr), _ROUTE_MARK)
            for attr in dir(cls)
            if getattr(getattr(cls, attr, None), _ROUTE_MARK, None)
        }
