"""Finding controller plugins, in three visible steps, each with its own small type.

discover (entry points of group `apid.controllers`) -> load (import, check the class)
-> bind (attach each controller to its IO State: the file in `iostateDir` if there is one,
else the one the plugin ships in its package at `iostate/<name>.json`).
Every error names the distribution, so an operator knows which package to fix.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import metadata, resources
from pathlib import Path

from apid.config import SecurityConfig
from apid.iostate import ControllerState, IOStateError, RuleSet, check_actions, parse_text, read_dir
from apid.plugin import Controller

GROUP = "apid.controllers"


class PluginError(Exception):
    """A plugin could not be loaded or bound; the message names its distribution."""


@dataclass(frozen=True)
class FoundPlugin:
    name: str
    distribution: str
    entry_point: metadata.EntryPoint

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
        distribution = entry_point.dist.name if entry_point.dist else "unknown"
        found.setdefault(
            (distribution, entry_point.name),
            FoundPlugin(name=entry_point.name, distribution=distribution, entry_point=entry_point),
        )
    return sorted(found.values(), key=lambda p: (p.name, p.distribution))


def load(found: Iterable[FoundPlugin]) -> list[LoadedController]:
    loaded: dict[str, LoadedController] = {}
    for plugin in found:
        try:
            cls = plugin.entry_point.load()
        except Exception as exc:
            raise PluginError(
                f"plugin {plugin.label} failed to load: {type(exc).__name__}: {exc}"
            ) from exc
        if not (isinstance(cls, type) and issubclass(cls, Controller)):
            raise PluginError(f"plugin {plugin.label}: {plugin.entry_point.value} is not an apid.plugin.Controller")
        if not cls.name:
            raise PluginError(f"plugin {plugin.label}: {cls.__qualname__} sets no controller name")
        if cls.name in loaded:
            raise PluginError(
                f"plugin {plugin.label}: controller {cls.name!r} is already provided by "
                f"{loaded[cls.name].plugin.label}"
            )
        loaded[cls.name] = LoadedController(plugin=plugin, cls=cls)
    return list(loaded.values())


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


def bind(
    controllers: Iterable[LoadedController], iostate_dir: Path, security: SecurityConfig
) -> Bound:
    """Attach every controller to its IO State and check that each action exists."""
    controllers = {c.cls.name: c for c in controllers}
    overrides = read_dir(iostate_dir, security)
    for name, state in overrides.items():
        if name not in controllers:
            raise IOStateError(f"{state.source}: no installed plugin provides controller {name!r}")
    states: dict[str, ControllerState] = {}
    for name, controller in sorted(controllers.items()):
        state = overrides.get(name)
        if state is None:
            shipped = packaged_iostate(controller)
            if shipped is None:
                raise PluginError(
                    f"plugin {controller.plugin.label}: controller {name!r} has no IO State "
                    f"(none in {iostate_dir}, none shipped as iostate/{name}.json in its package)"
                )
            source, text = shipped
            state = parse_text(text, source, security)
        check_actions(state, controller.cls.actions(), controller.plugin.label)
        states[name] = state
    for state in states.values():
        for spec in state.values.values():
            if spec.reference is not None and spec.reference not in states:
                raise IOStateError(
                    f"{state.source}: controller {state.name}, field {spec.name}: FKEY reference "
                    f"{spec.reference!r} is not an installed controller"
                )
    return Bound(rules=RuleSet(controllers=states), controllers=controllers)


def load_all(iostate_dir: Path, security: SecurityConfig) -> Bound:
    return bind(load(discover()), iostate_dir, security)


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
