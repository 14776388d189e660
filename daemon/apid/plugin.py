"""The public plugin API: everything a controller plugin imports comes from this module.

A controller is a class with a `name` (its IO State NAME) and methods marked `@action`.
An action receives a `Call` (the request fields already filtered for the caller's role and
typed, the caller, the services) and returns data, a Deferred or a coroutine. What it
returns is filtered to the caller's RESPONSE fields by the daemon, never by the plugin.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, overload

from apid.apidoc import ApiView, api_view
from apid.problems import (
    BadRequest,
    Conflict,
    Forbidden,
    InvalidFields,
    NotFound,
    Problem,
    Unprocessable,
)

if TYPE_CHECKING:
    from twisted.internet.defer import Deferred

    from apid.accounts import Accounts
    from apid.config import SecurityConfig
    from apid.hooks.service import Hooks
    from apid.ping import PeerPinger
    from apid.iostate import Endpoint, RuleSet
    from apid.store.database import Database

__all__ = [
    "ActionRules", "ApiView", "BadRequest", "Call", "Caller", "Conflict", "Controller", "FieldError", "Forbidden",
    "InvalidFields", "NotFound", "Problem", "RouteCall", "Services", "UnitOfWork", "Unprocessable", "action",
    "api_view", "route",
]

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")
_ACTION_MARK = "__apid_action__"
_ROUTE_MARK = "__apid_route__"

FieldError = dict[str, str]
"""One entry of an `InvalidFields` problem's `errors`: `{"field": name, "reason": text}`."""

Validator = Callable[[Mapping[str, Any]], Iterable[FieldError] | None]


@dataclass(frozen=True)
class ActionRules:
    """What an action declares about its request fields, checked by the daemon before the action
    runs, together with the IO State checks, so that one 400 lists every bad field at once.

    `requires`: fields that must be sent (not null). `validate(fields)`: the action's own field
    rules; it receives the admitted, typed fields (only those that passed the IO State checks,
    so any may be absent) and returns field errors, or raises `InvalidFields` with them."""

    requires: tuple[str, ...] = ()
    validate: Validator | None = None


@overload
def action(method: F) -> F: ...


@overload
def action(*, requires: Iterable[str] = (), validate: Validator | None = None) -> Callable[[F], F]: ...


def action(method: Any = None, *, requires: Iterable[str] = (), validate: Validator | None = None) -> Any:
    """Mark a controller method as an action that IO State may expose: `@action`, or
    `@action(requires=("name",), validate=check)` to declare its field rules (`ActionRules`)."""
    rules = ActionRules(requires=tuple(requires), validate=validate)

    def mark(handler: F) -> F:
        setattr(handler, _ACTION_MARK, rules)
        return handler

    return mark if method is None else mark(method)


def action_rules(handler: Callable[..., Any]) -> ActionRules:
    """The rules an `@action` declared (none for a bare `@action`)."""
    return getattr(handler, _ACTION_MARK)


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


@dataclass(frozen=True)
class Services:
    """What the daemon lends a controller: the database, the accounts, the role settings, the
    pinger of the peer servers and the hooks (for the first-party `server` and `hook`
    controllers), the IO State rule set in force and the application version (for `apidoc`)."""

    db: Database
    accounts: Accounts
    security: SecurityConfig
    pinger: PeerPinger
    hooks: Hooks
    rules: Callable[[], RuleSet]  # the rule set in force now: call it each time, a reload swaps it
    version: str  # the application version of every path, MAJOR.MINOR ("0.1" in /v0.1/...)


class UnitOfWork(Protocol):
    """Runs `work(connection, *args)` in one write transaction, off the reactor thread."""

    def write(self, work: Callable[..., T], *args: Any) -> Deferred[T]: ...


@dataclass(frozen=True)
class Call:
    endpoint: Endpoint
    fields: Mapping[str, Any]
    caller: Caller
    unit: UnitOfWork | None = None  # set by the daemon for every call

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
                [{"field": name, "reason": "is required"} for name in missing],
                detail=f"required fields missing: {', '.join(missing)}",
            )

    def page(self, default: int = 20, maximum: int = 100) -> tuple[int, int]:
        """(offset, limit) from the `offset` and `max` fields, for actions that list records."""
        offset = self.fields.get("offset")
        limit = self.fields.get("max")
        offset = 0 if offset is None else offset
        limit = default if limit is None else limit
        errors = []
        if offset < 0:
            errors.append({"field": "offset", "reason": "must be at least 0"})
        if not 1 <= limit <= maximum:
            errors.append({"field": "max", "reason": f"must be 1 to {maximum}"})
        if errors:
            raise InvalidFields(errors)
        return offset, limit


@dataclass(frozen=True)
class RouteCall:
    """The argument of a `@route` method: the query and JSON body as sent (IO State does not
    govern these paths), and the caller, or None on a public (reserved) path."""

    query: Mapping[str, list[str]]
    body: Mapping[str, Any]
    caller: Caller | None


class Controller:
    """Base class of controllers: subclasses set `name` and mark actions with `@action`."""

    name: str = ""

    def __init__(self, services: Services) -> None:
        self.services = services

    @classmethod
    def actions(cls) -> Mapping[str, Callable[..., Any]]:
        return {
            attr: getattr(cls, attr)
            for attr in dir(cls)
            if getattr(getattr(cls, attr, None), _ACTION_MARK, False)
        }

    @classmethod
    def routes(cls) -> Mapping[str, tuple[str, str]]:
        """Method name -> (path, HTTP method) of every `@route` method."""
        return {
            attr: getattr(getattr(cls, attr), _ROUTE_MARK)
            for attr in dir(cls)
            if getattr(getattr(cls, attr, None), _ROUTE_MARK, None)
        }
