"""Running the shell examples of the docs against a real daemon, and checking what they say.

A ```sh block (or a docs/examples/*.sh file) is cut into steps: a command, with its `\\`
continuation lines, and what the docs say of it:

- a trailing comment that starts with an HTTP status, `curl ... # 403 problem`: the answer's
  status (the status line of `curl -i`, else the problem body's `status`);
- a trailing comment that starts with `{`, or comment lines right under the command (no blank
  line between): what the command prints. Where they start with `{`, the expectation is that
  JSON up to its closing brace (text after it is commentary) and the output must be it whole;
  otherwise each line must appear in the output, in order. `...` stands for any text, and
  white space is ignored.

Comments above a command, or after a blank line, describe and are not checked. Every step
must exit 0. The steps of one call run in one bash process, in order, so variables carry from
one block to the next as they do in a reader's terminal.

The scripts run in a deployment laid out like a checkout after `make run` (`etc/`,
`iostate/`, `var/`, `.venv`), so `.venv/bin/apid` and `var/outbox/` mean what the docs say;
only the daemon's address differs, and the docs take it from `B` when it is set
(`B=${B:-http://127.0.0.1:8080}`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness import REPO, Deployment

FENCE = re.compile(r"^```(\w*)\s*$")
# pip installing a plugin in a test, offline. PIP_NO_BUILD_ISOLATION=0 is pip's spelling of
# --no-build-isolation: the test extra's hatchling builds.
OFFLINE_PIP = {"PIP_NO_INDEX": "1", "PIP_NO_BUILD_ISOLATION": "0", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


@dataclass(frozen=True)
class Step:
    command: str
    line: int
    status: int | None = None
    output: tuple[str, ...] = ()
    whole: bool = False  # the output is one JSON text that must match the whole output


@dataclass(frozen=True)
class Ran:
    step: Step
    returncode: int
    stdout: str
    stderr: str


def fenced_blocks(markdown: str, language: str = "sh") -> list[tuple[int, str]]:
    """Every fenced block of `language`: (line number of its first line, its text)."""
    blocks, current, start, lang = [], None, 0, None
    for number, line in enumerate(markdown.splitlines(keepends=True), 1):
        fence = FENCE.match(line.rstrip("\n"))
        if current is None and fence:
            current, start, lang = [], number + 1, fence.group(1)
        elif current is not None and line.rstrip("\n") == "```":
            if lang == language:
                blocks.append((start, "".join(current)))
            current = None
        elif current is not None:
            current.append(line)
    return blocks


def section(markdown: str, heading: str) -> str:
    """The text under a `## heading`, up to the next heading of the same or a higher level."""
    lines = markdown.splitlines(keepends=True)
    level = heading.split(" ", 1)[0]
    start = next(i for i, line in enumerate(lines) if line.rstrip("\n") == heading)
    end = next(
        (
            i
            for i in range(start + 1, len(lines))
            if re.match(rf"#{{1,{len(level)}}} ", lines[i]) and not _in_fence(lines, i)
        ),
        len(lines),
    )
    return "".join(lines[start:end])


def _in_fence(lines: list[str], index: int) -> bool:
    return sum(1 for line in lines[:index] if line.startswith("```")) % 2 == 1


def _comment_start(line: str) -> int | None:
    """Where a trailing `# comment` starts, outside quotes and after white space."""
    quote, escaped = None, False
    for i, char in enumerate(line):
        if escaped:
            escaped = False
        elif char == "\\" and quote != "'":
            escaped = True
        elif quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1] in " \t"):
            return i
    return None


def _json_end(text: str) -> int | None:
    """The index just past the JSON value `text` starts with, once its brackets balance."""
    depth, in_string, escaped = 0, False, False
    for i, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
            continue
        if char == '"':
            in_string = True
        elif char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
            if depth == 0:
                return i + 1
    return None


def steps(script: str, first_line: int = 1) -> list[Step]:
    """The steps of a script, with what its comments say of each."""
    lines = script.splitlines()
    out: list[Step] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip() or line.lstrip().startswith("#"):
            i += 1
            continue
        start = i
        while lines[i].rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
        command = "\n".join(lines[start : i + 1])
        cut = _comment_start(lines[i])
        trailing = lines[i][cut + 1 :].strip() if cut is not None else ""
        i += 1
        under = []
        while i < len(lines) and lines[i].lstrip().startswith("#"):
            under.append(lines[i].lstrip()[1:].strip())
            i += 1
        status = int(trailing[:3]) if re.match(r"\d{3}\b", trailing) else None
        said = [trailing] if trailing.startswith(("{", "[")) else under
        output: tuple[str, ...] = ()
        whole = False
        if said and said[0].startswith(("{", "[")):
            text = ""
            for piece in said:
                text += piece
                end = _json_end(text)
                if end is not None:
                    output, whole = (text[:end],), True
                    break
            else:
                raise ValueError(f"line {first_line + start}: the JSON under the command never closes: {text!r}")
        elif said:
            output = tuple(said)
        out.append(Step(command, first_line + start, status, output, whole))
    return out


def _pattern(expected: str) -> str:
    """A regular expression for an expectation: white space removed, `...` any text."""
    flat = re.sub(r"\s+", "", expected)
    return ".*?".join(re.escape(part) for part in flat.split("..."))


def status_of(output: str) -> int | None:
    """The status an output shows: the last status line of `curl -i`, else a problem's `status`."""
    lines = re.findall(r"^HTTP/[\d.]+ (\d{3})", output, re.MULTILINE)
    if lines:
        return int(lines[-1])
    try:
        body = json.loads(output)
    except ValueError:
        return None
    return body.get("status") if isinstance(body, dict) else None


def mismatch(ran: Ran) -> str | None:
    """What is wrong with a step that ran, or None."""
    step = ran.step
    if ran.returncode != 0:
        return f"exit status {ran.returncode}"
    if step.status is not None and status_of(ran.stdout) != step.status:
        return f"the docs say status {step.status}, the answer shows {status_of(ran.stdout)}"
    flat = re.sub(r"\s+", "", ran.stdout)
    if step.whole:
        if not re.fullmatch(_pattern(step.output[0]), flat, re.DOTALL):
            return f"the docs say it prints {step.output[0]}"
    else:
        position = 0
        for line in step.output:
            found = re.compile(_pattern(line), re.DOTALL).search(flat, position)
            if found is None:
                return f"the docs say it prints {line!r}"
            position = found.end()
    return None


def run_steps(all_steps: list[Step], cwd: Path, env: dict[str, str], timeout: float = 180) -> list[Ran]:
    """Run the steps in order in one bash process; it stops after the first that exits non-zero."""
    folder = Path(tempfile.mkdtemp(prefix=".steps-", dir=cwd))  # one per run: no step reads another's
    script = []
    for n, step in enumerate(all_steps):
        script.append(
            f"{{\n{step.command}\n}} >{folder}/{n}.out 2>{folder}/{n}.err </dev/null\n"
            f"rc=$?; echo $rc >{folder}/{n}.rc; [ $rc = 0 ] || exit 0\n"
        )
    # The reader's terminal has no APID_* settings of the test run's: etc/ of `cwd` decides.
    clean = {name: value for name, value in os.environ.items() if not name.startswith("APID_")}
    done = subprocess.run(
        ["bash", "-c", "".join(script)], cwd=cwd, env={**clean, **env}, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, done.stderr
    ran = []
    for n, step in enumerate(all_steps):
        rc_file = folder / f"{n}.rc"
        if not rc_file.exists():
            break
        ran.append(
            Ran(step, int(rc_file.read_text()), (folder / f"{n}.out").read_text(), (folder / f"{n}.err").read_text())
        )
    return ran


def check(ran: list[Ran], expected_count: int, source: str) -> None:
    """Fail on the first step that went wrong, quoting it, what it printed and what the docs say."""
    for result in ran:
        wrong = mismatch(result)
        if wrong:
            raise AssertionError(
                f"{source}:{result.step.line}: {wrong}\n$ {result.step.command}\n"
                f"--- stdout\n{result.stdout}--- stderr\n{result.stderr}"
            )
    assert len(ran) == expected_count, f"{source}: only {len(ran)} of {expected_count} steps ran"


def checkout_like(
    root: Path, *, server: dict | None = None, api: dict | None = None, venv: Path | None = REPO / ".venv"
) -> Deployment:
    """A deployment laid out like a checkout after `make run`: the development section of the
    repository's etc/ (with `server` overrides), iostate/, var/ and `.venv`, a link to `venv`
    (None: the caller makes its own, see `layered_venv`)."""
    deployment = Deployment(root, server=server or {}, api=api or {}, environment="development")
    deployment.write()
    if venv is not None:
        (root / ".venv").symlink_to(venv)
    return deployment


def layered_venv(path: Path) -> Path:
    """A virtualenv at `path` that sees every package of the checkout's .venv and installs into
    itself, so that a test installs a plugin (`.venv/bin/pip install -e ...`) without changing
    what the rest of the suite runs. Its `bin/pip`, `bin/apid` and `bin/pytest` run those of it."""
    base = REPO / ".venv"
    subprocess.run([base / "bin" / "python", "-m", "venv", "--without-pip", path], check=True)
    python = path / "bin" / "python"
    found = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    )
    inherited = subprocess.run(
        [base / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    )
    # A .pth line that starts with `import` runs: the checkout's packages (and their own .pth
    # files, the editable installs) come after this venv's own.
    Path(found.stdout.strip(), "_checkout_venv.pth").write_text(
        f"import site; site.addsitedir({inherited.stdout.strip()!r})\n"
    )
    for command, module in (("pip", "pip"), ("apid", "apid"), ("pytest", "pytest")):
        script = path / "bin" / command
        script.write_text(f'#!/bin/sh\nexec "{python}" -m {module} "$@"\n')
        script.chmod(0o755)
    return python
