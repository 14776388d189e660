"""The suite's own rule: test modules share helpers (the modules beside this one in tests/) and
fixtures (the conftest files), never each other. A test module imported by another is a helper
nobody looks for there, and its fixtures and tests are dragged into a module that pytest-xdist
may run on another worker than the file they belong to."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
TEST_PACKAGES = {"integration", "unit"}
NOT_THE_SUITES = {"sample_plugin", "output"}  # a plugin package of its own; files the tests write


def is_test_module(name: str) -> bool:
    """Whether the dotted `name` is one of the suite's test packages, or a test module, or in one."""
    parts = name.split(".")
    return parts[0] in TEST_PACKAGES or any(part.startswith("test_") for part in parts)


def imports_of_test_modules(source: str) -> list[str]:
    """The import statements of `source` that reach a test module, as written. A relative
    import counts as one: only the test packages have anything to import relatively."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names = [node.module or "", *(f"{node.module}.{alias.name}" for alias in node.names)]
        elif isinstance(node, ast.ImportFrom):
            names = [f".{node.module or ''}"]
        else:
            continue
        if any(name.startswith(".") or is_test_module(name) for name in names):
            found.append(ast.unparse(node))
    return found


def suite_files() -> list[Path]:
    return sorted(path for path in TESTS.rglob("*.py") if not NOT_THE_SUITES & set(path.relative_to(TESTS).parts[:-1]))


def test_no_module_of_the_suite_imports_a_test_module():
    offending = {
        str(path.relative_to(TESTS)): found
        for path in suite_files()
        if (found := imports_of_test_modules(path.read_text(encoding="utf-8")))
    }
    assert offending == {}, "move what they share into a helper module of tests/ or a conftest fixture"


def test_the_suite_is_what_is_scanned():
    scanned = {str(path.relative_to(TESTS)) for path in suite_files()}
    assert {"harness.py", "integration/conftest.py", "integration/test_sessions.py", "unit/test_http.py"} <= scanned
    assert not any(name.startswith(("sample_plugin/", "output/")) for name in scanned)


@pytest.mark.parametrize(
    "source",
    [
        "from integration.test_sessions import log_in",
        "from integration import test_sessions",
        "import integration.test_sessions",
        "import unit.test_http as http_tests",
        "from unit.test_http import Connection",
        "from .test_http import Connection, assert_problem",
        "from . import test_http",
        "import test_layout",
        "def helper():\n    from integration.test_sessions import log_in\n",
    ],
)
def test_each_way_of_importing_a_test_module_is_found(source):
    assert len(imports_of_test_modules(source)) == 1


@pytest.mark.parametrize(
    "source",
    [
        "from harness import ADMIN, running_daemon",
        "from assertions import assert_problem",
        "import unittest.mock",
        "from apid.testing import Kit",
        "import pytest_twisted",
        "from twisted.internet.testing import StringTransport",
    ],
)
def test_helpers_and_libraries_are_not_test_modules(source):
    assert imports_of_test_modules(source) == []
