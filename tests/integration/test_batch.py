"""Batch calls through the running daemon: `POST /b{app}[-{api}]/{controller}/{action}`.

Every rule of SPEC.md "Batch call" and DESIGN.md 4.6: outputs with and without `combine`,
207 with `data` and `errors`, the BATCH role list checked before any element runs, each
element authorised and field-filtered on its own, `batchLimit`, malformed bodies, methods,
versions. Every write is checked by reading back what was stored through `/v` calls.
"""

from __future__ import annotations

import json

import pytest

from assertions import ADMIN_FIELDS, PROBLEM_MEMBERS, USER_FIELDS, assert_json, assert_problem
from harness import (
    ADMIN,
    REPO,
    USER,
    V,
    create_team,
    deployment_with_accounts,
    everyone,
    new_person,
    person_fields,
    person_named,
    running_daemon,
    show_person,
)

B = "/b0.1"
TEAM_V1_FIELDS = {"id", "name", "leaderId", "budget"}
SAMPLE_TEAM_IOSTATE = REPO / "tests/sample_plugin/apid_sample/iostate/team.json"


# --- helpers -----------------------------------------------------------------------------------


def assert_element_problem(error: dict, status: int, index: int, instance: str) -> None:
    """One entry of a 207's `errors`: the element's problem plus its index."""
    assert error.keys() >= PROBLEM_MEMBERS, error
    assert error["status"] == status, error
    assert error["index"] == index, error
    assert error["instance"] == instance, error
    assert error["type"].startswith("urn:apid:problem:"), error


def usernames(daemon, admin_token) -> set[str]:
    return {p["username"] for p in everyone(daemon, admin_token)}


@pytest.fixture(scope="module")
def team(daemon, admin_token, user_id) -> dict:
    return create_team(daemon, admin_token, "Batchers", user_id, 99.5)


# --- outputs: combine true, false, absent ----------------------------------------------------


def test_combine_true_answers_every_output_in_element_order(daemon, admin_token):
    first = new_person(daemon, admin_token)
    second = new_person(daemon, admin_token)
    reply = daemon.request(
        "POST",
        f"{B}/person/show",
        {"batch": [{"id": second["id"]}, {"id": 1}, {"id": first["id"]}], "combine": True},
        token=admin_token,
    )
    body = assert_json(reply, 200)
    assert isinstance(body, list)
    assert [p["id"] for p in body] == [second["id"], 1, first["id"]]
    assert body == [
        show_person(daemon, admin_token, second["id"]),
        show_person(daemon, admin_token, 1),
        show_person(daemon, admin_token, first["id"]),
    ]
    assert [p["username"] for p in body] == [second["username"], ADMIN[0], first["username"]]
    assert all(set(p) == ADMIN_FIELDS for p in body)


@pytest.mark.parametrize("combine", [False, "absent"])
def test_without_combine_only_the_last_output_is_answered(daemon, admin_token, combine):
    first = new_person(daemon, admin_token)
    second = new_person(daemon, admin_token)
    body = {"batch": [{"id": first["id"]}, {"id": 1}, {"id": second["id"]}]}
    if combine != "absent":
        body["combine"] = combine
    reply = daemon.request("POST", f"{B}/person/show", body, token=admin_token)
    answer = assert_json(reply, 200)
    assert isinstance(answer, dict)
    assert answer == show_person(daemon, admin_token, second["id"])
    assert answer["username"] == second["username"]


@pytest.mark.parametrize("combine, as_list", [("true", True), ("false", False), (True, True), (False, False)])
def test_combine_accepts_booleans_and_the_strings_true_and_false(daemon, admin_token, user_id, combine, as_list):
    reply = daemon.request(
        "POST", f"{B}/person/show", {"batch": [{"id": 1}, {"id": user_id}], "combine": combine}, token=admin_token
    )
    body = assert_json(reply, 200)
    if as_list:
        assert [p["id"] for p in body] == [1, user_id]
    else:
        assert isinstance(body, dict)
        assert body["id"] == user_id
        assert body["username"] == USER[0]


@pytest.mark.parametrize("combine", ["yes", 1, [], {"x": True}])
def test_a_combine_that_is_not_true_or_false_is_400_and_nothing_runs(daemon, admin_token, combine):
    fields = person_fields()
    reply = daemon.request("POST", f"{B}/person/create", {"batch": [fields], "combine": combine}, token=admin_token)
    body = assert_problem(reply, 400, f"{B}/person/create")
    assert {e["field"] for e in body["errors"]} == {"combine"}
    assert fields["username"] not in usernames(daemon, admin_token)


# --- non-safe targets: every element stored, in order ----------------------------------------


def test_a_batch_create_stores_every_element_in_order(daemon, admin_token):
    elements = [person_fields() for _ in range(3)]
    reply = daemon.request("POST", f"{B}/person/create", {"batch": elements, "combine": True}, token=admin_token)
    body = assert_json(reply, 200)
    assert len(body) == 3
    assert all(set(out) == {"id", "version"} and out["version"] == 0 for out in body)
    ids = [out["id"] for out in body]
    assert ids == sorted(ids) and len(set(ids)) == 3  # created one after another, in element order
    for out, sent in zip(body, elements, strict=True):
        stored = show_person(daemon, admin_token, out["id"])
        assert stored["username"] == sent["username"]
        assert stored["email"] == sent["email"]
        assert stored["roles"] == ["ROLE_USER"]
    # the passwords were stored too: each new account can log in with its own
    for sent in elements:
        assert daemon.login(sent["username"], sent["password"])


def test_a_batch_create_without_combine_answers_the_last_and_stores_all(daemon, admin_token):
    elements = [person_fields() for _ in range(3)]
    reply = daemon.request("POST", f"{B}/person/create", {"batch": elements}, token=admin_token)
    body = assert_json(reply, 200)
    assert set(body) == {"id", "version"}
    stored = [person_named(daemon, admin_token, sent["username"]) for sent in elements]
    assert all(s is not None for s in stored), stored
    assert [s["email"] for s in stored] == [sent["email"] for sent in elements]
    ids = [s["id"] for s in stored]
    assert ids == sorted(ids)
    assert body["id"] == ids[-1]


def test_a_batch_update_changes_every_element(daemon, admin_token):
    first = new_person(daemon, admin_token)
    second = new_person(daemon, admin_token)
    reply = daemon.request(
        "POST",
        f"{B}/person/update",
        {
            "batch": [
                {"id": first["id"], "email": "b-up-1@example.com"},
                {"id": second["id"], "email": "b-up-2@example.com", "accountLocked": True},
            ],
            "combine": True,
        },
        token=admin_token,
    )
    assert assert_json(reply, 200) == [{"id": first["id"], "version": 1}, {"id": second["id"], "version": 1}]
    assert show_person(daemon, admin_token, first["id"])["email"] == "b-up-1@example.com"
    after = show_person(daemon, admin_token, second["id"])
    assert after["email"] == "b-up-2@example.com"
    assert after["accountLocked"] is True


def test_later_update_elements_see_earlier_ones(daemon, admin_token):
    """Non-safe elements run one after another: the second update sends the version the first made."""
    person = new_person(daemon, admin_token)
    reply = daemon.request(
        "POST",
        f"{B}/person/update",
        {
            "batch": [
                {"id": person["id"], "version": 0, "email": "seq-1@example.com"},
                {"id": person["id"], "version": 1, "email": "seq-2@example.com"},
            ],
            "combine": True,
        },
        token=admin_token,
    )
    assert assert_json(reply, 200) == [{"id": person["id"], "version": 1}, {"id": person["id"], "version": 2}]
    stored = show_person(daemon, admin_token, person["id"])
    assert stored["email"] == "seq-2@example.com"
    assert stored["version"] == 2


def test_a_batch_delete_is_posted_and_removes_every_element(daemon, admin_token):
    first = new_person(daemon, admin_token)
    second = new_person(daemon, admin_token)
    reply = daemon.request(
        "POST", f"{B}/person/delete", {"batch": [{"id": first["id"]}, {"id": second["id"]}]}, token=admin_token
    )
    assert assert_json(reply, 200) == {"id": second["id"]}
    for person in (first, second):
        assert_problem(daemon.request("GET", f"{V}/person/show/{person['id']}", token=admin_token), 404)
    assert not {first["username"], second["username"]} & usernames(daemon, admin_token)


# --- failing elements: 207 with data and errors ----------------------------------------------


@pytest.mark.parametrize("combine", [True, False])
def test_a_failing_show_element_gives_207_with_data_and_errors(daemon, admin_token, combine):
    person = new_person(daemon, admin_token)
    reply = daemon.request(
        "POST",
        f"{B}/person/show",
        {"batch": [{"id": 999999}, {"id": person["id"]}], "combine": combine},
        token=admin_token,
    )
    body = assert_json(reply, 207)
    assert set(body) == {"data", "errors"}
    expected = show_person(daemon, admin_token, person["id"])
    assert body["data"] == ([None, expected] if combine else expected)
    assert len(body["errors"]) == 1
    error = body["errors"][0]
    assert_element_problem(error, 404, 0, f"{B}/person/show")
    assert error["type"] == "urn:apid:problem:not-found"
    assert "999999" in error["detail"]


@pytest.mark.parametrize("combine", [True, False])
def test_when_the_last_element_fails_data_holds_null_in_its_place(daemon, admin_token, combine):
    reply = daemon.request(
        "POST", f"{B}/person/show", {"batch": [{"id": 1}, {"id": 888888}], "combine": combine}, token=admin_token
    )
    body = assert_json(reply, 207)
    assert body["data"] == ([show_person(daemon, admin_token, 1), None] if combine else None)
    assert [e["index"] for e in body["errors"]] == [1]
    assert_element_problem(body["errors"][0], 404, 1, f"{B}/person/show")


@pytest.mark.parametrize("combine", [True, False])
def test_a_failing_create_element_does_not_stop_the_others(daemon, admin_token, combine):
    """Element 1 reuses element 0's username: a 409 only because element 0 ran first."""
    first, third = person_fields(), person_fields()
    clash = {**person_fields(), "username": first["username"]}
    reply = daemon.request(
        "POST", f"{B}/person/create", {"batch": [first, clash, third], "combine": combine}, token=admin_token
    )
    body = assert_json(reply, 207)
    stored_first = person_named(daemon, admin_token, first["username"])
    stored_third = person_named(daemon, admin_token, third["username"])
    assert stored_first is not None and stored_third is not None
    assert stored_first["email"] == first["email"]  # not the clashing element's email
    assert stored_third["email"] == third["email"]
    assert clash["email"] not in {p["email"] for p in everyone(daemon, admin_token)}
    outputs = [{"id": stored_first["id"], "version": 0}, None, {"id": stored_third["id"], "version": 0}]
    assert body["data"] == (outputs if combine else outputs[-1])
    assert len(body["errors"]) == 1
    assert_element_problem(body["errors"][0], 409, 1, f"{B}/person/create")
    assert body["errors"][0]["type"] == "urn:apid:problem:conflict"


def test_every_failing_element_is_reported(daemon, admin_token):
    reply = daemon.request(
        "POST",
        f"{B}/person/show",
        {"batch": [{"id": 777771}, {"id": 1}, {"id": 777772}, {"id": "one"}], "combine": True},
        token=admin_token,
    )
    body = assert_json(reply, 207)
    assert body["data"] == [None, show_person(daemon, admin_token, 1), None, None]
    assert [(e["index"], e["status"]) for e in body["errors"]] == [(0, 404), (2, 404), (3, 400)]
    assert "777771" in body["errors"][0]["detail"]
    assert "777772" in body["errors"][1]["detail"]
    assert {e["field"] for e in body["errors"][2]["errors"]} == {"id"}


@pytest.mark.parametrize("combine", [True, False])
def test_a_batch_whose_every_element_fails_is_still_207(daemon, admin_token, combine):
    reply = daemon.request(
        "POST", f"{B}/person/show", {"batch": [{"id": 666661}, {"id": 666662}], "combine": combine}, token=admin_token
    )
    body = assert_json(reply, 207)
    assert body["data"] == ([None, None] if combine else None)
    assert [(e["index"], e["status"]) for e in body["errors"]] == [(0, 404), (1, 404)]


# --- roles: BATCH list before anything runs, then each element on its own -------------------


def test_a_role_not_in_the_batch_list_is_403_before_any_element_runs(daemon, admin_token, user_token, user_id):
    before = show_person(daemon, admin_token, user_id)
    reply = daemon.request(
        "POST",
        f"{B}/person/update",
        {"batch": [{"id": user_id, "email": "alice.batched@example.com"}]},
        token=user_token,
    )
    body = assert_problem(reply, 403, f"{B}/person/update")
    assert "batch" in body["detail"]
    assert "index" not in body
    assert show_person(daemon, admin_token, user_id) == before


def test_the_same_update_is_allowed_to_the_user_as_a_plain_call(daemon, admin_token, user_token, user_id):
    """So the 403 above comes from the BATCH list, not from the update itself."""
    reply = daemon.request(
        "PUT",
        f"{V}/person/update/{user_id}",
        {"email": "alice.plain@example.com", "currentPassword": USER[1]},
        token=user_token,
    )
    assert reply.status == 200, reply.body
    assert show_person(daemon, admin_token, user_id)["email"] == "alice.plain@example.com"


def test_a_user_may_not_batch_create(daemon, admin_token, user_token):
    fields = person_fields()
    reply = daemon.request("POST", f"{B}/person/create", {"batch": [fields]}, token=user_token)
    assert_problem(reply, 403)
    assert fields["username"] not in usernames(daemon, admin_token)


def test_an_endpoint_without_batch_roles_cannot_be_batched_even_by_an_administrator(daemon, admin_token, team):
    assert daemon.request("GET", f"{V}/team/list", token=admin_token).status == 200
    body = assert_problem(daemon.request("POST", f"{B}/team/list", {"batch": [{}]}, token=admin_token), 403)
    assert "batch" in body["detail"]


def test_an_element_with_a_field_the_role_may_not_send_fails_alone(daemon, admin_token):
    """create admits accountLocked for nobody; nickname is not a person field at all."""
    first, locked, unknown, last = (person_fields() for _ in range(4))
    locked["accountLocked"] = True
    unknown["nickname"] = "nick"
    reply = daemon.request(
        "POST", f"{B}/person/create", {"batch": [first, locked, unknown, last], "combine": True}, token=admin_token
    )
    body = assert_json(reply, 207)
    assert [e["index"] for e in body["errors"]] == [1, 2]
    for error, field in zip(body["errors"], ["accountLocked", "nickname"], strict=True):
        assert_element_problem(error, 400, error["index"], f"{B}/person/create")
        assert error["type"] == "urn:apid:problem:invalid-fields"
        assert {e["field"] for e in error["errors"]} == {field}
    names = usernames(daemon, admin_token)
    assert first["username"] in names and last["username"] in names
    assert locked["username"] not in names and unknown["username"] not in names
    assert body["data"][1] is None and body["data"][2] is None
    assert body["data"][0]["id"] == person_named(daemon, admin_token, first["username"])["id"]
    assert body["data"][3]["id"] == person_named(daemon, admin_token, last["username"])["id"]


def test_an_administrator_element_may_send_admin_only_fields(daemon, admin_token):
    fields = {**person_fields(), "roles": ["ROLE_ADMIN"], "enabled": False}
    reply = daemon.request("POST", f"{B}/person/create", {"batch": [fields]}, token=admin_token)
    created = assert_json(reply, 200)
    stored = show_person(daemon, admin_token, created["id"])
    assert stored["roles"] == ["ROLE_ADMIN"]
    assert stored["enabled"] is False


def test_a_user_batching_show_sees_only_its_fields_and_only_its_own_record(daemon, admin_token, user_token, user_id):
    reply = daemon.request(
        "POST",
        f"{B}/person/show",
        {
            "batch": [{"id": user_id}, {"id": 1}, {"id": user_id, "email": "x@example.com"}, {"id": user_id}],
            "combine": True,
        },
        token=user_token,
    )
    body = assert_json(reply, 207)
    own = show_person(daemon, user_token, user_id)
    assert set(own) == USER_FIELDS
    assert body["data"] == [own, None, None, own]
    assert set(body["data"][0]) == USER_FIELDS
    forbidden, bad_field = body["errors"]
    assert_element_problem(forbidden, 403, 1, f"{B}/person/show")
    assert ADMIN[2] not in json.dumps(forbidden) and ADMIN[0] not in json.dumps(forbidden)
    assert_element_problem(bad_field, 400, 2, f"{B}/person/show")
    assert {e["field"] for e in bad_field["errors"]} == {"email"}


def test_an_administrator_batching_show_sees_every_field(daemon, admin_token, user_id):
    reply = daemon.request("POST", f"{B}/person/show", {"batch": [{"id": user_id}], "combine": True}, token=admin_token)
    body = assert_json(reply, 200)
    assert len(body) == 1
    assert set(body[0]) == ADMIN_FIELDS
    assert body[0]["username"] == USER[0]


def test_a_user_batching_team_show_does_not_see_the_budget(daemon, admin_token, user_token, team):
    as_user = assert_json(daemon.request("POST", f"{B}/team/show", {"batch": [{"id": team["id"]}]}, token=user_token))
    as_admin = assert_json(daemon.request("POST", f"{B}/team/show", {"batch": [{"id": team["id"]}]}, token=admin_token))
    assert as_admin == team
    assert set(as_admin) == TEAM_V1_FIELDS
    assert as_user == {k: team[k] for k in ("id", "name", "leaderId")}


# --- malformed batch bodies: 400, nothing runs ------------------------------------------------


def _valid_create():
    return person_fields("unrun")


@pytest.mark.parametrize(
    "make_body, field",
    [
        (dict, "batch"),
        (lambda: {"combine": True}, "batch"),
        (lambda: {"batch": []}, "batch"),
        (lambda: {"batch": _valid_create()}, "batch"),
        (lambda: {"batch": "people"}, "batch"),
        (lambda: {"batch": None}, "batch"),
        (lambda: {"batch": [_valid_create()], "extra": True}, "extra"),
        (lambda: {"batch": [_valid_create()], "combine": True, "id": 1}, "id"),
    ],
    ids=["no-body-members", "no-batch", "empty", "object", "string", "null", "unknown-member", "id-member"],
)
def test_a_malformed_batch_body_is_400_and_nothing_runs(daemon, admin_token, unchanged, make_body, field):
    body = make_body()
    reply = daemon.request("POST", f"{B}/person/create", body, token=admin_token)
    problem = assert_problem(reply, 400, f"{B}/person/create")
    assert problem["type"] == "urn:apid:problem:bad-request"
    assert field in {e["field"] for e in problem["errors"]}


@pytest.mark.parametrize("bad", ["person", 5, None, ["a"], True])
def test_an_element_that_is_not_an_object_is_400_and_nothing_runs(daemon, admin_token, bad):
    fields = _valid_create()
    before = everyone(daemon, admin_token)
    reply = daemon.request("POST", f"{B}/person/create", {"batch": [fields, bad], "combine": True}, token=admin_token)
    problem = assert_problem(reply, 400, f"{B}/person/create")
    assert problem["index"] == 1
    assert everyone(daemon, admin_token) == before


def test_a_batch_with_no_body_at_all_is_400(daemon, admin_token, unchanged):
    assert_problem(daemon.request("POST", f"{B}/person/create", token=admin_token), 400)


def test_a_batch_body_that_is_not_json_is_refused(daemon, admin_token, unchanged):
    reply = daemon.request(
        "POST",
        f"{B}/person/create",
        body=b'{"batch": [',
        token=admin_token,
        headers={"Content-Type": "application/json"},
    )
    assert_problem(reply, 400)
    reply = daemon.request(
        "POST",
        f"{B}/person/create",
        body=b'[{"username": "x"}]',
        token=admin_token,
        headers={"Content-Type": "application/json"},
    )
    assert_problem(reply, 400)


# --- method, path, version --------------------------------------------------------------------


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE"])
def test_a_batch_not_posted_is_405_with_allow_post(daemon, admin_token, unchanged, method):
    reply = daemon.request(method, f"{B}/person/create", {"batch": [_valid_create()]}, token=admin_token)
    problem = assert_problem(reply, 405, f"{B}/person/create")
    assert reply.headers.get("Allow") == "POST"
    assert problem["allow"] == ["POST"]


def test_get_on_a_batch_of_a_get_endpoint_is_still_405(daemon, admin_token):
    reply = daemon.request("GET", f"{B}/person/show", token=admin_token)
    assert_problem(reply, 405)
    assert reply.headers.get("Allow") == "POST"


def test_a_batch_path_with_an_id_is_405(daemon, admin_token):
    reply = daemon.request("POST", f"{B}/person/show/1", {"batch": [{"id": 1}]}, token=admin_token)
    assert_problem(reply, 405)
    assert reply.headers.get("Allow") == "POST"


@pytest.mark.parametrize("path", [f"{B}/person/nope", f"{B}/nobody/show", "/b9.9/person/show"])
def test_an_unknown_target_is_404(daemon, admin_token, path):
    reply = daemon.request("POST", path, {"batch": [{"id": 1}]}, token=admin_token)
    body = assert_problem(reply, 404, path)
    assert body["type"] == "urn:apid:problem:not-found"


def test_a_batch_of_an_unknown_action_runs_nothing(daemon, admin_token, unchanged):
    reply = daemon.request("POST", f"{B}/person/createMany", {"batch": [_valid_create()]}, token=admin_token)
    assert_problem(reply, 404)


def test_an_unknown_application_version_names_the_served_one(daemon, admin_token):
    body = assert_problem(daemon.request("POST", "/b9.9/person/show", {"batch": [{"id": 1}]}, token=admin_token), 404)
    assert body["servedVersion"] == "0.1"


def test_b_calls_resolve_the_api_version_named_in_the_path(daemon, admin_token, team):
    """Version 2 of team/show declares no BATCH roles (the default is none), version 1 does:
    which answer comes back shows which version the batch resolved."""
    element = {"batch": [{"id": team["id"]}]}
    assert assert_json(daemon.request("POST", "/b0.1-1/team/show", element, token=admin_token)) == team
    assert assert_json(daemon.request("POST", "/b0.1/team/show", element, token=admin_token)) == team
    refused = assert_problem(daemon.request("POST", "/b0.1-2/team/show", element, token=admin_token), 403)
    assert "batch" in refused["detail"]
    # byLeader exists in version 1 only
    leader = {"batch": [{"leaderId": team["leaderId"]}]}
    assert assert_json(daemon.request("POST", "/b0.1/team/byLeader", leader, token=admin_token))["id"] == team["id"]
    assert_problem(daemon.request("POST", "/b0.1-2/team/byLeader", leader, token=admin_token), 404)
    assert_problem(daemon.request("POST", "/b0.1-3/team/show", element, token=admin_token), 404)


# --- authentication ---------------------------------------------------------------------------


def test_a_batch_without_a_token_is_401_and_runs_nothing(daemon, admin_token, unchanged):
    reply = daemon.request("POST", f"{B}/person/create", {"batch": [_valid_create()]})
    assert_problem(reply, 401, f"{B}/person/create")
    assert reply.headers.get("WWW-Authenticate", "").startswith("Bearer")


def test_a_batch_with_a_bad_token_is_401_and_runs_nothing(daemon, admin_token, unchanged):
    reply = daemon.request("POST", f"{B}/person/create", {"batch": [_valid_create()]}, token="not-a-jwt")
    assert_problem(reply, 401)


def test_a_get_batch_without_a_token_is_401(daemon):
    assert_problem(daemon.request("POST", f"{B}/person/show", {"batch": [{"id": 1}]}), 401)


# --- a second deployment: batchLimit 3, and team/show version 2 open to batches ---------------


@pytest.fixture(scope="module")
def limited(tmp_path_factory):
    """batchLimit 3; its iostate/ overrides the sample plugin's team.json to give version 2 of
    team/show a BATCH list (a file in iostateDir with the same NAME overrides the shipped one)."""
    deployment = deployment_with_accounts(tmp_path_factory.mktemp("apid-batch-limit"), api={"batchLimit": 3})
    team_state = json.loads(SAMPLE_TEAM_IOSTATE.read_text())
    team_state["VERSION"]["2"]["URI"]["show"]["ROLES"] = {"BATCH": ["ROLE_ADMIN", "ROLE_USER"]}
    (deployment.root / "iostate" / "team.json").write_text(json.dumps(team_state))
    with running_daemon(deployment) as running:
        yield running


@pytest.fixture(scope="module")
def limited_admin(limited) -> str:
    return limited.login(ADMIN[0], ADMIN[1])


@pytest.fixture(scope="module")
def limited_user(limited) -> str:
    return limited.login(USER[0], USER[1])


def test_more_elements_than_batch_limit_is_413_and_stores_nothing(limited, limited_admin):
    before = everyone(limited, limited_admin)
    elements = [person_fields("over") for _ in range(4)]
    reply = limited.request("POST", f"{B}/person/create", {"batch": elements, "combine": True}, token=limited_admin)
    problem = assert_problem(reply, 413, f"{B}/person/create")
    assert problem["type"] == "urn:apid:problem:payload-too-large"
    assert problem["limit"] == 3
    assert everyone(limited, limited_admin) == before


def test_exactly_batch_limit_elements_run(limited, limited_admin):
    elements = [person_fields("atlimit") for _ in range(3)]
    reply = limited.request("POST", f"{B}/person/create", {"batch": elements, "combine": True}, token=limited_admin)
    body = assert_json(reply, 200)
    assert len(body) == 3
    for out, sent in zip(body, elements, strict=True):
        assert show_person(limited, limited_admin, out["id"])["username"] == sent["username"]


def test_batch_limit_applies_to_get_endpoints_too(limited, limited_admin):
    reply = limited.request("POST", f"{B}/person/show", {"batch": [{"id": 1}] * 4}, token=limited_admin)
    assert assert_problem(reply, 413)["limit"] == 3


@pytest.fixture(scope="module")
def limited_team(limited, limited_admin) -> dict:
    return create_team(limited, limited_admin, "Versioned", 1, 7.0)


@pytest.mark.parametrize("who", ["admin", "user"])
def test_a_batch_of_api_version_2_answers_only_id_and_name(limited, limited_admin, limited_user, limited_team, who):
    token = limited_admin if who == "admin" else limited_user
    elements = {"batch": [{"id": limited_team["id"]}, {"id": limited_team["id"]}], "combine": True}
    reply = limited.request("POST", "/b0.1-2/team/show", elements, token=token)
    expected = {"id": limited_team["id"], "name": "Versioned"}
    assert assert_json(reply) == [expected, expected]
    # the same batch without a version segment resolves CURRENTSTABLE (1): more fields
    current = assert_json(limited.request("POST", "/b0.1/team/show", elements, token=token))
    assert current[0]["leaderId"] == 1
    assert ("budget" in current[0]) is (who == "admin")
