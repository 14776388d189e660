"""API keys (issue 29, item 2), against the real daemon: created, listed and revoked through the
API and the command line, shown once and stored as a hash, calling with their roles and within
their scope until they expire or are revoked (on another daemon within a second), stopped by
their owner's demotion, disabling or deletion, rate limited as callers of their own, their last
use recorded; and never opening a refresh, a password or address change, or key management
beyond revoking themselves."""

from __future__ import annotations

import hashlib
import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest

from assertions import assert_problem, error_fields
from harness import ADMIN, USER, Daemon, V, deployment_with_accounts, new_person, running_daemon, wait_for

B = "/b0.1"
C = "/c0.1"


def create_key(daemon: Daemon, token: str, **fields) -> dict:
    """A new key through the API (a name and ROLE_USER unless given); the answer, key included."""
    body = {"name": f"key {uuid.uuid4().hex[:6]}", "roles": ["ROLE_USER"], **fields}
    reply = daemon.request("POST", f"{V}/apikey/create", body, token=token)
    assert reply.status == 200, reply.body
    return reply.json


def show(daemon: Daemon, key: str, person_id: int):
    return daemon.request("GET", f"{V}/person/show/{person_id}", token=key)


def person_id_of(daemon: Daemon, admin_token: str, name: str) -> int:
    people = daemon.request("GET", f"{V}/person/list?max=100", token=admin_token).json
    return next(p["id"] for p in people if p["username"] == name)


@pytest.fixture(scope="module")
def other(deployment, daemon):
    """A second daemon on the module daemon's deployment: the same database."""
    with running_daemon(deployment) as running:
        yield running


@pytest.fixture(scope="module")
def admin_id(daemon, admin_token) -> int:
    return person_id_of(daemon, admin_token, ADMIN[0])


# --- created, shown once, stored as a hash ------------------------------------------------------


def test_a_key_is_shown_once_and_stored_only_as_its_hash(daemon, user_token, user_id, database):
    created = create_key(daemon, user_token, name="nightly export")
    key = created["key"]
    assert key.startswith("apid_") and len(key) >= len("apid_") + 43, key
    assert created["prefix"] == key[:17] and created["userId"] == user_id and created["roles"] == ["ROLE_USER"]
    assert created["revokedAt"] is None and created["lastUsedAt"] is None and created["scopes"] is None

    listed = daemon.request("GET", f"{V}/apikey/list?max=100", token=user_token)
    assert listed.status == 200, listed.body
    (mine,) = [k for k in listed.json if k["id"] == created["id"]]
    assert "key" not in mine and mine["prefix"] == created["prefix"] and mine["name"] == "nightly export"
    assert key not in listed.body.decode()

    row = database.execute("SELECT * FROM api_key WHERE id = ?", (created["id"],)).fetchone()
    assert row["key_hash"] == hashlib.sha256(key.encode()).hexdigest()
    assert row["prefix"] == key[5:17]
    assert not any(isinstance(value, str) and key[17:] in value for value in tuple(row))


def test_an_administrator_creates_keys_for_any_account_and_a_user_only_their_own(
    daemon, admin_token, user_token, user_id, admin_id
):
    for_user = create_key(daemon, admin_token, userId=user_id)
    assert for_user["userId"] == user_id
    assert show(daemon, for_user["key"], user_id).status == 200
    refused = daemon.request(
        "POST", f"{V}/apikey/create", {"name": "theirs", "roles": ["ROLE_USER"], "userId": admin_id}, token=user_token
    )
    assert "userId" in error_fields(assert_problem(refused, 400))
    # the user lists their own keys only; the administrator everyone's
    users = {k["userId"] for k in daemon.request("GET", f"{V}/apikey/list?max=100", token=user_token).json}
    assert users == {user_id}
    assert for_user["id"] in {
        k["id"] for k in daemon.request("GET", f"{V}/apikey/list?max=100", token=admin_token).json
    }


# --- roles and scope ---------------------------------------------------------------------------


def test_a_key_calls_with_its_roles_and_its_owners_record_rules(daemon, admin_token, user_token, user_id, admin_id):
    key = create_key(daemon, user_token)["key"]
    assert show(daemon, key, user_id).json["username"] == USER[0]
    assert_problem(show(daemon, key, admin_id), 403)  # the owner's own record only
    assert_problem(daemon.request("GET", f"{V}/person/list", token=key), 403)
    # the key of an account with both roles, given ROLE_USER alone, calls as a user
    owner = new_person(daemon, admin_token, roles=["ROLE_ADMIN", "ROLE_USER"])
    token = daemon.login(owner["username"], owner["password"])
    narrow = create_key(daemon, token)["key"]
    assert_problem(daemon.request("GET", f"{V}/person/list", token=narrow), 403)
    wide = create_key(daemon, token, roles=["ROLE_ADMIN"])["key"]
    assert daemon.request("GET", f"{V}/person/list", token=wide).status == 200


def test_a_role_beyond_the_owners_is_refused_at_create(daemon, user_token):
    beyond = daemon.request("POST", f"{V}/apikey/create", {"name": "up", "roles": ["ROLE_ADMIN"]}, token=user_token)
    problem = assert_problem(beyond, 403)
    assert problem["field"] == "roles" and "ROLE_ADMIN" in problem["detail"]
    bad = daemon.request(
        "POST",
        f"{V}/apikey/create",
        {"name": "", "roles": ["ROLE_NOBODY"], "scopes": ["nothing/here"], "expiresAt": "2020-01-01"},
        token=user_token,
    )
    assert error_fields(assert_problem(bad, 400)) == {"name", "roles", "scopes", "expiresAt"}
    assert_problem(daemon.request("POST", f"{V}/apikey/create", {"name": "none", "roles": []}, token=user_token), 400)


def test_a_scoped_key_calls_only_its_controllers_and_endpoints(daemon, user_token, user_id):
    key = create_key(daemon, user_token, scopes=["person/show"])["key"]
    assert show(daemon, key, user_id).status == 200
    assert daemon.request("POST", f"{B}/person/show", {"batch": [{"id": user_id}]}, token=key).status == 200
    for method, path, body in [
        ("GET", f"{V}/hook/list", None),
        ("PUT", f"{V}/person/update/{user_id}", {"email": "scoped@example.org"}),
        ("GET", f"{C}/person/show/{user_id}", {"chain": {"key": "id", "order": {"hook/list": "return"}}}),
        ("GET", "/teamCount", None),  # a plugin's own route is outside every scope
    ]:
        assert "this API key" in assert_problem(daemon.request(method, path, body, token=key), 403)["detail"], path
    hooks = create_key(daemon, user_token, scopes=["hook"])["key"]
    assert daemon.request("GET", f"{V}/hook/list", token=hooks).status == 200
    assert_problem(show(daemon, hooks, user_id), 403)


def test_an_expired_key_is_refused(daemon, user_token, user_id):
    soon = (datetime.now(UTC) + timedelta(seconds=2)).isoformat()
    key = create_key(daemon, user_token, expiresAt=soon)["key"]
    assert show(daemon, key, user_id).status == 200
    time.sleep(2.2)
    assert "expired" in assert_problem(show(daemon, key, user_id), 401)["detail"]


def test_an_unknown_or_forged_key_is_refused(daemon, user_token, user_id):
    key = create_key(daemon, user_token)["key"]
    for forged in (key[:-1] + ("A" if key[-1] != "A" else "B"), "apid_short", "apid_" + "x" * 55):
        problem = assert_problem(show(daemon, forged, user_id), 401)
        assert problem["detail"] == "the API key is not valid" and forged not in str(problem)


# --- revocation, and the owner's standing ------------------------------------------------------


def test_a_revoked_key_is_refused_by_another_daemon_within_a_second(daemon, other, user_token, user_id):
    created = create_key(daemon, user_token)
    key = created["key"]
    assert show(other, key, user_id).status == 200  # kept by the other daemon now
    revoked = daemon.request("PUT", f"{V}/apikey/revoke/{created['id']}", token=user_token)
    assert revoked.status == 200 and revoked.json["revokedAt"] is not None, revoked.body
    started = time.monotonic()
    assert wait_for(lambda: show(other, key, user_id).status == 401, timeout=1.0, interval=0.02)
    assert wait_for(lambda: show(daemon, key, user_id).status == 401, timeout=1.0, interval=0.02)
    print(f"\nrevocation on one daemon refused by the other after {time.monotonic() - started:.2f} s")
    assert "revoked" in assert_problem(show(other, key, user_id), 401)["detail"]
    # again, idempotent: the first revocation's time stays
    again = daemon.request("PUT", f"{V}/apikey/revoke/{created['id']}", token=user_token)
    assert again.json["revokedAt"] == revoked.json["revokedAt"]


def test_a_user_cannot_revoke_anothers_key(daemon, admin_token, user_token):
    theirs = create_key(daemon, admin_token, roles=["ROLE_ADMIN"])
    assert_problem(daemon.request("PUT", f"{V}/apikey/revoke/{theirs['id']}", token=user_token), 404)
    assert daemon.request("GET", f"{V}/person/show/{theirs['userId']}", token=theirs["key"]).status == 200


def test_the_owners_demotion_disabling_and_deletion_stop_the_key(daemon, other, admin_token):
    owner = new_person(daemon, admin_token, roles=["ROLE_ADMIN", "ROLE_USER"])
    token = daemon.login(owner["username"], owner["password"])
    key = create_key(daemon, token, roles=["ROLE_ADMIN", "ROLE_USER"])["key"]
    assert other.request("GET", f"{V}/person/list", token=key).status == 200

    def update(**fields):
        reply = daemon.request("PUT", f"{V}/person/update/{owner['id']}", fields, token=admin_token)
        assert reply.status == 200, reply.body

    update(roles=["ROLE_USER"])  # demoted: the key keeps only what its owner holds
    assert_problem(daemon.request("GET", f"{V}/person/list", token=key), 403)
    assert wait_for(lambda: other.request("GET", f"{V}/person/list", token=key).status == 403, timeout=1.0)
    assert show(other, key, owner["id"]).status == 200
    update(enabled=False)
    assert_problem(show(daemon, key, owner["id"]), 401)
    assert wait_for(lambda: show(other, key, owner["id"]).status == 401, timeout=1.0)
    update(enabled=True)
    assert show(daemon, key, owner["id"]).status == 200
    assert daemon.request("DELETE", f"{V}/person/delete/{owner['id']}", token=admin_token).status == 200
    assert_problem(show(daemon, key, owner["id"]), 401)
    assert wait_for(lambda: show(other, key, owner["id"]).status == 401, timeout=1.0)


def test_the_owners_own_password_change_keeps_the_key_and_an_administrators_ends_it(daemon, admin_token):
    owner = new_person(daemon, admin_token, roles=["ROLE_USER"])
    token = daemon.login(owner["username"], owner["password"])
    key = create_key(daemon, token)["key"]
    path = f"{V}/person/update/{owner['id']}"
    own = daemon.request(
        "PUT", path, {"password": "own-new-password-1", "currentPassword": owner["password"]}, token=token
    )
    assert own.status == 200, own.body
    assert show(daemon, key, owner["id"]).status == 200
    time.sleep(0.01)  # the key is older than the reset to come
    assert daemon.request("PUT", path, {"password": "admin-set-password-1"}, token=admin_token).status == 200
    assert_problem(show(daemon, key, owner["id"]), 401)


# --- what a key never opens --------------------------------------------------------------------


def test_a_key_cannot_refresh_change_the_password_or_address_or_manage_keys(daemon, user_token, user_id):
    created = create_key(daemon, user_token)
    key = created["key"]
    refresh = daemon.request("GET", f"/refreshToken?name={USER[0]}", token=key, headers={"Cookie": "apid_refresh=x"})
    assert "API key" in assert_problem(refresh, 401)["detail"]
    assert "API key" in assert_problem(daemon.request("POST", "/logout", token=key), 401)["detail"]
    for change in ({"password": "a-new-password-9"}, {"email": "elsewhere@example.org"}):
        reply = daemon.request("PUT", f"{V}/person/update/{user_id}", {**change, "currentPassword": USER[1]}, token=key)
        assert "API key" in assert_problem(reply, 403)["detail"], change
    daemon.login(USER[0], USER[1])  # the password is unchanged
    assert show(daemon, key, user_id).json["email"] == USER[2]
    made = daemon.request("POST", f"{V}/apikey/create", {"name": "child", "roles": ["ROLE_USER"]}, token=key)
    assert_problem(made, 403)
    assert_problem(daemon.request("GET", f"{V}/apikey/list", token=key), 403)
    sibling = create_key(daemon, user_token)
    assert_problem(daemon.request("PUT", f"{V}/apikey/revoke/{sibling['id']}", token=key), 403)
    assert show(daemon, sibling["key"], user_id).status == 200
    # but it may revoke itself
    assert daemon.request("PUT", f"{V}/apikey/revoke/{created['id']}", token=key).status == 200
    assert wait_for(lambda: show(daemon, key, user_id).status == 401, timeout=1.0)


def test_the_last_use_is_recorded(daemon, user_token, user_id, database):
    created = create_key(daemon, user_token)
    assert show(daemon, created["key"], user_id).status == 200

    def last_used():
        row = database.execute("SELECT last_used_at FROM api_key WHERE id = ?", (created["id"],)).fetchone()
        return row["last_used_at"]

    assert wait_for(lambda: last_used() is not None, timeout=5)
    listed = daemon.request("GET", f"{V}/apikey/list?max=100", token=user_token).json
    (mine,) = [k for k in listed if k["id"] == created["id"]]
    used = datetime.fromisoformat(mine["lastUsedAt"])
    assert abs((datetime.now(UTC) - used).total_seconds()) < 30


# --- the command line --------------------------------------------------------------------------


def test_keys_are_created_listed_and_revoked_by_the_command_line(deployment, daemon, other, user_id):
    made = deployment.cli("key", "create", "--user", USER[0], "--name", "ci", "--role", "ROLE_USER")
    assert made.returncode == 0, made.stderr
    (key,) = [line.split(": ", 1)[1] for line in made.stdout.splitlines() if line.startswith("key: ")]
    assert show(daemon, key, user_id).status == 200
    assert show(other, key, user_id).status == 200
    listed = deployment.cli("key", "list", "--user", USER[0])
    assert listed.returncode == 0, listed.stderr
    (line,) = [line for line in listed.stdout.splitlines() if key[:17] in line]
    assert key not in listed.stdout and "\tci\t" in line and "active" in line
    key_id = line.split("\t")[0]
    revoked = deployment.cli("key", "revoke", key_id)
    assert revoked.returncode == 0, revoked.stderr
    assert wait_for(lambda: show(daemon, key, user_id).status == 401, timeout=1.0, interval=0.02)
    assert wait_for(lambda: show(other, key, user_id).status == 401, timeout=1.0, interval=0.02)
    beyond = deployment.cli("key", "create", "--user", USER[0], "--name", "up", "--role", "ROLE_ADMIN")
    assert beyond.returncode == 1 and "ROLE_ADMIN" in beyond.stderr


# --- rate limits -------------------------------------------------------------------------------


def test_a_key_is_rate_limited_as_its_own_caller(tmp_path):
    throttled = deployment_with_accounts(
        tmp_path, server={"apiThrottle": True}, api={"throttle": {"rateLimit": {"ROLE_USER": 3}, "expires": 60}}
    )
    with running_daemon(throttled) as daemon:
        token = daemon.login(USER[0], USER[1])
        key = create_key(daemon, token)["key"]  # the owner's first request
        owner_id = daemon.request("GET", f"{V}/apikey/list", token=token).json[0]["userId"]  # the second
        for _ in range(3):
            assert show(daemon, key, owner_id).status == 200
        assert_problem(show(daemon, key, owner_id), 429)
        # the owner's own count is apart: one request left
        assert daemon.request("GET", f"{V}/person/show/{owner_id}", token=token).status == 200
        other_key = create_key(daemon, daemon.login(ADMIN[0], ADMIN[1]), userId=owner_id)["key"]
        assert show(daemon, other_key, owner_id).status == 200  # another key, another count
