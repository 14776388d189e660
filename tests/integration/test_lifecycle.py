"""The daemon's life and its command line: ready line, refusing to start on bad rules or
configuration, `apid iostate check`, `apid user add`, `apid routes`, the JWT secret across a
restart, and SIGTERM letting a request in flight finish.
"""

from __future__ import annotations

import http.client
import json
import re
import signal
import socket
import stat
import subprocess
import sys
import time

import pytest
from sqlalchemy import text

from apid.store.database import make_engine
from apid.store.migrate import upgrade
from harness import (
    ADMIN,
    ADMIN_ACCOUNT,
    READY,
    REPO,
    USER,
    USER_ACCOUNT,
    Daemon,
    Deployment,
    V,
    deployment_with_accounts,
    running_daemon,
)


class RecordingDaemon(Daemon):
    """A Daemon that keeps the line it printed when it became ready."""

    ready_line: str | None = None

    def _read_line(self, timeout: float) -> str | None:
        self.ready_line = super()._read_line(timeout)
        return self.ready_line


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> Deployment:
    """A deployment for command-line checks, migrated; no daemon runs on it."""
    deployment = Deployment(tmp_path_factory.mktemp("apid-cli"))
    deployment.write()
    deployment.migrate()
    return deployment


def person_state() -> dict:
    return json.loads((REPO / "iostate" / "person.json").read_text())


def write_state(folder, document: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "person.json").write_text(json.dumps(document))


def with_unknown_role(document: dict) -> dict:
    document["IOSTATE"]["VERSION"]["1"]["URI"]["show"]["ROLES"]["DEFAULT"].append("ROLE_GHOST")
    return document


def with_unknown_field(document: dict) -> dict:
    document["IOSTATE"]["VERSION"]["1"]["URI"]["show"]["RESPONSE"]["permitAll"].append("nickname")
    return document


def one_line_error(stderr: str) -> None:
    assert stderr.strip(), "nothing on stderr"
    assert "Traceback" not in stderr, stderr


# --- ready line --------------------------------------------------------------------------------


def test_serve_prints_one_ready_line_with_the_address_it_listens_on(tmp_path):
    deployment = Deployment(tmp_path)
    deployment.write()
    daemon = RecordingDaemon(deployment).start()
    try:
        line = daemon.ready_line
        assert line is not None and line.endswith("\n")
        match = READY.search(line)
        assert match, line
        assert "0.1" in line
        # The address printed is the one that answers.
        assert daemon.request("GET", "/health").json == {"status": "pass", "version": "0.1"}
    finally:
        assert daemon.stop() == 0


# --- apid iostate check --------------------------------------------------------------------------


def test_iostate_check_passes_on_the_repository_iostate(plain):
    done = plain.cli("iostate", "check", str(REPO / "iostate"))
    assert done.returncode == 0, done.stderr
    assert re.search(r"\bperson\b", done.stdout)
    assert re.search(r"\bteam\b", done.stdout)


def test_iostate_check_passes_on_the_configured_iostate_dir(plain):
    done = plain.cli("iostate", "check")
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("breakage, named", [(with_unknown_role, "ROLE_GHOST"), (with_unknown_field, "nickname")])
def test_iostate_check_fails_naming_the_role_or_field(plain, tmp_path, breakage, named):
    folder = tmp_path / "iostate"
    write_state(folder, breakage(person_state()))
    done = plain.cli("iostate", "check", str(folder))
    assert done.returncode != 0
    one_line_error(done.stderr)
    assert named in done.stderr
    assert "person.json" in done.stderr


def test_iostate_check_fails_on_a_file_that_is_not_json(plain, tmp_path):
    folder = tmp_path / "iostate"
    folder.mkdir()
    (folder / "person.json").write_text('{"IOSTATE": {"NAME": "person",')
    done = plain.cli("iostate", "check", str(folder))
    assert done.returncode != 0
    one_line_error(done.stderr)
    assert "person.json" in done.stderr


# --- refusing to start ---------------------------------------------------------------------------


def refuses_to_serve(deployment: Deployment) -> subprocess.CompletedProcess:
    """`apid serve` on the deployment; it must exit by itself (a daemon that starts times out)."""
    try:
        return deployment.cli("serve")
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"apid served although it should have refused: {exc.stdout!r}")


def test_the_daemon_refuses_to_start_when_iostate_names_an_unknown_role(tmp_path):
    deployment = Deployment(tmp_path)
    write_state(tmp_path / "iostate", with_unknown_role(person_state()))
    deployment.write()
    done = refuses_to_serve(deployment)
    assert done.returncode != 0
    assert "apid ready" not in done.stdout
    assert "ROLE_GHOST" in done.stderr
    assert "person.json" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_daemon_refuses_to_start_when_iostate_names_an_unknown_field(tmp_path):
    deployment = Deployment(tmp_path)
    write_state(tmp_path / "iostate", with_unknown_field(person_state()))
    deployment.write()
    done = refuses_to_serve(deployment)
    assert done.returncode != 0
    assert "apid ready" not in done.stdout
    assert "nickname" in done.stderr


@pytest.mark.parametrize(
    "server, api, file, key",
    [
        ({"bogusKey": 1}, {}, "service_server.yml", "bogusKey"),
        ({"jwt": {"secretFiel": "var/x"}}, {}, "service_server.yml", "secretFiel"),
        ({"webhookActive": "yes"}, {}, "service_server.yml", "webhookActive"),
        ({}, {"maxBodyByte": 4096}, "service_api.yml", "maxBodyByte"),
        ({}, {"maxBodyBytes": "big"}, "service_api.yml", "maxBodyBytes"),
        ({}, {"security": {"superuserRole": "ROLE_GHOST"}}, "service_api.yml", "superuserRole"),
        ({"shutdown": {"drain": float("nan")}}, {}, "service_server.yml", "shutdown.drain: must be a finite number"),
        (
            {"shutdown": {"healthDrain": float("inf")}},
            {},
            "service_server.yml",
            "shutdown.healthDrain: must be a finite",
        ),
        ({"webhooks": {"timeout": 10**400}}, {}, "service_server.yml", "webhooks.timeout: must be a finite number"),
        ({"plugins": {"team": {"defaultBudget": 10**400}}}, {}, "service_server.yml", "team.defaultBudget: must be at"),
    ],
)
def test_a_bad_configuration_key_stops_the_daemon_naming_file_and_key(tmp_path, server, api, file, key):
    deployment = Deployment(tmp_path, server=server, api=api)
    deployment.write()
    done = refuses_to_serve(deployment)
    assert done.returncode != 0
    assert "apid ready" not in done.stdout
    one_line_error(done.stderr)
    assert file in done.stderr
    assert key in done.stderr


# --- apid user add --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, email, role, password, named",
    [
        ("bob1", "bob1@example.com", "ROLE_GHOST", "bob-password-1", "ROLE_GHOST"),
        ("bob2", "bob2-at-example.com", "ROLE_USER", "bob-password-2", "bob2-at-example.com"),
        ("bob3", "bob3@example.com", "ROLE_USER", "short", "password"),
    ],
)
def test_user_add_refuses_bad_input_and_creates_nothing(plain, name, email, role, password, named):
    refused = plain.cli(
        "user", "add", name, "--email", email, "--role", role, "--password-stdin", input=password + "\n"
    )
    assert refused.returncode != 0
    one_line_error(refused.stderr)
    assert named in refused.stderr
    # Nothing was stored: the same name and address are still free.
    fixed = plain.cli(
        "user",
        "add",
        name,
        "--email",
        f"{name}@example.com",
        "--role",
        "ROLE_USER",
        "--password-stdin",
        input=f"{name}-good-password\n",
    )
    assert fixed.returncode == 0, fixed.stderr


def test_user_add_refuses_a_taken_name(plain):
    first = plain.cli(
        "user",
        "add",
        "carl",
        "--email",
        "carl@example.com",
        "--role",
        "ROLE_USER",
        "--password-stdin",
        input="carl-password-1\n",
    )
    assert first.returncode == 0, first.stderr
    again = plain.cli(
        "user",
        "add",
        "carl",
        "--email",
        "carl2@example.com",
        "--role",
        "ROLE_USER",
        "--password-stdin",
        input="carl-password-2\n",
    )
    assert again.returncode != 0
    one_line_error(again.stderr)
    assert "username" in again.stderr


# --- apid migrate --------------------------------------------------------------------------------


def test_migrate_names_addresses_that_became_one_and_changes_nothing(tmp_path):
    """Migration 0004 (person.email_key) on a database where the ASCII-only check let two
    spellings of one address in: a message naming both, no traceback, then a clean retry."""
    deployment = Deployment(tmp_path)
    deployment.write()
    (tmp_path / "var").mkdir(exist_ok=True)
    engine = make_engine(f"sqlite:///{tmp_path / 'var' / 'test.db'}")
    upgrade(engine, "0003")
    with engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO person (username, password, email) VALUES "
                "('upper', 'x', 'ÄRGER@example.com'), ('lower', 'x', 'ärger@example.com')"
            )
        )
    refused = deployment.cli("migrate")
    assert refused.returncode == 1
    one_line_error(refused.stderr)
    assert "person 1 'ÄRGER@example.com', person 2 'ärger@example.com'" in refused.stderr
    with engine.begin() as connection:
        assert connection.execute(text("SELECT version_num FROM alembic_version")).scalar() == "0003"
        connection.execute(text("UPDATE person SET email = 'old-ärger@example.com' WHERE id = 2"))
    engine.dispose()
    done = deployment.cli("migrate")
    assert done.returncode == 0, done.stderr


# --- apid routes ----------------------------------------------------------------------------------


def test_routes_lists_person_and_team_endpoints(plain):
    done = plain.cli("routes")
    assert done.returncode == 0, done.stderr
    routes = {tuple(line.split()[:2]) for line in done.stdout.splitlines() if line.strip()}
    expected = {
        ("POST", f"{V}/person/create"),
        ("GET", f"{V}/person/show"),
        ("GET", f"{V}/person/list"),
        ("PUT", f"{V}/person/update"),
        ("DELETE", f"{V}/person/delete"),
        ("POST", f"{V}/team/create"),
        ("GET", f"{V}/team/show"),
        ("GET", f"{V}/team/list"),
        ("GET", "/v0.1-2/team/show"),
        ("GET", "/teamCount"),
    }
    assert expected <= routes, done.stdout
    # a plugin's own path says whose it is and that it is governed like an API call
    (team_count,) = [line for line in done.stdout.splitlines() if line.split()[:2] == ["GET", "/teamCount"]]
    assert "apid-sample-plugin" in team_count and "needs a token, rate limited" in team_count, team_count


def test_routes_on_broken_iostate_fails_with_one_line_naming_the_role(tmp_path):
    deployment = Deployment(tmp_path)
    write_state(tmp_path / "iostate", with_unknown_role(person_state()))
    deployment.write()
    done = deployment.cli("routes")
    assert done.returncode != 0
    one_line_error(done.stderr)
    assert "ROLE_GHOST" in done.stderr


# --- the JWT secret ----------------------------------------------------------------------------------


def test_the_jwt_secret_is_created_0600_and_survives_a_restart(tmp_path):
    deployment = deployment_with_accounts(tmp_path, accounts=(USER_ACCOUNT,))
    secret_file = tmp_path / "var" / "jwt.secret"
    assert not secret_file.exists()

    daemon = Daemon(deployment).start()
    try:
        assert secret_file.exists()
        assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
        secret = secret_file.read_bytes()
        assert len(secret.strip()) >= 32
        token = daemon.login(USER[0], USER[1])
        assert daemon.request("GET", f"{V}/person/show/1", token=token).status == 200
    finally:
        assert daemon.stop() == 0

    again = Daemon(deployment).start()
    try:
        assert secret_file.read_bytes() == secret
        assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
        mine = again.request("GET", f"{V}/person/show/1", token=token)
        assert mine.status == 200, mine.body
        assert mine.json["username"] == USER[0]
    finally:
        assert again.stop() == 0


# --- SIGTERM ----------------------------------------------------------------------------------------

# A SIGTERM that arrives while start-up runs, once the thread pools have started and before the
# daemon registered its shutdown: sent by the process to itself at that moment, through the
# real signal handler, as `make run` stopped early sends it.
SIGTERM_DURING_START_UP = """
import os, signal, sys
from apid.runtime import reactors
from apid.cli.main import main

install = reactors.install

def install_then_arm(name):
    installed = install(name)
    from apid.server import reloading  # imports the reactor: only once apid installed it

    started = reloading.RulesWatcher.start

    async def start_then_sigterm(self, generation):
        os.kill(os.getpid(), signal.SIGTERM)
        return await started(self, generation)

    reloading.RulesWatcher.start = start_then_sigterm
    return installed

reactors.install = install_then_arm
sys.exit(main(sys.argv[1:]))
"""


def test_a_sigterm_during_start_up_ends_the_process(tmp_path):
    """The database's and the passwords' thread pools are not daemon threads: a SIGTERM after
    they started and before the daemon registered its shutdown left a process waiting for
    them forever ("Main loop terminated", then nothing). Now it ends by itself."""
    deployment = deployment_with_accounts(tmp_path, accounts=(ADMIN_ACCOUNT,))
    command = ["serve", "--config-dir", str(deployment.config_dir), "--env", deployment.environment]
    process = subprocess.Popen(
        [sys.executable, "-c", SIGTERM_DURING_START_UP, *command, "--listen", "tcp:0:interface=127.0.0.1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        pytest.fail("a SIGTERM during start-up left the process running")
    # The default reactor handles the signal at once, inside the start-up; the asyncio reactor
    # at its loop's next turn, which may come once start-up has ended: either way it ends.
    assert "Received SIGTERM" in err, err
    assert process.returncode == 0 or "apid ready" not in out, (process.returncode, out, err)


@pytest.fixture
def draining(tmp_path):
    with running_daemon(deployment_with_accounts(tmp_path, accounts=(ADMIN_ACCOUNT,))) as daemon:
        daemon.token = daemon.login(ADMIN[0], ADMIN[1])
        yield daemon


def test_sigterm_lets_a_request_in_flight_finish_and_exits_zero(draining):
    body = json.dumps({"id": 1}).encode()
    head = (
        f"GET {V}/person/show HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {draining.token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", draining.port), timeout=30) as sock:
        sock.sendall(head + body[:3])
        time.sleep(1.5)  # let the daemon read the headers, even on a loaded machine: the request is now in flight
        draining.process.send_signal(signal.SIGTERM)
        time.sleep(0.5)  # let the daemon begin shutting down while the body is still arriving
        sock.sendall(body[3:])
        reply = http.client.HTTPResponse(sock)
        reply.begin()
        status, answer = reply.status, reply.read()
    assert status == 200, answer
    assert json.loads(answer)["username"] == ADMIN[0]
    assert draining.process.wait(30) == 0


def test_serve_says_what_it_migrated_and_nothing_when_nothing_was(tmp_path):
    """`database.migrate: true` (the default): the daemon's log names each schema it changed,
    as `apid migrate` prints them; a start on a database up to date names none."""
    deployment = Deployment(tmp_path)
    deployment.write()
    for start in ("first", "second"):
        daemon = Daemon(deployment)
        daemon.stderr_path = tmp_path / f"{start}.stderr"
        daemon.start()
        assert daemon.stop() == 0
    assert re.search(r"apid: created the database schema \(revision \d+\)", (tmp_path / "first.stderr").read_text())
    assert "schema" not in (tmp_path / "second.stderr").read_text()
