"""What a newcomer meets first, through the real command: `apid serve --listen PORT`, a `listen`
apid cannot use, running outside the deployment, a base URL without a scheme, what `apid migrate`
says, and socket activation exactly as docs/operations.md documents it.
"""

from __future__ import annotations

import configparser
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading

import pytest

from harness import REPO, Deployment, deployment_with_accounts, free_port, running_daemon, wait_for
from shell_docs import checkout_like, fenced_blocks, section


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> Deployment:
    deployment = Deployment(tmp_path_factory.mktemp("apid-first"))
    deployment.write()
    return deployment


def ready_line(process: subprocess.Popen, timeout: float = 30) -> str | None:
    line: list[str] = []
    reader = threading.Thread(target=lambda: line.append(process.stdout.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    return line[0] if line else None


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    return lines[0]


# --- listen -------------------------------------------------------------------------------------


def test_serve_on_a_bare_port_listens_on_that_port_on_loopback(plain):
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "apid",
            "serve",
            "--listen",
            str(port),
            "--config-dir",
            str(plain.config_dir),
            "--env",
            "test",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert f"apid ready on http://127.0.0.1:{port} " in (ready_line(process) or "")
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(30) == 0


@pytest.mark.parametrize("how", ["--listen", "APID_LISTEN"])
def test_a_listen_apid_cannot_use_is_a_usage_error_naming_the_form_to_use(plain, how):
    args, env = (
        (("serve", "--listen", "localhost:8080"), None)
        if how == "--listen"
        else (("serve",), {"APID_LISTEN": "localhost:8080"})
    )
    done = plain.cli(*args, env=env)
    assert done.returncode == 2
    line = one_line(done.stderr)
    # a log line as `logFormat` writes it (text: time and namespace first), with the message
    assert "apid: configuration error: listen 'localhost:8080': " in line
    assert "tcp:PORT:interface=ADDR" in line


# --- where the configuration is -------------------------------------------------------------------


def test_outside_the_deployment_the_error_names_the_option_and_the_variable(tmp_path):
    env = {key: value for key, value in os.environ.items() if key != "APID_CONFIG_DIR"}
    done = subprocess.run(
        [sys.executable, "-m", "apid", "migrate"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    line = one_line(done.stderr)
    assert f"{tmp_path / 'etc' / 'service_server.yml'}: cannot read" in line
    assert "--config-dir" in line and "APID_CONFIG_DIR" in line


def test_a_base_url_without_a_scheme_stops_every_command_naming_the_key(tmp_path):
    deployment = Deployment(tmp_path, server={"baseUrl": "api.example.com"})
    deployment.write()
    done = deployment.cli("migrate")
    assert done.returncode == 2
    assert "test.baseUrl: must be an absolute http:// or https:// URL" in one_line(done.stderr)


# --- apid migrate ---------------------------------------------------------------------------------


def test_migrate_says_it_created_the_schema_then_that_it_is_up_to_date(tmp_path):
    deployment = Deployment(tmp_path)
    deployment.write()
    first, again = deployment.cli("migrate"), deployment.cli("migrate")
    assert first.returncode == 0 and again.returncode == 0, first.stderr + again.stderr
    assert re.fullmatch(r"apid: created the database schema \(revision \w+\)\n", first.stdout)
    assert re.fullmatch(r"apid: the database schema is up to date \(revision \w+\)\n", again.stdout)


# --- socket activation as docs/operations.md says ----------------------------------------------------


def documented_socket_activation() -> str:
    operations = (REPO / "docs" / "operations.md").read_text(encoding="utf-8")
    blocks = [block for _, block in fenced_blocks(section(operations, "### Socket activation"))]
    [command] = [line for block in blocks for line in block.splitlines() if line.startswith("systemd-socket-activate ")]
    return command


def test_the_units_and_the_docs_name_the_same_socket():
    units = configparser.ConfigParser(strict=False, interpolation=None)
    units.optionxform = str
    units.read([REPO / "etc" / "apid.socket", REPO / "etc" / "apid.service.d" / "socket.conf"])
    listen = units["Service"]["Environment"].removeprefix("APID_LISTEN=")
    assert listen == f"systemd:domain=INET:name={units['Socket']['FileDescriptorName']}"
    assert units["Socket"]["ListenStream"] == "127.0.0.1:8080"
    command = documented_socket_activation()
    assert f"-E APID_LISTEN={listen} " in command
    assert f"--fdname={units['Socket']['FileDescriptorName']} " in command


@pytest.mark.skipif(shutil.which("systemd-socket-activate") is None, reason="systemd-socket-activate is not installed")
@pytest.mark.parametrize("workers", [1, 2])
def test_socket_activation_without_systemd_works_as_documented(tmp_path, workers):
    """The documented command, in a deployment laid out like the checkout, on a free port; with
    worker processes, the parent takes the socket and every worker serves it."""
    deployment = checkout_like(tmp_path, api={"procCores": workers})
    command = documented_socket_activation()
    assert "127.0.0.1:8080" in command
    port = free_port()
    process = subprocess.Popen(
        command.replace("127.0.0.1:8080", f"127.0.0.1:{port}"),
        shell=True,
        cwd=deployment.root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert wait_for(lambda: _listening(port), timeout=10), "systemd-socket-activate holds no port"
        reply = subprocess.run(
            ["curl", "-s", "-m", "30", f"http://127.0.0.1:{port}/health"], capture_output=True, text=True, timeout=60
        )
        assert reply.stdout == '{"status":"pass","version":"0.1"}'
        # the first worker may serve before the other does: the ready line comes once both do
        assert select.select([process.stdout], [], [], 30)[0], "no ready line"
        ready = process.stdout.readline()
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    assert ready.startswith(f"apid ready on http://127.0.0.1:{port} "), (ready, err)
    assert ready.rstrip().endswith("2 workers)") == (workers == 2), ready


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_what_apid_writes_under_var_is_private_to_its_user(tmp_path):
    """The database and its WAL files, the JWT secret and mail: 0600 files in 0700 folders,
    whoever else has an account on the machine."""
    deployment = deployment_with_accounts(tmp_path, server={"database": {"url": "sqlite:///var/private.db"}})
    with running_daemon(deployment) as daemon:
        answer = daemon.request(
            "POST", "/register", {"username": "newcomer", "password": "a long passphrase 1", "email": "n@example.com"}
        )
        assert answer.status == 200, answer.body
        assert wait_for(lambda: any((tmp_path / "var").rglob("*.eml")))
        created = sorted((tmp_path / "var").rglob("*"))
        names = {path.name for path in created}
        assert {"private.db", "private.db-wal", "private.db-shm", "jwt.secret"} <= names, names
        assert {path.relative_to(tmp_path): oct(path.stat().st_mode & 0o777) for path in created} == {
            path.relative_to(tmp_path): "0o700" if path.is_dir() else "0o600" for path in created
        }
    assert oct((tmp_path / "var").stat().st_mode & 0o777) == "0o700"
