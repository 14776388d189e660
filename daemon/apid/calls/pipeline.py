"""The one path every call takes, whether it came alone, in a batch or as a chain link.

resolve the endpoint -> check the method -> check the caller's roles -> admit only the
role's REQUEST fields, typed by VALUES, with the fields the action requires and its own
field rules (one 400 lists every bad field) -> run the controller action -> return only the
role's RESPONSE fields. Each step is a small function; `Pipeline.run` composes them and
reads like that list. Nothing here trusts an earlier call: every run authorises on its own.
An action's coroutine runs where `apid.runtime.coroutines` says: on Twisted's driver, or as an asyncio
task under the asyncio reactor.
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol

from twisted.internet.defer import CancelledError, Deferred, fail, succeed
from twisted.logger import Logger
from twisted.python.failure import Failure

from apid.auth.apikeys import OUT_OF_SCOPE
from apid.auth.tokens import NEEDS_TOKEN, Principal
from apid.declarations.actions import action_rules
from apid.http.current_request import REQUEST_ID
from apid.iostate import ControllerState, Endpoint, RuleSet
from apid.iostate.types import Conversion
from apid.plugin import ActionRules, Call, Caller, Controller, FieldError, Validator
from apid.problems import Forbidden, InternalError, InvalidFields, MethodNotAllowed, NotFound, Problem, Unauthorized
from apid.runtime.coroutines import asyncio_required, needs_asyncio, started

log = Logger(namespace="apid.pipeline")


class Events(Protocol):
    """Where a successful non-safe call of a hookable endpoint reports its output, after it
    returns or, with `write`, in the transaction of its unit of work."""

    async def record(self, endpoint: Endpoint, output: Any) -> None: ...

    def write(self, endpoint: Endpoint, work: Callable[..., Any], *args: Any) -> Deferred[Any]: ...


class Writer(Protocol):
    def write(self, work: Callable[..., Any], *args: Any) -> Deferred[Any]: ...


class CallUnit:
    """A call's unit of work (`Call.write`): its writes, with its events when it has any."""

    __slots__ = ("_db", "_endpoint", "_events", "recorded")

    def __init__(self, db: Writer | None, events: Events | None, endpoint: Endpoint) -> None:
        self._db = db
        self._events = events
        self._endpoint = endpoint
        self.recorded = False

    def write(self, work: Callable[..., Any], *args: Any) -> Deferred[Any]:
        if self._db is None:
            raise RuntimeError("the pipeline was made without a database")
        if self._events is None or not self._endpoint.emits_events:
            return self._db.write(work, *args)
        self.recorded = True
        return self._events.write(self._endpoint, work, *args)


class Purpose(enum.Enum):
    """Why the endpoint is being called, which decides the role list that admits the caller."""

    DEFAULT = "DEFAULT"
    BATCH = "BATCH"


# CallRequest and CallResult are made per call, a hundred per batch, and never changed once
# made; they are not frozen because a frozen dataclass takes twice as long to make.
@dataclass(slots=True)
class CallRequest:
    """One call's input, parsed at the edge: JSON fields and text fields (query, path id)."""

    controller: str
    action: str | None
    api_version: str | None
    method: str | None
    body: Mapping[str, Any] = field(default_factory=dict)
    text: Mapping[str, list[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Admission:
    """What admitting a caller to an endpoint decided: the same for every element of a batch."""

    state: ControllerState
    endpoint: Endpoint
    granted: frozenset[str]
    caller: Caller
    action: Callable[[Call], Any]
    action_rules: ActionRules


@dataclass(slots=True)
class CallResult:
    endpoint: Endpoint
    granted: frozenset[str]
    data: Any
    page: tuple[int, int] | None = None  # (offset, limit) when the action paged (Call.page)


def resolve(rules: RuleSet, request: CallRequest) -> tuple[ControllerState, Endpoint]:
    state = rules.controller(request.controller)
    if state is None:
        raise NotFound(f"no controller named {request.controller!r}")
    version_name = request.api_version or state.current_stable
    version = state.versions.get(version_name)
    if version is None:
        raise NotFound(
            f"controller {state.name} has no API version {version_name!r} (it has {', '.join(sorted(state.versions))})"
        )
    action = request.action or version.default_action
    endpoint = version.endpoints.get(action) if action else None
    if endpoint is None:
        raise NotFound(f"controller {state.name} (API version {version_name}) has no action {action!r}")
    return state, endpoint


def check_method(endpoint: Endpoint, method: str | None) -> None:
    """The request's method must be the endpoint's; HEAD is GET without the body."""
    if method == "HEAD" and endpoint.method == "GET":
        return
    if method is not None and method != endpoint.method:
        raise MethodNotAllowed(
            f"{endpoint.path} is called with {endpoint.method}, not {method}", allow=[endpoint.method]
        )


def authorize(endpoint: Endpoint, principal: Principal, purpose: Purpose) -> frozenset[str]:
    """The caller's roles this endpoint admits for this purpose; none at all is a 403, or a 401
    for a caller without a token, who may log in."""
    granted = endpoint.granted(principal.roles)
    batch_refused = purpose is Purpose.BATCH and not endpoint.batch_roles.intersection(principal.roles)
    if principal.anonymous and (not granted or batch_refused):
        raise Unauthorized(NEEDS_TOKEN)
    if not granted:
        raise Forbidden(f"your roles may not call {endpoint.path}")
    scopes = principal.key_scopes  # an API key's: the controllers or endpoints it may call
    if scopes is not None and endpoint.controller not in scopes and endpoint.path not in scopes:
        raise Forbidden(OUT_OF_SCOPE.format(path=endpoint.path))
    if batch_refused:
        raise Forbidden(f"your roles may not call {endpoint.path} in a batch")
    return granted


NO_RULES = ActionRules()  # a bare `@action`


def admit_fields(
    state: ControllerState,
    endpoint: Endpoint,
    granted: frozenset[str],
    request: CallRequest,
    declared: ActionRules = NO_RULES,
) -> dict[str, Any]:
    """The request fields, typed. One 400 lists every field the role may not send, every bad
    value, every field the action requires that is missing, a paging field out of the action's
    `Page`, a field past its `Limits`, and what the action's own `validate` says of the fields
    admitted."""
    fields, errors = typed_fields(state, endpoint, granted, request)
    missing = [name for name in declared.requires if fields.get(name) is None]
    if missing:
        flagged = {error["field"] for error in errors}
        errors += [{"field": name, "reason": "is required"} for name in missing if name not in flagged]
    if declared.page is not None:
        flagged = {error["field"] for error in errors}
        errors += [error for error in declared.page.errors(fields) if error["field"] not in flagged]
    if declared.limits:
        for name, limits in declared.limits.items():
            if name in fields and not any(error["field"] == name for error in errors):
                errors += limits.errors(name, fields[name])
    if declared.validate is not None:
        errors += _validated(declared.validate, fields, endpoint)
    if errors:
        raise InvalidFields(errors=errors)
    return fields


def typed_fields(
    state: ControllerState, endpoint: Endpoint, granted: frozenset[str], request: CallRequest
) -> tuple[dict[str, Any], list[FieldError]]:
    """The fields the role may send, typed by VALUES, and an error for every other field."""
    allowed = endpoint.request_fields(granted)
    body, text = request.body, request.text
    errors: list[FieldError] = []
    fields: dict[str, Any] = {}
    for name, values in text.items():
        if name not in body and _sendable(state, endpoint, allowed, name, errors):
            kind = state.values[name].type
            try:
                fields[name] = _parse_text(kind, values)
            except ValueError as exc:
                errors.append({"field": name, "reason": f"{exc} ({kind.name})"})
    for name, value in body.items():
        if _sendable(state, endpoint, allowed, name, errors):
            kind = state.values[name].type
            try:
                fields[name] = None if value is None else kind.check(value)
            except ValueError as exc:
                errors.append({"field": name, "reason": f"{exc} ({kind.name})"})
    clashes = [name for name in text if name in body and name in fields] if text and body else []
    if clashes:
        # The body wins on a clash, but a malformed path or query value is refused all the same:
        # /hook/update/abc with {"id": 1} in the body is a bad request, not an update of hook 1.
        flagged = {error["field"] for error in errors}
        for name in clashes:
            kind = state.values[name].type
            try:
                _parse_text(kind, text[name])
            except ValueError as exc:
                if name not in flagged:
                    errors.append({"field": name, "reason": f"{exc} ({kind.name}), in the path or query"})
    return fields, errors


def _sendable(
    state: ControllerState, endpoint: Endpoint, allowed: frozenset[str], name: str, errors: list[FieldError]
) -> bool:
    """Whether the role may send field `name`; when not, the error saying why is added."""
    if name not in state.values:
        errors.append({"field": name, "reason": f"is not a field of {state.name}"})
        return False
    if name not in allowed:
        errors.append({"field": name, "reason": f"may not be sent to {endpoint.path} by your role"})
        return False
    return True


def _validated(validate: Validator, fields: Mapping[str, Any], endpoint: Endpoint) -> list[FieldError]:
    """The field errors the action's `validate` returns or raises; its failure is the plugin's
    and answers like a failing action."""
    try:
        return list(validate(fields) or ())
    except InvalidFields as invalid:
        return list(invalid.extensions["errors"])
    except Problem:
        raise
    except Exception:
        log.failure("the field rules of {endpoint} raised", endpoint=endpoint.path, requestId=REQUEST_ID.get())
        raise InternalError(f"{endpoint.path} failed; the error was logged") from None


def _parse_text(kind: Any, values: list[str]) -> Any:
    if kind.name == "List":
        return [item for value in values for item in kind.parse(value)]
    if len(values) > 1:
        raise ValueError("was given more than once")
    return kind.parse(values[0])


def _deferred(awaitable: Awaitable[Any]) -> Deferred[Any]:
    """An action's awaitable as a Deferred: a coroutine driven as it is, any other awaitable
    through one that awaits it."""
    if isinstance(awaitable, Deferred):
        return awaitable
    if inspect.iscoroutine(awaitable):
        return Deferred.fromCoroutine(awaitable)
    return Deferred.fromCoroutine(_awaited(awaitable))


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    return await awaitable


NO_CONVERSIONS: Mapping[str, Conversion] = MappingProxyType({})


def filter_output(data: Any, allowed: frozenset[str], conversions: Mapping[str, Conversion] = NO_CONVERSIONS) -> Any:
    """Keep only the allowed keys of a record, or of each record of a list or tuple, each value
    in its VALUES type's form (`Endpoint.conversions`: a Float stored as 1 answers 1.0)."""
    if isinstance(data, Mapping):
        record = {key: value for key, value in data.items() if key in allowed}
        for key, convert in conversions.items():
            if key in record:
                record[key] = convert(record[key])
        return record
    if isinstance(data, (list, tuple)):
        return [filter_output(item, allowed, conversions) for item in data]
    return data


def kept_promise(data: Any, carried: tuple[str, ...], endpoint: Endpoint) -> None:
    """A 500 for an answer without a field its action declares it carries (`@action(carries=)`)
    and the roles receive (`carried`), which the documents promise clients is always there and
    never null: a plugin's bug, logged with the record, not a break in every generated client
    that reads it. (`filter_output` made every record a dict.)"""
    records = data if isinstance(data, list) else (data,)
    for record in records:
        if isinstance(record, dict) and None in map(record.get, carried):
            log.error(
                "{endpoint} answered a record without {missing}, which it declares it carries: {record!r}",
                endpoint=endpoint.path,
                missing=[name for name in carried if record.get(name) is None],
                record=record,
                requestId=REQUEST_ID.get(),
            )
            raise InternalError(f"{endpoint.path} failed; the error was logged")


class Pipeline:
    """Runs calls against the current rule set; `rules` is re-read per call so a reload swaps it."""

    def __init__(
        self,
        *,
        rules: Callable[[], RuleSet],
        controllers: Mapping[str, Controller],
        superuser_role: str,
        events: Events | None = None,
        db: Writer | None = None,
        changed: Callable[[Iterable[str]], Awaitable[None]] | None = None,
    ) -> None:
        self._rules = rules
        self._controllers = controllers
        self._superuser_role = superuser_role
        self._events = events  # None when webhookActive is false
        self._db = db
        self._changed = changed  # told of a successful write of a controller whose answers are cached
        self._told_asyncio: set[str] = set()  # the actions logged as awaiting asyncio
        # (RESPONSE fields, fields carried) -> those of them the roles receive
        self._carried: dict[tuple[frozenset[str], tuple[str, ...]], tuple[str, ...]] = {}

    def admit(
        self, principal: Principal, request: CallRequest, purpose: Purpose = Purpose.DEFAULT, address: str = ""
    ) -> Admission:
        """The checks that need no request fields: endpoint, method, roles. Batch and chain
        run them for every element or link before any of them runs. `address` is the client's."""
        state, endpoint = resolve(self._rules(), request)
        check_method(endpoint, request.method)
        granted = authorize(endpoint, principal, purpose)
        caller = principal.caller(roles=granted, superuser_role=self._superuser_role, address=address)
        action = getattr(self._controllers[endpoint.controller], endpoint.action)
        return Admission(
            state=state,
            endpoint=endpoint,
            granted=granted,
            caller=caller,
            action=action,
            action_rules=action_rules(action),
        )

    def check_anonymous(self, principal: Principal, request: CallRequest, purpose: Purpose = Purpose.DEFAULT) -> None:
        """For a caller without a token, before anything else is read: a 401 unless the endpoint
        admits the anonymous role for this purpose, so every other endpoint, an unknown one
        too, answers as it does without anonymous access."""
        if not principal.anonymous:
            return
        try:
            endpoint = self.endpoint(request)
        except NotFound:
            raise Unauthorized(NEEDS_TOKEN) from None
        authorize(endpoint, principal, purpose)

    def rules(self) -> RuleSet:
        """The rule set in force now."""
        return self._rules()

    def endpoint(self, request: CallRequest) -> Endpoint:
        return resolve(self._rules(), request)[1]

    async def run(self, principal: Principal, request: CallRequest, purpose: Purpose = Purpose.DEFAULT) -> CallResult:
        return await self.execute(self.admit(principal, request, purpose), request)

    def execute(self, admitted: Admission, request: CallRequest) -> Deferred[CallResult]:
        """The steps that depend on one call's fields: admit them, run the action, filter
        its output. A batch admits its endpoint once and executes each element here.

        Written as Deferred callbacks on the action's own Deferred (or coroutine, driven as it
        is) rather than as a coroutine of its own: no second coroutine to drive per call, where
        a batch makes a hundred calls per request."""
        endpoint, request_id = admitted.endpoint, REQUEST_ID.get()  # for the log of a failure
        try:
            fields = admit_fields(admitted.state, endpoint, admitted.granted, request, admitted.action_rules)
            unit = CallUnit(self._db, self._events, endpoint)
            call = Call(
                endpoint=endpoint, fields=fields, caller=admitted.caller, unit=unit, paging=admitted.action_rules.page
            )
            output = admitted.action(call)
        except Exception:
            return fail().addErrback(self._action_failed, endpoint, request_id)
        if isinstance(output, Deferred):
            running = output
        elif inspect.isawaitable(output):
            running = _deferred(started(output))
        else:
            running = succeed(output)
        return running.addCallbacks(
            self._answered, self._action_failed, callbackArgs=(admitted, call, unit), errbackArgs=(endpoint, request_id)
        )

    def _action_failed(self, failure: Failure, endpoint: Endpoint, request_id: str | None) -> Failure:
        """A problem or a cancelling as it is; any other error of the plugin's a 500, logged
        with the endpoint and the id of the request it served."""
        if failure.check(Problem, CancelledError):
            return failure
        error = failure.value
        if isinstance(error, Exception) and needs_asyncio(error):
            raise self._asyncio_required(endpoint.path, error, request_id)
        log.failure("controller {endpoint} raised", failure=failure, endpoint=endpoint.path, requestId=request_id)
        raise InternalError(f"{endpoint.path} failed; the error was logged")

    def _answered(
        self, output: Any, admitted: Admission, call: Call, unit: CallUnit
    ) -> CallResult | Deferred[CallResult]:
        endpoint, granted = admitted.endpoint, admitted.granted
        allowed = endpoint.response_fields(granted)
        data = filter_output(output, allowed, endpoint.conversions)
        carries = admitted.action_rules.carries
        if carries:
            carried = self._carried.get((allowed, carries))
            if carried is None:  # once per endpoint and roles: the request path is measured
                carried = self._carried[allowed, carries] = tuple(name for name in carries if name in allowed)
            kept_promise(data, carried, endpoint)
        result = CallResult(endpoint=endpoint, granted=granted, page=call.paged, data=data)
        events = self._events is not None and endpoint.emits_events and not unit.recorded
        changed = self._changed is not None and not endpoint.is_safe and admitted.state.caches
        if events or changed:
            return Deferred.fromCoroutine(self._told(endpoint, output, result, events, changed))
        return result

    async def _told(
        self, endpoint: Endpoint, output: Any, result: CallResult, events: bool, changed: bool
    ) -> CallResult:
        """A write's answer once its events are recorded and its cached answers dropped."""
        if events and self._events is not None:
            await self._events.record(endpoint, output)
        if changed and self._changed is not None:
            await self._changed([endpoint.controller])
        return result

    def _asyncio_required(self, path: str, error: Exception, request_id: str | None) -> InternalError:
        """The 500 of an action that awaited asyncio under the default reactor, logged the
        first time only: every call of it fails the same way, and a line says it all."""
        if path not in self._told_asyncio:
            self._told_asyncio.add(path)
            log.error(
                "{endpoint} awaited asyncio ({error}), which runs only under the asyncio reactor: set "
                "`reactor: asyncio` in service_server.yml (logged once per action)",
                endpoint=path,
                error=repr(error),
                requestId=request_id,
            )
        return asyncio_required(path)
