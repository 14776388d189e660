"""Fuzzing apid from its own OpenAPI documents: Schemathesis runs every check against the real
daemon, as a caller without a token, as a user and as an administrator, each from the
document `/openapi.json` answers that caller. `tests/integration/test_fuzz.py` makes a short
run of it, `scripts/fuzz` a long one; docs/api-docs.md#fuzzing says what a run covers.

The deployment is disposable (a temporary folder), and the run may destroy what it reaches:
it creates, changes and deletes accounts, hooks and teams. What keeps it meaningful:

- the calling accounts stay as they are: a case of the administrator's run that would change
  or delete one of them or the leaver (person/update, person/delete, plain, batched or as a
  chain's first link) is pointed at a victim account instead (tests/fuzz_hooks.py), so the
  run's tokens keep working; the user's run needs no sparing (a user reaches only their own
  record, and changing their password needs the current one, which no answer holds);
- `/logout` cases log a disposable account in afresh for each case, so a logout never ends
  the session every other case uses; the anonymous run sends `/logout` without a token;
- the abuse limits on logins, registrations and reset requests are raised far above what a
  run sends (they have their own tests), or every later case would be a 429;
- records exist for the ids the document's examples name (mockData `1`): the user is
  person 1 (so the user's own record answers them too), hook 1 and team 1 exist, so the
  examples reach real records and their answers are checked against the response schemas,
  not only 404s.

After the runs, `intact()` checks that the calling accounts were not changed and that their
tokens still work, so a run that lost its footing fails rather than quietly testing 401s.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from harness import (
    ADMIN,
    ADMIN_ACCOUNT,
    REPO,
    USER,
    USER_ACCOUNT,
    Daemon,
    Deployment,
    V,
    deployment_with_accounts,
    everyone,
)

CONFIG = REPO / "tests" / "data" / "schemathesis.toml"
ST = Path(sys.executable).with_name("st")
ROLES = ("anonymous", "user", "admin")
LOG_ALARMS = ("Traceback", "Unhandled")
VICTIMS = 6
# Far above what a run sends. The login limit per (account, address) matters most: Schemathesis
# reuses values from answers, so it tries wrong passwords for the leaver's name too.
UNLIMITED = {"perAddress": 1_000_000, "perAccount": 1_000_000, "window": 900}
API_OVERRIDES = {
    "abuseLimits": {
        "login": {**UNLIMITED, "perAccountAddress": 1_000_000},
        "register": dict(UNLIMITED),
        "reset": dict(UNLIMITED),
    }
}
SERVER_OVERRIDES = {"jwt": {"accessLifetime": 86_400}}  # a long run outlives the default 15 minutes
LEAVER = ("leaver", "leaver-password-1", "leaver@example.com")


def fuzz_deployment(root: Path) -> Deployment:
    """A disposable deployment whose first account is the user (id 1), then the administrator."""
    return deployment_with_accounts(
        root, api=API_OVERRIDES, server=SERVER_OVERRIDES, accounts=(USER_ACCOUNT, ADMIN_ACCOUNT)
    )


@dataclass
class FuzzWorld:
    """The running daemon and what the runs need of it: tokens, and the accounts to spare."""

    daemon: Daemon
    tokens: dict[str, str | None]
    accounts: dict[str, dict]  # the calling accounts as they were before any run
    protected: list[int]
    victims: list[int]
    out: Path  # documents and reports of the runs

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.daemon.port}"


def prepare(daemon: Daemon, out: Path) -> FuzzWorld:
    """Records for the examples to reach, disposable accounts, and the tokens of the runs."""
    user, admin = daemon.login(*USER[:2]), daemon.login(*ADMIN[:2])

    def post(path: str, body: dict, token: str) -> dict:
        reply = daemon.request("POST", f"{V}/{path}", body, token=token)
        assert reply.status == 200, (path, reply.status, reply.body)
        return reply.json

    victims = [
        post(
            "person/create",
            {"username": f"victim{n}", "password": f"victim-password-{n}", "email": f"victim{n}@example.com"},
            admin,
        )["id"]
        for n in range(VICTIMS)
    ]
    leaver = post("person/create", dict(zip(("username", "password", "email"), LEAVER, strict=True)), admin)["id"]
    post("hook/create", {"url": "http://localhost:3000/fuzz", "service": "person"}, admin)
    post("team/create", {"name": "Fuzz", "leaderId": 1, "budget": 10.5}, admin)
    people = {person["username"]: person for person in everyone(daemon, admin)}
    accounts = {"user": people[USER[0]], "admin": people[ADMIN[0]]}
    assert accounts["user"]["id"] == 1, accounts
    out.mkdir(parents=True, exist_ok=True)
    return FuzzWorld(
        daemon=daemon,
        tokens={"anonymous": None, "user": user, "admin": admin},
        accounts=accounts,
        protected=[accounts["user"]["id"], accounts["admin"]["id"], leaver],
        victims=victims,
        out=out,
    )


@dataclass
class FuzzRun:
    role: str
    command: list[str]
    returncode: int
    output: str
    generated: int = field(init=False)

    def __post_init__(self) -> None:
        counts = re.findall(r"^\s*(\d+) generated", self.output, re.MULTILINE)  # the summary's "Test cases" line
        self.generated = int(counts[-1]) if counts else 0

    @property
    def passed(self) -> bool:
        return self.returncode == 0


def document(world: FuzzWorld, role: str) -> Path:
    """The OpenAPI document `/openapi.json` answers the role's caller, saved for `st run`."""
    token = world.tokens[role]
    reply = world.daemon.request("GET", "/openapi.json", token=token)
    assert reply.status == 200, reply.body
    path = world.out / f"openapi-{role}.json"
    path.write_text(json.dumps(reply.json, indent=1))
    return path


def run(
    world: FuzzWorld,
    role: str,
    *,
    max_examples: int,
    seed: int | None = None,
    phases: str | None = None,
    max_time: int | None = None,
    workers: int = 1,
    timeout: float | None = None,
    spare: bool = True,
) -> FuzzRun:
    """`st run` with every check over the role's document; the output is Schemathesis's report.
    `phases` (examples, coverage, fuzzing, stateful; all by default) and `max_time` (seconds,
    repeating the fuzzing phase until spent) are `st run`'s options of those names. Without
    `spare`, the administrator's run changes whichever account it reaches, its own included."""
    command = [
        str(ST),
        "--config-file",
        str(CONFIG),
        "--no-color",
        "run",
        str(document(world, role)),
        "--url",
        world.base_url,
        "--checks",
        "all",
        "--max-examples",
        str(max_examples),
        "--workers",
        str(workers),
        "--report",
        "junit",
        "--report-dir",
        str(world.out / f"report-{role}"),
    ]
    if seed is not None:
        command += ["--seed", str(seed)]
    if phases is not None:
        command += ["--phases", phases]
    if max_time is not None:
        command += ["--max-time", str(max_time)]
    token = world.tokens[role]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO / "tests"), os.environ.get("PYTHONPATH")])),
        "SCHEMATHESIS_HOOKS": "fuzz_hooks",
        "APID_FUZZ_BASE_URL": world.base_url,
        "APID_FUZZ_TOKEN": token or "",
        "APID_FUZZ_LEAVER": f"{LEAVER[0]}:{LEAVER[1]}" if token else "",
        "APID_FUZZ_PROTECTED": ",".join(map(str, world.protected)) if role == "admin" and spare else "",
        "APID_FUZZ_VICTIMS": ",".join(map(str, world.victims)),
    }
    done = subprocess.run(command, cwd=world.out, env=env, capture_output=True, text=True, timeout=timeout)
    return FuzzRun(role=role, command=command, returncode=done.returncode, output=done.stdout + done.stderr)


def intact(world: FuzzWorld) -> list[str]:
    """What went wrong with the calling accounts during the runs: tokens refused, or accounts
    changed (but for what the user may change of their own: email, and so version and time)."""
    problems = []
    for role in ("user", "admin"):
        reply = world.daemon.request("GET", "/openapi.json", token=world.tokens[role])
        if reply.status != 200:
            problems.append(f"the {role}'s token is refused: {reply.status} {reply.body[:200]!r}")
    if problems:
        return problems
    own = {"user": ("email", "version", "lastUpdated"), "admin": ()}
    for role, before in world.accounts.items():
        now = world.daemon.request("GET", f"{V}/person/show/{before['id']}", token=world.tokens["admin"])
        if now.status != 200:
            problems.append(f"the {role}'s record: {now.status} {now.body[:200]!r}")
            continue
        changed = {
            name: (before.get(name), value)
            for name, value in now.json.items()
            if before.get(name) != value and name not in own[role]
        }
        if changed:
            problems.append(f"the {role}'s account changed: {changed}")
    return problems


def log_alarms(daemon: Daemon) -> list[str]:
    """The lines around each traceback or unhandled error in the daemon's log."""
    lines = daemon.stderr.splitlines()
    return [
        "\n".join(lines[max(0, n - 2) : n + 15])
        for n, line in enumerate(lines)
        if any(word in line for word in LOG_ALARMS)
    ]
