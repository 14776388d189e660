"""The bad-request matrix: every case of tests/data/bad_requests.yaml sent to one daemon.

Each case is one hostile or broken request (see the head of the YAML file for the case
format). For every case the test checks:

- the status, and the RFC 9457 problem body (unless the case says `problem: false`: answers
  twisted.web gives on its own, before apid sees the request, have no body);
- what the case adds: the fields the problem's `errors` must name, words of `detail`, the
  `Allow` header of a 405, the `rule` of a 422, the element errors of a 207, headers that must
  not appear;
- never a 500 (except from `/error`, whose job is to render the status it is asked for), no
  response header carrying CR or LF, `WWW-Authenticate` on every 401;
- that nothing stored changed: a snapshot of every row of every table of the deployment's
  SQLite database (opened read-only) before and after the case, plus the sample plugin's
  teams, which live in the daemon's memory (read through `team/list`);
- that the daemon's log (its stderr) gained no traceback while the case ran, so a failure
  names the case. A last test checks the whole log once more.

Run it alone: `.venv/bin/pytest -q tests/integration/test_bad_request_matrix.py`
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import http.client
import json
import re
import socket
import sqlite3
import string
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from assertions import PROBLEM_MEMBERS, assert_problem
from forged_tokens import admin_claims, b64, forge, tampered
from harness import (
    ADMIN,
    REPO,
    USER,
    Daemon,
    Deployment,
    Response,
    V,
    deployment_with_accounts,
    new_person,
    person_fields,
)

CASES_FILE = REPO / "tests" / "data" / "bad_requests.yaml"

# Every table is compared, the session and one-time token tables included: no case of the
# matrix is a request that may legitimately write (a refused /logout must not revoke, a refused
# /refreshToken must not rotate, a refused /validate or /resetPassword must not use an id up).
# The throwaway accounts and their tokens are made before the first snapshot. One table is left
# out: each daemon process notes there that it still runs, every 15 s (`iostate_report.seen_at`,
# apid.server.reloading), a heartbeat no request writes, which may fall between two snapshots.
EXCLUDED_TABLES: frozenset[str] = frozenset({"iostate_report"})

# The matrix sends hundreds of failed logins, registrations and reset requests from one
# address: the abuse limits are raised far above that (they have their own tests in
# test_accounts.py). `apiThrottle` is off in the test environment, so rate limits never trip.
UNLIMITED = {"perAddress": 1_000_000, "perAccount": 1_000_000, "window": 900}
API_OVERRIDES = {
    "abuseLimits": {kind: dict(UNLIMITED) for kind in ("login", "register", "reset")},
    "throttle": {"rateLimit": {"ROLE_USER": 1_000_000, "ROLE_ADMIN": 1_000_000}},
}

ANSWER_TIMEOUT = 30.0  # seconds to wait for an ordinary answer
EARLY_ANSWER_TIMEOUT = 3.0  # seconds to wait for an answer to a body that is never sent whole
LOG_ALARMS = ("Traceback", "Unhandled")
REPEATED = re.compile(r"<(.)\*([0-9]+)>")  # in a case's path: `<9*5000>` is 5,000 nines

CASE_KEYS = {
    "id",
    "method",
    "path",
    "headers",
    "token",
    "json",
    "raw",
    "encoding",
    "generate",
    "raw_request",
    "declared_length",
    "chunked",
    "expect",
    "why",
}
BODY_KEYS = ("json", "raw", "generate")
EXPECT_KEYS = {
    "status",
    "problem",
    "fields",
    "detail_contains",
    "allow",
    "rule",
    "element_errors",
    "forbid_headers",
    "closed",
    "index",
    "servedVersion",
    "instance",
}


# --- the cases ------------------------------------------------------------------------------


def load_cases() -> list[dict[str, Any]]:
    """The cases of the YAML file, checked for shape so that a typo fails loudly here."""
    cases = yaml.safe_load(CASES_FILE.read_text(encoding="utf-8"))["cases"]
    seen: set[str] = set()
    for case in cases:
        name = case.get("id")
        assert isinstance(name, str) and name, f"a case without an id: {case}"
        assert name not in seen, f"two cases named {name}"
        seen.add(name)
        unknown = set(case) - CASE_KEYS
        assert not unknown, f"{name}: unknown keys {sorted(unknown)}"
        assert sum(key in case for key in BODY_KEYS) <= 1, f"{name}: more than one body"
        assert "raw_request" in case or {"method", "path"} <= case.keys(), f"{name}: method and path needed"
        expect = case.get("expect")
        assert isinstance(expect, dict) and ("status" in expect or expect.get("closed")), f"{name}: expect.status"
        unknown = set(expect) - EXPECT_KEYS
        assert not unknown, f"{name}: unknown expect keys {sorted(unknown)}"
    return cases


CASES = load_cases()


# --- bodies that cannot be written inline ------------------------------------------------------

GENERATORS: dict[str, Callable[[Any], bytes]] = {}


def generator(name: str) -> Callable[[Callable[[Any], bytes]], Callable[[Any], bytes]]:
    def register(function: Callable[[Any], bytes]) -> Callable[[Any], bytes]:
        GENERATORS[name] = function
        return function

    return register


def _spec(value: Any, scalar: str, **defaults: Any) -> dict[str, Any]:
    """A generator's argument: a bare number stands for its main setting."""
    spec = dict(value) if isinstance(value, dict) else {scalar: value}
    return {**defaults, **spec}


def _with_marker(base: dict[str, Any], name: str, text: bytes) -> bytes:
    """`base` as JSON with field `name` holding `text`, a JSON fragment written as given."""
    marker = f"__matrix_marker_{uuid.uuid4().hex}__"
    return json.dumps({**base, name: marker}).encode().replace(f'"{marker}"'.encode(), text)


@generator("deep_nesting")
def deep_nesting(value: Any) -> bytes:
    """A JSON object `depth` levels deep in all (the top object is level 1): under `field`,
    arrays (`container: array`) or objects nested to the depth, beside `base`'s fields."""
    spec = _spec(value, "depth", container="object", field="a", base={})
    inner = spec["depth"] - 1
    if spec["container"] == "array":
        nested = b"[" * inner + b"]" * inner
    else:
        nested = b'{"a":' * (inner - 1) + b"{}" + b"}" * (inner - 1)
    return _with_marker(spec["base"], spec["field"], nested)


@generator("big_string")
def big_string(value: Any) -> bytes:
    spec = _spec(value, "length", field="username", base={}, char="x")
    return json.dumps({**spec["base"], spec["field"]: spec["char"] * spec["length"]}).encode()


@generator("huge_int_digits")
def huge_int_digits(value: Any) -> bytes:
    spec = _spec(value, "digits", field="id", base={})
    return _with_marker(spec["base"], spec["field"], b"9" * spec["digits"])


@generator("lone_surrogate_in")
def lone_surrogate_in(value: Any) -> bytes:
    """`field` holds a lone high surrogate: as the JSON escape `\\ud800` (valid JSON syntax, not
    valid Unicode), or with `form: bytes` as its UTF-8-style encoding ED A0 80 (not UTF-8)."""
    spec = _spec(value, "field", base={}, form="escape")
    text = b'"ab\\ud800cd"' if spec["form"] == "escape" else b'"ab\xed\xa0\x80cd"'
    return _with_marker(spec["base"], spec["field"], text)


@generator("batch_of")
def batch_of(value: Any) -> bytes:
    spec = _spec(value, "count", element={"id": 1})
    return json.dumps({"batch": [spec["element"]] * spec["count"]}).encode()


@generator("padded")
def padded(value: Any) -> bytes:
    """A valid JSON object padded with whitespace to exactly `size` bytes."""
    spec = _spec(value, "size", base={})
    raw = json.dumps(spec["base"]).encode()
    return raw[:-1] + b" " * (spec["size"] - len(raw)) + b"}"


# --- whole requests that cannot be written inline -------------------------------------------


def request_generator(spec: dict[str, Any]) -> bytes:
    kind, value = next(iter(spec.items()))
    if kind == "long_request_line":
        return b"GET /v0.1/person/show/1?pad=" + b"a" * value + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    if kind == "long_header":
        return b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Pad: " + b"a" * value + b"\r\n\r\n"
    if kind == "many_headers":
        lines = b"".join(b"X-Pad-%d: a\r\n" % n for n in range(value))
        return b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + lines + b"\r\n"
    raise AssertionError(f"no request generator {kind}")


# --- the world the cases run in: accounts, their tokens, a hook, a team --------------------


@pytest.fixture(scope="module")
def deployment(tmp_path_factory) -> Deployment:
    return deployment_with_accounts(tmp_path_factory.mktemp("apid-matrix"), api=API_OVERRIDES)


@dataclass
class World:
    values: dict[str, Any] = field(default_factory=dict)  # what `${name}` stands for in a case
    auth: dict[str, str | None] = field(default_factory=dict)  # token kind -> Authorization value
    admin_token: str = ""


def _unsigned(alg: str, **claims: Any) -> str:
    """A token with `alg` in its header and no signature at all."""
    return f"{b64({'alg': alg, 'typ': 'at+jwt'})}.{b64(admin_claims(**claims))}."


def _hs256_by_hand(key: bytes, header: dict, **claims: Any) -> str:
    """A token HMAC-signed by hand (PyJWT refuses an empty key, which is the point here)."""
    signing_input = f"{b64(header)}.{b64(admin_claims(**claims))}"
    signature = hmac.new(key, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{base64.urlsafe_b64encode(signature).rstrip(b'=').decode()}"


def _ok(reply: Response, what: str) -> Response:
    assert reply.status in (200, 204), f"{what}: {reply.status} {reply.body!r}"
    return reply


@pytest.fixture(scope="module")
def world(daemon: Daemon, deployment: Deployment, admin_token: str, user_token: str, user_id: int) -> World:
    """Throwaway accounts, each brought into the state its token kind needs, and the tokens."""
    admin = admin_token

    def account(prefix: str, **extra: Any) -> tuple[dict, str]:
        person = new_person(daemon, admin, **{**person_fields(prefix), **extra})
        return person, daemon.login(person["username"], person["password"])

    def update(person: dict, fields: dict) -> None:
        _ok(daemon.request("PUT", f"{V}/person/update/{person['id']}", fields, token=admin), f"update {fields}")

    def delete(person: dict) -> None:
        _ok(daemon.request("DELETE", f"{V}/person/delete/{person['id']}", token=admin), "delete")

    # Every account is made (and logged in) first and changed afterwards, so that the deleted
    # account's id lies below the highest and is never given again (SQLite reuses only the top id).
    victim, victim_token = account("victim")
    _, revoked_token = account("revoked")
    deleted, deleted_token = account("deleted")
    disabled, disabled_token = account("disabled")
    locked, locked_token = account("locked")
    demoted, demoted_token = account("demoted", roles=["ROLE_ADMIN", "ROLE_USER"])
    # Second accounts in the same states, for the cases that may use their token up (a /logout
    # wrongly accepted revokes it; a demoted administrator wrongly let through may promote itself
    # again), so that such a failure cannot make another case pass or fail.
    deleted_b, deleted_b_token = account("deletedb")
    disabled_b, disabled_b_token = account("disabledb")
    demoted_b, demoted_b_token = account("demotedb", roles=["ROLE_ADMIN", "ROLE_USER"])
    _ok(daemon.request("POST", "/logout", token=revoked_token), "logout")
    for person in (deleted, deleted_b):
        delete(person)
    for person in (disabled, disabled_b):
        update(person, {"enabled": False})
    update(locked, {"accountLocked": True})
    for person in (demoted, demoted_b):
        update(person, {"roles": ["ROLE_USER"]})
    # The top id deleted and given to the next account made: the old token names the new account.
    recycled, recycled_token = account("recycled", roles=["ROLE_ADMIN"])
    delete(recycled)
    successor = new_person(daemon, admin, **person_fields("successor"))

    hook = daemon.request(
        "POST", f"{V}/hook/create", {"url": "http://localhost:3000/matrix", "service": "person"}, token=admin
    )
    assert hook.status == 200, hook.body
    team = daemon.request(
        "POST", f"{V}/team/create", {"name": "Matrix", "leaderId": victim["id"], "budget": 10.5}, token=admin
    )
    assert team.status == 200, team.body
    ghost_team = daemon.request("POST", f"{V}/team/create", {"name": "Ghosts", "leaderId": deleted["id"]}, token=admin)
    assert ghost_team.status == 200, ghost_team.body

    now = int(time.time())
    bearer = {
        "admin": admin,
        "user": user_token,
        "victim": victim_token,
        "revoked": revoked_token,
        "deleted_account": deleted_token,
        "disabled_account": disabled_token,
        "locked_account": locked_token,
        "demoted_admin": demoted_token,
        "deleted_account_b": deleted_b_token,
        "disabled_account_b": disabled_b_token,
        "demoted_admin_b": demoted_b_token,
        "deleted_id_reused": recycled_token,
        "alg_none": _unsigned("none"),
        "alg_none_capitalised": _unsigned("None"),
        "signature_stripped": admin.rsplit(".", 1)[0] + ".",
        "wrong_key": forge(deployment, key=b"another-deployment-secret-0123456789abcdef"),
        "empty_key_kid_traversal": _hs256_by_hand(
            b"", {"alg": "HS256", "typ": "at+jwt", "kid": "../../../../../dev/null"}
        ),
        "hs512": forge(deployment, algorithm="HS512"),
        "wrong_audience": forge(deployment, aud="someone-else"),
        "wrong_issuer": forge(deployment, iss="someone-else"),
        "expired": forge(deployment, iat=now - 7200, exp=now - 3600),
        "future_iat": forge(deployment, iat=now + 3600, exp=now + 7200),
        "no_typ": forge(deployment, header={"typ": None}),
        "wrong_typ": forge(deployment, header={"typ": "JWT"}),
        "missing_claim": forge(deployment, drop=("exp",)),
        "missing_jti": forge(deployment, drop=("jti",)),
        "sub_not_a_number": forge(deployment, sub="1 OR 1=1"),
        "roles_not_a_list": forge(deployment, roles="ROLE_ADMIN"),
        "unknown_account": forge(deployment, sub="999999", name="ghost"),
        "tampered": tampered(user_token),
        "garbage": "x" * 40,
        "malformed": "not.a.token",
        "huge": "a" * 10000,
    }
    auth: dict[str, str | None] = {
        "none": None,
        "bearer_empty": "Bearer ",
        "basic": "Basic " + base64.b64encode(f"{ADMIN[0]}:{ADMIN[1]}".encode()).decode(),
    }
    auth.update({kind: f"Bearer {token}" for kind, token in bearer.items()})

    values = {
        "admin_id": 1,
        "admin_name": ADMIN[0],
        "user_id": user_id,
        "user_name": USER[0],
        "victim_id": victim["id"],
        "victim_name": victim["username"],
        "deleted_id": deleted["id"],
        "deleted_name": deleted["username"],
        "deleted_password": deleted["password"],
        "disabled_name": disabled["username"],
        "disabled_password": disabled["password"],
        "locked_name": locked["username"],
        "locked_password": locked["password"],
        "demoted_id": demoted["id"],
        "demoted_b_id": demoted_b["id"],
        "successor_id": successor["id"],
        "recycled_id": recycled["id"],
        "hook_id": hook.json["id"],
        "team_id": team.json["id"],
        "ghost_team_id": ghost_team.json["id"],
    }
    return World(values=values, auth=auth, admin_token=admin)


# --- what is stored ---------------------------------------------------------------------------


def database_path(deployment: Deployment) -> Path:
    """The SQLite file of the deployment's test environment (etc/service_server.yml)."""
    server = yaml.safe_load((deployment.config_dir / "service_server.yml").read_text())
    url = server[deployment.environment]["database"]["url"]
    assert url.startswith("sqlite:///"), url
    path = Path(url.removeprefix("sqlite:///"))
    return path if path.is_absolute() else deployment.root / path


def snapshot(database: Path) -> dict[str, list[tuple]]:
    """Every row of every table, read through a read-only connection."""
    connection = sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=10)
    try:
        tables = [
            name for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        ]
        return {
            table: sorted(connection.execute(f'SELECT * FROM "{table}"').fetchall(), key=repr)
            for table in tables
            if table not in EXCLUDED_TABLES
        }
    finally:
        connection.close()


def stored(daemon: Daemon, database: Path, admin_token: str) -> dict[str, Any]:
    teams = daemon.request("GET", f"{V}/team/list", token=admin_token)
    state: dict[str, Any] = snapshot(database)
    state["team (in the daemon's memory)"] = (teams.status, teams.body)
    return state


def differences(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    lines = []
    for table in sorted(before.keys() | after.keys()):
        old, new = before.get(table), after.get(table)
        if old == new:
            continue
        if isinstance(old, list) and isinstance(new, list):
            gone = [row for row in old if row not in new]
            came = [row for row in new if row not in old]
            lines.append(f"{table}: removed {gone!r}, added {came!r}")
        else:
            lines.append(f"{table}: {old!r} -> {new!r}")
    return lines


# --- sending ---------------------------------------------------------------------------------


def substitute(value: Any, values: dict[str, Any]) -> Any:
    """`${name}` replaced in every string; a string that is only `${name}` takes the value's type."""
    if isinstance(value, str):
        whole = value.strip()
        if whole.startswith("${") and whole.endswith("}") and whole[2:-1] in values and value == whole:
            return values[whole[2:-1]]
        return string.Template(value).safe_substitute({k: str(v) for k, v in values.items()})
    if isinstance(value, list):
        return [substitute(item, values) for item in value]
    if isinstance(value, dict):
        return {substitute(k, values): substitute(v, values) for k, v in value.items()}
    return value


def body_of(case: dict[str, Any], values: dict[str, Any]) -> bytes | None:
    if "json" in case:
        return json.dumps(substitute(case["json"], values)).encode()
    if "raw" in case:
        text = substitute(case["raw"], values)
        encoding = case.get("encoding", "utf-8")
        return text.encode(encoding, "surrogatepass" if encoding.startswith("utf") else "strict")
    if "generate" in case:
        ((name, argument),) = case["generate"].items()
        return GENERATORS[name](substitute(argument, values))
    return None


def _chunked(body: bytes, size: int = 65536) -> bytes:
    chunks = [body[i : i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for chunk in chunks) + b"0\r\n\r\n"


def build_request(case: dict[str, Any], world: World) -> tuple[bytes, float]:
    """The request's bytes as sent on the wire, and how long to wait for the answer."""
    if "raw_request" in case:
        raw = case["raw_request"]
        data = request_generator(raw) if isinstance(raw, dict) else substitute(raw, world.values).encode("latin-1")
        return data, ANSWER_TIMEOUT
    body = body_of(case, world.values)
    headers: dict[str, str | None] = {"Host": "127.0.0.1", "Connection": "close"}
    if body is not None:
        headers["Content-Type"] = "application/json"
    authorization = world.auth[case.get("token", "none")]
    if authorization is not None:
        headers["Authorization"] = authorization
    headers.update(substitute(case.get("headers") or {}, world.values))
    timeout = ANSWER_TIMEOUT
    payload = body or b""
    if case.get("chunked"):
        headers["Transfer-Encoding"] = "chunked"
        payload = _chunked(payload)
    elif "declared_length" in case:
        # Only the start of the body is sent: the answer must come from the header alone.
        headers["Content-Length"] = str(case["declared_length"])
        timeout = EARLY_ANSWER_TIMEOUT
    elif body is not None or case["method"] in ("POST", "PUT"):
        headers["Content-Length"] = str(len(payload))
    path = REPEATED.sub(lambda repeated: repeated[1] * int(repeated[2]), substitute(case["path"], world.values))
    head = f"{case['method']} {path} HTTP/1.1\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in headers.items() if value is not None)
    return head.encode("latin-1") + b"\r\n" + payload, timeout


class NoAnswer(Exception):
    pass


def exchange(port: int, data: bytes, timeout: float) -> Response | None:
    """Send the bytes, read one answer. None: the daemon closed the connection without one."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        # the daemon may answer (and close) before taking the whole body: then read the answer
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(data)
        reply = http.client.HTTPResponse(sock)
        try:
            reply.begin()
            return Response(reply.status, reply.headers, reply.read())
        except (http.client.RemoteDisconnected, ConnectionResetError):
            return None
        except TimeoutError:
            raise NoAnswer(f"no answer within {timeout} s") from None
        finally:
            reply.close()


# --- checking --------------------------------------------------------------------------------


def check_answer(case: dict[str, Any], reply: Response | None) -> None:
    expect = case["expect"]
    if expect.get("closed"):
        assert reply is None, f"expected the connection closed without an answer, got {reply.status} {reply.body!r}"
        return
    assert reply is not None, "the daemon closed the connection without answering"
    status = expect["status"]
    shown = f"{reply.status} {reply.headers.get('Content-Type')} {reply.body[:600]!r}"
    assert reply.status == status, f"expected {status}, got {shown}"
    path = case.get("path", "")
    if not path.startswith("/error"):
        assert reply.status < 500, shown
    for name, value in reply.headers.items():
        assert "\r" not in value and "\n" not in value, f"header {name} carries CR/LF: {value!r}"
    for name in expect.get("forbid_headers", []):
        assert reply.headers.get(name) is None, f"{name}: {reply.headers.get(name)!r} must not be sent"
    assert b"Traceback" not in reply.body, shown
    if expect.get("problem", True) is False:
        assert b"<html" not in reply.body.lower(), shown
        return
    if status == 207:
        assert reply.content_type.split(";")[0].strip() == "application/json", shown
        body = reply.json
        assert set(body) == {"data", "errors"}, body
        got = [(error["index"], error["status"]) for error in body["errors"]]
        want = [(error["index"], error["status"]) for error in expect.get("element_errors", [])]
        assert got == want, f"element errors {got}, expected {want}: {body}"
        return
    media_type = reply.content_type.split(";")[0].strip()
    assert media_type == "application/problem+json", f"not a problem: {shown}"
    if expect.get("instance") is False:
        # a request line too long to parse has no path to name as the instance (docs/errors.md)
        problem = reply.json
        assert reply.status == problem["status"] == status and "instance" not in problem, problem
        assert PROBLEM_MEMBERS - {"instance"} <= problem.keys(), problem
    else:
        missing = PROBLEM_MEMBERS - set(reply.json)
        assert not missing, f"the problem lacks {sorted(missing)}: {reply.json}"
        problem = assert_problem(reply, status)
    if "fields" in expect:
        named = {error.get("field") for error in problem.get("errors") or []}
        missing = set(expect["fields"]) - named
        assert not missing, f"errors must name {sorted(missing)}: {problem}"
    words = expect.get("detail_contains", [])
    for word in [words] if isinstance(words, str) else words:
        assert word in problem["detail"], f"detail must contain {word!r}: {problem}"
    if status == 401:
        assert reply.headers.get("WWW-Authenticate", "").lower().startswith("bearer"), dict(reply.headers)
    if status == 405:
        allow = reply.headers.get("Allow")
        assert allow, f"a 405 without Allow: {dict(reply.headers)}"
        methods = {m.strip() for m in allow.split(",")}
        if case["method"] not in expect.get("allow", []):
            assert case["method"] not in methods, f"Allow {allow} lists the method refused"
        if "allow" in expect:
            # every method named must be allowed; a GET route may list HEAD beside it
            assert set(expect["allow"]) <= methods <= set(expect["allow"]) | {"HEAD"}, f"Allow: {allow}"
    for member in ("rule", "index", "servedVersion"):
        if member in expect:
            assert problem.get(member) == expect[member], f"{member} {problem.get(member)!r}: {problem}"


def log_size(daemon: Daemon) -> int:
    return daemon.stderr_path.stat().st_size if daemon.stderr_path.exists() else 0


def log_since(daemon: Daemon, offset: int) -> str:
    if not daemon.stderr_path.exists():
        return ""
    with open(daemon.stderr_path, "rb") as log:
        log.seek(offset)
        return log.read().decode("utf-8", "replace")


# --- the tests ---------------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_a_bad_request_is_refused_with_its_status_and_changes_nothing(case, daemon, deployment, world):
    database = database_path(deployment)
    before = stored(daemon, database, world.admin_token)
    log_start = log_size(daemon)
    data, timeout = build_request(case, world)
    try:
        reply = exchange(daemon.port, data, timeout)
        answer_error = None
    except NoAnswer as error:
        reply, answer_error = None, error
    time.sleep(0.01)  # let anything logged after the answer reach the log
    logged = log_since(daemon, log_start)
    changed = differences(before, stored(daemon, database, world.admin_token))

    problems = []
    if answer_error is not None:
        problems.append(str(answer_error))
    else:
        try:
            check_answer(case, reply)
        except AssertionError as error:
            problems.append(f"answer: {error}")
    if changed:
        problems.append("stored data changed:\n  " + "\n  ".join(changed))
    alarms = [word for word in LOG_ALARMS if word in logged]
    if alarms:
        problems.append(f"the log gained {', '.join(alarms)}:\n{logged[-3000:]}")
    if problems:
        pytest.fail(f"{case['id']}: " + "\n".join(problems), pytrace=False)


def test_the_log_holds_no_traceback_after_every_case(daemon, world):
    log = daemon.stderr
    for word in LOG_ALARMS:
        assert word not in log, log[-5000:]


def test_the_matrix_has_at_least_200_cases():
    assert len(CASES) >= 200, len(CASES)
