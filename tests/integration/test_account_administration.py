"""Administering accounts (issue 33, item 3), against the real daemon: an API key, whatever its
roles, reads accounts but never creates, changes or deletes one; an administrator cannot demote,
disable, lock or expire their own account; the last active administrator is never removed,
through a single call, a batch or a chain, nor by two administrators demoting each other at once."""

from __future__ import annotations

import threading

import pytest

from assertions import assert_problem
from harness import ADMIN, V, create_team, deployment_with_accounts, new_person, person_fields, running_daemon

B = "/b0.1"
C = "/c0.1"
INTERACTIVE = "administering accounts needs an interactive login"


def admin_key(deployment) -> str:
    """A ROLE_ADMIN key of the administrator, made on the server (`apid key create`)."""
    made = deployment.cli("key", "create", "--user", ADMIN[0], "--name", "ops", "--role", "ROLE_ADMIN")
    assert made.returncode == 0, made.stderr
    (key,) = [line.split(": ", 1)[1] for line in made.stdout.splitlines() if line.startswith("key: ")]
    return key


def stored(database, person_id: int):
    return database.execute("SELECT * FROM person WHERE id = ?", (person_id,)).fetchone()


def roles_stored(database, person_id: int) -> set[str]:
    rows = database.execute(
        "SELECT r.authority FROM person_role pr JOIN role r ON r.id = pr.role_id WHERE pr.person_id = ?",
        (person_id,),
    )
    return {row[0] for row in rows}


# --- the reproduction: an administrator's key makes an administrator ----------------------------


def test_an_administrators_key_cannot_make_an_administrator(deployment, daemon, database):
    key = admin_key(deployment)
    made = person_fields("mallory")
    reply = daemon.request("POST", f"{V}/person/create", {**made, "roles": ["ROLE_ADMIN"]}, token=key)
    problem = assert_problem(reply, 403)
    assert INTERACTIVE in problem["detail"]
    assert database.execute("SELECT 1 FROM person WHERE username = ?", (made["username"],)).fetchone() is None
    assert_problem(
        daemon.request("POST", "/authenticate", {"username": made["username"], "password": made["password"]}), 401
    )


def test_a_key_changes_and_deletes_no_account_but_reads_them(deployment, daemon, admin_token, user_id, database):
    key = admin_key(deployment)
    before = tuple(stored(database, 1))
    for change in (
        {"password": "taken-over-password-1"},
        {"email": "mallory@example.org"},
        {"roles": ["ROLE_ADMIN"]},
        {"enabled": False},
        {"accountLocked": True},
        {"username": "renamed"},
    ):
        for target in (1, user_id):
            reply = daemon.request("PUT", f"{V}/person/update/{target}", change, token=key)
            assert INTERACTIVE in assert_problem(reply, 403)["detail"], (change, target)
    batch = daemon.request("POST", f"{B}/person/update", {"batch": [{"id": 1, "email": "m@example.org"}]}, token=key)
    assert INTERACTIVE in batch.body.decode() and batch.status in (207, 403), batch.body
    assert (
        INTERACTIVE
        in assert_problem(daemon.request("DELETE", f"{V}/person/delete/{user_id}", token=key), 403)["detail"]
    )
    assert tuple(stored(database, 1)) == before
    assert stored(database, user_id) is not None and roles_stored(database, user_id) == {"ROLE_USER"}
    assert daemon.request("GET", f"{V}/person/show/1", token=key).status == 200
    assert daemon.request("GET", f"{V}/person/list", token=key).status == 200
    assert daemon.login(ADMIN[0], ADMIN[1])  # the password is unchanged


# --- an administrator's own account, and the last one -------------------------------------------


@pytest.mark.parametrize(
    "change", [{"roles": ["ROLE_USER"]}, {"enabled": False}, {"accountLocked": True}, {"accountExpired": True}]
)
def test_an_administrator_cannot_demote_disable_or_lock_themselves(daemon, admin_token, database, change):
    before = tuple(stored(database, 1))
    problem = assert_problem(daemon.request("PUT", f"{V}/person/update/1", change, token=admin_token), 409)
    assert "your own account" in problem["detail"]
    assert tuple(stored(database, 1)) == before and roles_stored(database, 1) == {"ROLE_ADMIN"}


def test_two_administrators_demoting_each_other_at_once_leave_one(tmp_path):
    """The reproduction of the contract test that locked the only administrator out: whatever
    the order, one administrator stays (the other's call is a 409, or a 403 once demoted)."""
    with running_daemon(deployment_with_accounts(tmp_path)) as daemon:
        token = daemon.login(ADMIN[0], ADMIN[1])
        second = new_person(daemon, token, roles=["ROLE_ADMIN"])
        tokens = {1: token, second["id"]: daemon.login(second["username"], second["password"])}
        answers: dict[int, int] = {}
        start = threading.Barrier(2)

        def demote(target: int, caller: int) -> None:
            start.wait()
            path = f"{V}/person/update/{target}"
            answers[target] = daemon.request("PUT", path, {"roles": ["ROLE_USER"]}, token=tokens[caller]).status

        threads = [threading.Thread(target=demote, args=pair) for pair in ((1, second["id"]), (second["id"], 1))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert sorted(answers.values()) in ([200, 403], [200, 409]), answers
        people = daemon.request(
            "GET", f"{V}/person/list", token=tokens[next(t for t, s in answers.items() if s != 200)]
        )
        assert people.status == 200, people.body
        assert [p["id"] for p in people.json if "ROLE_ADMIN" in p["roles"]] == [
            next(t for t, s in answers.items() if s != 200)
        ]


def test_an_administrators_own_account_is_kept_through_batch_and_chain(daemon, admin_token, database):
    before = tuple(stored(database, 1))
    second = new_person(daemon, admin_token)
    for element in ({"id": 1, "accountLocked": True}, {"id": 1, "roles": ["ROLE_USER"]}):
        body = {"batch": [{"id": second["id"], "email": f"b{second['id']}@example.com"}, element], "combine": True}
        reply = daemon.request("POST", f"{B}/person/update", body, token=admin_token)
        assert reply.status == 207, reply.body
        (error,) = reply.json["errors"]
        assert error["status"] == 409 and error["index"] == 1 and "your own account" in error["detail"], error
    team = create_team(daemon, admin_token, "admins", 1, 1.0)
    chain = {"enabled": False, "chain": {"key": "leaderId", "type": "postchain", "order": {"person/update": "return"}}}
    reply = daemon.request("PUT", f"{C}/team/show/{team['id']}", chain, token=admin_token)
    assert "your own account" in assert_problem(reply, 409)["detail"]
    assert tuple(stored(database, 1))[:8] == before[:8] and roles_stored(database, 1) == {"ROLE_ADMIN"}
    assert stored(database, 1)["enabled"] and not stored(database, 1)["account_locked"]
