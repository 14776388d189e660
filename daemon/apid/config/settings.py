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
import re
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, dataclass_transform

import yaml

T = TypeVar("T")


class ConfigError(Exception):
    """A configuration file is missing, unreadable or holds a value that is not allowed."""


# --- values read from a file, with where they are ---------------------------------------------


# By id() of each mapping and list of a document: it (which keeps the id its own) and the line
# of each of its keys or items, counted from 1.
_Lines = dict[int, tuple[Any, dict[Any, int]]]


class _LineLoader(yaml.SafeLoader):
    """PyYAML's safe loader, noting the line of every mapping key and list item it builds."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.lines: _Lines = {}


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> Iterator[dict[Any, Any]]:
    data: dict[Any, Any] = {}
    yield data  # first, as PyYAML's own does, so that an alias may refer to it
    data.update(loader.construct_mapping(node))
    loader.lines[id(data)] = (data, {loader.construct_object(key): key.start_mark.line + 1 for key, _ in node.value})


def _construct_sequence(loader: _LineLoader, node: yaml.SequenceNode) -> Iterator[list[Any]]:
    data: list[Any] = []
    yield data
    data.extend(loader.construct_sequence(node))
    loader.lines[id(data)] = (data, {index: item.start_mark.line + 1 for index, item in enumerate(node.value)})


_LineLoader.add_constructor("tag:yaml.org,2002:map", _construct_mapping)
_LineLoader.add_constructor("tag:yaml.org,2002:seq", _construct_sequence)


class Node:
    """A value read from a YAML file, with the file, line and dotted key that name it in
    errors. An environment variable's value is a node too, named by the variable alone."""

    def __init__(
        self,
        value: Any,
        file: str,
        path: str | None = "",
        line: int | None = None,
        lines: _Lines | None = None,
    ) -> None:
        self.value = value
        self.file = file
        self.path = path
        self.line = line
        self._lines = lines or {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickled, as a worker process gets its configuration: each mapping's lines are
        known by its id(), which unpickling changes (the mappings stay shared, pickle keeps
        one copy of each)."""
        state["_lines"] = {id(held): (held, lines) for held, lines in state["_lines"].values()}
        self.__dict__.update(state)

    def fail(self, message: str) -> ConfigError:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        if self.path is None:
            return ConfigError(f"{where}: {message}")
        return ConfigError(f"{where}: {self.path or '(top level)'}: {message}")

    def child(self, key: str | int, value: Any) -> Node:
        """The value under `key` (an index for a list's item); one that is absent is named
        by its key at the line of the mapping it would be in."""
        name = f"[{key}]" if isinstance(key, int) else key
        path = self.path or ""
        joined = f"{path}{name}" if isinstance(key, int) or not path else f"{path}.{name}"
        held, lines = self._lines.get(id(self.value), (None, {}))
        line = lines.get(key, self.line) if held is self.value else self.line
        return Node(value, self.file, joined, line, self._lines)

    def find(self, keys: Sequence[str]) -> tuple[Node, bool]:
        """The node under the keys, and whether the file holds it."""
        node = self
        for depth, key in enumerate(keys):
            if not isinstance(node.value, dict) or key not in node.value:
                for absent in keys[depth:]:
                    node = node.child(absent, None)
                return node, False
            node = node.child(key, node.value[key])
        return node, True

    def mapping(self, allowed: tuple[str, ...] | None = None) -> dict[str, Node]:
        if self.value is None:
            return {}
        if not isinstance(self.value, dict):
            raise self.fail(f"expected a mapping, got {describe(self.value)}")
        out = {}
        for key, value in self.value.items():
            if not isinstance(key, str):
                raise self.fail(f"keys must be strings, got {key!r}")
            if allowed is not None and key not in allowed:
                raise self.child(key, value).fail(f"unknown key; allowed here: {', '.join(allowed)}")
            out[key] = self.child(key, value)
        return out

    def string(self) -> str:
        if not isinstance(self.value, str) or not self.value:
            raise self.fail(f"expected a non-empty string, got {describe(self.value)}")
        return self.value

    def boolean(self) -> bool:
        if not isinstance(self.value, bool):
            raise self.fail(f"expected true or false, got {describe(self.value)}")
        return self.value

    def integer(self, minimum: int = 0) -> int:
        if isinstance(self.value, bool) or not isinstance(self.value, int):
            raise self.fail(f"expected a whole number, got {describe(self.value)}")
        if self.value < minimum:
            raise self.fail(f"must be at least {minimum}, got {self.value}")
        return self.value

    def number(self, minimum: float = 0.0) -> float:
        if isinstance(self.value, bool) or not isinstance(self.value, (int, float)):
            raise self.fail(f"expected a number, got {describe(self.value)}")
        if self.value <= minimum:
            raise self.fail(f"must be greater than {minimum}, got {self.value}")
        return float(self.value)

    def strings(self) -> tuple[str, ...]:
        if not isinstance(self.value, list):
            raise self.fail(f"expected a list of strings, got {describe(self.value)}")
        return tuple(self.child(i, v).string() for i, v in enumerate(self.value))


def describe(value: Any) -> str:
    """A value as a message quotes what the file holds."""
    if value is None:
        return "nothing"
    return f"{type(value).__name__} {value!r}"


def read_file(path: Path) -> Node:
    """The YAML file at `path`, whole."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text: {exc}") from exc
    loader = _LineLoader(text)
    try:
        value = loader.get_single_data()
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    finally:
        loader.dispose()
    return Node(value, str(path), "", None, loader.lines)


# --- kinds: how one value is checked, and how the docs name it ----------------------------------


@dataclass
class Reading:
    """What reading a file needs besides its YAML: the deployment root relative paths resolve
    against, the environment section being read, the process environment (for overrides), and
    the values read so far by dotted key, which derived defaults refer to."""

    root: Path
    env: Mapping[str, str]
    environment: str | None = None
    values: dict[str, Any] = field(default_factory=dict)
    prefix: str = ""  # the dotted key of the mapping being read, with a trailing dot

    def value(self, key: str) -> Any:
        """The value of the setting `key` (dotted, from the top), read before."""
        return self.values[key]

    def under(self, key: str) -> Reading:
        """The same reading, inside the mapping at `key` (the values read stay shared)."""
        return dataclasses.replace(self, prefix=f"{self.prefix}{key}.")


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
        value = kind.read(Node(reading.env[declared.env], name, None), reading)
    return kind.finish(value, reading)


def _blamed(node: Node, invalid: Invalid) -> ConfigError:
    paths = [tuple(key.split(".")) if isinstance(key, str) else key for key in invalid.keys]
    for path in paths:
        blamed, held = node.find(path)
        if held:
            return blamed.fail(invalid.message)
    return node.find(paths[0])[0].fail(invalid.message)


# --- the docs' tables ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Row:
    """One setting as docs/configuration.md shows it; `defaults` holds one (label, text) pair,
    or one per kind of a `PerKind` mapping."""

    key: str
    type: str
    defaults: tuple[tuple[str, str], ...]
    doc: str


def _doc(declared: Setting) -> str:
    overrides = [f"`{name}`" for name in (declared.env, declared.option) if name]
    if not overrides:
        return declared.doc
    return f"{declared.doc} Overridden by {' and '.join(overrides)}."


def _default_text(declared: Setting, kind: Kind) -> str:
    if declared.derived is not None:
        return declared.derived.text
    if declared.default is _READ_EMPTY:
        return "see below"
    if declared.default is _REQUIRED:
        return "required"
    return kind.show(declared.default)


def rows(cls: type, prefix: str = "") -> Iterator[Row]:
    """Every setting `cls` declares, nested ones included, in their order; at the top (no
    `prefix`), each nested mapping also has a row of its own, pointing at its table."""
    mappings: set[str] = set()
    for entry in _entries(cls):
        declared, kind = entry.setting, entry.kind
        key = prefix + declared.key
        mapping = declared.key if isinstance(kind, Section) else declared.key.partition(".")[0]
        if not prefix and mapping not in mappings and (mapping != declared.key or isinstance(kind, Section)):
            mappings.add(mapping)
            default = "required" if declared.required and isinstance(kind, Section) else "see below"
            yield Row(mapping, "mapping", (("", default),), f"Its keys: [{mapping}](#{mapping.lower()}) below.")
        if isinstance(kind, Section):
            yield from rows(kind.cls, key + ".")
            continue
        kind_name = kind.name if declared.also is None else f"{kind.name}, {declared.also}"
        yield Row(key, kind_name, (("", _default_text(declared, kind)),), _doc(declared))
        if isinstance(kind, ListOf):
            if kind.shorthand is not None:
                (short,) = (item for item in _entries(kind.cls) if item.setting.key == kind.shorthand)
                doc = f"Short for `{{{kind.shorthand}: ...}}`: the other keys take their defaults."
                yield Row(f"{key}[i]", short.kind.name, (("", ""),), doc)
            yield from rows(kind.cls, f"{key}[i].")
        elif isinstance(kind, PerKind):
            yield from _per_kind_rows(kind, key)


def _per_kind_rows(kind: PerKind, key: str) -> Iterator[Row]:
    for entry in _entries(kind.cls):
        name = entry.setting.key
        taking = [each for each, defaults in kind.defaults.items() if name in defaults]
        where = taking[0] if len(taking) == 1 else "<kind>"
        defaults = tuple(
            (each, entry.kind.show(defaults[name]) if name in defaults else "(not accepted)")
            for each, defaults in kind.defaults.items()
        )
        yield Row(f"{key}.{where}.{name}", entry.kind.name, defaults, _doc(entry.setting))


def table(rows: Sequence[Row]) -> str:
    """`rows` as a Markdown table."""
    labels = [label for label, _ in rows[0].defaults]
    if any([label for label, _ in row.defaults] != labels for row in rows):
        raise ValueError("a table's rows must all have the same default columns")
    heads = ["Key", "Type", *(f"Default `{label}`" if label else "Default" for label in labels), "What it does"]
    lines = [f"| {' | '.join(heads)} |", f"|{'---|' * len(heads)}"]
    for row in rows:
        cells = [f"`{row.key}`", row.type, *(text for _, text in row.defaults), row.doc]
        lines.append(f"| {' | '.join(cells)} |")
    return "\n".join(lines) + "\n"


MARKER = re.compile(r"^<!-- settings: (\S+)(?: (\S+))? -->\n((?:\|.*\n)*)", re.MULTILINE)


def _under(key: str, prefix: str) -> bool:
    return not prefix or key.startswith((prefix + ".", prefix + "["))


def document(page: str, files: Mapping[str, type]) -> str:
    """`page` with the table under each `<!-- settings: FILE [PREFIX] -->` marker written from
    the declarations of FILE's class: the settings under PREFIX (all of the file's without
    one) that no marker with a longer prefix claims. Each setting is in one table."""
    markers = [(m[1], m[2] or "") for m in MARKER.finditer(page)]
    unknown = sorted({name for name, _ in markers} - set(files))
    if unknown:
        raise ValueError(f"no settings class for {', '.join(unknown)}")

    def written(match: re.Match[str]) -> str:
        name, prefix = match[1], match[2] or ""
        longer = [other for each, other in markers if each == name and len(other) > len(prefix)]
        shown = [
            row
            for row in rows(files[name])
            if _under(row.key, prefix) and not any(_under(row.key, other) for other in longer)
        ]
        if not shown:
            raise ValueError(f"no settings of {name} under {prefix!r}")
        return match[0][: match.start(3) - match.start(0)] + table(shown)

    return MARKER.sub(written, page)
