"""A setting: how it is declared, read from its YAML file and shown in docs/configuration.md.

A setting is one field of a frozen dataclass, declared once:

    per_host: int = setting("perHost", default=8, at_least=1, doc="Deliveries in flight to one host.")

The annotation is its type, the call holds its key, default, bounds and description. One
reader, `read_section`, turns a YAML mapping into such a dataclass: it refuses keys nothing
declares, checks each value against its `Kind`, fills in defaults, applies environment
overrides and asks the class's own `conflicts` for settings that are fine alone and wrong
together. Every refusal is a `ConfigError` naming the file, the line and the dotted key.
`document` writes the settings tables of docs/configuration.md from the same declarations.

Dataclass field metadata rather than msgspec or pydantic: no new dependency, the classes the
daemon reads stay the frozen dataclasses they were (mypy types them through
`dataclass_transform`), and the messages (file, line, dotted key, what is allowed) and the
docs' tables need a reader and a writer of apid's own either way.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, dataclass_transform
from urllib.parse import urlsplit

from apid.config.nodes import ConfigError, Node, Reading, describe

T = TypeVar("T")


def _same(value: Any, reading: Reading) -> Any:
    return value


def show_value(value: Any) -> str:
    """A default as the docs' tables show it."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float):
        return f"`{value:g}`"
    if isinstance(value, (tuple, list, frozenset, set, dict)) and not value:
        return "empty"
    return f"`{value}`"


@dataclass(frozen=True)
class Kind:
    """What a setting's value may be: `read` checks the file's value and returns the
    attribute's, `finish` is applied to every value (the file's, a default, an override) for
    what needs the deployment, `name` is the docs' Type column and `show` a default there."""

    name: str
    read: Callable[[Node, Reading], Any]
    finish: Callable[[Any, Reading], Any] = _same
    show: Callable[[Any], str] = show_value


def integer(at_least: int = 0) -> Kind:
    return Kind(f"integer ≥ {at_least}", lambda node, _: node.integer(at_least))


def number(above: float = 0) -> Kind:
    return Kind(f"number > {above:g}", lambda node, _: node.number(float(above)))


def alternatives(words: Sequence[str]) -> str:
    """`a or b`, `a, b or c`."""
    return " or ".join(words) if len(words) < 3 else f"{', '.join(words[:-1])} or {words[-1]}"


def choice(options: Sequence[str] | Mapping[str, Any]) -> Kind:
    """One of the words `options` names; a mapping gives the value each word stands for."""
    meaning = dict(options) if isinstance(options, Mapping) else {word: word for word in options}
    words = list(meaning)

    def read(node: Node, _: Reading) -> Any:
        word = node.string()
        if word not in meaning:
            raise node.fail(f"must be {alternatives(words)}, got {word!r}")
        return meaning[word]

    def shown(value: Any) -> str:
        return next(f"`{word}`" for word, meant in meaning.items() if meant == value)

    return Kind(alternatives([f"`{word}`" for word in words]), read, show=shown)


BOOLEAN = Kind("boolean", lambda node, _: node.boolean())
STRING = Kind("string", lambda node, _: node.string())
STRINGS = Kind("list of strings", lambda node, _: node.strings())
# A number of seconds that may be 0 (no wait at all)
SECONDS = Kind("number ≥ 0", lambda node, _: node.number(0.0, or_equal=True))


def http_url(value: str) -> str:
    """`value` if it is an absolute http:// or https:// URL with a host and a valid port."""
    try:
        parts = urlsplit(value)
        _ = parts.port  # reading it raises ValueError for a port that is not a number or out of range
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"must be an absolute http:// or https:// URL such as https://api.example.com, got {value!r}")
    return value


def _url(node: Node, _: Reading) -> str:
    """An absolute http(s) URL: a bare host (`api.example.com`) would make every link built on
    it relative, and so broken, in a mail or a redirect."""
    try:
        return http_url(node.string())
    except ValueError as exc:
        raise node.fail(str(exc)) from None


URL = Kind("URL", _url)


def under_root(value: Any, reading: Reading) -> Path:
    """A path as written (`~` expanded), relative ones at the deployment root."""
    path = Path(value).expanduser()
    return path if path.is_absolute() else reading.root / path


PATH = Kind("string (path)", lambda node, _: node.string(), finish=under_root)


# --- declarations ------------------------------------------------------------------------------

_REQUIRED: Any = object()  # no default: the file must hold it
_READ_EMPTY: Any = object()  # a mapping left out reads as an empty one: all its defaults


@dataclass(frozen=True)
class Derived:
    """A default computed from what was read before it; `text` says how, in the docs."""

    text: str
    compute: Callable[[Reading], Any]


@dataclass(frozen=True)
class Setting:
    """One setting's declaration (see `setting`)."""

    key: str
    doc: str = ""
    default: Any = _REQUIRED
    derived: Derived | None = None
    kind: Kind | None = None
    at_least: int | None = None
    above: float | None = None
    also: str | None = None
    env: str | None = None
    option: str | None = None

    @property
    def required(self) -> bool:
        return self.default is _REQUIRED and self.derived is None


def setting(
    key: str,
    *,
    doc: str,
    default: Any = _REQUIRED,
    derived: Derived | None = None,
    kind: Kind | None = None,
    at_least: int | None = None,
    above: float | None = None,
    also: str | None = None,
    env: str | None = None,
    option: str | None = None,
) -> Any:
    """Declare the field a setting: `key` in its YAML mapping (dotted for a value in a nested
    mapping: `database.url`); `default` when the file leaves it out (none: required), or
    `derived` from what was read before; `kind` when the annotation alone does not say what
    the file may hold (bool, int, float, str, Path, tuple[str, ...] and `X | None` do);
    `at_least` for an int, `above` for a float (default 0); `also` a further bound the class's
    `conflicts` checks, as the docs show it; `env`, an environment variable that overrides the
    file, and `option`, a command-line option that does (named in the docs and messages);
    `doc`, the docs' description."""
    declared = Setting(key, doc, default, derived, kind, at_least, above, also, env, option)
    metadata = {"setting": declared}
    if default is _REQUIRED:
        return field(metadata=metadata)
    if type(default).__hash__ is None:  # a dict: every instance shares the one, read-only
        return field(default_factory=lambda: default, metadata=metadata)
    return field(default=default, metadata=metadata)


def section(key: str, *, required: bool = False, kind: Kind | None = None, doc: str = "") -> Any:
    """Declare the field a nested mapping: read into the field's settings dataclass (or by
    `kind`), each of its settings taking its default when the file leaves the mapping out."""
    declared = Setting(key, doc, _REQUIRED if required else _READ_EMPTY, kind=kind)
    return field(metadata={"setting": declared})


@dataclass_transform(frozen_default=True, kw_only_default=True, field_specifiers=(setting, section))
def settings(cls: type[T]) -> type[T]:
    """A frozen, keyword-only dataclass whose `setting` and `section` fields `read_section` reads."""
    return dataclass(frozen=True, kw_only=True)(cls)


class Invalid:
    """Settings that conflict: `message` is blamed on the first of `keys` the file holds (each
    a dotted key, or a tuple of keys when a key may hold a dot), else on the first of them."""

    def __init__(self, message: str, *keys: str | tuple[str, ...]) -> None:
        self.message = message
        self.keys = keys


# --- kinds of nested values ----------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Section(Kind):
    """A nested mapping read into a settings dataclass."""

    cls: type


@dataclass(frozen=True, kw_only=True)
class ListOf(Kind):
    """A list of mappings, each read into `cls`; an item that is a string stands for its
    `shorthand` setting alone (a peer's URL alone)."""

    cls: type
    shorthand: str | None


@dataclass(frozen=True, kw_only=True)
class PerKind(Kind):
    """A mapping of kinds (`login`, `register`, ...) to a settings dataclass each, where a kind
    accepts only the keys its defaults name and takes those defaults for the keys left out."""

    cls: type
    defaults: Mapping[str, Mapping[str, Any]]


def _section(cls: type) -> Section:
    return Section(name="mapping", read=lambda node, reading: read_section(cls, node, reading), cls=cls)


def list_of(cls: type, of: str, shorthand: str | None = None) -> ListOf:
    """A list of `cls` mappings: `of` names the items in the docs and in messages."""
    name = f"list of {of}"

    def read(node: Node, reading: Reading) -> tuple[Any, ...]:
        if not isinstance(node.value, list):
            raise node.fail(f"expected a {name}, got {describe(node.value)}")
        items = (node.child(i, value) for i, value in enumerate(node.value))
        return tuple(read_section(cls, item, reading, shorthand=shorthand) for item in items)

    return ListOf(name=name, read=read, cls=cls, shorthand=shorthand)


def per_kind(cls: type, **defaults: Mapping[str, Any]) -> PerKind:
    """A `cls` per kind, each kind accepting the keys of its defaults."""

    def read(node: Node, reading: Reading) -> dict[str, Any]:
        given = node.mapping(tuple(defaults))
        return {
            kind: read_section(cls, given.get(kind) or node.child(kind, None), reading, defaults=defaults[kind])
            for kind in defaults
        }

    return PerKind(name="mapping", read=read, cls=cls, defaults=defaults)


# --- the one reader ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Entry:
    name: str  # the attribute
    setting: Setting
    kind: Kind


def _kind_of(annotation: Any, declared: Setting) -> Kind:
    """The declared kind, else the one the field's annotation implies (with the bounds)."""
    if declared.kind is not None:
        return declared.kind
    if isinstance(annotation, types.UnionType) and type(None) in typing.get_args(annotation):
        (annotation,) = (arg for arg in typing.get_args(annotation) if arg is not type(None))
    if annotation is int:
        return integer(declared.at_least or 0)
    if annotation is float:
        return number(declared.above or 0)
    if declared.at_least is not None or declared.above is not None:
        raise TypeError(f"{declared.key}: at_least is for an int, above for a float")
    simple = {bool: BOOLEAN, str: STRING, Path: PATH, tuple[str, ...]: STRINGS}
    if annotation in simple:
        return simple[annotation]
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        return _section(annotation)
    raise TypeError(f"{declared.key}: declare the kind of a {annotation}")


_ENTRIES: dict[type, tuple[_Entry, ...]] = {}


def _entries(cls: type) -> tuple[_Entry, ...]:
    """The settings `cls` declares, in their order, with their kinds."""
    if cls not in _ENTRIES:
        hints = typing.get_type_hints(cls)
        _ENTRIES[cls] = tuple(
            _Entry(f.name, f.metadata["setting"], _kind_of(hints[f.name], f.metadata["setting"]))
            for f in dataclasses.fields(cls)
            if "setting" in f.metadata
        )
    return _ENTRIES[cls]


def _present(entries: Iterable[_Entry], node: Node) -> dict[str, Node]:
    """The node of every declared key the file holds, by dotted key; any other key is refused,
    naming the keys allowed where it is (in the order they are declared)."""
    tree: dict[str, Any] = {}  # key -> the tree under it, or the dotted key it ends
    for entry in entries:
        *groups, last = entry.setting.key.split(".")
        level = tree
        for group in groups:
            level = level.setdefault(group, {})
        level[last] = entry.setting.key
    found: dict[str, Node] = {}

    def walk(node: Node, level: dict[str, Any]) -> None:
        for key, child in node.mapping(tuple(level)).items():
            if isinstance(level[key], dict):
                walk(child, level[key])
            else:
                found[level[key]] = child

    walk(node, tree)
    return found


def _nested(entry: _Entry) -> bool:
    return isinstance(entry.kind, (Section, ListOf, PerKind))


def read_section(
    cls: type[T],
    node: Node,
    reading: Reading,
    *,
    defaults: Mapping[str, Any] | None = None,
    shorthand: str | None = None,
    **fixed: Any,
) -> T:
    """`cls` read from the mapping at `node`: each declared setting from the file, else its
    default (from `defaults` by key where given: only those keys are accepted then), then
    its environment override; `fixed` are the fields that are no settings. A mapping's own
    values are read before its derived defaults and nested mappings, which may refer to
    them; then `cls.conflicts`, if it has one, says what does not go together."""
    entries = _entries(cls)
    if defaults is not None:
        entries = tuple(entry for entry in entries if entry.setting.key in defaults)
    alone = shorthand is not None and isinstance(node.value, str)  # a peer given by its URL alone
    given = {str(shorthand): node} if alone else _present(entries, node)
    values: dict[str, Any] = {}
    for entry in sorted(entries, key=lambda entry: entry.setting.derived is not None or _nested(entry)):
        value = _value(entry, given.get(entry.setting.key), node, reading, defaults)
        values[entry.name] = reading.values[reading.prefix + entry.setting.key] = value
    made = cls(**values, **fixed)
    conflicts: Callable[[frozenset[str]], Iterable[Invalid]] | None = getattr(made, "conflicts", None)
    for invalid in conflicts(frozenset(given)) if conflicts else ():
        raise _blamed(node, invalid)
    return made


def _value(entry: _Entry, found: Node | None, owner: Node, reading: Reading, defaults: Mapping[str, Any] | None) -> Any:
    declared, kind = entry.setting, entry.kind
    inner = reading.under(declared.key) if _nested(entry) else reading
    if found is not None:
        value = kind.read(found, inner)
    elif defaults is not None:
        value = defaults[declared.key]
    elif declared.derived is not None:
        value = declared.derived.compute(reading)
    elif declared.default is _READ_EMPTY:
        value = kind.read(owner.find(declared.key.split("."))[0], inner)
    elif declared.required:
        raise owner.find(declared.key.split("."))[0].fail("is required")
    else:
        value = declared.default
    if declared.env and reading.env.get(declared.env):
        name = f"{declared.env} (or {declared.option})" if declared.option else declared.env
        value = kind.read(Node(value=reading.env[declared.env], file=name, path=None), reading)
    return kind.finish(value, reading)


def _blamed(node: Node, invalid: Invalid) -> ConfigError:
    paths = [tuple(key.split(".")) if isinstance(key, str) else key for key in invalid.keys]
    for path in paths:
        blamed, held = node.find(path)
        if held:
            return blamed.fail(invalid.message)
    return node.find(paths[0])[0].fail(invalid.message)
