"""The first-party plugins are written as any plugin would be: from apid they import only the
public face, so that what they need is lent through `Services` to every plugin alike."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"
KIT = Path(__file__).resolve().parents[2] / "daemon" / "apid" / "testing"
PUBLIC = frozenset({"apid.plugin", "apid.records", "apid.problems", "apid.testing"})


def apid_imports(module: Path) -> set[str]:
    """Every apid module `module` imports, at any depth (`from apid import x` names `apid.x`)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(module.read_text(), str(module))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "apid":
                found.update(f"apid.{alias.name}" for alias in node.names)
            else:
                found.add(node.module)
    return {name for name in found if name == "apid" or name.startswith("apid.")}


def below_the_face(name: str) -> bool:
    return not any(name == public or name.startswith(f"{public}.") for public in PUBLIC)


MODULES = sorted(PLUGINS.glob("**/*.py"))


def test_the_plugins_are_found():
    assert {module.relative_to(PLUGINS).parts[0] for module in MODULES} >= {
        "apid_person",
        "apid_apikey",
        "apid_apidoc",
        "apid_hook",
        "apid_server",
    }


@pytest.mark.parametrize("module", MODULES, ids=lambda module: str(module.relative_to(PLUGINS)))
def test_a_first_party_plugin_imports_only_the_public_face(module: Path):
    below = {name for name in apid_imports(module) if below_the_face(name)}
    assert below == set()


@pytest.mark.parametrize("module", sorted(KIT.glob("*.py")), ids=lambda module: module.name)
def test_the_kit_imports_no_plugin_and_passes_for_no_other_class(module: Path):
    """The kit lends its hooks through `Services`, as the daemon does its own: it needs no
    first-party controller of its own making, named as the real one."""
    tree = ast.parse(module.read_text(), str(module))
    first_party = {package.name for package in PLUGINS.iterdir() if package.is_dir()}
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names} | {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module
    }
    assert {name.split(".")[0] for name in imported} & first_party == set()
    renamed = {
        target.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Attribute)
    }
    assert renamed & {"__module__", "__qualname__", "__name__"} == set()
