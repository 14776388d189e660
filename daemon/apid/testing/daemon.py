"""The real daemon for a plugin's tests: `apid serve` in a subprocess, on a loopback port of
its own, over a deployment folder written for the test.

What the in-memory kit cannot show runs here as in production: the reactor chosen
(`reactor: asyncio` and its event loop), the plugin's migrations run by `apid migrate` (once
per set of revisions: the next daemons start from a copy, apid.testing.template), webhooks
delivered for real (to a `WebhookReceiver`),
the HTTP layer and the process's start-up and shutdown. A test calls it with the same
methods as `InMemoryApid` (`apid.testing.calls.ApiCalls`), over real connections.

Public through `apid.testing`; `apid.testing.pytest_plugin` makes a fixture of it.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal
from urllib.parse import urlencode

from apid.auth.passwords import Hashing, hasher
from apid.config.files import load as load_config
from apid.problems import Problem
from apid.testing.calls import ApiCalls, Login, Reply, query_fields, request_headers
from apid.testing.settings import ENVIRONMENT, SHIPPED_ROLES, write_settings
from apid.testing.template import add_accounts, keep, restore, template_for

_READY = re.compile(r"apid ready on http://127\.0\.0\.1:(?P<port>\d+) \(.*API version (?P<version>[^,]+),")
_CREATED = re.compile(r"\(id (?P<id>\d+)\)")

# The public paths of the service_api.yml apid ships, so that logins and the account
# endpoints answer as deployed; `api={"reservedUris": [...]}` replaces them.
RESERVED_URIS = (
    "/authenticate",
    "/register",
    "/error",
    "/logout",
    "/validate",
    "/validateResetPassword",
    "/resetPassword",
    "/forgotPassword",
    "/refreshToken",
    "/health",
    "/openapi.json",
    "/docs",
    "/docs/assets",
)


class DaemonFailed(RuntimeError):
    """`apid serve` did not become ready, or an `apid` command failed: the message carries
    what it wrote to stderr."""


@dataclass(frozen=True)
class Account:
    """An account `ApidDaemon` makes before it serves (`apid user add`)."""

    username: str
    password: str
    roles: tuple[str, ...]
    email: str = ""  # `<username>@example.com` when empty


class ApidDaemon(ApiCalls):
    """`apid serve` over a deployment in `root` (etc/, var/, iostate/, made if missing), on
    127.0.0.1 and a free port. Use it as a context manager, or `start()` and `stop()`.

    - `reactor`: `"default"` (the daemon's own default) or `"asyncio"`, its `reactor` setting.
    - `server`, `api`: service_server.yml (its `test` environment) and service_api.yml settings
      over the kit's: SQLite in `root/var`, mail to files, a fresh JWT secret, webhooks on, one
      process, the roles and public paths of the files apid ships.
    - `accounts`: made by `apid user add` once the migrations ran, before the daemon starts.
    - `env`, `python`: the daemon's environment beside the test's, and its interpreter (the
      virtualenv where the plugin is installed).

    - `plugins`: the plugin distributions to serve (`loadPlugins`), beside apid's own: so that
      a plugin's tests depend on no other plugin installed beside it. Empty: every one installed.

    The plugins served have their migrations run at start.
    Attributes once started: `port`, `url` (`http://127.0.0.1:<port>`), `version` (of every
    path), `ready` (the line the daemon printed when ready).
    """

    def __init__(
        self,
        root: Path | str,
        *,
        reactor: Literal["default", "asyncio"] = "default",
        server: Mapping[str, Any] | None = None,
        api: Mapping[str, Any] | None = None,
        accounts: Iterable[Account] = (),
        env: Mapping[str, str] | None = None,
        python: str = sys.executable,
        plugins: Iterable[str] = (),
    ) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.config_dir = write_settings(
            self.root,
            {"reactor": reactor, "loadPlugins": list(plugins), **(server or {})},
            {"reservedUris": list(RESERVED_URIS), "procCores": 1, **(api or {})},
        )
        self.accounts = tuple(accounts)
        self.env = dict(env or {})
        self.python = python
        self.plugins = tuple(plugins)
        # the kit's own SQLite file, migrated by this interpreter's apid: prepared from a template
        self._database = self.root / "var" / "apid.db"
        self._prepared_here = (
            python == sys.executable and "database" not in (server or {}) and "PYTHONPATH" not in self.env
        )
        # accounts of the shipped roles, made here in a database the kit chose (a command each costs more)
        self._accounts_here = self._prepared_here and "security" not in (api or {})
        self.port = 0
        self.version = ""
        self.ready = ""
        self._process: subprocess.Popen[str] | None = None
        self._stderr = self.root / "daemon.stderr"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def stderr(self) -> str:
        """What the daemon wrote to stderr so far (its log)."""
        return self._stderr.read_text(errors="replace") if self._stderr.exists() else ""

    def cli(self, *args: str, input: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """`apid ARGS` on this deployment (`migrate --status`, `iostate reload`, `hook add ...`);
        it raises nothing: look at `returncode`, `stdout` and `stderr`."""
        command = [self.python, "-m", "apid", *args, "--config-dir", str(self.config_dir), "--env", ENVIRONMENT]
        return subprocess.run(
            command, input=input, capture_output=True, text=True, timeout=timeout, env=self._environment()
        )

    def add_account(self, account: Account) -> int:
        """Make `account` with `apid user add`; its id."""
        roles = [arg for role in account.roles for arg in ("--role", role)]
        email = _email(account)
        done = self.cli(
            "user", "add", account.username, "--email", email, *roles, "--password-stdin", input=account.password + "\n"
        )
        if done.returncode != 0 or not (created := _CREATED.search(done.stdout)):
            raise DaemonFailed(f"apid user add {account.username} failed: {done.stderr.strip()}")
        return int(created["id"])

    def start(self, timeout: float = 60) -> ApidDaemon:
        """Run the migrations (apid's and the plugins' served), make the `accounts`, and serve;
        back once the daemon says it is ready. `DaemonFailed` if it does not. A database the
        kit chose starts as a copy of one these migrations made before (apid.testing.template)."""
        template = template_for(self.plugins) if self._prepared_here and not self._database.exists() else None
        if template is None or not restore(template, self._database):
            migrated = self.cli("migrate")
            if migrated.returncode != 0:
                raise DaemonFailed(f"apid migrate failed: {migrated.stderr.strip()}")
            if template is not None:
                keep(self._database, template)
        if self._accounts_here and set().union(*(account.roles for account in self.accounts)) <= SHIPPED_ROLES:
            try:
                add_accounts(
                    self._database,
                    [(account.username, _email(account), account.password, account.roles) for account in self.accounts],
                    Hashing(hasher(load_config(self.config_dir, ENVIRONMENT, env={}).server.passwords)),
                )
            except (Problem, ValueError) as refused:  # as `apid user add` would have refused them
                raise DaemonFailed(f"making the accounts failed: {refused}") from None
        else:
            for account in self.accounts:
                self.add_account(account)
        command = [self.python, "-m", "apid", "serve", "--config-dir", str(self.config_dir), "--env", ENVIRONMENT]
        with open(self._stderr, "ab") as stderr:  # the daemon holds its own copy
            self._process = subprocess.Popen(
                [*command, "--listen", "tcp:0:interface=127.0.0.1"],
                stdout=subprocess.PIPE,
                stderr=stderr,
                text=True,
                env=self._environment(),
            )
        assert self._process.stdout is not None  # a pipe, as asked
        line = _first_line(self._process.stdout, timeout)
        ready = _READY.search(line)
        if ready is None:
            try:  # the end of its output, not a timeout, when it stopped by itself: wait for its status
                ended: int | None = self._process.wait(2)
            except subprocess.TimeoutExpired:
                ended = None
            self.stop()
            if ended is not None:  # it stopped by itself: its log says why, at once
                raise DaemonFailed(f"apid serve exited with status {ended} before it was ready:\n{self.stderr.strip()}")
            raise DaemonFailed(f"apid serve did not become ready within {timeout:g} s: {line!r}\n{self.stderr}")
        self.port, self.version, self.ready = int(ready["port"]), ready["version"], line.strip()
        return self

    def login(self, username: str, password: str) -> str:
        """An access token from `POST /authenticate`."""
        reply = self.post("/authenticate", {"username": username, "password": password})
        if reply.status != 200:
            raise DaemonFailed(f"login of {username} answered {reply.status}: {reply.text}")
        token: str = reply.json["token"]
        return token

    def caller(self, *roles: str, username: str | None = None) -> Login:
        """A new account holding `roles` (made with `apid user add` while the daemon runs),
        logged in through `/authenticate`."""
        account = Account(username or f"caller{secrets.token_hex(4)}", secrets.token_urlsafe(16), roles)
        account_id = self.add_account(account)
        token = self.login(account.username, account.password)
        return Login(account_id, account.username, account.password, frozenset(roles), token)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: Mapping[str, Any] | None = None,
        caller: Login | None = None,
        headers: Mapping[str, str] | None = None,
        links: bool = False,
        timeout: float = 60,
    ) -> Reply:
        """Call `path` on a new connection (see `ApiCalls.request`); `timeout` bounds it."""
        sent = request_headers(caller, links, headers)
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            sent.setdefault("Content-Type", "application/json")
        if query:
            path += "?" + urlencode(query_fields(query), doseq=True)
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            connection.request(method, path, body=data, headers=sent)
            answer = connection.getresponse()
            text = answer.read().decode("utf-8")
        finally:
            connection.close()
        answered: dict[str, list[str]] = {}
        for name, value in answer.getheaders():
            answered.setdefault(name.lower(), []).append(value)
        return Reply(answer.status, {name: ", ".join(values) for name, values in answered.items()}, text)

    def stop(self, timeout: float = 30) -> int | None:
        """SIGTERM, then wait for the daemon to drain and end (killed after `timeout` s); its
        exit status, None if it never started."""
        process, self._process = self._process, None
        if process is None:
            return None
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if process.stdout is not None:
            process.stdout.close()
        return process.returncode

    def __enter__(self) -> ApidDaemon:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def _environment(self) -> dict[str, str]:
        return {**os.environ, **self.env}


def _email(account: Account) -> str:
    return account.email or f"{account.username}@example.com"


def _first_line(stream: IO[str], timeout: float) -> str:
    """The first line of `stream`, or what there is after `timeout` seconds."""
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    return lines[0] if lines else ""


def default_accounts(roles: Sequence[str] = ("ROLE_ADMIN", "ROLE_USER")) -> tuple[Account, ...]:
    """One account per role, named after it (`admin` for ROLE_ADMIN), each with a password of
    its own: what the pytest fixture makes."""
    return tuple(
        Account(role.removeprefix("ROLE_").lower(), f"{role.lower()}-{secrets.token_hex(8)}", (role,)) for role in roles
    )
