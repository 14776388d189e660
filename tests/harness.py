"""Running the real `apid` for tests: a deployment folder with accounts, the daemon as a
subprocess, HTTP, and the person and team calls many modules make through it.

The daemon runs in its own process (never in the test's reactor), listens on an ephemeral
loopback port and is told apart by the port in its ready line.
"""

from __future__ import annotations

import atexit
import copy
import functools
import hashlib
import http.client
import itertools
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parent.parent
READY = re.compile(r"apid ready on http://127\.0\.0\.1:(\d+)")
ADMIN = ("admin", "admin-password-1", "admin@example.com")
USER = ("alice", "alice-password-1", "alice@example.com")
ADMIN_ACCOUNT = (*ADMIN, "ROLE_ADMIN")
USER_ACCOUNT = (*USER, "ROLE_USER")
V = "/v0.1"
ANCHORS = REPO / "scripts" / "anchors"
# APID_TEST_REACTOR=asyncio (or another) runs every daemon on that reactor, unless its deployment names one
# (`server={"reactor": ...}`); README.md, Tests, says which modules `make test` runs so.
TEST_REACTOR = os.environ.get("APID_TEST_REACTOR") or None
_serial = itertools.count(1)


def deep_merge(base: dict, override: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


@dataclass
class Response:
    status: int
    headers: http.client.HTTPMessage
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def content_type(self) -> str:
        return self.headers.get("Content-Type", "")


@dataclass
class Deployment:
    """A deployment root: etc/ (from the repository's, with overrides), iostate/, var/."""

    root: Path
    server: dict = field(default_factory=dict)
    api: dict = field(default_factory=dict)
    environment: str = "test"
    migrated: bool = field(default=False, init=False, repr=False)  # by `migrate()`

    def write(self) -> None:
        etc = self.root / "etc"
        etc.mkdir(parents=True, exist_ok=True)
        server = yaml.safe_load((REPO / "etc/service_server.yml").read_text())
        server[self.environment] = deep_merge(server.get(self.environment) or {}, self.server)
        if TEST_REACTOR and "reactor" not in self.server:
            server[self.environment]["reactor"] = TEST_REACTOR
        # one process unless a test asks for workers: a test daemon is one of many running at once
        api = deep_merge(yaml.safe_load((REPO / "etc/service_api.yml").read_text()), {"procCores": 1, **self.api})
        (etc / "service_server.yml").write_text(yaml.safe_dump(server))
        (etc / "service_api.yml").write_text(yaml.safe_dump(api))
        if not (self.root / "iostate").exists():
            shutil.copytree(REPO / "iostate", self.root / "iostate")

    @property
    def config_dir(self) -> Path:
        return self.root / "etc"

    def cli(
        self, *args: str, input: str | None = None, env: dict | None = None, python: str = sys.executable
    ) -> subprocess.CompletedProcess:
        """`apid ARGS` on this deployment, run by `python` (another virtualenv's: its plugins)."""
        command = [str(python), "-m", "apid", *args]
        if args and args[0] not in ("--help",):
            command += ["--config-dir", str(self.config_dir), "--env", self.environment]
        return subprocess.run(
            command,
            input=input,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, **(env or {})},
        )

    def migrate(self) -> None:
        """`apid migrate` (the checkout's plugins): what an operator runs before `apid user add`,
        which refuses a database behind the code."""
        done = self.cli("migrate")
        assert done.returncode == 0, done.stderr
        self.migrated = True

    def add_user(self, name: str, password: str, email: str, *roles: str) -> None:
        """`apid user add`, the database migrated first if this deployment has not yet."""
        if not self.migrated:
            self.migrate()
        role_args = [arg for role in roles for arg in ("--role", role)]
        done = self.cli("user", "add", name, "--email", email, *role_args, "--password-stdin", input=password + "\n")
        assert done.returncode == 0, done.stderr

    def add_accounts(self, accounts: tuple[tuple[str, ...], ...]) -> None:
        """`apid user add` for each account, the database migrated first. On SQLite, a copy of
        the database made so for a deployment of the same settings and accounts when there is
        one (`template_folder`): the same rows, the commands run once instead of each time."""
        database = self._sqlite_file()
        template = database and template_folder() / f"{self._template_key(accounts)}.db"
        if template and template.exists():
            database.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(template, database)
            self.migrated = True
            return
        for account in accounts:
            self.add_user(*account)
        if template and database.exists():
            made = template.with_suffix(f".{os.getpid()}.part")
            shutil.copyfile(database, made)
            made.replace(template)  # whole or not at all, for the other processes of the run

    def _sqlite_file(self) -> Path | None:
        """The deployment's SQLite file when its settings name one under its root (no
        environment overriding them): the databases a template may stand for."""
        if "APID_DATABASE_URL" in os.environ:
            return None
        server = yaml.safe_load((self.config_dir / "service_server.yml").read_text())[self.environment]
        url = ((server or {}).get("database") or {}).get("url", "")
        relative = url.removeprefix("sqlite:///")
        if relative == url or relative.startswith("/") or "?" in relative:
            return None
        return self.root / relative

    def _template_key(self, accounts: tuple[tuple[str, ...], ...]) -> str:
        """What the database depends on: the interpreter (its plugins), the settings but those
        `migrate` and `user add` never read, the accounts."""
        settings = [
            yaml.safe_load((self.config_dir / name).read_text()) for name in ("service_server.yml", "service_api.yml")
        ]
        server = {k: v for k, v in (settings[0][self.environment] or {}).items() if k not in _RUNTIME_ONLY}
        api = {k: v for k, v in settings[1].items() if k not in _RUNTIME_ONLY}
        key = json.dumps([sys.executable, self.environment, accounts, server, api], sort_keys=True, default=str)
        return hashlib.sha256(key.encode()).hexdigest()


# Settings of the running daemon alone: deployments differing only in these share a template
_RUNTIME_ONLY = frozenset(
    {"reactor", "listen", "accessLog", "logFormat", "apiThrottle", "shutdown", "pingTimeout", "servers", "connections"}
    | {"trustedProxies", "metrics", "redis", "baseUrl", "homeUrl", "mail", "procCores", "throttle", "cors"}
    | {"batchLimit", "chainLimit", "maxBodyBytes"}
)


@functools.cache
def template_folder() -> Path:
    """Where template databases are kept: `APID_TEST_TEMPLATES` (`make test` names one folder for
    all its processes, new for each run), else a folder of this process's, removed as it exits."""
    if os.environ.get("APID_TEST_TEMPLATES"):
        return Path(os.environ["APID_TEST_TEMPLATES"])
    folder = Path(tempfile.mkdtemp(prefix="apid-test-templates-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


class Daemon:
    """`apid serve` in a subprocess; `stop()` sends SIGTERM and waits. `python` is the
    interpreter it runs under (another virtualenv's, to serve the plugins installed there)."""

    def __init__(
        self,
        deployment: Deployment,
        env: dict | None = None,
        python: str = sys.executable,
        listen: str = "tcp:0:interface=127.0.0.1",
    ) -> None:
        self.deployment = deployment
        self.env = env or {}
        self.python = python
        self.listen = listen  # a fixed port for a test that restarts the daemon where clients look for it
        self.process: subprocess.Popen | None = None
        self.port: int | None = None
        self.stderr_path = deployment.root / "daemon.stderr"

    def start(self, timeout: float = 30) -> Daemon:
        with open(self.stderr_path, "ab") as stderr:  # the daemon holds its own copy
            self.process = subprocess.Popen(
                [
                    self.python,
                    "-m",
                    "apid",
                    "serve",
                    "--config-dir",
                    str(self.deployment.config_dir),
                    "--env",
                    self.deployment.environment,
                    "--listen",
                    self.listen,
                ],
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                env={**os.environ, **self.env},
            )
        line = self._read_line(timeout)
        match = READY.search(line or "")
        if not match:
            self.process.kill()
            self.process.wait()
            raise RuntimeError(f"apid did not become ready: {line!r}\n{self.stderr}")
        self.port = int(match.group(1))
        self.ready = line  # "apid ready on ... (environment ..., API version ..., reactor ...)"
        return self

    def _read_line(self, timeout: float) -> str | None:
        result: list[str] = []
        reader = threading.Thread(target=lambda: result.append(self.process.stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout)
        return result[0] if result else None

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""

    def workers(self) -> list[int]:
        """The pids of the daemon's worker processes (`procCores` above 1): its children."""
        pid = self.process.pid
        return sorted(int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split())

    def stop(self, timeout: float = 30) -> int:
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else 0
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        finally:
            if self.process.poll() is None:
                self.process.kill()

    def request(
        self,
        method: str,
        path: str,
        json_body: Any = None,
        *,
        token: str | None = None,
        headers: dict[str, str] | None = None,
        body: bytes | None = None,
        timeout: float = 30,
        source: str | None = None,
    ) -> Response:
        """One request on a new connection; `source` is the client address to send from
        (another loopback address of 127.0.0.0/8, for per-address limits)."""
        headers = dict(headers or {})
        if json_body is not None:
            body = json.dumps(json_body).encode()
            headers.setdefault("Content-Type", "application/json")
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        connection = http.client.HTTPConnection(
            "127.0.0.1", self.port, timeout=timeout, source_address=(source, 0) if source else None
        )
        try:
            connection.request(method, path, body=body, headers=headers)
            reply = connection.getresponse()
            return Response(reply.status, reply.headers, reply.read())
        finally:
            connection.close()

    def login(self, username: str, password: str) -> str:
        reply = self.request("POST", "/authenticate", {"username": username, "password": password})
        assert reply.status == 200, reply.body
        return reply.json["token"]


def deployment_with_accounts(
    root: Path,
    *,
    server: dict | None = None,
    api: dict | None = None,
    accounts: tuple[tuple[str, ...], ...] = (ADMIN_ACCOUNT, USER_ACCOUNT),
) -> Deployment:
    """A written deployment with accounts added, each (name, password, email, *roles):
    by default the admin (ROLE_ADMIN) and the user (ROLE_USER)."""
    deployment = Deployment(root, server=server or {}, api=api or {})
    deployment.write()
    deployment.add_accounts(accounts)
    return deployment


@contextmanager
def running_daemon(
    deployment: Deployment, *, env: dict | None = None, python: str = sys.executable
) -> Iterator[Daemon]:
    """The daemon started on the deployment, stopped on leaving the block (`env` and `python`
    as for `Daemon`)."""
    daemon = Daemon(deployment, env=env, python=python).start()
    try:
        yield daemon
    finally:
        daemon.stop()


@contextmanager
def running_daemons(deployment: Deployment, names: tuple[str, ...] = ("app1", "app2")) -> Iterator[list[Daemon]]:
    """A daemon per name on one deployment (each its own stderr file, `<name>.stderr`), as a
    balancer's servers; those still running are stopped on leaving the block (a test may kill some)."""
    started: list[Daemon] = []
    try:
        for name in names:
            daemon = Daemon(deployment)
            daemon.stderr_path = deployment.root / f"{name}.stderr"
            started.append(daemon.start())
        yield started
    finally:
        for daemon in started:
            if daemon.process is not None and daemon.process.poll() is None:
                daemon.stop()


def person_fields(prefix: str = "person") -> dict:
    """A username, password and email for a fresh account, numbered to be unique in the run."""
    n = next(_serial)
    return {"username": f"{prefix}{n}", "password": f"{prefix}-password-{n}", "email": f"{prefix}{n}@example.com"}


def new_person(daemon: Daemon, admin_token: str, **extra) -> dict:
    """Create a fresh account through the API; returns what was sent plus the new id."""
    fields = {**person_fields(), **extra}
    reply = daemon.request("POST", f"{V}/person/create", fields, token=admin_token)
    assert reply.status == 200, reply.body
    return {**fields, "id": reply.json["id"]}


def show_person(daemon: Daemon, token: str, person_id: int) -> dict:
    reply = daemon.request("GET", f"{V}/person/show/{person_id}", token=token)
    assert reply.status == 200, reply.body
    return reply.json


def everyone(daemon: Daemon, admin_token: str) -> list[dict]:
    """Every account, a page of 100 at a time."""
    people: list[dict] = []
    while True:
        reply = daemon.request("GET", f"{V}/person/list?offset={len(people)}&max=100", token=admin_token)
        assert reply.status == 200, reply.body
        people += reply.json
        if len(reply.json) < 100:
            return people


def person_named(daemon: Daemon, admin_token: str, name: str) -> dict | None:
    return next((p for p in everyone(daemon, admin_token) if p["username"] == name), None)


def create_team(daemon: Daemon, admin_token: str, name: str, leader_id: int, budget: float) -> dict:
    """Create a team of the sample plugin through the API; returns the answer."""
    reply = daemon.request(
        "POST", f"{V}/team/create", {"name": name, "leaderId": leader_id, "budget": budget}, token=admin_token
    )
    assert reply.status == 200, reply.body
    return reply.json


def burst(daemon: Daemon, token: str, count: int) -> None:
    """`count` team/create calls in batches of 100 (each a webhook event where hooks listen)."""
    for start in range(0, count, 100):
        batch = [{"name": f"team {n}", "leaderId": 1} for n in range(start, min(count, start + 100))]
        reply = daemon.request("POST", "/b0.1/team/create", {"batch": batch}, token=token)
        assert reply.status == 200, reply.body


def without_uvloop(root: Path) -> dict[str, str]:
    """The environment of a daemon that cannot import uvloop (a module in `root` that refuses
    to load comes first on its path): `reactor: asyncio` then runs on the standard loop."""
    hidden = root / "without-uvloop" / "uvloop"
    hidden.mkdir(parents=True, exist_ok=True)
    (hidden / "__init__.py").write_text('raise ImportError("uvloop is hidden from this daemon")\n')
    path = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(hidden.parent), path]))}


def free_port() -> int:
    """A loopback port nothing listens on (at the moment of asking)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def end_process(process: subprocess.Popen | None, timeout: float = 10) -> None:
    """Terminate a server process the tests started, killing it if it outlives `timeout`."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def wait_for(predicate, timeout: float = 10, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def listening(port: int) -> bool:
    """Whether a server accepts connections on the loopback `port` (one started in another process)."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    except OSError:
        return False
    return True


@contextmanager
def running_anchor(
    name: str, deployment: Deployment | None = None, args: Sequence[str] = ()
) -> Iterator[tuple[subprocess.Popen, int]]:
    """scripts/anchors/{name}.py, a hand-written server scripts/bench measures apid against, on a
    free loopback port, reading `deployment`'s SQLite file and JWT secret (the person/show
    anchors), with `args`: its process and port once it accepts connections; stopped on leaving
    the block."""
    port = free_port()
    files = (
        []
        if deployment is None
        else [
            "--db",
            str(deployment.root / "var" / "test.db"),
            "--secret-file",
            str(deployment.root / "var" / "jwt.secret"),
        ]
    )
    process = subprocess.Popen([sys.executable, str(ANCHORS / f"{name}.py"), *files, "--port", str(port), *args])
    try:
        wait_for(lambda: process.poll() is not None or listening(port), timeout=30)
        if not listening(port):
            raise RuntimeError(f"{name} did not start (exit status {process.poll()})")
        yield process, port
    finally:
        process.terminate()
        process.wait(10)
