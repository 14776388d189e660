"""docs/security.md names, for each promise, the test that proves it: every one must exist,
so that renaming or deleting a test cannot leave the page claiming a proof that is gone."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
REFERENCE = re.compile(r"`(tests/[\w/]+\.py)::((?:test_|Test)\w+)`")


def test_every_test_named_in_the_security_page_exists():
    page = (REPO / "docs" / "security.md").read_text(encoding="utf-8")
    named = REFERENCE.findall(page)
    assert len(named) >= 40, "the page should name a proving test for each promise"
    missing = []
    for path, name in sorted(set(named)):
        tree = ast.parse((REPO / path).read_text(encoding="utf-8"))
        # test functions, and test classes: a Hypothesis state machine's `TestCase` is an assignment
        defined = {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
        defined |= {
            target.id
            for node in tree.body
            if isinstance(node, ast.Assign)
            for target in node.targets
            if isinstance(target, ast.Name)
        }
        if name not in defined:
            missing.append(f"{path}::{name}")
    assert not missing, f"docs/security.md names tests that do not exist: {missing}"
