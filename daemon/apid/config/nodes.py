"""The YAML of a settings file as nodes that know their file and line, so that every refusal
(a `ConfigError`) names the file, the line and the dotted key."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

# The largest integer a setting may be: 64 bits, what SQLite, C and the clock work with.
LARGEST_INTEGER = 2**63 - 1
LONG_INTEGER = 10**40  # and from this one on, a message gives its length, not its digits


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
        *,
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
        return Node(value=value, file=self.file, path=joined, line=line, lines=self._lines)

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
        if self.value > LARGEST_INTEGER:
            raise self.fail(f"must be at most {LARGEST_INTEGER}, got {describe(self.value)}")
        if self.value < minimum:
            raise self.fail(f"must be at least {minimum}, got {self.value}")
        return self.value

    def number(self, minimum: float = 0.0, *, or_equal: bool = False) -> float:
        """A finite number greater than `minimum` (or equal to it, `or_equal`), as a float.
        YAML reads `.nan` and `.inf` as floats, and an integer of any length: neither means
        a duration, a rate or a size, and a long integer would fail later, where the file and
        the key are no longer known (float() of it overflows)."""
        if isinstance(self.value, bool) or not isinstance(self.value, (int, float)):
            raise self.fail(f"expected a number, got {describe(self.value)}")
        try:
            number = float(self.value)
        except OverflowError:
            number = math.inf
        if not math.isfinite(number):
            raise self.fail(f"must be a finite number, got {describe(self.value)}")
        if number < minimum or (number == minimum and not or_equal):
            raise self.fail(f"must be {'at least' if or_equal else 'greater than'} {minimum:g}, got {self.value}")
        return number

    def strings(self) -> tuple[str, ...]:
        if not isinstance(self.value, list):
            raise self.fail(f"expected a list of strings, got {describe(self.value)}")
        return tuple(self.child(i, v).string() for i, v in enumerate(self.value))


def describe(value: Any) -> str:
    """A value as a message quotes what the file holds (an integer too long to read, by its length)."""
    if value is None:
        return "nothing"
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= LONG_INTEGER:
        return f"an integer of {len(str(abs(value)))} digits"
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
    return Node(value=value, file=str(path), path="", line=None, lines=loader.lines)


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
