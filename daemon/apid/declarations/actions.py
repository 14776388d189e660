"""What a controller's methods declare, read by the daemon and the API documents: `@action`
with its rules (`ActionRules`: required fields, the answer, the page, the fields it carries,
who may see a copy) and `@route`, and who calls (`Caller`), whom the rules name. Plugins
import all of it from `apid.plugin`, the public face, which re-exports it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, TypeVar, overload

from apid.problems import FieldError

F = TypeVar("F", bound=Callable[..., Any])
ACTION_MARK = "__apid_action__"  # the attribute of a method `@action` marks: its ActionRules
ROUTE_MARK = "__apid_route__"  # the attribute of a method `@route` marks: (path, method)


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
class Limits:
    """What one field's values keep besides their VALUES type, declared beside the action with
    `@action(limits={"name": Limits(min_length=1, max_length=100)})`: a text's length in
    characters and a `pattern` it holds (searched, as JSON Schema does), a list's length. The
    daemon checks them with the call's other fields (one 400), and the API documents state
    them in the field's schema: one declaration for both, as `Page` is for paging."""

    min_length: int | None = None
    max_length: int | None = None
    pattern: str | None = None
    min_items: int | None = None
    max_items: int | None = None

    def __post_init__(self) -> None:
        if self.pattern is not None:
            re.compile(self.pattern)  # a bad pattern is an error at import, not at the first call

    def errors(self, name: str, value: Any) -> list[FieldError]:
        """What `value` of field `name` breaks (nothing for null: absent)."""
        reasons = []
        if isinstance(value, str):
            if not _within(len(value), self.min_length, self.max_length):
                reasons.append(f"must be {_span(self.min_length, self.max_length)} characters")
            if self.pattern is not None and re.search(self.pattern, value) is None:
                reasons.append(f"must match {self.pattern}")
        elif isinstance(value, list) and not _within(len(value), self.min_items, self.max_items):
            span = _span(self.min_items, self.max_items)
            reasons.append("must list at least one item" if span == "at least 1" else f"must list {span} items")
        return [{"field": name, "reason": reason} for reason in reasons]

    def json_schema(self) -> dict[str, Any]:
        """The JSON Schema keywords saying the same."""
        keywords = {
            "minLength": self.min_length,
            "maxLength": self.max_length,
            "pattern": self.pattern,
            "minItems": self.min_items,
            "maxItems": self.max_items,
        }
        return {keyword: value for keyword, value in keywords.items() if value is not None}


def _within(length: int, least: int | None, most: int | None) -> bool:
    return (least is None or length >= least) and (most is None or length <= most)


def _span(least: int | None, most: int | None) -> str:
    if most is None:
        return f"at least {least}"
    return f"at most {most}" if least is None else f"{least} to {most}"


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
    `carries`: the fields every record it answers holds, never null (its key, `version`...):
    the documents make them required and non-null where the caller's role sees them, so a
    generated client types them plainly, and the daemon answers 500 rather than break that
    promise (the record is logged). `limits`: what fields keep besides their VALUES type
    (`Limits`), checked with the others and stated in the documents. `asyncio`: it awaits
    asyncio libraries, so it is served under `reactor: asyncio` only, and the documents of a
    deployment on another reactor leave it out.

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
    carries: tuple[str, ...] = ()
    limits: Mapping[str, Limits] = field(default_factory=dict)
    asyncio: bool = False


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
    carries: Iterable[str] = (),
    limits: Mapping[str, Limits] | None = None,
    asyncio: bool = False,
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
    carries: Iterable[str] = (),
    limits: Mapping[str, Limits] | None = None,
    asyncio: bool = False,
) -> Any:
    """Mark a controller method as an action that IO State may expose: `@action`, or
    `@action(requires=("name",), answers="record", ...)` to declare its `ActionRules`."""
    if answers not in (None, "record", "list", "nothing"):
        raise ValueError(f'@action(answers=...) is "record", "list" or "nothing", not {answers!r}')
    if page is not None and not 1 <= page.default <= page.maximum:
        raise ValueError(f"@action(page=...): the default is 1 to the maximum, not {page}")
    if isinstance(carries, str):
        raise ValueError(f"@action(carries=...) is a sequence of field names: ({carries!r},), not {carries!r}")
    carried = tuple(carries)
    if carried and answers == "nothing":
        raise ValueError('@action(carries=...) names fields of a record: an action that answers "nothing" has none')
    rules = ActionRules(
        requires=tuple(requires),
        validate=validate,
        caller_independent=caller_independent,
        answers=answers,
        page=page,
        may_see=may_see,
        upstream=upstream,
        carries=carried,
        limits=MappingProxyType(dict(limits or {})),
        asyncio=asyncio,
    )

    def mark(handler: F) -> F:
        setattr(handler, ACTION_MARK, rules)
        return handler

    return mark if method is None else mark(method)


def action_rules(handler: Callable[..., Any]) -> ActionRules:
    """The rules an `@action` declared (none for a bare `@action`)."""
    rules: ActionRules = getattr(handler, ACTION_MARK)
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
        setattr(handler, ROUTE_MARK, (path.rstrip("/") or "/", method.upper()))
        return handler

    return mark
