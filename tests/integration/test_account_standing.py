"""Access follows the account (issue 10, items 1 and 3), against the real daemon.

A token is only as good as its account now: demoted, disabled, locked, expired or deleted
accounts are refused on their next request, through v, b and c calls and plugin routes
alike, on the daemon that made the change at once and on another daemon sharing the
database within a second. A password change ends the account's other sessions (access
tokens and refresh cookies); the owner must give the current password; an administrator's
reset of another's password ends all of that account's sessions; refresh reuse ends the
family's access tokens too.
"""

from __future__ import annotations

import time
import uuid

import pytest

from assertions import assert_problem, error_fields
from harness import ADMIN, Daemon, V, deployment_with_accounts, running_daemon, wait_for
from sessions import claims_of, log_in, log_out, refresh

B = "/b0.1"
C = "/c0.1"


def account(daemon: Daemon, admin_token: str, *roles: str) -> tuple[int, str, str]:
    """A fresh enabled account with `roles`: (id, username, password)."""
    name = f"st-{uuid.uuid4().hex[:8]}"
    password = f"pw-{uuid.uuid4().hex[:12]}"
    reply = daemon.request(
        "POST",
        f"{V}/person/create",
        {
            "username": name,
            "password": password,
            "email": f"{name}@example.org",
            "roles": list(roles),
        },
        token=admin_token,
    )
    assert reply.status == 200, reply.body
    return reply.json["id"], name, password


def change(daemon: Daemon, admin_token: str, person_id: int, **fields) -> None:
    reply = daemon.request("PUT", f"{V}/person/update/{person_id}", fields, token=admin_token)
    assert reply.status == 200, reply.body


def calls(person_id: int) -> list[tuple[str, str, dict | None]]:
    """The same read through a single call, a batch, a chain and a plugin route."""
    return [
        ("GET", f"{V}/person/show/{person_id}", None),
        ("POST", f"{B}/person/show", {"batch": [{"id": person_id}]}),
        ("GET", f"{C}/person/show/{person_id}", None),
        ("GET", "/teamCount", None),
    ]


def all_refused(daemon: Daemon, token: str, person_id: int) -> None:
    for method, path, body in calls(person_id):
        reply = daemon.request(method, path, body, token=token)
        problem = assert_problem(reply, 401)
        assert "log in again" in problem["detail"], (path, problem)
        assert reply.headers["WWW-Authenticate"].startswith("Bearer"), path


@pytest.fixture(scope="module")
def other(deployment, daemon):
    """A second daemon on the module daemon's deployment: the same database."""
    with running_daemon(deployment) as running:
        yield running


# --- the account's standing ---------------------------------------------------------------------


def test_a_demoted_admin_loses_admin_rights_on_the_next_request(daemon, admin_token):
    admin_id, name, password = account(daemon, admin_token, "ROLE_ADMIN", "ROLE_USER")
    token = daemon.login(name, password)
    assert daemon.request("GET", f"{V}/person/list", token=token).status == 200
    change(daemon, admin_token, admin_id, roles=["ROLE_USER"])

    assert_problem(daemon.request("GET", f"{V}/person/list", token=token), 403)
    # the attack of the report: creating a new administrator with the old token
    created = daemon.request(
        "POST",
        f"{V}/person/create",
        {
            "username": "st-usurper",
            "password": "usurper-password",
            "email": "usurper@example.org",
            "roles": ["ROLE_ADMIN"],
        },
        token=token,
    )
    assert_problem(created, 403)
    assert (
        daemon.request("POST", "/authenticate", {"username": "st-usurper", "password": "usurper-password"}).status
        == 401
    )
    # nor can it give itself the role back: a user may not send `roles`
    again = daemon.request("PUT", f"{V}/person/update/{admin_id}", {"roles": ["ROLE_ADMIN"]}, token=token)
    assert "roles" in error_fields(assert_problem(again, 400))
    # what a user may do, it still may
    assert daemon.request("GET", f"{V}/person/show/{admin_id}", token=token).status == 200


@pytest.mark.parametrize("flag", [{"enabled": False}, {"accountLocked": True}, {"accountExpired": True}])
def test_a_disabled_locked_or_expired_account_is_refused_everywhere(daemon, admin_token, flag):
    person_id, name, password = account(daemon, admin_token, "ROLE_USER")
    token = daemon.login(name, password)
    assert daemon.request("GET", f"{V}/person/show/{person_id}", token=token).status == 200
    change(daemon, admin_token, person_id, **flag)
    all_refused(daemon, token, person_id)
    restored = {key: not value for key, value in flag.items()}
    change(daemon, admin_token, person_id, **restored)
    # the token was never revoked: the account is in good standing again
    assert daemon.request("GET", f"{V}/person/show/{person_id}", token=token).status == 200


def test_a_deleted_account_is_refused_and_its_logout_writes_nothing(daemon, admin_token):
    person_id, name, password = account(daemon, admin_token, "ROLE_USER")
    token, cookie = log_in(daemon, name, password)
    assert daemon.request("DELETE", f"{V}/person/delete/{person_id}", token=admin_token).status == 200
    all_refused(daemon, token, person_id)
    assert_problem(log_out(daemon, token, cookie), 401)
    assert_problem(refresh(daemon, name, token, cookie), 401)


def test_a_change_on_one_daemon_holds_on_another_within_a_second(daemon, other, admin_token):
    person_id, name, password = account(daemon, admin_token, "ROLE_ADMIN")
    token = other.login(name, password)
    assert other.request("GET", f"{V}/person/list", token=token).status == 200  # known to `other` now
    change(daemon, admin_token, person_id, roles=["ROLE_USER"])
    started = time.monotonic()
    assert wait_for(
        lambda: other.request("GET", f"{V}/person/list", token=token).status == 403, timeout=5, interval=0.05
    )
    print(f"\ndemotion on one daemon seen by the other after {time.monotonic() - started:.2f} s")
    change(daemon, admin_token, person_id, enabled=False)
    assert wait_for(
        lambda: other.request("GET", f"{V}/person/show/{person_id}", token=token).status == 401,
        timeout=5,
        interval=0.05,
    )


def test_a_change_made_by_the_command_line_is_seen_by_the_daemon(daemon, admin_token, deployment):
    """`apid user add` runs in its own process: the daemon learns of the new account (whose
    id may be one a deleted account held) through the change log."""
    person_id, name, password = account(daemon, admin_token, "ROLE_USER")
    token = daemon.login(name, password)
    done = deployment.cli(
        "user",
        "add",
        f"cli-{uuid.uuid4().hex[:6]}",
        "--email",
        f"cli-{uuid.uuid4().hex[:6]}@example.org",
        "--role",
        "ROLE_USER",
        "--password-stdin",
        input="cli-password-123\n",
    )
    assert done.returncode == 0, done.stderr
    assert daemon.request("GET", f"{V}/person/show/{person_id}", token=token).status == 200


# --- passwords and sessions ---------------------------------------------------------------------


def test_changing_ones_own_password_needs_the_current_one(daemon, admin_token):
    person_id, name, password = account(daemon, admin_token, "ROLE_USER")
    token = daemon.login(name, password)
    path = f"{V}/person/update/{person_id}"
    missing = daemon.request("PUT", path, {"password": "a-new-password-1"}, token=token)
    assert error_fields(assert_problem(missing, 400)) == {"currentPassword"}
    wrong = daemon.request(
        "PUT", path, {"password": "a-new-password-1", "currentPassword": "not-it-at-all"}, token=token
    )
    assert assert_problem(wrong, 403)["field"] == "currentPassword"
    # nothing changed: the old password still logs in, the new one does not
    assert daemon.request("POST", "/authenticate", {"username": name, "password": "a-new-password-1"}).status == 401
    daemon.login(name, password)
    right = daemon.request("PUT", path, {"password": "a-new-password-1", "currentPassword": password}, token=token)
    assert right.status == 200, right.body
    daemon.login(name, "a-new-password-1")
    # an administrator changing their own password is asked too
    admin_id = claims_of(admin_token)["sub"]
    own = daemon.request("PUT", f"{V}/person/update/{admin_id}", {"password": "admin-new-password"}, token=admin_token)
    assert error_fields(assert_problem(own, 400)) == {"currentPassword"}


def test_a_password_change_ends_every_other_session_of_the_account(daemon, admin_token):
    person_id, name, password = account(daemon, admin_token, "ROLE_USER")
    mine, my_cookie = log_in(daemon, name, password)
    theirs, their_cookie = log_in(daemon, name, password)
    reply = daemon.request(
        "PUT",
        f"{V}/person/update/{person_id}",
        {"password": "changed-password-1", "currentPassword": password},
        token=mine,
    )
    assert reply.status == 200, reply.body
    # the other login: its access token and its refresh cookie are dead
    assert_problem(daemon.request("GET", f"{V}/person/show/{person_id}", token=theirs), 401)
    assert_problem(refresh(daemon, name, theirs, their_cookie), 401)
    # the login that made the change goes on, and can still refresh
    assert daemon.request("GET", f"{V}/person/show/{person_id}", token=mine).status == 200
    assert refresh(daemon, name, mine, my_cookie).status == 200


def test_an_administrators_reset_ends_all_of_the_accounts_sessions(daemon, other, admin_token):
    person_id, name, password = account(daemon, admin_token, "ROLE_USER")
    token, cookie = log_in(daemon, name, password)
    elsewhere = other.login(name, password)
    assert other.request("GET", f"{V}/person/show/{person_id}", token=elsewhere).status == 200
    change(daemon, admin_token, person_id, password="reset-by-admin-1")
    assert_problem(daemon.request("GET", f"{V}/person/show/{person_id}", token=token), 401)
    assert_problem(refresh(daemon, name, token, cookie), 401)
    assert wait_for(
        lambda: other.request("GET", f"{V}/person/show/{person_id}", token=elsewhere).status == 401,
        timeout=5,
        interval=0.05,
    )
    fresh = daemon.login(name, "reset-by-admin-1")
    assert daemon.request("GET", f"{V}/person/show/{person_id}", token=fresh).status == 200
    # the administrator's own session was not touched
    assert daemon.request("GET", f"{V}/person/list", token=admin_token).status == 200


def test_logout_ends_every_access_token_of_the_login_and_is_idempotent(daemon, admin_token):
    person_id, name, password = account(daemon, admin_token, "ROLE_USER")
    first, cookie = log_in(daemon, name, password)
    time.sleep(0.01)
    refreshed = refresh(daemon, name, first, cookie)
    assert refreshed.status == 200, refreshed.body
    second = refreshed.json["token"]
    assert log_out(daemon, second, None).status == 204
    for token in (first, second):
        assert_problem(daemon.request("GET", f"{V}/person/show/{person_id}", token=token), 401)
    assert log_out(daemon, second, None).status == 204


@pytest.fixture(scope="module")
def quick_grace(tmp_path_factory):
    """A daemon whose refresh grace window is 1 s, access tokens living the default 15 min."""
    deployment = deployment_with_accounts(
        tmp_path_factory.mktemp("grace"), server={"secureCookies": False, "jwt": {"refreshGrace": 1}}
    )
    with running_daemon(deployment) as running:
        yield running


def test_refresh_reuse_ends_the_familys_access_tokens_too(quick_grace):
    admin_token = quick_grace.login(*ADMIN[:2])
    person_id, name, password = account(quick_grace, admin_token, "ROLE_USER")
    token, first = log_in(quick_grace, name, password)
    rotated = refresh(quick_grace, name, token, first)
    assert rotated.status == 200, rotated.body
    latest = rotated.json["token"]
    other, _ = log_in(quick_grace, name, password)
    time.sleep(1.5)
    assert_problem(refresh(quick_grace, name, token, first), 401)  # reuse: someone else holds the family
    for each in (token, latest):
        assert_problem(quick_grace.request("GET", f"{V}/person/show/{person_id}", token=each), 401)
    assert quick_grace.request("GET", f"{V}/person/show/{person_id}", token=other).status == 200
