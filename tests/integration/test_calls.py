"""Plain calls through the running daemon: person CRUD, request fields, roles, the team plugin.

Every write is checked by reading back what was stored, through the API itself.
"""

from __future__ import annotations

import itertools

import pytest

from assertions import ADMIN_FIELDS, USER_FIELDS, assert_problem
from harness import ADMIN, USER, V, create_team, everyone, new_person, show_person

_serial = itertools.count(1)


# --- create / show / list / update / delete -------------------------------------------------


def test_create_answers_id_and_version_and_stores_the_account(daemon, admin_token):
    created = daemon.request(
        "POST",
        f"{V}/person/create",
        {"username": "carol", "password": "carol-password-1", "email": "carol@example.com"},
        token=admin_token,
    )
    assert created.status == 200, created.body
    assert created.content_type == "application/json"
    assert set(created.json) == {"id", "version"}
    assert created.json["version"] == 0

    stored = show_person(daemon, admin_token, created.json["id"])
    assert stored["username"] == "carol"
    assert stored["email"] == "carol@example.com"
    assert stored["roles"] == ["ROLE_USER"]
    assert stored["enabled"] is True
    assert "password" not in stored
    # The password was stored (hashed): the new account can log in with it.
    token = daemon.login("carol", "carol-password-1")
    assert show_person(daemon, token, created.json["id"])["username"] == "carol"


def test_admin_may_set_roles_and_enabled_on_create(daemon, admin_token):
    person = new_person(daemon, admin_token, roles=["ROLE_ADMIN"], enabled=False)
    stored = show_person(daemon, admin_token, person["id"])
    assert stored["roles"] == ["ROLE_ADMIN"]
    assert stored["enabled"] is False
    refused = daemon.request("POST", "/authenticate", {"username": person["username"], "password": person["password"]})
    assert_problem(refused, 401)


def test_list_returns_every_account_in_id_order_a_page_at_a_time(daemon, admin_token):
    first = new_person(daemon, admin_token)
    second = new_person(daemon, admin_token)
    people = everyone(daemon, admin_token)
    ids = [p["id"] for p in people]
    assert ids == sorted(ids)
    assert {first["id"], second["id"]} <= set(ids)
    assert {p["username"] for p in people} >= {ADMIN[0], USER[0], first["username"], second["username"]}
    assert all(set(p) == ADMIN_FIELDS for p in people)

    position = ids.index(first["id"])
    page = daemon.request("GET", f"{V}/person/list?offset={position}&max=1", token=admin_token)
    assert page.status == 200
    assert [p["id"] for p in page.json] == [first["id"]]


def test_update_changes_what_is_stored_and_raises_the_version(daemon, admin_token):
    person = new_person(daemon, admin_token)
    reply = daemon.request(
        "PUT",
        f"{V}/person/update/{person['id']}",
        {"email": "changed@example.com", "accountLocked": True},
        token=admin_token,
    )
    assert reply.status == 200, reply.body
    assert reply.json == {"id": person["id"], "version": 1}

    stored = show_person(daemon, admin_token, person["id"])
    assert stored["email"] == "changed@example.com"
    assert stored["accountLocked"] is True
    assert stored["version"] == 1
    assert stored["username"] == person["username"]


def test_update_of_the_password_changes_which_password_logs_in(daemon, admin_token):
    person = new_person(daemon, admin_token)
    token = daemon.login(person["username"], person["password"])
    reply = daemon.request(
        "PUT",
        f"{V}/person/update/{person['id']}",
        {"password": "a-brand-new-secret", "currentPassword": person["password"]},
        token=token,
    )
    assert reply.status == 200, reply.body
    old = daemon.request("POST", "/authenticate", {"username": person["username"], "password": person["password"]})
    assert_problem(old, 401)
    assert daemon.login(person["username"], "a-brand-new-secret")


def test_delete_removes_the_account(daemon, admin_token):
    person = new_person(daemon, admin_token)
    reply = daemon.request("DELETE", f"{V}/person/delete/{person['id']}", token=admin_token)
    assert reply.status == 200, reply.body
    assert reply.json == {"id": person["id"]}

    assert_problem(daemon.request("GET", f"{V}/person/show/{person['id']}", token=admin_token), 404)
    assert person["id"] not in [p["id"] for p in everyone(daemon, admin_token)]
    assert_problem(daemon.request("DELETE", f"{V}/person/delete/{person['id']}", token=admin_token), 404)
    gone = daemon.request("POST", "/authenticate", {"username": person["username"], "password": person["password"]})
    assert_problem(gone, 401)


def test_an_administrator_cannot_delete_their_own_account(daemon, admin_token):
    assert_problem(daemon.request("DELETE", f"{V}/person/delete/1", token=admin_token), 409)
    assert show_person(daemon, admin_token, 1)["username"] == ADMIN[0]


def test_show_of_a_missing_id_is_404(daemon, admin_token):
    body = assert_problem(daemon.request("GET", f"{V}/person/show/999999", token=admin_token), 404)
    assert "999999" in body["detail"]


# --- where request fields come from --------------------------------------------------------


def test_id_from_the_path(daemon, admin_token, user_id):
    reply = daemon.request("GET", f"{V}/person/show/{user_id}", token=admin_token)
    assert reply.status == 200
    assert reply.json["id"] == user_id
    assert reply.json["username"] == USER[0]


def test_id_from_the_query(daemon, admin_token, user_id):
    reply = daemon.request("GET", f"{V}/person/show?id={user_id}", token=admin_token)
    assert reply.status == 200, reply.body
    assert reply.json["username"] == USER[0]


def test_id_from_the_json_body(daemon, admin_token, user_id):
    reply = daemon.request("GET", f"{V}/person/show", {"id": user_id}, token=admin_token)
    assert reply.status == 200, reply.body
    assert reply.json["username"] == USER[0]


def test_body_wins_over_the_path_id(daemon, admin_token, user_id):
    reply = daemon.request("GET", f"{V}/person/show/1", {"id": user_id}, token=admin_token)
    assert reply.status == 200, reply.body
    assert reply.json["id"] == user_id


def test_body_wins_over_the_query_id(daemon, admin_token, user_id):
    reply = daemon.request("GET", f"{V}/person/show?id=1", {"id": user_id}, token=admin_token)
    assert reply.status == 200, reply.body
    assert reply.json["id"] == user_id


def test_body_wins_over_the_path_id_on_update(daemon, admin_token):
    path_person = new_person(daemon, admin_token)
    body_person = new_person(daemon, admin_token)
    reply = daemon.request(
        "PUT",
        f"{V}/person/update/{path_person['id']}",
        {"id": body_person["id"], "email": "body-wins@example.com"},
        token=admin_token,
    )
    assert reply.status == 200, reply.body
    assert reply.json["id"] == body_person["id"]
    assert show_person(daemon, admin_token, body_person["id"])["email"] == "body-wins@example.com"
    assert show_person(daemon, admin_token, path_person["id"])["email"] == path_person["email"]


def test_query_fields_are_typed_like_body_fields(daemon, admin_token):
    reply = daemon.request("GET", f"{V}/person/list?max=1", token=admin_token)
    assert reply.status == 200
    assert len(reply.json) == 1


@pytest.mark.parametrize("path", ["/v0.1/person/show/1/", "/v0.1/person/list/", "/v0.1/person/show/?id=1"])
def test_trailing_slash_is_accepted(daemon, admin_token, path):
    reply = daemon.request("GET", path, token=admin_token)
    assert reply.status == 200, reply.body
    first = reply.json[0] if isinstance(reply.json, list) else reply.json
    assert first["id"] == 1


# --- roles: who sees what, who may do what --------------------------------------------------


def test_a_user_sees_fewer_fields_than_an_administrator(daemon, admin_token, user_token, user_id):
    as_user = show_person(daemon, user_token, user_id)
    as_admin = show_person(daemon, admin_token, user_id)
    assert set(as_user) == USER_FIELDS
    assert set(as_admin) == ADMIN_FIELDS
    assert {k: as_admin[k] for k in USER_FIELDS} == as_user


def test_a_user_may_show_their_own_record(daemon, user_token, user_id):
    assert show_person(daemon, user_token, user_id)["username"] == USER[0]
    by_query = daemon.request("GET", f"{V}/person/show?id={user_id}", token=user_token)
    assert by_query.status == 200
    assert by_query.json["id"] == user_id


def test_a_user_may_not_show_another_record(daemon, user_token):
    body = assert_problem(daemon.request("GET", f"{V}/person/show/1", token=user_token), 403)
    assert ADMIN[2] not in str(body)


def test_a_user_may_update_their_own_email(daemon, admin_token, user_token, user_id):
    before = show_person(daemon, admin_token, user_id)
    reply = daemon.request(
        "PUT",
        f"{V}/person/update/{user_id}",
        {"email": "alice.new@example.com", "currentPassword": USER[1]},
        token=user_token,
    )
    assert reply.status == 200, reply.body
    after = show_person(daemon, admin_token, user_id)
    assert after["email"] == "alice.new@example.com"
    assert after["version"] == before["version"] + 1
    assert after["roles"] == before["roles"]


def test_a_user_may_not_update_another_record(daemon, admin_token, user_token):
    before = show_person(daemon, admin_token, 1)
    reply = daemon.request("PUT", f"{V}/person/update/1", {"email": "stolen@example.com"}, token=user_token)
    assert_problem(reply, 403)
    assert show_person(daemon, admin_token, 1) == before


def test_a_user_may_not_update_another_record_through_the_body_id(daemon, admin_token, user_token, user_id):
    before = show_person(daemon, admin_token, 1)
    reply = daemon.request(
        "PUT", f"{V}/person/update/{user_id}", {"id": 1, "email": "stolen@example.com"}, token=user_token
    )
    assert_problem(reply, 403)
    assert show_person(daemon, admin_token, 1) == before


def test_a_user_may_not_list(daemon, user_token):
    assert_problem(daemon.request("GET", f"{V}/person/list", token=user_token), 403)


def test_a_user_may_not_create(daemon, admin_token, user_token):
    before = everyone(daemon, admin_token)
    reply = daemon.request(
        "POST",
        f"{V}/person/create",
        {"username": "mallory", "password": "mallory-password", "email": "mallory@example.com"},
        token=user_token,
    )
    assert_problem(reply, 403)
    assert everyone(daemon, admin_token) == before


def test_a_user_may_not_delete(daemon, admin_token, user_token):
    person = new_person(daemon, admin_token)
    assert_problem(daemon.request("DELETE", f"{V}/person/delete/{person['id']}", token=user_token), 403)
    assert show_person(daemon, admin_token, person["id"])["username"] == person["username"]


# --- conflicts ---------------------------------------------------------------------------------


def test_a_stale_version_is_a_409_and_keeps_the_newer_data(daemon, admin_token):
    person = new_person(daemon, admin_token)
    first = daemon.request(
        "PUT", f"{V}/person/update/{person['id']}", {"version": 0, "email": "first@example.com"}, token=admin_token
    )
    assert first.status == 200, first.body
    assert first.json["version"] == 1

    stale = daemon.request(
        "PUT", f"{V}/person/update/{person['id']}", {"version": 0, "email": "second@example.com"}, token=admin_token
    )
    assert_problem(stale, 409)

    stored = show_person(daemon, admin_token, person["id"])
    assert stored["email"] == "first@example.com"
    assert stored["version"] == 1


def test_the_current_version_updates(daemon, admin_token):
    person = new_person(daemon, admin_token)
    version = show_person(daemon, admin_token, person["id"])["version"]
    reply = daemon.request(
        "PUT", f"{V}/person/update/{person['id']}", {"version": version, "enabled": False}, token=admin_token
    )
    assert reply.status == 200, reply.body
    assert show_person(daemon, admin_token, person["id"])["enabled"] is False


@pytest.mark.parametrize("clash", ["username", "username-case", "email"])
def test_a_taken_username_or_email_on_create_is_409_and_creates_nothing(daemon, admin_token, clash):
    existing = new_person(daemon, admin_token)
    n = next(_serial)
    fields = {"username": f"fresh{n}", "password": "fresh-password-1", "email": f"fresh{n}@example.com"}
    if clash == "username":
        fields["username"] = existing["username"]
    elif clash == "username-case":
        fields["username"] = existing["username"].upper()
    else:
        fields["email"] = existing["email"]
    before = everyone(daemon, admin_token)

    reply = daemon.request("POST", f"{V}/person/create", fields, token=admin_token)
    assert_problem(reply, 409)
    assert everyone(daemon, admin_token) == before


def test_a_taken_username_on_update_is_409_and_changes_nothing(daemon, admin_token):
    first = new_person(daemon, admin_token)
    second = new_person(daemon, admin_token)
    before = show_person(daemon, admin_token, second["id"])
    reply = daemon.request(
        "PUT", f"{V}/person/update/{second['id']}", {"username": first["username"]}, token=admin_token
    )
    assert_problem(reply, 409)
    assert show_person(daemon, admin_token, second["id"]) == before


# --- API versions and the third-party plugin ------------------------------------------------


@pytest.fixture(scope="module")
def team(daemon, admin_token, user_id) -> dict:
    return create_team(daemon, admin_token, "Platform", user_id, 1250.5)


def test_the_sample_plugin_creates_a_team(team, user_id):
    assert set(team) == {"id", "name", "leaderId", "budget"}
    assert team["name"] == "Platform"
    assert team["leaderId"] == user_id
    assert team["budget"] == 1250.5


def test_the_sample_plugin_shows_the_team_with_its_budget_to_an_administrator(daemon, admin_token, team):
    reply = daemon.request("GET", f"{V}/team/show/{team['id']}", token=admin_token)
    assert reply.status == 200, reply.body
    assert reply.json == team


def test_the_sample_plugin_hides_the_budget_from_a_user(daemon, user_token, team):
    reply = daemon.request("GET", f"{V}/team/show/{team['id']}", token=user_token)
    assert reply.status == 200, reply.body
    assert reply.json == {"id": team["id"], "name": "Platform", "leaderId": team["leaderId"]}


def test_the_sample_plugin_lists_teams(daemon, user_token, team):
    reply = daemon.request("GET", f"{V}/team/list", token=user_token)
    assert reply.status == 200, reply.body
    assert {"id": team["id"], "name": "Platform", "leaderId": team["leaderId"]} in reply.json


def test_a_user_may_not_create_a_team(daemon, admin_token, user_token, team):
    before = daemon.request("GET", f"{V}/team/list", token=admin_token).json
    reply = daemon.request("POST", f"{V}/team/create", {"name": "Rogue", "leaderId": 1}, token=user_token)
    assert_problem(reply, 403)
    assert daemon.request("GET", f"{V}/team/list", token=admin_token).json == before


@pytest.mark.parametrize("who", ["admin", "user"])
def test_api_version_2_of_team_show_returns_only_id_and_name(daemon, admin_token, user_token, team, who):
    token = admin_token if who == "admin" else user_token
    reply = daemon.request("GET", f"/v0.1-2/team/show/{team['id']}", token=token)
    assert reply.status == 200, reply.body
    assert reply.json == {"id": team["id"], "name": "Platform"}


def test_api_version_2_has_only_the_actions_it_declares(daemon, admin_token, team):
    assert_problem(daemon.request("GET", "/v0.1-2/team/list", token=admin_token), 404)


def test_the_stable_api_version_can_be_named_explicitly(daemon, admin_token, team):
    reply = daemon.request("GET", f"/v0.1-1/team/show/{team['id']}", token=admin_token)
    assert reply.status == 200, reply.body
    assert reply.json == team
