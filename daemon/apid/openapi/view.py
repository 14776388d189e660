"""The API as one set of roles sees it, built from the IO State rule set in force.

`api_view(rules, roles, app_version)` keeps the controllers, API versions and actions those
roles may call, and for each action only the request fields the roles may send and the
response fields they receive, with their VALUES type, description, mock value and key. Nothing
another role alone may see gets in: a controller or API version with no action the roles may
call is left out, no role list is shown (only whether *these* roles may batch a call or receive
its webhooks), and of VALUES only the fields these roles use. `apidoc/show` answers
`ApiView.to_dict()`; `apid.openapi` turns the same view into an OpenAPI document.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from apid.calls.paths import call_path
from apid.iostate.model import ControllerState, Deprecation, Endpoint, FieldSpec
from apid.iostate.types import ValueType, value_type
from apid.plugin import RuleSet

ID = "id"  # the request field a path's last segment fills: /v0.1/person/show/2


@dataclass(frozen=True)
class FieldDoc:
    name: str
    type: str  # the VALUES type's name: Long, String, Email, ...
    description: str
    mock: Any  # mockData as a value of the type ("1" of a Long is 1), else as written; None if absent
    key: str | None  # PKEY, FKEY or INDEX
    reference: str | None  # the controller an FKEY points to

    @property
    def value_type(self) -> ValueType:
        return value_type(self.type)

    def to_dict(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "description": self.description,
            "mockData": self.mock,
            "key": self.key,
            "reference": self.reference,
        }


@dataclass(frozen=True)
class ActionDoc:
    controller: str
    action: str
    api_version: str
    current: bool  # the controller's CURRENTSTABLE: its paths carry no -{api}
    default: bool  # the version's DEFAULTACTION: /v{app}/{controller} calls it too
    method: str
    description: str
    batch: bool  # these roles may call it in a batch (/b...)
    hook: bool  # these roles may receive its webhooks
    request: tuple[FieldDoc, ...]
    response: tuple[FieldDoc, ...]
    deprecated: Deprecation | None = None  # its API version's DEPRECATED and SUNSET
    # these roles that add REQUEST or RESPONSE fields of their own to permitAll's: the fields
    # follow from them, so the API documents name the action's shapes after them
    shape_roles: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return f"{self.controller}/{self.action}"

    @property
    def is_safe(self) -> bool:
        return self.method == "GET"

    @property
    def takes_id(self) -> bool:
        """Whether these roles may send `id`, and so call the `/{id}` path form."""
        return any(field.name == ID for field in self.request)

    def path(self, kind: str, app_version: str, with_id: bool = False) -> str:
        """The path of a `v`, `b` or `c` call, with `{id}` last when asked."""
        api = None if self.current else self.api_version
        path = call_path(kind, app_version, api, self.controller, self.action)
        return path + "/{id}" if with_id else path

    def paths(self, app_version: str) -> dict[str, list[str]]:
        """Every path form these roles may use: v (plain, by id, the controller alone for the
        default action), b (when they may batch it) and c (a chain starting here)."""
        plain = [self.path("v", app_version)]
        if self.takes_id:
            plain.append(self.path("v", app_version, with_id=True))
        if self.default:
            plain.append(self.path("v", app_version).rsplit("/", 1)[0])
        return {
            "v": plain,
            "b": [self.path("b", app_version)] if self.batch else [],
            "c": [self.path("c", app_version, with_id=self.takes_id)],
        }

    def to_dict(self, app_version: str) -> dict[str, Any]:
        return {
            "method": self.method,
            "description": self.description,
            "paths": self.paths(app_version),
            "batch": self.batch,
            "hook": self.hook,
            "request": {field.name: field.to_dict() for field in self.request},
            "response": {field.name: field.to_dict() for field in self.response},
        }


@dataclass(frozen=True)
class VersionDoc:
    name: str
    current: bool
    default_action: str | None  # only when these roles may call it
    deprecated: Deprecation | None
    actions: tuple[ActionDoc, ...]

    def to_dict(self, app_version: str) -> dict[str, Any]:
        return {
            "current": self.current,
            "defaultAction": self.default_action,
            "deprecated": None if self.deprecated is None else deprecation_dict(self.deprecated),
            "actions": {action.action: action.to_dict(app_version) for action in self.actions},
        }


@dataclass(frozen=True)
class ControllerDoc:
    name: str
    versions: tuple[VersionDoc, ...]


@dataclass(frozen=True)
class ApiView:
    app_version: str
    roles: frozenset[str]
    controllers: tuple[ControllerDoc, ...]

    def controller(self, name: str) -> ControllerDoc | None:
        return next((c for c in self.controllers if c.name == name), None)

    def actions(self) -> Iterator[ActionDoc]:
        for controller in self.controllers:
            for version in controller.versions:
                yield from version.actions

    def to_dict(self) -> dict[str, Any]:
        """The answer of `apidoc/show`."""
        return {
            "version": self.app_version,
            "roles": sorted(self.roles),
            "controllers": {
                controller.name: {
                    "versions": {v.name: v.to_dict(self.app_version) for v in controller.versions},
                }
                for controller in self.controllers
            },
        }


def views_of(rules: Callable[[], RuleSet], app_version: str) -> Callable[[Iterable[str]], dict[str, Any]]:
    """`services.api_view`: the API some roles may call, read from the rule set in force at
    each call, so that a reload shows at once."""
    return lambda roles: api_view(rules(), roles, app_version).to_dict()


def api_view(rules: RuleSet, roles: Iterable[str], app_version: str) -> ApiView:
    """What `roles` may call in `rules`, and nothing else. `rules` is typed as the plugin API
    names it; its controllers are IO State's `ControllerState`s."""
    roles = frozenset(roles)
    controllers = []
    for state in rules.controllers.values():
        versions = tuple(
            version for version in (_version(state, name, roles) for name in state.versions) if version.actions
        )
        if versions:
            controllers.append(ControllerDoc(name=state.name, versions=versions))
    return ApiView(app_version=app_version, roles=roles, controllers=tuple(controllers))


def _version(state: ControllerState, name: str, roles: frozenset[str]) -> VersionDoc:
    version = state.versions[name]
    current = name == state.current_stable
    actions = tuple(
        _action(state, endpoint, roles, current, endpoint.action == version.default_action, version.deprecated)
        for endpoint in version.endpoints.values()
        if endpoint.granted(roles)
    )
    callable_names = {action.action for action in actions}
    return VersionDoc(
        name=name,
        current=current,
        default_action=version.default_action if version.default_action in callable_names else None,
        deprecated=version.deprecated,
        actions=actions,
    )


def iso_time(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")


def deprecation_dict(deprecation: Deprecation) -> dict[str, Any]:
    """DEPRECATED and SUNSET as ISO 8601 UTC times, with DEPRECATED's message (or null)."""
    return {
        "since": iso_time(deprecation.since),
        "message": deprecation.message,
        "sunset": None if deprecation.sunset is None else iso_time(deprecation.sunset),
    }


def _action(
    state: ControllerState,
    endpoint: Endpoint,
    roles: frozenset[str],
    current: bool,
    default: bool,
    deprecated: Deprecation | None,
) -> ActionDoc:
    granted = endpoint.granted(roles)
    return ActionDoc(
        controller=state.name,
        action=endpoint.action,
        api_version=endpoint.api_version,
        current=current,
        default=default,
        method=endpoint.method,
        description=endpoint.description,
        batch=bool(endpoint.batch_roles & roles),
        hook=bool(endpoint.hook_roles & roles),
        request=_fields(state.values, endpoint.request_fields(granted)),
        response=_fields(state.values, endpoint.response_fields(granted)),
        deprecated=deprecated,
        shape_roles=tuple(
            sorted(
                role for role in granted if endpoint.request.by_role.get(role) or endpoint.response.by_role.get(role)
            )
        ),
    )


def _fields(values: Mapping[str, FieldSpec], names: frozenset[str]) -> tuple[FieldDoc, ...]:
    """The named fields, in the order VALUES lists them."""
    return tuple(
        FieldDoc(
            name=spec.name,
            type=spec.type.name,
            description=spec.description,
            mock=mock_value(spec.type, spec.mock_data),
            key=spec.key,
            reference=spec.reference,
        )
        for spec in values.values()
        if spec.name in names
    )


def mock_value(kind: ValueType, raw: Any) -> Any:
    """mockData as a value of its field's type where it reads as one, else as written.

    IO State files write mockData as text ("1", "true", "[\\"ROLE_USER\\"]", "null"): it is
    read as JSON first, then as the type's own text form (a Date, an Email, a String)."""
    if not isinstance(raw, str):
        return _checked(kind, raw, raw)
    try:
        value = json.loads(raw)
    except ValueError:
        pass
    else:
        if value is None:
            return None
        checked = _checked(kind, value, None)
        if checked is not None:
            return checked
    for read in (kind.check, kind.parse):
        try:
            return read(raw)
        except ValueError:
            continue
    return raw


def _checked(kind: ValueType, value: Any, otherwise: Any) -> Any:
    try:
        return None if value is None else kind.check(value)
    except ValueError:
        return otherwise
