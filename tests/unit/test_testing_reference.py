"""The "Reference" of docs/testing.md is `apid.testing` as the code declares it: one entry
(a `####` heading) per name of its `__all__` and none for anything else, each opening with
the constructor's parameters in the code's order and kinds, so that a changed constructor
cannot leave the page behind."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest

import apid.testing

PAGE = Path(__file__).resolve().parents[2] / "docs" / "testing.md"
ENTRY = re.compile(r"^#### `(\w+)`\n\n```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def entries() -> dict[str, str]:
    text = PAGE.read_text(encoding="utf-8")
    reference = text[text.index("\n## Reference\n") :]
    found = dict(ENTRY.findall(reference))
    assert len(found) == len(re.findall(r"^#### ", reference, re.MULTILINE)), "an entry without its python block"
    return found


def documented(block: str) -> list[tuple[str, str]] | None:
    """(name, kind) of each parameter of `class Name(...)`, or None for `class Name(Base)`."""
    source = block.strip().removeprefix("class ")
    node = ast.parse(f"def {source}: ...".replace("= ...", "= None")).body[0]
    assert isinstance(node, ast.FunctionDef)
    args = node.args
    if not args.kwonlyargs and len(args.args) == 1 and args.args[0].annotation is None and not args.defaults:
        return None  # the base class, not a parameter
    return [(a.arg, "POSITIONAL_OR_KEYWORD") for a in args.args] + [(a.arg, "KEYWORD_ONLY") for a in args.kwonlyargs]


def test_every_public_name_has_one_entry_and_nothing_else_has_one():
    assert sorted(entries()) == sorted(apid.testing.__all__)


@pytest.mark.parametrize("name", sorted(apid.testing.__all__))
def test_an_entry_shows_the_constructor_the_code_declares(name):
    obj = getattr(apid.testing, name)
    shown = documented(entries()[name])
    if shown is None:
        assert entries()[name].strip() == f"class {name}({obj.__bases__[0].__name__})"
        return
    declared = [(p.name, p.kind.name) for p in inspect.signature(obj).parameters.values()]
    assert shown == declared, f"{name}: docs/testing.md shows other parameters than the code"
