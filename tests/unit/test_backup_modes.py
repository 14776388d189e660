"""The backups docs/operations.md shows are private to their owner (issue 39: made as written
they were 0644 and held password hashes): its SQLite and secret lines, run as written (but for
the paths and the user switch) from a shell whose umask is 022, write files 0600."""

from __future__ import annotations

import re
import shutil
import sqlite3
import stat
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUN_AS_APID = "runuser -u apid -- "


def documented_lines() -> list[str]:
    """The backup block's lines run as apid (the SQLite copy and the secret)."""
    text = (REPO / "docs/operations.md").read_text()
    block = text[text.index("**Backups.**") :]
    commands = re.search(r"```sh\n(.*?)```", block, re.S)
    assert commands is not None
    return [line.removeprefix(RUN_AS_APID) for line in commands[1].splitlines() if line.startswith(RUN_AS_APID)]


@pytest.mark.skipif(shutil.which("sqlite3") is None, reason="the sqlite3 shell (Debian package sqlite3) is missing")
def test_the_documented_backups_are_0600_whatever_the_callers_umask(tmp_path):
    state, backups = tmp_path / "lib", tmp_path / "backups"
    state.mkdir()
    backups.mkdir(mode=0o700)
    with sqlite3.connect(state / "apid.db") as database:
        database.execute("CREATE TABLE account (password_hash TEXT)")
    (state / "jwt.secret").write_text("s" * 64)
    (state / "jwt.secret").chmod(0o600)
    lines = documented_lines()
    assert len(lines) == 2 and all("umask 077 && " in line for line in lines)
    for line in lines:
        command = line.replace("/var/lib/apid", str(state)).replace("/var/backups/apid", str(backups))
        done = subprocess.run(["sh", "-c", f"umask 022 && {command}"], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
    written = {path.name: stat.S_IMODE(path.stat().st_mode) for path in backups.iterdir()}
    assert written == {"apid.db": 0o600, "jwt.secret": 0o600}
