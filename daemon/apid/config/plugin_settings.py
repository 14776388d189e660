"""A plugin's settings: declared by the plugin, written by the operator under `plugins`.

A controller declares its settings as apid declares its own (apid.config.settings): a `@settings`
class of `setting(...)` fields, named by `Controller.settings_class`. The operator writes them
in service_server.yml, per environment, under `plugins.<controller name>`. The file is read
before any plugin is loaded, so `apid.config.files` keeps the `plugins` mapping as written
(`PluginSections`, with the file and line of every key), and the daemon and the testing kit
read each controller's settings from it once the controllers are loaded: a key a controller
does not declare, a value of the wrong type or a missing required one stops the start with
a `ConfigError` naming the file, the line and the key, as for apid's own settings.

`setting` and `settings` are the public face of apid.config.settings for plugins (`apid.plugin`
exports them): the same reader, with the declaration's options a plugin needs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar, dataclass_transform

import apid.config.settings as declarations
from apid.config.nodes import Node, Reading, describe
from apid.config.settings import Kind, read_section

T = TypeVar("T")


# The kinds of apid's own settings a plugin's may name (`setting(kind=...)`), by name.
KINDS = {"url": declarations.URL, "seconds": declarations.SECONDS}


def setting(
    key: str,
    *,
    doc: str,
    default: Any = ...,
    at_least: int | None = None,
    above: float | None = None,
    kind: Literal["url", "seconds"] | None = None,
    choices: Sequence[str] | None = None,
) -> Any:
    """Declare a field of a `@settings` class a setting: `key` in the plugin's mapping (dotted
    for a nested mapping: `client.timeout`), `doc` what it does; `default` when the file leaves
    it out (`...`, as if none is given: required); `at_least` bounds an `int`, `above` a
    `float` (both 0 unless given). The field's annotation is its type: bool, int, float, str,
    Path, tuple[str, ...], or any of them `| None`. `kind` reads it as apid reads its own of
    that kind: `"url"` an absolute http(s) URL (a `str`), `"seconds"` a number of seconds, 0 or
    more (a `float`); `choices` one of these words (a `str`)."""
    if kind is not None and choices is not None:
        raise TypeError(f"{key}: a setting takes kind= or choices=, not both")
    if kind is not None and kind not in KINDS:
        raise ValueError(f"{key}: kind must be one of {', '.join(KINDS)}, not {kind!r}")
    declared = KINDS[kind] if kind is not None else None if choices is None else declarations.choice(tuple(choices))
    if default is ...:
        return declarations.setting(key, doc=doc, at_least=at_least, above=above, kind=declared)
    return declarations.setting(key, doc=doc, default=default, at_least=at_least, above=above, kind=declared)


@dataclass_transform(frozen_default=True, kw_only_default=True, field_specifiers=(setting,))
def settings(cls: type[T]) -> type[T]:
    """A frozen, keyword-only dataclass of `setting` fields: a controller's settings class."""
    return declarations.settings(cls)


@dataclass(frozen=True, eq=False)
class PluginSections:
    """The `plugins` mapping of one environment of service_server.yml as written: the
    controller's name to its mapping, each read when the controllers are known (`read`)."""

    node: Node
    root: Path
    environment: str | None

    def read(self, declared: Mapping[str, type | None]) -> dict[str, Any]:
        """Each controller's settings, by name, from its mapping (all defaults when the file
        has none), for the controllers that declare a settings class (`declared`: each
        loaded controller's name to its class, or None)."""
        given = self.node.mapping()
        for name, node in given.items():
            if name not in declared:
                raise node.fail(f"no plugin installed provides a controller named {name!r}")
            if declared[name] is None:
                raise node.fail(f"controller {name!r} declares no settings (its settings_class is None)")
        reading = Reading(self.root, {}, self.environment)
        return {
            name: _read(cls, given.get(name) or self.node.child(name, None), reading.under(name))
            for name, cls in sorted(declared.items())
            if cls is not None
        }


def _read(cls: type, node: Node, reading: Reading) -> Any:
    """One controller's settings; a class apid cannot read is named with the controller."""
    try:
        return read_section(cls, node, reading)
    except TypeError as exc:  # not a @settings class, or a field of a type no setting has
        raise node.fail(f"its settings_class {cls.__qualname__} cannot be read: {exc}") from None


def _sections(node: Node, reading: Reading) -> PluginSections:
    """The `plugins` mapping: controller names to mappings, checked as far as that goes
    before the plugins are loaded."""
    for section in node.mapping().values():
        if section.value is not None and not isinstance(section.value, dict):
            raise section.fail(f"expected the controller's settings, a mapping, got {describe(section.value)}")
    return PluginSections(node, reading.root, reading.environment)


PLUGINS = Kind("mapping controller -> mapping", _sections, show=lambda _: "empty")
