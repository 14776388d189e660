"""Every command that needs the database, run while it cannot be reached, says so in one line
on standard error and exits 1 (issue 39: `apid migrate --status` and others printed 117-122
lines with two raw tracebacks)."""

from __future__ import annotations

import pytest

from harness import Deployment

UNREACHABLE = "postgresql://apid@127.0.0.1:1/apid"  # nothing listens on port 1
SAID = 'apid: the database cannot be reached: connection failed: connection to server at "127.0.0.1", port 1 failed: '

COMMANDS = [
    ["migrate"],
    ["migrate", "--status"],
    ["migrate", "--plan"],
    ["migrate", "--to", "apid@head"],
    ["migrate", "--down", "apid"],
    ["user", "add", "carol", "--email", "carol@example.com", "--role", "ROLE_USER", "--password-stdin"],
    ["hook", "add", "--user", "carol", "--url", "http://127.0.0.1:9/hook", "--service", "person"],
    ["hook", "list"],
    ["hook", "enable", "1"],
    ["hook", "disable", "1"],
    ["key", "create", "--user", "carol", "--name", "ci", "--role", "ROLE_USER"],
    ["key", "list"],
    ["key", "revoke", "1"],
    ["iostate", "reload"],
]


@pytest.fixture(scope="module")
def deployment(tmp_path_factory) -> Deployment:
    written = Deployment(tmp_path_factory.mktemp("down"))
    written.write()
    return written


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_a_command_without_its_database_says_so_in_one_line(deployment, command):
    done = deployment.cli(*command, input="carol-password-1\n", env={"APID_DATABASE_URL": UNREACHABLE})
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and done.stderr.startswith(SAID), done.stderr
    assert "Connection refused" in done.stderr
