"""A setting declared once (apid.config.settings): the one reader, its messages with file, line and
key, and docs/configuration.md's tables written from the same declarations."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
import typing
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from apid.config.files import DOCUMENTED, load_api, load_server
from apid.config.kinds import SERVER_FILE
from apid.config.nodes import ConfigError, Reading, read_file
from apid.config.reference import MARKER, document, rows
from apid.config.server import ConnectionLimits, WebhooksConfig
from apid.config.settings import Derived, Invalid, choice, per_kind, read_section, section, setting, settings

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "configuration.md"


# --- a small declaration, read -----------------------------------------------------------------


@settings
class Limit:
    most: int = setting("most", at_least=1, doc="The most.")
    extra: int | None = setting("extra", default=None, at_least=1, doc="Only some kinds take it.")


@settings
class Inner:
    size: int = setting("size", default=4, at_least=1, doc="A size.")
    label: str = setting(
        "label", derived=Derived("`name` + `!`", lambda reading: reading.value("name") + "!"), doc="A label."
    )


@settings
class Outer:
    name: str = setting("name", default="apid", env="EXAMPLE_NAME", doc="A name.")
    mode: bool = setting("nested.mode", default=True, kind=choice({"fast": True, "slow": False}), doc="A mode.")
    low: float = setting("nested.low", default=1.0, doc="Low.")
    high: float = setting("nested.high", default=2.0, doc="High.")
    inner: Inner = section("inner")
    limits: Mapping[str, Limit] = section(
        "limits", kind=per_kind(Limit, wide={"most": 10, "extra": 3}, narrow={"most": 2}), doc="Limits."
    )
    folder: Path = setting("folder", default=Path("var/data"), doc="A folder.")

    def conflicts(self, given: frozenset[str]) -> Iterator[Invalid]:
        if self.high < self.low:
            yield Invalid(f"high ({self.high:g}) must be at least low ({self.low:g})", "nested.high", "nested.low")


def read(tmp_path: Path, text: str, env: Mapping[str, str] | None = None) -> Outer:
    path = tmp_path / "example.yml"
    path.write_text(text, encoding="utf-8")
    return read_section(Outer, read_file(path), Reading(tmp_path, env or {}))


def refusal(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as info:
        read(tmp_path, text)
    return str(info.value).replace(str(tmp_path / "example.yml"), "example.yml")


def test_an_empty_file_takes_every_default(tmp_path):
    outer = read(tmp_path, "")
    assert (outer.name, outer.mode, outer.low, outer.high) == ("apid", True, 1.0, 2.0)
    assert outer.inner == Inner(size=4, label="apid!")
    assert outer.limits == {"wide": Limit(most=10, extra=3), "narrow": Limit(most=2)}
    assert outer.folder == tmp_path / "var" / "data"


def test_values_are_read_converted_and_derived_from_what_was_read(tmp_path):
    outer = read(tmp_path, "name: x\nnested:\n  mode: slow\ninner: {size: 9}\nlimits:\n  narrow: {most: 5}\n")
    assert (outer.name, outer.mode, outer.inner) == ("x", False, Inner(size=9, label="x!"))
    assert outer.limits["narrow"] == Limit(most=5)


def test_an_environment_variable_overrides_the_file_once_the_file_is_checked(tmp_path):
    assert read(tmp_path, "name: x\n", {"EXAMPLE_NAME": "y"}).name == "y"
    assert read(tmp_path, "name: x\n", {"EXAMPLE_NAME": ""}).name == "x"
    with pytest.raises(ConfigError, match=r"example\.yml:1: name: expected a non-empty string, got int 5"):
        read(tmp_path, "name: 5\n", {"EXAMPLE_NAME": "y"})


@pytest.mark.parametrize(
    "text, message",
    [
        ("name: x\nnmae: y\n", "example.yml:2: nmae: unknown key; allowed here: name, nested, inner, limits, folder"),
        (
            "nested:\n  mode: fast\n  speed: 3\n",
            "example.yml:3: nested.speed: unknown key; allowed here: mode, low, high",
        ),
        ("nested:\n  mode: maybe\n", "example.yml:2: nested.mode: must be fast or slow, got 'maybe'"),
        ("inner:\n\n  size: 0\n", "example.yml:3: inner.size: must be at least 1, got 0"),
        ("limits:\n  narrow: {extra: 1}\n", "example.yml:2: limits.narrow.extra: unknown key; allowed here: most"),
        ("limits: [1]\n", "example.yml:1: limits: expected a mapping, got list [1]"),
        ("nested:\n  low: 5\n", "example.yml:2: nested.low: high (2) must be at least low (5)"),
        ("nested:\n  low: 5\n  high: 3\n", "example.yml:3: nested.high: high (3) must be at least low (5)"),
        ("- 1\n", "example.yml: (top level): expected a mapping, got list [1]"),
    ],
)
def test_a_refusal_names_the_file_the_line_and_the_key(tmp_path, text, message):
    assert refusal(tmp_path, text) == message


def test_a_required_key_left_out_is_named_at_the_line_of_its_mapping(tmp_path):
    @settings
    class Needs:
        inner: Limit = section("inner", required=True)

    path = tmp_path / "needs.yml"
    path.write_text("# a comment\ninner:\n  extra: 2\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        read_section(Needs, read_file(path), Reading(tmp_path, {}))
    assert str(info.value) == f"{path}:2: inner.most: is required"
    path.write_text("{}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        read_section(Needs, read_file(path), Reading(tmp_path, {}))
    assert str(info.value) == f"{path}: inner: is required"


def test_lines_follow_flow_mappings_and_lists(tmp_path):
    assert refusal(tmp_path, "inner: &shared {size: 2}\nlimits:\n  wide: *shared\n") == (
        "example.yml:1: limits.wide.size: unknown key; allowed here: most, extra"
    )
    assert refusal(tmp_path, "limits: {wide: {most: 1},\n  narrow: {most: 0}}\n") == (
        "example.yml:2: limits.narrow.most: must be at least 1, got 0"
    )


# --- apid's two files -------------------------------------------------------------------------------


def test_apid_s_messages_name_the_line(tmp_path):
    path = tmp_path / SERVER_FILE
    path.write_text("development:\n  listen: 8080\n\n  webhooks:\n    perHost: 0\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_server(path, "development", tmp_path, {})
    assert str(info.value) == f"{path}:5: development.webhooks.perHost: must be at least 1, got 0"


def test_a_retry_base_above_the_default_retry_max_is_refused_naming_retry_base(tmp_path):
    path = tmp_path / SERVER_FILE
    path.write_text("test:\n  webhooks: {retryBase: 4000}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_server(path, "test", tmp_path, {})
    assert str(info.value) == f"{path}:2: test.webhooks.retryBase: must be at most retryMax (3600 s, its default)"


def test_an_api_version_left_empty_is_refused_as_no_string(tmp_path):
    path = tmp_path / "service_api.yml"
    roles = "security: {superuserRole: A, userRole: U, networkGroups: [g], networkRoles: {g: [A, U]}}\n"
    path.write_text(roles + "api:\n  version:\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_api(path, tmp_path)
    assert str(info.value) == f'{path}:3: api.version: must be a quoted string such as "1.10", got nothing'


def test_the_settings_classes_built_without_a_file_hold_the_declared_defaults():
    assert WebhooksConfig() == WebhooksConfig(
        timeout=10.0, per_host=8, retry_base=5.0, retry_factor=6.0, retry_max=3600.0, lease=60.0, poll=1.0
    )
    assert ConnectionLimits().body_rate == 65536


def declared_fields() -> Iterator[tuple[type, dataclasses.Field[typing.Any]]]:
    seen: set[type] = set()
    todo = list(DOCUMENTED.values())
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if "setting" in f.metadata:
                yield cls, f
                kind = f.metadata["setting"].kind
                nested = getattr(kind, "cls", None) or hints[f.name]
                if dataclasses.is_dataclass(nested) and isinstance(nested, type):
                    todo.append(nested)


@pytest.mark.parametrize("cls, declared", list(declared_fields()), ids=lambda value: getattr(value, "name", ""))
def test_each_plain_default_is_of_its_field_s_type(cls, declared):
    annotation = typing.get_type_hints(cls)[declared.name]
    default = declared.default
    if default is dataclasses.MISSING or declared.metadata["setting"].kind is not None:
        return
    origin = typing.get_origin(annotation)
    if origin is tuple:  # tuple[str, ...]: its arguments are its items'
        allowed: tuple[type, ...] = (tuple,)
    else:
        allowed = tuple(arg for arg in typing.get_args(annotation) if isinstance(arg, type)) or (origin or annotation,)
    assert isinstance(default, allowed), f"{cls.__name__}.{declared.name}: default {default!r} is no {annotation}"
    assert not (isinstance(default, bool) and bool not in allowed)


# --- docs/configuration.md -----------------------------------------------------------------------------


def test_the_docs_tables_are_the_declarations():
    text = PAGE.read_text(encoding="utf-8")
    assert document(text, DOCUMENTED) == text, (
        "docs/configuration.md differs: run .venv/bin/python scripts/sync-settings"
    )


def test_every_setting_is_in_exactly_one_table_of_the_docs():
    text = PAGE.read_text(encoding="utf-8")
    for name, cls in DOCUMENTED.items():
        shown = [
            key
            for match in MARKER.finditer(text)
            if match[1] == name
            for key in re.findall(r"^\| `([^`]+)` \|", match[3], re.MULTILINE)
        ]
        assert sorted(shown) == sorted(row.key for row in rows(cls)), name


def test_each_mapping_row_points_at_a_heading_of_the_page():
    text = PAGE.read_text(encoding="utf-8")
    headings = {  # as GitHub makes a heading's anchor
        re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-") for heading in re.findall(r"^#+ (.*)$", text, re.M)
    }
    for cls in DOCUMENTED.values():
        for row in rows(cls):
            for anchor in re.findall(r"\]\(#([^)]+)\)", row.doc):
                assert anchor in headings, f"{row.key}: no heading for #{anchor}"


def test_a_table_that_differs_from_its_declarations_is_rewritten():
    text = PAGE.read_text(encoding="utf-8")
    wrong = text.replace("| `webhooks.perHost` | integer ≥ 1 | `8` |", "| `webhooks.perHost` | integer ≥ 0 | `4` |")
    assert wrong != text
    assert document(wrong, DOCUMENTED) == text


def test_the_sync_script_leaves_an_up_to_date_page_alone():
    done = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "sync-settings")], capture_output=True, text=True, check=True
    )
    assert done.stdout == ""
