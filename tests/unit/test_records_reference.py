"""The `apid.records` reference of docs/plugins.md is `apid.records` as the code declares it: one
entry (a `####` heading with a Python block) per name of its `__all__`, none for anything else,
each block the name's signature as `inspect` gives it, so that a changed function cannot leave
the reference behind."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

import apid.records

PAGE = Path(__file__).resolve().parents[2] / "docs" / "plugins.md"
ENTRY = re.compile(r"^#### `(\w+)`\n\n```python\n(.*?)\n```$", re.MULTILINE | re.DOTALL)


def entries() -> dict[str, str]:
    text = PAGE.read_text(encoding="utf-8")
    start = text.index("\n## `apid.records` reference\n")
    end = text.find("\n## ", start + 1)
    return dict(ENTRY.findall(text[start:] if end == -1 else text[start:end]))


def declared(name: str) -> str:
    """The name as the reference must show it: an alias's value, a function's `def` line."""
    value = getattr(apid.records, name)
    if not callable(value) or isinstance(value, type) or name == "Record":
        return f"{name} = {str(value).replace('typing.', '')}"
    return f"def {name}{inspect.signature(value)}".replace("'", "")  # annotations are strings here


def test_every_public_name_has_one_entry_and_nothing_else_has_one():
    assert sorted(entries()) == sorted(apid.records.__all__)


@pytest.mark.parametrize("name", sorted(apid.records.__all__))
def test_an_entry_shows_the_signature_the_code_declares(name):
    assert entries()[name] == declared(name)
