"""Reading IO State files strictly: a file with one bad rule is refused whole.

Every error names the file, and where it applies the controller, version, action, role or
field, so an operator can fix it without reading code.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import UTC, date, datetime, time
from pathlib import Path
from typing import Any

from apid.config.api import SecurityConfig
from apid.iostate.model import (
    METHODS,
    NAME,
    ApiVersion,
    Audience,
    CachePolicy,
    CallLimit,
    ControllerState,
    Deprecation,
    Endpoint,
    FieldSpec,
    RoleFields,
)
from apid.iostate.types import Conversion, value_type

PERMIT_ALL = "permitAll"
UNLIMITED = "*"
CALL_WINDOW = 600  # seconds: RATELIMIT's window unless given, the original framework's 10 minutes
# seconds: what the original framework's `UPDATECACHE: true` keeps an answer (it kept one until a
# flush; a writing call now flushes it, and a minute bounds what a client's own cache may show)
UPDATECACHE_AGE = 60
KEYS = ("PKEY", "FKEY", "INDEX")
FIELD_MEMBERS = ("type", "description", "mockData", "key", "reference")  # of a VALUES entry
EVERY_FIELD = "*"  # in a REQUEST or RESPONSE list: every field of VALUES, as in the original framework
ISO_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")
FRAMEWORK_DATE = re.compile(r"(?P<month>[0-9]{2})/(?P<day>[0-9]{2})/(?P<year>[0-9]{4})")  # the original framework's
DATE_FORMS = '"YYYY-MM-DD", an ISO 8601 date-time with its UTC offset ("2026-06-30T12:00:00Z") or "MM/DD/YYYY"'


class IOStateError(Exception):
    """An IO State file breaks a rule; the message says where and which."""


class _Where:
    """The place being read, for error messages: file, controller, version, action."""

    def __init__(self, source: str, *parts: str) -> None:
        self.source = source
        self.parts = parts

    def at(self, part: str) -> _Where:
        return _Where(self.source, *self.parts, part)

    def error(self, message: str) -> IOStateError:
        place = ", ".join(self.parts)
        return IOStateError(f"{self.source}: {place + ': ' if place else ''}{message}")


def _object(value: Any, where: _Where, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise where.error(f"{what} must be a JSON object")
    return value


def _names(value: Any, where: _Where, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise where.error(f"{what} must be a list of strings")
    return value


def _text(value: Any, where: _Where, what: str, *, default: str | None = None) -> str:
    if value is None and default is not None:
        return default
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value:
        raise where.error(f"{what} must be a non-empty string")
    return value


def _values(raw: Any, where: _Where) -> dict[str, FieldSpec]:
    values = {}
    for name, spec in _object(raw, where, "VALUES").items():
        here = where.at(f"field {name}")
        spec = _object(spec, here, "a VALUES entry")
        if name == EVERY_FIELD:
            raise here.error(f"{EVERY_FIELD!r} is not a field name: in REQUEST and RESPONSE it means every field")
        unknown = set(spec) - set(FIELD_MEMBERS)
        if unknown:
            raise here.error(f"unknown members {sorted(unknown)}")
        try:
            kind = value_type(_text(spec.get("type"), here, "type"))
        except KeyError as exc:
            raise here.error(exc.args[0]) from None
        key = spec.get("key")
        if key is not None and key not in KEYS:
            raise here.error(f"key must be one of {', '.join(KEYS)}, got {key!r}")
        reference = spec.get("reference")
        if reference is not None and key != "FKEY":
            raise here.error("reference is only allowed with key FKEY")
        if key == "FKEY" and reference is None:
            raise here.error('an FKEY field needs a reference ("controller" or "controller.field" it points to)')
        controller, referenced_field = _reference(reference, here) if reference is not None else (None, None)
        values[name] = FieldSpec(
            name=name,
            type=kind,
            description=str(spec.get("description", "")),
            key=key,
            reference=controller,
            referenced_field=referenced_field,
            mock_data=spec.get("mockData"),
        )
    return values


def _reference(raw: Any, where: _Where) -> tuple[str, str | None]:
    """`"company.id"` is the controller and its field; `"company"` alone leaves the field to
    binding, which reads it as company's PKEY."""
    text = raw if isinstance(raw, str) else ""
    controller, dot, field_name = text.partition(".")
    if not NAME.fullmatch(controller) or (dot and not field_name):
        raise where.error(f'reference must be "controller" or "controller.field", got {raw!r}')
    return controller, field_name or None


def _role_fields(
    raw: Any,
    where: _Where,
    what: str,
    values: Mapping[str, FieldSpec],
    endpoint_roles: frozenset[str],
) -> RoleFields:
    by_role: dict[str, frozenset[str]] = {}
    permit_all: frozenset[str] = frozenset()
    for role, fields in _object(raw if raw is not None else {}, where, what).items():
        here = where.at(f"{what} {role}")
        names = _names(fields, here, "the field list")
        if EVERY_FIELD in names:
            names = list(values)
        for name in names:
            if name not in values:
                raise here.error(f"field {name!r} is not defined in VALUES")
        if role == PERMIT_ALL:
            permit_all = frozenset(names)
        elif role not in endpoint_roles:
            raise here.error(f"role {role!r} may not call this endpoint (not in its roles)")
        else:
            by_role[role] = frozenset(names)
    return RoleFields(permit_all=permit_all, by_role=by_role)


def _rate_limits(raw: Any, where: _Where, endpoint_roles: frozenset[str]) -> dict[str, CallLimit]:
    """RATELIMIT: role -> `"*"` (no limit), calls per CALL_WINDOW seconds (`100` or the
    original framework's `"100"`), or `{"limit": calls, "window": seconds}`."""
    limits = {}
    for role, value in _object(raw if raw is not None else {}, where, "RATELIMIT").items():
        here = where.at(f"RATELIMIT {role}")
        if role not in endpoint_roles:
            raise here.error(f"role {role!r} may not call this endpoint (not in its roles)")
        limits[role] = _call_limit(value, here)
    return limits


def _call_limit(value: Any, where: _Where) -> CallLimit:
    if value == UNLIMITED:
        return CallLimit(None, CALL_WINDOW)
    if isinstance(value, dict):
        unknown = set(value) - {"limit", "window"}
        if unknown:
            raise where.error(f'unknown members {sorted(unknown)} (a limit is {{"limit": calls, "window": seconds}})')
        window = _count(value.get("window", CALL_WINDOW), where, "window")
        return CallLimit(_count(value.get("limit"), where, "limit"), window)
    calls = int(value) if isinstance(value, str) and value.isascii() and value.isdigit() else value
    if isinstance(calls, int) and not isinstance(calls, bool) and calls >= 1:
        return CallLimit(calls, CALL_WINDOW)
    raise where.error(
        f'a limit must be "*", a number of calls per {CALL_WINDOW} seconds, or '
        f'{{"limit": calls, "window": seconds}}, got {value!r}'
    )


def _cache(raw: Mapping[str, Any], method: str, where: _Where) -> CachePolicy | None:
    """CACHE `{"maxAge": seconds, "shared": bool}` on a GET action, or the original framework's
    UPDATECACHE: `true` is a per-caller cache of UPDATECACHE_AGE seconds, `false` none. Its
    files write UPDATECACHE on every action, so on a writing one it is accepted and unused."""
    if "CACHE" in raw and "UPDATECACHE" in raw:
        raise where.error("give CACHE or UPDATECACHE, not both")
    if "UPDATECACHE" in raw:
        if not isinstance(raw["UPDATECACHE"], bool):
            raise where.error(f"UPDATECACHE must be true or false, got {raw['UPDATECACHE']!r}")
        return CachePolicy(UPDATECACHE_AGE) if raw["UPDATECACHE"] and method == "GET" else None
    if "CACHE" not in raw:
        return None
    here = where.at("CACHE")
    if method != "GET":
        raise here.error(f"only a GET action's answers are cached, this one is {method}")
    cache = _object(raw["CACHE"], here, "CACHE")
    unknown = set(cache) - {"maxAge", "shared"}
    if unknown:
        raise here.error(f'unknown members {sorted(unknown)} (CACHE is {{"maxAge": seconds, "shared": bool}})')
    shared = cache.get("shared", False)
    if not isinstance(shared, bool):
        raise here.error(f"shared must be true or false, got {shared!r}")
    return CachePolicy(_count(cache.get("maxAge"), here, "maxAge"), shared)


def _count(value: Any, where: _Where, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise where.error(f"{what} must be a whole number of at least 1, got {value!r}")
    return value


def _endpoint(
    controller: str,
    version: str,
    action: str,
    raw: Any,
    where: _Where,
    values: Mapping[str, FieldSpec],
    network_roles: frozenset[str],
    network_group: str,
) -> Endpoint:
    raw = _object(raw, where, "an action entry")
    unknown = set(raw) - {"METHOD", "DESCRIPTION", "ROLES", "REQUEST", "RESPONSE", "RATELIMIT", "CACHE", "UPDATECACHE"}
    if unknown:
        raise where.error(f"unknown members {sorted(unknown)}")
    method = _text(raw.get("METHOD"), where, "METHOD").upper()
    if method not in METHODS:
        raise where.error(f"METHOD must be one of {', '.join(METHODS)}, got {method!r}")
    roles_raw = _object(raw.get("ROLES", {}), where, "ROLES")
    unknown = set(roles_raw) - {"DEFAULT", "BATCH", "HOOK"}
    if unknown:
        raise where.error(f"ROLES has unknown members {sorted(unknown)}")

    def roles(member: str, allowed: frozenset[str], within: str) -> frozenset[str]:
        here = where.at(f"ROLES.{member}")
        names = frozenset(_names(roles_raw.get(member, []), here, "the role list"))
        for role in sorted(names - allowed):
            raise here.error(f"role {role!r} is not in {within}")
        return names

    group_desc = f"networkRoles[{network_group}]"
    if roles_raw.get("DEFAULT") == []:
        raise where.error("ROLES.DEFAULT is empty: name the roles, or leave it out to admit the network group's roles")
    default = roles("DEFAULT", network_roles, group_desc) or network_roles
    response = _role_fields(raw.get("RESPONSE"), where, "RESPONSE", values, default)
    return Endpoint(
        controller=controller,
        action=action,
        api_version=version,
        method=method,
        description=str(raw.get("DESCRIPTION", "")),
        roles=default,
        batch_roles=roles("BATCH", default, "the endpoint's roles"),
        hook_roles=roles("HOOK", default, "the endpoint's roles"),
        request=_role_fields(raw.get("REQUEST"), where, "REQUEST", values, default),
        response=response,
        rate_limits=_rate_limits(raw.get("RATELIMIT"), where, default),
        cache=_cache(raw, method, where),
        conversions=_conversions(response, values),
    )


def _conversions(response: RoleFields, values: Mapping[str, FieldSpec]) -> dict[str, Conversion]:
    """The answer conversion of each RESPONSE field whose type has one (a Float, a Long)."""
    conversions = {}
    for name in sorted(response.permit_all.union(*response.by_role.values())):
        answer = values[name].type.answer
        if answer is not None:
            conversions[name] = answer
    return conversions


def _instant(raw: Any, where: _Where, member: str) -> int:
    """A date as Unix seconds: an ISO date (midnight UTC), an ISO date-time with its offset (a
    time without one could mean any zone), or the original framework's MM/DD/YYYY."""
    text = raw if isinstance(raw, str) else ""
    framework = FRAMEWORK_DATE.fullmatch(text)
    try:
        if framework:
            moment = datetime(int(framework["year"]), int(framework["month"]), int(framework["day"]), tzinfo=UTC)
        elif ISO_DATE.fullmatch(text):
            moment = datetime.combine(date.fromisoformat(text), time(), UTC)
        else:
            moment = datetime.fromisoformat(text)
            if moment.tzinfo is None:
                raise ValueError("no UTC offset")
    except ValueError:
        raise where.error(f"{member} must be a date: {DATE_FORMS}; got {raw!r}") from None
    return int(moment.timestamp())


def _deprecation(block: Mapping[str, Any], where: _Where) -> Deprecation | None:
    """`DEPRECATED` (a date, or the original framework's `["MM/DD/YYYY", "message"]`) and
    `SUNSET` (a date, not before it) of a version block."""
    raw, sunset_raw = block.get("DEPRECATED"), block.get("SUNSET")
    if raw is None:
        if sunset_raw is not None:
            raise where.error("SUNSET needs DEPRECATED: a version is deprecated before it goes")
        return None
    message = None
    if isinstance(raw, list):
        if len(raw) != 2 or not isinstance(raw[1], str) or not raw[1]:
            raise where.error(f'DEPRECATED as a list must be [date, "message"]; got {raw!r}')
        raw, message = raw
    since = _instant(raw, where, "DEPRECATED")
    sunset = None if sunset_raw is None else _instant(sunset_raw, where, "SUNSET")
    if sunset is not None and sunset < since:
        raise where.error(f"SUNSET {sunset_raw!r} is before DEPRECATED {raw!r}")
    return Deprecation(since=since, message=message, sunset=sunset)


def parse(document: Any, source: str, security: SecurityConfig) -> ControllerState:
    """Validate one IO State document (wrapped in IOSTATE or not) into a ControllerState."""
    where = _Where(source)
    document = _object(document, where, "an IO State file")
    if set(document) == {"IOSTATE"}:
        document = _object(document["IOSTATE"], where, "IOSTATE")
    unknown = set(document) - {"NAME", "NETWORKGRP", "VALUES", "CURRENTSTABLE", "VERSION"}
    if unknown:
        raise where.error(f"unknown members {sorted(unknown)}")
    name = _text(document.get("NAME"), where, "NAME")
    if not NAME.fullmatch(name):
        raise where.error(f"NAME {name!r} must be letters, digits and '_' (it is a URL segment)")
    where = where.at(f"controller {name}")
    group = _text(document.get("NETWORKGRP"), where, "NETWORKGRP")
    if group not in security.network_roles:
        raise where.error(
            f"NETWORKGRP {group!r} is not one of security.networkGroups ({', '.join(security.network_groups)})"
        )
    network_roles = security.network_roles[group]
    values = _values(document.get("VALUES", {}), where)
    versions_raw = _object(document.get("VERSION"), where, "VERSION")
    if not versions_raw:
        raise where.error("VERSION must hold at least one API version")
    current = _text(document.get("CURRENTSTABLE"), where, "CURRENTSTABLE")
    if current not in versions_raw:
        raise where.error(f"CURRENTSTABLE {current!r} is not a key of VERSION")

    versions = {}
    for version, block in versions_raw.items():
        here = where.at(f"version {version}")
        block = _object(block, here, "a VERSION block")
        unknown = set(block) - {"DEFAULTACTION", "DEPRECATED", "SUNSET", "URI"}
        if unknown:
            raise here.error(f"unknown members {sorted(unknown)}")
        uri = _object(block.get("URI"), here, "URI")
        for action in uri:
            if not NAME.fullmatch(action):
                raise here.error(f"action {action!r} must be letters, digits and '_' (it is a URL segment)")
        endpoints = {
            action: _endpoint(
                name,
                version,
                action,
                entry,
                here.at(f"action {action}"),
                values,
                network_roles,
                group,
            )
            for action, entry in uri.items()
        }
        default_action = block.get("DEFAULTACTION")
        if default_action is not None:
            default_action = _text(default_action, here, "DEFAULTACTION")
        if default_action is not None and default_action not in endpoints:
            raise here.error(f"DEFAULTACTION {default_action!r} is not an action of URI")
        deprecated = _deprecation(block, here)
        if deprecated is not None and deprecated.sunset is not None and version == current:
            raise here.error(
                "SUNSET is not allowed on the CURRENTSTABLE version: every call without "
                "-{api} would be gone; make another version CURRENTSTABLE first"
            )
        versions[version] = ApiVersion(
            name=version,
            default_action=default_action,
            deprecated=deprecated,
            endpoints=endpoints,
        )
    return ControllerState(
        name=name,
        network_group=group,
        values=values,
        current_stable=current,
        versions=versions,
        source=source,
    )


def read_json(text: str, source: str) -> Any:
    """The JSON document of a file's text, before any rule is checked."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise IOStateError(f"{source}: not valid JSON: {exc}") from None


def parse_text(text: str, source: str, security: SecurityConfig) -> ControllerState:
    return parse(read_json(text, source), source, security)


def read_dir(directory: Path, security: SecurityConfig) -> dict[str, ControllerState]:
    """Every `*.json` file of a folder, keyed by controller NAME; a missing folder is empty."""
    states: dict[str, ControllerState] = {}
    if not directory.is_dir():
        return states
    for path in sorted(directory.glob("*.json")):
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise IOStateError(f"{path}: cannot read: {exc}") from None
        state = parse_text(text, str(path), security)
        if state.name in states:
            raise IOStateError(f"{path}: controller {state.name} is also defined in {states[state.name].source}")
        states[state.name] = state
    return states


def check_actions(state: ControllerState, implemented: Iterable[str], plugin: str) -> None:
    """Every action of every version must be a method the controller implements."""
    implemented = frozenset(implemented)
    for version in state.versions.values():
        for action in version.endpoints:
            if action not in implemented:
                raise IOStateError(
                    f"{state.source}: controller {state.name}, version {version.name}, "
                    f"action {action}: the controller of {plugin} implements no such action "
                    f"(it has: {', '.join(sorted(implemented)) or 'none'})"
                )


def check_fields(state: ControllerState, declared: Iterable[str] | None, plugin: str) -> None:
    """Every field the rules name (each REQUEST and RESPONSE entry, then the rest of VALUES) is
    one the controller declares its code stores or answers (`Controller.table` and `fields`).
    Rules that need new code are refused until that code runs: a field the running code does
    not know would be accepted and silently dropped. `None`: the controller declares nothing,
    and is not checked."""
    if declared is None:
        return
    declared = frozenset(declared)
    where = _Where(state.source, f"controller {state.name}")

    def unknown(name: str, here: _Where) -> IOStateError:
        return here.error(
            f"field {name!r} is not one the controller of {plugin} stores or answers (it declares: "
            f"{', '.join(sorted(declared)) or 'none'}); start apid with code that handles it before loading these rules"
        )

    for version in state.versions.values():
        for action, endpoint in version.endpoints.items():
            here = where.at(f"version {version.name}").at(f"action {action}")
            for member, fields in (("REQUEST", endpoint.request), ("RESPONSE", endpoint.response)):
                for role, names in ((PERMIT_ALL, fields.permit_all), *sorted(fields.by_role.items())):
                    for name in sorted(names - declared):
                        raise unknown(name, here.at(f"{member} {role}"))
    for name in state.values:
        if name not in declared:
            raise unknown(name, where.at("VALUES"))


def check_shared_caches(state: ControllerState, caller_independent: Iterable[str], plugin: str) -> None:
    """A `shared` CACHE only on an action its controller declares caller-independent: a cached
    answer skips the action, and with it any check the action makes of who calls (person/show's
    "own record only"), so a shared one would hand one caller's answer to another."""
    caller_independent = frozenset(caller_independent)
    for version in state.versions.values():
        for action, endpoint in version.endpoints.items():
            if endpoint.cache is not None and endpoint.cache.shared and action not in caller_independent:
                raise IOStateError(
                    f"{state.source}: controller {state.name}, version {version.name}, action {action}, "
                    f'CACHE: "shared": true is refused: the controller of {plugin} does not declare {action} '
                    f"caller-independent, so a cached answer could skip a check the action makes of who calls; "
                    f'leave "shared" out (each caller\'s answers are then kept apart), or declare the action '
                    f"@action(caller_independent=True) if its answer depends only on the roles and the fields"
                )


def check_hook_roles(state: ControllerState, declared: Iterable[str], superuser_role: str, plugin: str) -> None:
    """HOOK gives an action that makes events (not a GET) no role but `superuser_role` unless
    its controller declares who may see the records it answers (`@action(may_see=...)`) or that
    they are the same for every caller (`caller_independent`): without either, each subscriber
    would receive every record the action answers, another user's too."""
    declared = frozenset(declared)
    for version in state.versions.values():
        for action, endpoint in version.endpoints.items():
            if endpoint.is_safe or action in declared:
                continue
            for role in sorted(endpoint.hook_roles - {superuser_role}):
                raise IOStateError(
                    f"{state.source}: controller {state.name}, version {version.name}, action {action}, "
                    f"ROLES.HOOK: role {role!r} is refused: the controller of {plugin} declares neither who may "
                    f"see the records {action} answers (@action(may_see=...)) nor that they are the same for "
                    f"every caller (@action(caller_independent=True)), so its webhook events would hand one "
                    f"user's record to another; give HOOK {superuser_role} only, or declare one of them"
                )


def bind_audiences(state: ControllerState, audiences: Mapping[str, Audience]) -> ControllerState:
    """The state with each endpoint bound to who may receive copies of its action's records
    (`apid.plugin_host.record_access`); an action without an entry stays unbound, and so sends none."""
    versions = {
        name: replace(
            version,
            endpoints={
                action: replace(endpoint, audience=audiences.get(action))
                for action, endpoint in version.endpoints.items()
            },
        )
        for name, version in state.versions.items()
    }
    return replace(state, versions=versions)


def bind_references(states: Mapping[str, ControllerState]) -> dict[str, ControllerState]:
    """The states with every FKEY checked against the controller it points to and bound to
    the field it holds. That field must be the controller's PKEY: an FKEY value names one
    record, which only the PKEY promises, and links and chains hand the value to actions
    that take that key."""
    bound = {}
    for name, state in states.items():
        values = dict(state.values)
        for spec in state.values.values():
            if spec.key == "FKEY":
                values[spec.name] = replace(spec, referenced_field=_referenced_field(state, spec, states))
        bound[name] = replace(state, values=values)
    return bound


def _referenced_field(state: ControllerState, spec: FieldSpec, states: Mapping[str, ControllerState]) -> str:
    written = spec.reference if spec.referenced_field is None else f"{spec.reference}.{spec.referenced_field}"
    where = _Where(state.source, f"controller {state.name}", f"field {spec.name}")
    target = None if spec.reference is None else states.get(spec.reference)
    if target is None:
        raise where.error(f"FKEY reference {written!r} is not an installed controller")
    key = target.primary_key
    if spec.referenced_field is None:
        if key is None:
            raise where.error(f"FKEY reference {written!r}: controller {target.name} has no PKEY field to reference")
        return key
    if spec.referenced_field not in target.values:
        raise where.error(
            f"FKEY reference {written!r}: controller {target.name} has no field {spec.referenced_field!r} in VALUES"
        )
    if spec.referenced_field != key:
        its_key = f"its PKEY is {key!r}" if key else "it has no PKEY"
        raise where.error(
            f"FKEY reference {written!r}: an FKEY references its controller's PKEY, and "
            f"{spec.referenced_field!r} is not {target.name}'s ({its_key})"
        )
    return key
