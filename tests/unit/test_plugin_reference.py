"""The "API reference" of docs/plugins.md is the plugin API as the code declares it: one entry
(a `####` heading) per name of `apid.plugin.__all__` and none for anything else, each with a
Python block whose signatures are those of the code (parameters, defaults, annotations), so
that a changed constructor cannot leave the reference behind."""

from __future__ import annotations

import ast
import collections.abc
import dataclasses
import inspect
import re
import textwrap
import typing
from dataclasses import MISSING
from pathlib import Path
from typing import Any

import pytest

import apid.plugin

PAGE = Path(__file__).resolve().parents[2] / "docs" / "plugins.md"
ENTRY = re.compile(r"^#### `(\w+)`\n\n```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def reference() -> str:
    text = PAGE.read_text(encoding="utf-8")
    start = text.index("\n## API reference\n")
    end = text.find("\n## ", start + 1)
    return text[start:] if end == -1 else text[start:end]


def headings() -> list[str]:
    return re.findall(r"^#### (.*)$", reference(), re.MULTILINE)


def entries() -> dict[str, str]:
    """Each entry's name and its Python block."""
    found = ENTRY.findall(reference())
    assert len(found) == len(headings()), "an entry is no `name` heading followed by a ```python block"
    return dict(found)


def statements(block: str) -> list[str]:
    """The block's statements, each joined from the lines its brackets span."""
    result, current, depth = [], "", 0
    for line in block.splitlines():
        current += ("\n" if current else "") + line
        depth += sum(line.count(c) for c in "([") - sum(line.count(c) for c in ")]")
        if depth == 0:
            result.append(current)
            current = ""
    return result


def parsed(statement: str) -> ast.stmt:
    """A documented statement as Python: `@name(...)` and a constructor `class Name(params)` read
    as a `def`, a member or a `class Name(Bases)` as written."""
    source = textwrap.dedent(statement).strip()
    if source.startswith("@"):
        source = "def " + source[1:]
    if not source.startswith(("def ", "async def ", "class ")):
        return ast.parse(source).body[0]
    try:
        return ast.parse(source + ": ...").body[0]
    except SyntaxError:
        return ast.parse("def " + source.removeprefix("class ") + ": ...").body[0]


def normal(annotation: Any) -> str | None:
    if annotation is inspect.Parameter.empty or annotation is None:
        return None
    return ast.unparse(ast.parse(annotation, mode="eval"))


def documented(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[tuple[str, str, str | None, Any]]:
    """(name, kind, annotation, default) of each parameter a documented signature declares."""
    args = node.args
    positional = args.posonlyargs + args.args
    defaults = [inspect.Parameter.empty] * (len(positional) - len(args.defaults)) + list(args.defaults)
    params = [(a.arg, "POSITIONAL_OR_KEYWORD", a.annotation, d) for a, d in zip(positional, defaults, strict=True)]
    if args.vararg:
        params.append((args.vararg.arg, "VAR_POSITIONAL", args.vararg.annotation, inspect.Parameter.empty))
    params += [
        (a.arg, "KEYWORD_ONLY", a.annotation, inspect.Parameter.empty if d is None else d)
        for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True)
    ]
    if args.kwarg:
        params.append((args.kwarg.arg, "VAR_KEYWORD", args.kwarg.annotation, inspect.Parameter.empty))
    namespace = vars(apid.plugin)
    return [
        (
            name,
            kind,
            None if note is None else ast.unparse(note),
            default if default is inspect.Parameter.empty else eval(ast.unparse(default), namespace),
        )
        for name, kind, note, default in params
    ]


def declared(function: Any) -> list[tuple[str, str, str | None, Any]]:
    """A dataclass field's default factory counts as what it makes (`{}`), as the reference writes it."""
    made = {}
    if dataclasses.is_dataclass(function):
        made = {f.name: f.default_factory() for f in dataclasses.fields(function) if f.default_factory is not MISSING}
    return [
        (p.name, p.kind.name, normal(p.annotation), made.get(p.name, p.default))
        for p in inspect.signature(function).parameters.values()
    ]


def same_signature(node: ast.FunctionDef | ast.AsyncFunctionDef, function: Any, label: str) -> None:
    assert documented(node) == declared(function), f"{label}: the reference's parameters differ from the code's"
    if node.returns is not None:
        assert ast.unparse(node.returns) == normal(inspect.signature(function).return_annotation), label
    assert isinstance(node, ast.AsyncFunctionDef) == inspect.iscoroutinefunction(function), f"{label}: async or not"


def is_protocol(obj: Any) -> bool:
    return getattr(obj, "_is_protocol", False)


def annotation_of(cls: type, name: str) -> str:
    for klass in cls.__mro__:
        if name in vars(klass).get("__annotations__", {}):
            return vars(klass)["__annotations__"][name]
    raise AssertionError(f"{cls.__name__} declares no attribute {name}")


def check_member(cls: type, member: ast.stmt, owner: str) -> None:
    """An attribute (a protocol's property or a class's annotation) or a method, as documented."""
    if isinstance(member, ast.AnnAssign):
        name, shown = member.target.id, ast.unparse(member.annotation)
        raw = inspect.getattr_static(cls, name, None)
        note = raw.fget.__annotations__["return"] if isinstance(raw, property) else annotation_of(cls, name)
        assert normal(note) == shown, f"{owner}.{name}: {shown} in the reference"
        return
    assert isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef), f"{owner}: {ast.unparse(member)}"
    function = inspect.getattr_static(cls, member.name, None)
    assert function is not None, f"{owner} has no {member.name}"
    same_signature(member, function, f"{owner}.{member.name}")


def test_every_public_name_has_one_entry_and_nothing_else_has_one():
    names = [heading.strip("`") for heading in headings()]
    assert len(names) == len(set(names)), "a name has two entries"
    assert sorted(names) == sorted(apid.plugin.__all__)


@pytest.mark.parametrize("name", sorted(apid.plugin.__all__))
def test_an_entry_shows_the_signature_the_code_declares(name):
    block = entries().get(name)
    assert block is not None, f"{name} has no entry in the API reference of docs/plugins.md"
    obj = getattr(apid.plugin, name)
    shown = statements(block)
    if shown[0] == f"@{name}":  # the bare decorator: the overload that takes the method itself
        assert any(len(inspect.signature(f).parameters) == 1 for f in typing.get_overloads(obj))
        shown = shown[1:]
    first, *members = [parsed(statement) for statement in shown]
    if isinstance(first, ast.Assign):  # a type alias
        assert [target.id for target in first.targets] == [name]
        namespace = {**vars(typing), **vars(collections.abc), **vars(apid.plugin)}  # as the reference writes it
        assert eval(ast.unparse(first.value), namespace) == obj, f"{name} is not what the reference says"
    elif isinstance(first, ast.ClassDef):  # class Name(Bases): its kinship, and for a problem its constructor
        assert first.name == name
        assert [ast.unparse(base) for base in first.bases] == [base.__name__ for base in obj.__bases__]
        if not is_protocol(obj):
            assert inspect.signature(obj) == inspect.signature(obj.__bases__[0]), f"{name}: its own constructor"
    else:  # a decorator or a constructor: the overload or signature of that name
        assert first.name == name
        overloads = typing.get_overloads(obj) if inspect.isfunction(obj) else []
        candidates = [f for f in overloads if documented(first) == declared(f)] or [obj]
        same_signature(first, candidates[0], name)
    for member in members:
        check_member(obj, member, name)
    if is_protocol(obj):
        listed = {member.target.id if isinstance(member, ast.AnnAssign) else member.name for member in members}
        own = {member for member in vars(obj) if not member.startswith("_")}
        assert listed == own, f"{name}: the reference shows other members than the protocol's"
