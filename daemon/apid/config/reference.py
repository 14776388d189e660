"""The settings tables of docs/configuration.md, written from the settings' declarations
(`scripts/sync-settings`; tests/unit/test_settings.py checks the page is up to date)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from apid.config.settings import _READ_EMPTY, _REQUIRED, Kind, ListOf, PerKind, Section, Setting, _entries

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
