"""The IO State rule set as small immutable values: controllers, API versions, endpoints.

A `RuleSet` is one validated snapshot; a reload builds a new one and swaps it whole, so a
request sees one consistent set of rules from start to end.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from apid.http.methods import ENDPOINT_METHODS
from apid.iostate.types import Conversion, ValueType

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # of a controller, an action, a field: a path segment each
SAFE_METHODS = frozenset({"GET"})
METHODS = ENDPOINT_METHODS
# Distinct role sets remembered per endpoint: the combinations the accounts hold, a few each.
KNOWN_ROLE_SETS = 256
PATH_ID = "id"  # the request field a path's last segment fills: /v0.1/person/show/2


@dataclass(frozen=True)
class FieldSpec:
    name: str
    type: ValueType
    description: str
    key: str | None = None
    reference: str | None = None  # the controller an FKEY points to
    # the field of it the FKEY holds, its PKEY; None until bound when the file names the
    # controller alone (`"person"`), which means its PKEY
    referenced_field: str | None = None
    # `mockData` as written (any JSON value): shown in the API docs, never checked
    mock_data: Any = field(default=None, compare=False)

    def references(self, controller: str, field_name: str) -> bool:
        """Whether this is an FKEY holding values of `controller`'s field `field_name`."""
        return self.key == "FKEY" and self.reference == controller and self.referenced_field == field_name


@dataclass(frozen=True)
class RoleFields:
    """REQUEST or RESPONSE: the fields every role gets (`permitAll`) plus each role's own.

    Every call asks this with the caller's granted roles; the few distinct role sets are
    worked out once each and remembered.
    """

    permit_all: frozenset[str]
    by_role: Mapping[str, frozenset[str]]
    _known: dict[frozenset[str], frozenset[str]] = field(default_factory=dict, compare=False, repr=False)

    def for_roles(self, roles: Iterable[str]) -> frozenset[str]:
        roles = roles if isinstance(roles, frozenset) else frozenset(roles)
        fields = self._known.get(roles)
        if fields is None:
            if len(self._known) >= KNOWN_ROLE_SETS:
                self._known.clear()
            fields = self.permit_all.union(*(self.by_role.get(role, frozenset()) for role in roles))
            self._known[roles] = fields
        return fields


@dataclass(frozen=True)
class CallLimit:
    """A role's RATELIMIT on an endpoint: `calls` per `window` seconds per caller; `calls`
    None is `"*"`, no limit for that role."""

    calls: int | None
    window: int


@dataclass(frozen=True)
class CachePolicy:
    """An action's CACHE: its answers are kept `max_age` seconds (and clients told so), per
    caller unless `shared`, when they depend only on the caller's roles and request fields
    (allowed only where the action declares it caller-independent: `check_shared_caches`)."""

    max_age: int
    shared: bool = False


@dataclass(frozen=True)
class Audience:
    """Who may receive a copy of a record the action answers other than its caller (a webhook
    event): what the action declares (`@action(may_see=..., caller_independent=...)`), bound to
    its endpoints when the rules are loaded, with the role that makes an administrator.
    `apid.plugin_host.record_access` decides with it."""

    superuser_role: str
    may_see: Callable[[Any, Any], bool] | None = None
    caller_independent: bool = False


@dataclass(frozen=True)
class Endpoint:
    controller: str
    action: str
    api_version: str
    method: str
    description: str
    roles: frozenset[str]
    batch_roles: frozenset[str]
    hook_roles: frozenset[str]
    request: RoleFields
    response: RoleFields
    rate_limits: Mapping[str, CallLimit] = field(default_factory=dict)  # RATELIMIT, by role
    cache: CachePolicy | None = None  # CACHE (or UPDATECACHE true) on a GET action
    # The RESPONSE fields whose answered values take their VALUES type's form (`ValueType.answer`):
    # a Float stored as 1 answers 1.0 from every action and event, as the database gives it back
    conversions: Mapping[str, Conversion] = field(default_factory=dict)
    # Who may receive copies of its records (`apid.plugin_host.record_access`); None until bound to the
    # plugin's code, and then nobody does
    audience: Audience | None = None
    _granted: dict[frozenset[str], frozenset[str]] = field(default_factory=dict, compare=False, repr=False)

    @property
    def path(self) -> str:
        return f"{self.controller}/{self.action}"

    @property
    def is_safe(self) -> bool:
        return self.method in SAFE_METHODS

    @property
    def emits_events(self) -> bool:
        """Whether a call is a webhook event: it changes something and hooks may hear of it."""
        return bool(self.hook_roles) and not self.is_safe

    def granted(self, roles: Iterable[str]) -> frozenset[str]:
        """The caller's roles that this endpoint admits; empty means the call is forbidden.

        Worked out once per set of roles and then the same set each time, so that the field
        lookups keyed by it (`RoleFields.for_roles`) find it by identity: a new set per call
        cost two microseconds per batch element."""
        roles = roles if isinstance(roles, frozenset) else frozenset(roles)
        granted = self._granted.get(roles)
        if granted is None:
            if len(self._granted) >= KNOWN_ROLE_SETS:
                self._granted.clear()
            granted = self._granted[roles] = self.roles.intersection(roles)
        return granted

    def request_fields(self, granted: Iterable[str]) -> frozenset[str]:
        return self.request.for_roles(granted)

    def response_fields(self, granted: Iterable[str]) -> frozenset[str]:
        return self.response.for_roles(granted)


@dataclass(frozen=True)
class Deprecation:
    """An API version's `DEPRECATED` date (with its message) and optional `SUNSET`, read once at
    load as Unix seconds: the headers of its calls and its 410 after the sunset come from here."""

    since: int
    message: str | None = None
    sunset: int | None = None

    def gone(self, now: float) -> bool:
        """Whether the sunset has come: from then on the version answers 410."""
        return self.sunset is not None and now >= self.sunset


@dataclass(frozen=True)
class ApiVersion:
    name: str
    default_action: str | None
    deprecated: Deprecation | None
    endpoints: Mapping[str, Endpoint]


@dataclass(frozen=True)
class ControllerState:
    name: str
    network_group: str
    values: Mapping[str, FieldSpec]
    current_stable: str
    versions: Mapping[str, ApiVersion]
    source: str

    @property
    def primary_key(self) -> str | None:
        return next((name for name, spec in self.values.items() if spec.key == "PKEY"), None)

    @cached_property
    def caches(self) -> bool:
        """Whether any action's answers are cached (CACHE): only then do its writes count as changes."""
        return any(
            endpoint.cache is not None for version in self.versions.values() for endpoint in version.endpoints.values()
        )


@dataclass(frozen=True)
class RuleSet:
    controllers: Mapping[str, ControllerState]
    _writing: dict[frozenset[str], frozenset[str]] = field(default_factory=dict, compare=False, repr=False)

    def controller(self, name: str) -> ControllerState | None:
        return self.controllers.get(name)

    def writing_methods(self, roles: frozenset[str]) -> frozenset[str]:
        """The methods of the non-safe endpoints `roles` may call, worked out once per role set
        (every chain that starts with a GET asks)."""
        methods = self._writing.get(roles)
        if methods is None:
            if len(self._writing) >= KNOWN_ROLE_SETS:
                self._writing.clear()
            methods = self._writing[roles] = frozenset(
                endpoint.method
                for state in self.controllers.values()
                for version in state.versions.values()
                for endpoint in version.endpoints.values()
                if not endpoint.is_safe and endpoint.granted(roles)
            )
        return methods

    @cached_property
    def limits_calls(self) -> bool:
        """Whether any endpoint has a RATELIMIT: only then must charging a request find the
        endpoints it calls."""
        return any(
            endpoint.rate_limits
            for state in self.controllers.values()
            for version in state.versions.values()
            for endpoint in version.endpoints.values()
        )

    def referring(self, name: str) -> list[tuple[ControllerState, FieldSpec]]:
        """The reverse relations of controller `name`: every FKEY of any controller (itself
        included) that points to it, by controller name and then in VALUES order."""
        return [
            (state, spec)
            for _, state in sorted(self.controllers.items())
            for spec in state.values.values()
            if spec.key == "FKEY" and spec.reference == name
        ]
