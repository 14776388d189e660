"""Finding controller plugins, in three visible steps, each with its own small type.

discover (entry points of group `apid.controllers`) -> load (import, check the class)
-> bind (attach each controller to its IO State: the file in `iostateDir` if there is one,
else the one the plugin ships in its package at `iostate/<name>.json`, and check it against
the code: its actions, its shared caches, the roles its webhook events may reach, and its
fields against those the controller declares, so that rules needing code that is not running
are refused at start and reload; and each endpoint bound to who may receive copies of its
action's records, as the action declares).
Every error names the distribution, so an operator knows which package to fix.

The plugins' migrations are found in `apid.plugin_host.migrations`, the rule set in force is
kept by `apid.plugin_host.rules`.
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from importlib import metadata, resources
from pathlib import Path
from typing import Any, Protocol

from twisted.logger import Logger

from apid.config.api import SecurityConfig
from apid.declarations.actions import action_rules
from apid.iostate import (
    Audience,
    ControllerState,
    IOStateError,
    RuleSet,
    bind_audiences,
    bind_references,
    check_actions,
    check_hook_roles,
    check_shared_caches,
    parse_text,
    read_dir,
)
from apid.plugin import Controller
from apid.plugin_host.field_declarations import (
    DeclarationError,
    check_declared,
    declared_fields,
    warn_of_the_old_spelling,
)

log = Logger(namespace="apid.plugins")

GROUP = "apid.controllers"
APID = "apid"  # the distribution of apid's own controllers and migrations: always loaded


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


def discover(
    entry_points: Iterable[metadata.EntryPoint] | None = None, only: Collection[str] = ()
) -> list[FoundPlugin]:
    """Entry points of the group, sorted, each distribution counted once however often it is on
    sys.path; of the distributions `only` names, if it names any (`loadPlugins`), and apid's."""
    if entry_points is None:
        entry_points = metadata.entry_points(group=GROUP)
    found: dict[tuple[str, str], FoundPlugin] = {}
    for entry_point in entry_points:
        distribution = distribution_of(entry_point)
        if not chosen(distribution, only):
            continue
        found.setdefault(
            (distribution, entry_point.name),
            FoundPlugin(name=entry_point.name, distribution=distribution, entry_point=entry_point),
        )
    return sorted(found.values(), key=lambda p: (p.name, p.distribution))


def chosen(distribution: str, only: Collection[str]) -> bool:
    """Whether a distribution's controllers and migrations load: apid's always, another's when
    `only` (`loadPlugins`) is empty or names it."""
    return distribution == APID or not only or distribution in only


def check_chosen(only: Collection[str]) -> None:
    """Every name of `loadPlugins` is an installed distribution: a misspelt one would leave its
    plugin out without a word."""
    installed = {distribution_of(entry_point) for entry_point in metadata.entry_points(group=GROUP)}
    missing = sorted(set(only) - installed)
    if missing:
        raise PluginError(
            f"loadPlugins names {', '.join(missing)}, which no installed distribution providing controllers "
            f"is; installed: {', '.join(sorted(installed - {APID})) or 'none but apid'}"
        )


def distribution_of(entry_point: metadata.EntryPoint) -> str:
    """The name of the distribution that announced `entry_point`, for errors that name it."""
    return entry_point.dist.name if entry_point.dist else "unknown"


def load(found: Iterable[FoundPlugin], skip_failing: bool = False) -> list[LoadedController]:
    """Import each plugin's controller and check the class; with `skip_failing`
    (`pluginFailure: skip`) a plugin that fails is left out, logged, and the others load."""
    loaded: dict[str, LoadedController] = {}
    for plugin in found:
        try:
            controller = _loaded(plugin, loaded)
        except PluginError as exc:
            _left_out(exc, plugin, skip_failing)
            continue
        loaded[controller.cls.name] = controller
    return list(loaded.values())


def _loaded(plugin: FoundPlugin, loaded: Mapping[str, LoadedController]) -> LoadedController:
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
    try:
        declared = declared_fields(cls)
    except DeclarationError as exc:
        raise PluginError(f"plugin {plugin.label}: {exc}") from None
    if declared is not None and not declared.strict:
        warn_of_the_old_spelling(cls)
    if declared is None:
        log.warn(
            "plugin {plugin}: controller {controller} declares no fields (`stores=`), so its IO State "
            "is not checked against its code: rules naming a field it cannot store or answer would "
            "load, and the field be dropped",
            plugin=plugin.label,
            controller=cls.name,
        )
    return LoadedController(plugin=plugin, cls=cls)


def _left_out(error: Exception, plugin: FoundPlugin, skip_failing: bool) -> None:
    """Raise `error`, unless the operator allows a failing plugin to be left out
    (`pluginFailure: skip`) and it is not apid's own: then log it, as the one line naming it."""
    if not skip_failing or plugin.distribution == APID:
        raise error
    log.critical(
        "{error}; left out (pluginFailure: skip): the other plugins serve", error=str(error), plugin=plugin.label
    )


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
    loaded: Iterable[LoadedController], iostate_dir: Path, security: SecurityConfig, skip_failing: bool = False
) -> Bound:
    """Attach every controller to its IO State and check that each action exists, that only the
    actions declared caller-independent share cached answers, that HOOK gives only administrators
    the events of an action that declares no `may_see` and is not caller-independent, and that
    every field is one the controller declares (when it declares them); then bind each endpoint
    to who may receive copies of its records."""
    controllers = {c.cls.name: c for c in loaded}
    overrides = read_dir(iostate_dir, security)
    for name, state in overrides.items():
        if name not in controllers and not skip_failing:  # left out at load, its file stays unused
            raise IOStateError(f"{state.source}: no installed plugin provides controller {name!r}")
    states: dict[str, ControllerState] = {}
    for name, controller in sorted(controllers.items()):
        try:
            states[name] = _bound_state(controller, overrides.get(name), iostate_dir, security)
        except (IOStateError, PluginError) as exc:
            _left_out(exc, controller.plugin, skip_failing)
    kept = {name: controller for name, controller in controllers.items() if name in states}
    return Bound(rules=RuleSet(controllers=bind_references(states)), controllers=kept)


def _bound_state(
    controller: LoadedController, overridden: ControllerState | None, iostate_dir: Path, security: SecurityConfig
) -> ControllerState:
    """The controller's IO State (the file in `iostateDir`, else the one it ships), checked
    against its code and bound to who may receive copies of its records."""
    name, label = controller.cls.name, controller.plugin.label
    if overridden is not None:
        state = overridden
    else:
        shipped = packaged_iostate(controller)
        if shipped is None:
            raise PluginError(
                f"plugin {label}: controller {name!r} has no IO State "
                f"(none in {iostate_dir}, none shipped as iostate/{name}.json in its package)"
            )
        source, text = shipped
        state = parse_text(text, source, security)
    declared = {action: action_rules(handler) for action, handler in controller.cls.actions().items()}
    check_actions(state, declared, label)
    check_declared(state, declared_fields(controller.cls), label)
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
    return bind_audiences(state, audiences)


def load_all(
    iostate_dir: Path, security: SecurityConfig, only: Collection[str] = (), skip_failing: bool = False
) -> Bound:
    """The plugins installed (those `only` names, and apid's), loaded and bound; with
    `skip_failing`, those that fail left out (`pluginFailure: skip`)."""
    check_chosen(only)
    return bind(load(discover(only=only), skip_failing), iostate_dir, security, skip_failing)
