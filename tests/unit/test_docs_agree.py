"""The docs agree with one another, and with the code where it can say: a fact several pages
state (which calls answer link relations, which `apid` commands exist, a setting's default, the
answer a call gets) is read from every page that states it, and a page saying otherwise fails.

tests/unit/test_docs_examples.py keeps the examples verbatim; this keeps the prose around them
from contradicting them, or each other."""

from __future__ import annotations

import argparse
import re
import shlex
from collections import defaultdict
from pathlib import Path

import pytest

from apid.cli.main import parser
from apid.config.files import DOCUMENTED
from apid.config.reference import rows

REPO = Path(__file__).resolve().parents[2]
PAGES = [*sorted((REPO / "docs").glob("*.md")), REPO / "README.md"]
FENCED = re.compile(r"^```[^\n]*\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def text(page: Path) -> str:
    return page.read_text(encoding="utf-8")


def prose(page: Path) -> str:
    """The page without its fenced blocks."""
    return FENCED.sub("\n\n", text(page))


def paragraphs(page: Path) -> list[str]:
    """The page's prose paragraphs, each on one line."""
    return [" ".join(block.split()) for block in re.split(r"\n\s*\n", prose(page)) if block.strip()]


def name(page: Path) -> str:
    return str(page.relative_to(REPO))


# --- which calls answer link relations -------------------------------------------------------------

KIND = r"`/?[vbc]`"
KINDS = rf"{KIND}(?:(?:,| and| or|, and|, or) {KIND})*"
CALL_KINDS = frozenset("vbc")
# Each form a page states it in, and the kinds of call that then answer links
LINK_CLAIMS = (
    (re.compile(rf"\b(?:for|with|on|to) (?:an? )?({KINDS}) calls?\b"), lambda kinds: kinds),
    (re.compile(rf"({KINDS}) calls? ignores? it"), lambda kinds: CALL_KINDS - kinds),
)


def link_claims() -> dict[frozenset[str], list[str]]:
    """The kinds of call (`v`, `b`, `c`) each page says answer `X-LINK_RELATIONS`, with where."""
    claims: dict[frozenset[str], list[str]] = defaultdict(list)
    for page in PAGES:
        for paragraph in paragraphs(page):
            if not re.search(r"X-LINK[_-]RELATIONS|link relations", paragraph, re.IGNORECASE):
                continue
            for pattern, answered in LINK_CLAIMS:
                for match in pattern.finditer(paragraph):
                    kinds = answered(frozenset(re.findall(r"[vbc]", match[1])))
                    claims[frozenset(kinds)].append(f"{name(page)}: {match[0]!r}")
    return claims


def test_every_page_says_the_same_calls_answer_link_relations():
    claims = link_claims()
    assert claims, "no page says which calls answer X-LINK_RELATIONS any more: fix the patterns"
    # the daemon answers them on all three (tests/integration/test_links.py, batch and chain)
    assert set(claims) == {CALL_KINDS}, f"the pages disagree: {dict(claims)}"


@pytest.mark.parametrize(
    "paragraph, answered",
    [
        ("`X-LINK_RELATIONS` is answered for `v` calls only; `b` and `c` calls ignore it", {"v"}),
        ("Send `X-LINK_RELATIONS` with a `/v`, `/b` or `/c` call", {"v", "b", "c"}),
        ("`X-LINK_RELATIONS` is answered for `v`, `b` and `c` calls alike", {"v", "b", "c"}),
    ],
)
def test_a_claim_about_link_relations_is_read_as_written(paragraph, answered):
    found = {
        frozenset(kinds(frozenset(re.findall(r"[vbc]", match[1]))))
        for pattern, kinds in LINK_CLAIMS
        for match in pattern.finditer(paragraph)
    }
    assert found == {frozenset(answered)}


# --- `apid` commands ---------------------------------------------------------------------------------

COMMAND_LINE = re.compile(r"^\s*(?:\$ )?(?:sudo \S+ )?(?:\S*/)?apid ((?!ready )[a-z][\w-]*)(?: ([a-z][\w-]*))?", re.M)
COMMAND_SPAN = re.compile(r"`((?:\S*/)?apid [^`\n]+)`")
NO_SUCH_COMMAND = re.compile(r"[Tt]here is no `((?:\S*/)?apid [^`]+)`|no `((?:\S*/)?apid [^`]+)` command")


def commands(cli: argparse.ArgumentParser) -> dict[str, dict]:
    """The command tree of `apid --help`: each command to its subcommands (empty: none)."""
    for choice in cli._actions:
        if isinstance(choice, argparse._SubParsersAction):
            return {command: commands(sub) for command, sub in choice.choices.items()}
    return {}


def exists(words: tuple[str, ...] | list[str], tree: dict[str, dict]) -> bool:
    first, *rest = words
    if first not in tree:
        return False
    subcommands = tree[first]
    return not subcommands or (bool(rest) and rest[0] in subcommands)


def command_mentions(page: Path) -> list[tuple[str, ...]]:
    """(command, subcommand or "") of every `apid ...` a page runs: in its code blocks, and in
    code spans of its prose."""
    found = [match for block in FENCED.findall(text(page)) for match in COMMAND_LINE.findall(block)]
    found += [match for span in COMMAND_SPAN.findall(prose(page)) for match in COMMAND_LINE.findall(span)]
    return [tuple(word for word in match if word) for match in found]


@pytest.mark.parametrize("page", PAGES, ids=name)
def test_every_apid_command_a_page_names_exists(page):
    tree = commands(parser())
    unknown = [" ".join(words) for words in command_mentions(page) if not exists(words, tree)]
    assert unknown == [], f"{name(page)} names commands `apid --help` does not list"


def test_no_page_says_a_command_is_missing_that_exists():
    tree = commands(parser())
    wrong = [
        f"{name(page)}: no `{said}`"
        for page in PAGES
        for match in NO_SUCH_COMMAND.finditer(" ".join(prose(page).split()))
        for said in match.groups()
        if said and exists(said.split()[1:3], tree)
    ]
    assert wrong == []


# --- defaults quoted in prose ----------------------------------------------------------------------

UNITS = {"s": 1, "second": 1, "seconds": 1, "min": 60, "minute": 60, "minutes": 60, "h": 3600, "hour": 3600}
UNITS |= {"hours": 3600, "day": 86400, "days": 86400, "week": 604800, "weeks": 604800}
DEFAULT_CLAIMS = (  # "`chainLimit` (service_api.yml, default 10)", "`shutdown.drain` seconds (20)"
    re.compile(r"`(?P<key>[A-Za-z][\w.]*)`[^`|]{0,40}?\(?default:? (?P<value>`[^`]+`|[0-9][0-9.]*(?: ?[a-z]+)?)"),
    re.compile(r"`(?P<key>[A-Za-z][\w.]*)`(?: seconds| bytes)? \((?P<value>[0-9][0-9.]*(?: ?[a-z]+)?)\)"),
)


def declared_defaults() -> dict[str, str]:
    """Each setting's default as docs/configuration.md shows it, written from its declaration."""
    return {row.key: row.defaults[0][1] for cls in DOCUMENTED.values() for row in rows(cls) if len(row.defaults) == 1}


def plain(value: str) -> str:
    """A default as text to compare: code without its backticks and a trailing `/`, a number with
    its unit in seconds (`24 h` is `86400`)."""
    value = value.strip("`").rstrip("/")
    number, _, unit = value.partition(" ")
    if re.fullmatch(r"[0-9]+(?:\.[0-9]+)?", number.replace(" ", "")) and unit in UNITS:
        return f"{float(number) * UNITS[unit]:g}"
    if re.fullmatch(r"[0-9]+(?:\.[0-9]+)?", value.split(" ")[0]):
        return f"{float(value.split(' ')[0]):g}"
    return value


def test_a_default_quoted_in_prose_is_the_declared_one():
    defaults = declared_defaults()
    quoted = [
        (name(page), claim["key"], claim["value"])
        for page in PAGES
        if page.name != "configuration.md"  # its tables are the declarations (scripts/sync-settings)
        for pattern in DEFAULT_CLAIMS
        for claim in pattern.finditer(" ".join(prose(page).split()))
        if claim["key"] in defaults
    ]
    assert len(quoted) >= 15, "fewer defaults quoted than the docs hold: fix the patterns"
    wrong = [
        f"{page}: `{key}` default {value}, declared {defaults[key]}"
        for page, key, value in quoted
        if plain(value) != plain(defaults[key])
    ]
    assert wrong == []


@pytest.mark.parametrize(
    "quoted, declared", [("24 h", "`86400`"), ("`iostate/`", "`iostate`"), ("10", "`10`"), ("14 days", "`1209600`")]
)
def test_a_default_is_compared_in_its_units(quoted, declared):
    assert plain(quoted) == plain(declared)


# --- one call, one answer ----------------------------------------------------------------------------

URL = re.compile(r"^(?:\$\{?B\}?|https?://[^/\s]+)(?=/)")


def call_of(command: str) -> tuple[str, str, str, str] | None:
    """(method, path, token variable, body) of a curl command, whatever its other options."""
    try:
        words = shlex.split(command.replace("\\\n", " "))
    except ValueError:
        return None
    method, path, token, body = "GET", "", "", ""
    options = iter(words[1:])
    for word in options:
        if word == "|":
            break
        if word == "-X":
            method = next(options, "")
        elif word == "-H":
            header = next(options, "")
            token = header.split()[-1] if header.lower().startswith("authorization") else token
        elif word in ("-d", "--data"):
            body = next(options, "")
            method = "POST" if method == "GET" else method
        elif URL.match(word) and not path:
            path = URL.sub("", word)
    return (method, path, token, body) if path.startswith("/") else None


def answers_shown() -> dict[tuple[str, str, str, str], set[tuple[str, str]]]:
    """Each call a page shows with its answer (`$ curl ...` and the line under it, or a
    trailing `# {...}`/`# 403` comment), to the (page, answer) pairs shown for it."""
    shown: dict[tuple[str, str, str, str], set[tuple[str, str]]] = defaultdict(set)
    for page in PAGES:
        for block in FENCED.findall(text(page)):
            lines = block.splitlines()
            for index, line in enumerate(lines):
                if not line.startswith(("$ curl", "curl")):
                    continue
                command, end = line, index
                while command.endswith("\\") and end + 1 < len(lines):
                    end += 1
                    command += "\n" + lines[end]
                command, _, comment = command.partition(" # ")
                answer = comment.strip() if re.match(r"[{\[]|[1-5][0-9]{2}\b", comment.strip()) else ""
                after = lines[end + 1] if end + 1 < len(lines) else ""
                if not answer and line.startswith("$ ") and after.startswith(("{", "[")):
                    answer = after
                call = call_of(command.removeprefix("$ "))
                if call is not None and answer:
                    shown[call].add((name(page), answer))
    return shown


def test_a_call_shown_on_several_pages_answers_the_same_on_each():
    differing = {
        call: sorted(places)
        for call, places in answers_shown().items()
        if len({answer for _, answer in places}) > 1 and len({page for page, _ in places}) > 1
    }
    assert differing == {}
