"""Finding controller plugins, in three visible steps, each with its own small type.

discover (entry points of group `apid.controllers`) -> load (import, check the class)
-> bind (attach each controller to its IO State: the file in `iostateDir` if there is one,
else the one the plugin ships in its package at `iostate/<name>.json`, and check it against
the code: its actions, its shared caches, the roles its webhook events may reach, and its
fields against those the controller declares, so that rules needing code that is not running
are refused at start and reload; and each endpoint bound to who may receive copies of its
action's records, as the action declares).
Every error names the distribution, so an operator knows which package to fix.

Beside them, `migration_sources` finds the plugins' Alembic revisions (entry point group
`apid.migrations`: the name is the plugin's branch, the value the package holding the revision
files), which `apid.store.migrate` runs after apid's own.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import metadata, resources
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy import Table
from twisted.logger import Logger

from apid.config.files import SecurityConfig
from apid.iostate import (
    Audience,
    ControllerState,
    IOStateError,
    RuleSet,
    bind_audiences,
    bind_references,
    check_actions,
    check_fields,
    check_hook_roles,
    check_shared_caches,
    parse_text,
    read_dir,
)
from apid.plugin import Controller, action_rules

log = Logger(namespace="apid.plugins")

GROUP = "apid.controllers"
MIGRATIONS_GROUP = "apid.migrations"
# A branch name ends the name of its version table, alembic_version_<name>: a plain SQL name
# within PostgreSQL's 63 characters.
BRANCH_NAME = re.compile(r"[a-z][a-z0-9_]{0,46}")


class PluginError(Exception):
    """A plugin could not be loaded or bound; the message names its distribution."""


class Loadable(Protocol):
    """What loading needs of an entry point: its `module:attr` text, and the object it names
    (`apid.testing` gives a class it was handed this way)."""

    @property
    def value(self) -> str: ...

    def load(self) -> Any: ...


@dataclass(frozen=True)
class FoundPlugin:
    name: str
    distribution: str
    entry_point: Loadable

    @property
    def label(self) -> str:
        return f"{self.name} (distribution {self.distribution})"


@dataclass(frozen=True)
class LoadedController:
    plugin: FoundPlugin
    cls: type[Controller]


@dataclass(frozen=True)
class Bound:
    rules: RuleSet
    controllers: Mapping[str, LoadedController]


def discover(entry_points: Iterable[metadata.EntryPoint] | None = None) -> list[FoundPlugin]:
    """Entry points of the group, sorted, each distribution counted once however often it is on sys.path."""
    if entry_points is None:
        entry_points = metadata.entry_points(group=GROUP)
    found: dict[tuple[str, str], FoundPlugin] = {}
    for entry_point in entry_points:
        distribution = _distribution(entry_point)
        found.setdefault(
            (distribution, entry_point.name),
            FoundPlugin(name=entry_point.name, distribution=distribution, entry_point=entry_point),
        )
    return sorted(found.values(), key=lambda p: (p.name, p.distribution))


def _distribution(entry_point: metadata.EntryPoint) -> str:
    return entry_point.dist.name if entry_point.dist else "unknown"


def load(found: Iterable[FoundPlugin]) -> list[LoadedController]:
    loaded: dict[str, LoadedController] = {}
    for plugin in found:
        try:
            cls = plugin.entry_point.load()
        except Exception as exc:
            raise PluginError(f"plugin {plugin.label} failed to load: {type(exc).__name__}: {exc}") from exc
        if not (isinstance(cls, type) and issubclass(cls, Controller)):
            raise PluginError(f"plugin {plugin.label}: {plugin.entry_point.value} is not an apid.plugin.Controller")
        if not cls.name:
            raise PluginError(f"plugin {plugin.label}: {cls.__qualname__} sets no controller name")
        if cls.name in loaded:
            raise PluginError(
                f"plugin {plugin.label}: controller {cls.name!r} is already provided by {loaded[cls.name].plugin.label}"
            )
        if declared_fields(cls, plugin.label) is None:
            log.warn(
                "plugin {plugin}: controller {controller} declares no fields (`table` or `fields`), so its "
                "IO State is not checked against its code: rules naming a field it cannot store or answer "
                "would load, and the field be dropped",
                plugin=plugin.label,
                controller=cls.name,
            )
        loaded[cls.name] = LoadedController(plugin=plugin, cls=cls)
    return list(loaded.values())


def declared_fields(cls: type[Controller], plugin: str) -> frozenset[str] | None:
    """The fields a controller's code stores or answers: the keys of its `table`'s columns and
    its `fields`; None when it declares neither."""
    if cls.table is None and cls.fields is None:
        return None
    if cls.table is not None and not isinstance(cls.table, Table):
        raise PluginError(f"plugin {plugin}: {cls.__qualname__}.table must be a sqlalchemy Table, not {cls.table!r}")
    fields = cls.fields if cls.fields is not None else ()
    if isinstance(fields, str) or not all(isinstance(name, str) for name in fields):
        raise PluginError(f"plugin {plugin}: {cls.__qualname__}.fields must be a collection of field names")
    columns = () if cls.table is None else (str(column.key) for column in cls.table.columns)
    return frozenset(fields).union(columns)


def packaged_iostate(controller: LoadedController) -> tuple[str, str] | None:
    """The IO State file the plugin ships, as (source name, text), if it ships one.

    It lives in the package that holds the controller's module; a controller in a
    top-level single-file module has no package and so ships none.
    """
    module = sys.modules.get(controller.cls.__module__)
    package = getattr(module, "__package__", None)
    if not package:
        return None
    resource = resources.files(package).joinpath("iostate", f"{controller.cls.name}.json")
    if not resource.is_file():
        return None
    return f"{package}:iostate/{controller.cls.name}.json", resource.read_text(encoding="utf-8")


def bind(loaded: Iterable[LoadedController], iostate_dir: Path, security: SecurityConfig) -> Bound:
    """Attach every controller to its IO State and check that each action exists, that only the
    actions declared caller-independent share cached answers, that HOOK gives only administrators
    the events of an action that declares no `may_see` and is not caller-independent, and that
    every field is one the controller declares (when it declares them); then bind each endpoint
    to who may receive copies of its records."""
    controllers = {c.cls.name: c for c in loaded}
    overrides = read_dir(iostate_dir, security)
    for name, state in overrides.items():
        if name not in controllers:
            raise IOStateError(f"{state.source}: no installed plugin provides controller {name!r}")
    states: dict[str, ControllerState] = {}
    for name, controller in sorted(controllers.items()):
        overridden = overrides.get(name)
        if overridden is not None:
            state = overridden
        else:
            shipped = packaged_iostate(controller)
            if shipped is None:
                raise PluginError(
                    f"plugin {controller.plugin.label}: controller {name!r} has no IO State "
                    f"(none in {iostate_dir}, none shipped as iostate/{name}.json in its package)"
                )
            source, text = shipped
            state = parse_text(text, source, security)
        label = controller.plugin.label
        declared = {action: action_rules(handler) for action, handler in controller.cls.actions().items()}
        check_actions(state, declared, label)
        check_fields(state, declared_fields(controller.cls, label), label)
        check_shared_caches(state, [action for action, rules in declared.items() if rules.caller_independent], label)
        check_hook_roles(
            state,
            [action for action, rules in declared.items() if rules.may_see is not None or rules.caller_independent],
            security.superuser_role,
            label,
        )
        audiences = {
            action: Audience(security.superuser_role, rules.may_see, rules.caller_independent)
            for action, rules in declared.items()
        }
        states[name] = bind_audiences(state, audiences)
    return Bound(rules=RuleSet(controllers=bind_references(states)), controllers=controllers)


def load_all(iostate_dir: Path, security: SecurityConfig) -> Bound:
    return bind(load(discover()), iostate_dir, security)


@dataclass(frozen=True)
class MigrationSource:
    """A plugin's Alembic revision files: `name` is its branch (its version table is
    `alembic_version_<name>`), `package` the import package holding the files and `folder`
    that package on disk, where Alembic reads them (so not from a zip)."""

    name: str
    distribution: str
    package: str
    folder: Path

    @property
    def label(self) -> str:
        return f"{self.name} (distribution {self.distribution})"

    @property
    def version_table(self) -> str:
        return f"alembic_version_{self.name}"

    @classmethod
    def from_package(cls, name: str, package: str, distribution: str = "unknown") -> MigrationSource:
        """The revisions in `package` (imported to find its folder) as the branch `name`."""
        label = f"{name} (distribution {distribution})"
        if not BRANCH_NAME.fullmatch(name) or name == "apid":
            raise PluginError(
                f"plugin {label}: the migrations' name must be 1 to 47 lower-case letters, digits or _, "
                f"starting with a letter, and not apid (it names the version table alembic_version_<name>)"
            )
        try:
            folder = resources.files(package)
        except Exception as exc:  # not found, not a package, or its __init__ failed
            raise PluginError(
                f"plugin {label}: migrations package {package} failed to load: {type(exc).__name__}: {exc}"
            ) from exc
        if not (isinstance(folder, Path) and folder.is_dir()):
            raise PluginError(
                f"plugin {label}: migrations package {package} is not a folder on disk "
                f"(a regular package, not zipped, holding the revision files)"
            )
        return cls(name=name, distribution=distribution, package=package, folder=folder)


def migration_sources(entry_points: Iterable[metadata.EntryPoint] | None = None) -> list[MigrationSource]:
    """The installed plugins' migrations, sorted by name, each distribution counted once however
    often it is on sys.path; two distributions may not share a name (nor so a version table)."""
    if entry_points is None:
        entry_points = metadata.entry_points(group=MIGRATIONS_GROUP)
    sources: dict[str, MigrationSource] = {}
    for entry_point in entry_points:
        distribution = _distribution(entry_point)
        taken = sources.get(entry_point.name)
        if taken is None:
            sources[entry_point.name] = MigrationSource.from_package(entry_point.name, entry_point.value, distribution)
        elif taken.distribution != distribution:
            raise PluginError(
                f"plugin {entry_point.name} (distribution {distribution}): migrations named "
                f"{entry_point.name!r} are already provided by {taken.label}"
            )
    return sorted(sources.values(), key=lambda source: source.name)


class RuleBook:
    """The rule set in force. A reload reads and validates the IO State files again and
    swaps the whole set at once; a set that fails validation is refused and the last good
    one stays. Requests already running keep the set they started with."""

    def __init__(self, bound: Bound, iostate_dir: Path, security: SecurityConfig) -> None:
        self.current = bound.rules
        self._controllers = list(bound.controllers.values())
        self._iostate_dir = iostate_dir
        self._security = security

    def read(self) -> RuleSet:
        """Bind the installed controllers to the files as they are now (blocking file I/O)."""
        return bind(self._controllers, self._iostate_dir, self._security).rules

    def swap(self, rules: RuleSet) -> None:
        self.current = rules


def dump_routes(bound: Bound, version: str, reserved_uris: frozenset[str]) -> list[str]:
    """One line per endpoint, for `apid routes`: IO State endpoints with their roles, then the
    plugins' `@route` paths, public when in reservedUris, else for any logged-in caller and
    rate limited like an API call."""
    rules = bound.rules
    lines = []
    for controller in rules.controllers.values():
        for api in controller.versions.values():
            for endpoint in api.endpoints.values():
                suffix = "" if api.name == controller.current_stable else f"-{api.name}"
                lines.append(
                    f"{endpoint.method:6} /v{version}{suffix}/{endpoint.path}  "
                    f"roles={json.dumps(sorted(endpoint.roles))} batch={json.dumps(sorted(endpoint.batch_roles))}"
                )
    for _name, loaded in sorted(bound.controllers.items()):
        for path, method in sorted(loaded.cls.routes().values()):
            access = "public" if (path.rstrip("/") or "/") in reserved_uris else "needs a token, rate limited"
            lines.append(f"{method:6} {path}  route of {loaded.plugin.label}: {access}")
    return lines
