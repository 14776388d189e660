"""The docs show their examples verbatim: a fenced block under `<!-- example: docs/examples/X -->`
is exactly the file X, which tests/integration/test_getting_started.py runs (or installs).
So what a reader copies is what the suite ran, and the two cannot drift apart."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from shell_docs import fenced_blocks

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
EXAMPLES = DOCS / "examples"
MARKED = re.compile(r"^<!-- example: (\S+) -->\n```\w*\n(.*?)^```$", re.MULTILINE | re.DOTALL)
PAGES_OF_EXAMPLES = ("getting-started.md", "concepts.md")


def marked_blocks() -> list[tuple[str, str, str]]:
    """(page, file named by the marker, the block's text) for every marked block of the docs."""
    return [
        (page.name, name, text)
        for page in sorted(DOCS.glob("*.md"))
        for name, text in MARKED.findall(page.read_text(encoding="utf-8"))
    ]


def example_files() -> list[Path]:
    return sorted(
        path
        for path in EXAMPLES.rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and ".egg-info" not in str(path)
    )


@pytest.mark.parametrize("page, name, text", marked_blocks(), ids=lambda value: str(value)[:40])
def test_a_marked_block_is_its_example_file_verbatim(page, name, text):
    path = REPO / name
    assert path.is_file(), f"docs/{page}: the example {name} does not exist"
    assert text == path.read_text(encoding="utf-8"), f"docs/{page}: the block differs from {name}"


def test_every_example_file_is_shown_in_the_docs():
    shown = {name for _, name, _ in marked_blocks()}
    missing = [str(path.relative_to(REPO)) for path in example_files() if str(path.relative_to(REPO)) not in shown]
    assert missing == []


@pytest.mark.parametrize("page", PAGES_OF_EXAMPLES)
def test_every_shell_block_of_the_newcomers_pages_is_an_example_that_runs(page):
    text = (DOCS / page).read_text(encoding="utf-8")
    shell = [block for _, block in fenced_blocks(text, "sh")]
    marked = [block for _, block in MARKED.findall(text)]
    assert shell and all(block in marked for block in shell), f"docs/{page}: a ```sh block is no example file"


@pytest.mark.parametrize("page", PAGES_OF_EXAMPLES)
def test_the_newcomers_pages_link_to_files_that_exist(page):
    text = (DOCS / page).read_text(encoding="utf-8")
    targets = {
        target.split("#")[0]
        for target in re.findall(r"\]\(([^)\s]+)\)", text)
        if not target.startswith(("http://", "https://", "#"))
    }
    assert targets and [target for target in sorted(targets) if not (DOCS / target).exists()] == []
