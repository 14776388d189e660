"""Chained calls through the running daemon: `/c{app}[-{api}]/{controller}/{action}/{id}`.

Every rule of SPEC.md "Chained call" and DESIGN.md 4.7, with the person controller and the
sample `team` plugin (whose records carry `leaderId`, a person's id): blankchain, postchain
and prechain; the 422 rules, each checked to have run nothing; malformed chain objects (400);
a failing link; a missing key; what a ROLE_USER chain may reach; API versions. Every change
is checked by reading back what was stored through `/v` calls.
"""

from __future__ import annotations

import itertools
import json

import pytest

from assertions import ADMIN_FIELDS, USER_FIELDS, assert_json, assert_problem, error_fields
from harness import (
    ADMIN,
    ADMIN_ACCOUNT,
    USER,
    V,
    create_team,
    deployment_with_accounts,
    everyone,
    new_person,
    running_daemon,
    show_person,
)

C = "/c0.1"
CHAIN_RULE = "urn:apid:problem:chain-rule"
MISSING_LEADER = 99999
_serial = itertools.count(1)


# --- helpers -----------------------------------------------------------------------------------


def assert_rule(reply, rule: str, instance: str | None = None) -> dict:
    body = assert_problem(reply, 422, instance)
    assert body["type"] == CHAIN_RULE, body
    assert body["rule"] == rule, body
    return body


def new_team(daemon, admin_token, leader_id: int, budget: float = 10.0) -> dict:
    return create_team(daemon, admin_token, f"team{next(_serial)}", leader_id, budget)


def reply_text(body) -> str:
    return json.dumps(body)


def team_name() -> str:
    return f"chained{next(_serial)}"


def show_team(daemon, token, team_id) -> dict:
    reply = daemon.request("GET", f"{V}/team/show/{team_id}", token=token)
    assert reply.status == 200, reply.body
    return reply.json


def teams(daemon, admin_token) -> list[dict]:
    reply = daemon.request("GET", f"{V}/team/list", token=admin_token)
    assert reply.status == 200, reply.body
    return reply.json


def teams_named(daemon, admin_token, name: str) -> list[dict]:
    return [t for t in teams(daemon, admin_token) if t["name"] == name]


@pytest.fixture
def nothing_changes(daemon, admin_token):
    """Asserts after the test that no account and no team was created, changed or deleted."""
    before = (everyone(daemon, admin_token), teams(daemon, admin_token))
    yield
    assert (everyone(daemon, admin_token), teams(daemon, admin_token)) == before


@pytest.fixture
def led(daemon, admin_token):
    """A fresh person and a team they lead."""
    leader = new_person(daemon, admin_token)
    return leader, new_team(daemon, admin_token, leader["id"])


@pytest.fixture(scope="module")
def user_team(daemon, admin_token, user_id) -> dict:
    return new_team(daemon, admin_token, user_id, budget=321.0)


@pytest.fixture(scope="module")
def admin_team(daemon, admin_token) -> dict:
    return new_team(daemon, admin_token, 1, budget=654.0)


@pytest.fixture(scope="module")
def orphan_team(daemon, admin_token) -> dict:
    """A team whose leaderId names no person."""
    return new_team(daemon, admin_token, MISSING_LEADER)


def leader_chain(**extra) -> dict:
    return {"chain": {"key": "leaderId", "order": {"person/show": "return"}, **extra}}


def update_chain(email: str, current_password: str | None = None, **extra) -> dict:
    """A postchain ending in person/update of `email` (with `currentPassword`, as an owner's needs)."""
    password = {} if current_password is None else {"currentPassword": current_password}
    return {
        "email": email,
        **password,
        "chain": {"key": "leaderId", "type": "postchain", "order": {"person/update": "return"}, **extra},
    }


def create_chain(name: str, leader_id: int, **extra) -> dict:
    return {
        "name": name,
        "leaderId": leader_id,
        "chain": {"key": "leaderId", "type": "prechain", "order": {"person/show": "return"}, **extra},
    }


# --- blankchain ---------------------------------------------------------------------------------


def test_a_blankchain_with_combine_answers_every_link_in_order(daemon, admin_token, led):
    leader, team = led
    reply = daemon.request("GET", f"{C}/team/show/{team['id']}", leader_chain(combine=True), token=admin_token)
    body = assert_json(reply)
    assert body == [show_team(daemon, admin_token, team["id"]), show_person(daemon, admin_token, leader["id"])]
    assert body[0] == team
    assert body[1]["username"] == leader["username"]
    assert set(body[1]) == ADMIN_FIELDS


@pytest.mark.parametrize("combine", [False, "false", "absent"])
def test_a_blankchain_without_combine_answers_the_last_link(daemon, admin_token, led, combine):
    leader, team = led
    extra = {} if combine == "absent" else {"combine": combine}
    reply = daemon.request("GET", f"{C}/team/show/{team['id']}", leader_chain(**extra), token=admin_token)
    assert assert_json(reply) == show_person(daemon, admin_token, leader["id"])


def test_combine_accepts_the_string_true(daemon, admin_token, led):
    leader, team = led
    reply = daemon.request("GET", f"{C}/team/show/{team['id']}", leader_chain(combine="true"), token=admin_token)
    assert [out["id"] for out in assert_json(reply)] == [team["id"], leader["id"]]


@pytest.mark.parametrize("chain_type", ["absent", "blankchain"])
def test_type_absent_on_get_means_blankchain(daemon, admin_token, led, chain_type):
    leader, team = led
    extra = {} if chain_type == "absent" else {"type": chain_type}
    reply = daemon.request("GET", f"{C}/team/show/{team['id']}", leader_chain(combine=True, **extra), token=admin_token)
    assert [out["id"] for out in assert_json(reply)] == [team["id"], leader["id"]]


def test_a_trailing_slash_and_query_fields_reach_the_first_link(daemon, admin_token, led):
    leader, team = led
    reply = daemon.request("GET", f"{C}/team/show?id={team['id']}", leader_chain(combine=True), token=admin_token)
    assert [out["id"] for out in assert_json(reply)] == [team["id"], leader["id"]]
    reply = daemon.request("GET", f"{C}/team/show/{team['id']}/", leader_chain(), token=admin_token)
    assert assert_json(reply)["id"] == leader["id"]


def test_a_four_link_chain_passes_each_key_on(daemon, admin_token):
    """team/show(second) > person/show(leader) > team/byLeader(leader: the first team) > team/summary:
    the leader's id reaches byLeader as leaderId (its FKEY to person.id), the others go as id."""
    leader = new_person(daemon, admin_token)
    first = new_team(daemon, admin_token, leader["id"])
    second = new_team(daemon, admin_token, leader["id"])
    chain = {
        "chain": {
            "key": "leaderId",
            "combine": True,
            "order": {"person/show": "id", "team/byLeader": "id", "team/summary": "return"},
        }
    }
    reply = daemon.request("GET", f"{C}/team/show/{second['id']}", chain, token=admin_token)
    body = assert_json(reply)
    assert len(body) == 4
    assert body[0] == second
    assert body[1] == show_person(daemon, admin_token, leader["id"])
    assert body[2] == {"id": first["id"], "name": first["name"], "leaderId": leader["id"]}
    assert body[3] == {"id": first["id"], "name": first["name"], "leaderId": leader["id"], "led": 2}

    chain["chain"]["combine"] = False
    last = assert_json(daemon.request("GET", f"{C}/team/show/{second['id']}", chain, token=admin_token))
    assert last == body[3]


# --- the hand-off: under the FKEY the next link takes, else as its id ----------------------------


def test_a_person_id_reaches_team_list_as_leader_id(daemon, admin_token, user_token, user_id):
    """person/show > team/list: team.leaderId references person.id, and team/list takes it."""
    led = [new_team(daemon, admin_token, user_id), new_team(daemon, admin_token, user_id)]
    new_team(daemon, admin_token, 1)
    chain = {"chain": {"key": "id", "combine": True, "order": {"team/list": "return"}}}
    person, listed = assert_json(daemon.request("GET", f"{C}/person/show/{user_id}", chain, token=user_token))
    assert person["id"] == user_id
    assert [team["id"] for team in listed] == [
        team["id"] for team in teams(daemon, admin_token) if team["leaderId"] == user_id
    ]
    assert {team["id"] for team in led} <= {team["id"] for team in listed}


def test_a_postchain_creates_the_team_under_the_leader_it_was_handed(daemon, admin_token):
    """person/show > team/create: the person's id becomes the new team's leaderId; a leaderId in
    the body cannot override the key handed on."""
    leader = new_person(daemon, admin_token)
    name = team_name()
    body = {
        "name": name,
        "leaderId": 1,
        "chain": {"key": "id", "type": "postchain", "order": {"team/create": "return"}},
    }
    created = assert_json(daemon.request("POST", f"{C}/person/show/{leader['id']}", body, token=admin_token))
    assert created["leaderId"] == leader["id"]
    assert show_team(daemon, admin_token, created["id"]) == created
    assert [team["leaderId"] for team in teams_named(daemon, admin_token, name)] == [leader["id"]]


def test_a_key_with_no_fkey_to_it_still_goes_as_id(daemon, admin_token, led):
    """team/show > team/summary: team has no FKEY to team.id, so the team's id goes as id; and
    team/show > person/show: the leaderId read is no field person references, so it goes as id."""
    leader, team = led
    chain = {"chain": {"key": "id", "order": {"team/summary": "return"}}}
    assert (
        assert_json(daemon.request("GET", f"{C}/team/show/{team['id']}", chain, token=admin_token))["id"] == team["id"]
    )
    assert (
        assert_json(daemon.request("GET", f"{C}/team/show/{team['id']}", leader_chain(), token=admin_token))["id"]
        == leader["id"]
    )


# --- postchain ----------------------------------------------------------------------------------


def test_a_postchain_updates_the_leader_and_answers_the_update(daemon, admin_token, led):
    leader, team = led
    reply = daemon.request(
        "PUT", f"{C}/team/show/{team['id']}", update_chain("lead.new@example.com"), token=admin_token
    )
    assert assert_json(reply) == {"id": leader["id"], "version": 1}
    stored = show_person(daemon, admin_token, leader["id"])
    assert stored["email"] == "lead.new@example.com"
    assert stored["version"] == 1
    assert stored["username"] == leader["username"]
    assert show_team(daemon, admin_token, team["id"]) == team


def test_a_postchain_with_combine_answers_both_links(daemon, admin_token, led):
    leader, team = led
    reply = daemon.request(
        "PUT", f"{C}/team/show/{team['id']}", update_chain("lead.both@example.com", combine=True), token=admin_token
    )
    assert assert_json(reply) == [team, {"id": leader["id"], "version": 1}]
    assert show_person(daemon, admin_token, leader["id"])["email"] == "lead.both@example.com"


def test_a_postchain_may_end_with_a_delete(daemon, admin_token, led):
    leader, team = led
    chain = {"chain": {"key": "leaderId", "type": "postchain", "order": {"person/delete": "return"}}}
    reply = daemon.request("DELETE", f"{C}/team/show/{team['id']}", chain, token=admin_token)
    assert assert_json(reply) == {"id": leader["id"]}
    assert_problem(daemon.request("GET", f"{V}/person/show/{leader['id']}", token=admin_token), 404)


def test_a_longer_postchain_passes_keys_to_the_non_safe_call(daemon, admin_token, led):
    leader, team = led
    chain = {
        "email": "three.links@example.com",
        "chain": {
            "key": "leaderId",
            "type": "postchain",
            "combine": True,
            "order": {"person/show": "id", "person/update": "return"},
        },
    }
    reply = daemon.request("PUT", f"{C}/team/show/{team['id']}", chain, token=admin_token)
    body = assert_json(reply)
    assert body[0] == team
    assert body[1]["id"] == leader["id"] and body[1]["email"] == leader["email"]  # shown before the update
    assert body[2] == {"id": leader["id"], "version": 1}
    assert show_person(daemon, admin_token, leader["id"])["email"] == "three.links@example.com"


def test_a_postchain_non_safe_call_gets_the_id_from_the_previous_link(daemon, admin_token, led):
    """The issue: the last call "receives the body's fields and the id from the previous link"."""
    leader, team = led
    bystander = new_person(daemon, admin_token)
    body = {
        "id": bystander["id"],
        "email": "which.one@example.com",
        "chain": {"key": "leaderId", "type": "postchain", "order": {"person/update": "return"}},
    }
    reply = daemon.request("PUT", f"{C}/team/show/{team['id']}", body, token=admin_token)
    after = show_person(daemon, admin_token, bystander["id"])
    assert after["email"] == bystander["email"] and after["version"] == 0, "the chain updated a person it never reached"
    if reply.status == 200:
        assert reply.json == {"id": leader["id"], "version": 1}
        assert show_person(daemon, admin_token, leader["id"])["email"] == "which.one@example.com"
    else:
        assert_problem(reply, 400)
        assert show_person(daemon, admin_token, leader["id"])["version"] == 0


# --- prechain -----------------------------------------------------------------------------------


def test_a_prechain_creates_the_team_and_answers_its_leader(daemon, admin_token):
    leader = new_person(daemon, admin_token)
    name = team_name()
    reply = daemon.request(
        "POST", f"{C}/team/create", create_chain(name, leader["id"], combine=True), token=admin_token
    )
    created, shown = assert_json(reply)
    assert created["name"] == name and created["leaderId"] == leader["id"]
    assert show_team(daemon, admin_token, created["id"]) == created
    assert shown == show_person(daemon, admin_token, leader["id"])
    assert teams_named(daemon, admin_token, name) == [{"id": created["id"], "name": name, "leaderId": leader["id"]}]


def test_a_prechain_without_combine_answers_the_last_link_and_still_creates(daemon, admin_token):
    leader = new_person(daemon, admin_token)
    name = team_name()
    reply = daemon.request("POST", f"{C}/team/create", create_chain(name, leader["id"]), token=admin_token)
    assert assert_json(reply) == show_person(daemon, admin_token, leader["id"])
    stored = teams_named(daemon, admin_token, name)
    assert len(stored) == 1
    assert stored[0]["leaderId"] == leader["id"]


def test_a_prechain_feeds_more_than_one_get(daemon, admin_token):
    leader = new_person(daemon, admin_token)
    name = team_name()
    body = {
        "name": name,
        "leaderId": leader["id"],
        "budget": 5.5,
        "chain": {
            "key": "leaderId",
            "type": "prechain",
            "combine": True,
            "order": {"person/show": "id", "team/byLeader": "return"},
        },
    }
    created, shown, found = assert_json(daemon.request("POST", f"{C}/team/create", body, token=admin_token))
    assert created["budget"] == 5.5
    assert shown["id"] == leader["id"]
    assert found == {"id": created["id"], "name": name, "leaderId": leader["id"]}
    assert show_team(daemon, admin_token, created["id"]) == created


# --- 422: chain rules, checked before any link runs -------------------------------------------


def test_two_non_safe_calls_are_422_and_nothing_runs(daemon, admin_token, led):
    leader, team = led
    body = {
        "email": "twice@example.com",
        "chain": {"key": "leaderId", "type": "postchain", "order": {"person/update": "id", "person/delete": "return"}},
    }
    reply = daemon.request("PUT", f"{C}/team/show/{team['id']}", body, token=admin_token)
    assert_rule(reply, "one-non-safe-method", f"{C}/team/show/{team['id']}")
    stored = show_person(daemon, admin_token, leader["id"])
    assert stored["email"] == leader["email"] and stored["version"] == 0


def test_a_prechain_with_a_second_non_safe_call_is_422_and_creates_nothing(daemon, admin_token, nothing_changes):
    body = {
        "name": team_name(),
        "leaderId": 1,
        "email": "x@example.com",
        "chain": {"key": "leaderId", "type": "prechain", "order": {"person/update": "return"}},
    }
    assert_rule(daemon.request("POST", f"{C}/team/create", body, token=admin_token), "one-non-safe-method")


def test_a_postchain_whose_non_safe_call_is_not_last_is_422(daemon, admin_token, led):
    leader, _ = led
    body = {
        "email": "first@example.com",
        "chain": {"key": "id", "type": "postchain", "order": {"person/show": "return"}},
    }
    reply = daemon.request("PUT", f"{C}/person/update/{leader['id']}", body, token=admin_token)
    assert_rule(reply, "non-safe-method-position")
    stored = show_person(daemon, admin_token, leader["id"])
    assert stored["email"] == leader["email"] and stored["version"] == 0


def test_a_postchain_whose_non_safe_call_is_in_the_middle_is_422(daemon, admin_token, led):
    leader, team = led
    body = {
        "email": "middle@example.com",
        "chain": {"key": "leaderId", "type": "postchain", "order": {"person/update": "id", "person/show": "return"}},
    }
    reply = daemon.request("PUT", f"{C}/team/show/{team['id']}", body, token=admin_token)
    assert_rule(reply, "non-safe-method-position")
    stored = show_person(daemon, admin_token, leader["id"])
    assert stored["email"] == leader["email"] and stored["version"] == 0


def test_a_prechain_whose_non_safe_call_is_not_first_is_422_and_creates_nothing(
    daemon, admin_token, admin_team, nothing_changes
):
    body = {
        "name": team_name(),
        "leaderId": 1,
        "chain": {"key": "leaderId", "type": "prechain", "order": {"team/create": "return"}},
    }
    reply = daemon.request("POST", f"{C}/team/show/{admin_team['id']}", body, token=admin_token)
    assert_rule(reply, "non-safe-method-position")


@pytest.mark.parametrize("method", ["POST", "DELETE", "GET"])
def test_a_postchain_called_with_another_method_is_422_and_changes_nothing(daemon, admin_token, led, method):
    leader, team = led
    reply = daemon.request(
        method, f"{C}/team/show/{team['id']}", update_chain("wrong.method@example.com"), token=admin_token
    )
    body = assert_rule(reply, "request-method")
    assert "PUT" in body["detail"]
    stored = show_person(daemon, admin_token, leader["id"])
    assert stored["email"] == leader["email"] and stored["version"] == 0


@pytest.mark.parametrize("method", ["PUT", "GET", "PATCH"])
def test_a_prechain_called_with_another_method_is_405_and_creates_nothing(daemon, admin_token, nothing_changes, method):
    """No chain starting with team/create (a POST) is called with anything but POST: the path
    does not take the method (405, as the OpenAPI document says), whatever the chain object."""
    reply = daemon.request(method, f"{C}/team/create", create_chain(team_name(), 1), token=admin_token)
    assert assert_problem(reply, 405)["allow"] == ["POST"]
    assert reply.headers["Allow"] == "POST"


@pytest.mark.parametrize("method", ["PUT", "DELETE"])
def test_a_blankchain_not_called_with_get_or_post_is_422(daemon, admin_token, led, nothing_changes, method):
    _, team = led
    reply = daemon.request(method, f"{C}/team/show/{team['id']}", leader_chain(type="blankchain"), token=admin_token)
    assert "GET or POST" in assert_rule(reply, "request-method")["detail"]


def test_a_blankchain_may_be_posted_as_browsers_send_a_body(daemon, admin_token, led):
    """fetch cannot send a GET with a body: a blankchain is POSTed too, its type said."""
    leader, team = led
    reply = daemon.request(
        "POST", f"{C}/team/show/{team['id']}", leader_chain(type="blankchain", combine=True), token=admin_token
    )
    assert [out["id"] for out in assert_json(reply)] == [team["id"], leader["id"]]
    untyped = daemon.request("POST", f"{C}/team/show/{team['id']}", leader_chain(), token=admin_token)
    assert error_fields(assert_problem(untyped, 400)) == {"chain.type"}


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_order_may_be_an_array_of_links_with_their_keys(daemon, admin_token, led, method):
    """JSON does not promise the order of an object's members; an array keeps it."""
    leader, team = led
    chain = {
        "key": "leaderId",
        "type": "blankchain",
        "combine": True,
        "order": [{"link": "person/show", "key": "id"}, {"link": "team/list", "key": "return"}],
    }
    reply = daemon.request(method, f"{C}/team/show/{team['id']}", {"chain": chain}, token=admin_token)
    body = assert_json(reply)
    assert [body[0]["id"], body[1]["id"]] == [team["id"], leader["id"]]
    assert team["id"] in [t["id"] for t in body[2]]


def test_a_postchain_takes_the_array_form_too(daemon, admin_token, led):
    leader, team = led
    email = f"array{next(_serial)}@example.com"
    body = {
        "email": email,
        "chain": {"key": "leaderId", "type": "postchain", "order": [{"link": "person/update", "key": "return"}]},
    }
    reply = daemon.request("PUT", f"{C}/team/show/{team['id']}", body, token=admin_token)
    assert assert_json(reply)["id"] == leader["id"]
    assert show_person(daemon, admin_token, leader["id"])["email"] == email


@pytest.mark.parametrize("chain_type", ["absent", "blankchain"])
def test_a_blankchain_with_a_non_safe_call_is_422_and_changes_nothing(daemon, admin_token, led, chain_type):
    leader, team = led
    body = {"email": "blank@example.com", "chain": {"key": "leaderId", "order": {"person/update": "return"}}}
    if chain_type != "absent":
        body["chain"]["type"] = chain_type
    assert_rule(daemon.request("GET", f"{C}/team/show/{team['id']}", body, token=admin_token), "blankchain-safe-only")
    stored = show_person(daemon, admin_token, leader["id"])
    assert stored["email"] == leader["email"] and stored["version"] == 0


@pytest.mark.parametrize("chain_type, method", [("postchain", "PUT"), ("prechain", "POST")])
def test_a_postchain_or_prechain_without_a_non_safe_call_is_422(daemon, admin_token, led, chain_type, method):
    _, team = led
    reply = daemon.request(method, f"{C}/team/show/{team['id']}", leader_chain(type=chain_type), token=admin_token)
    assert_rule(reply, "non-safe-method-required")


def test_an_unknown_link_is_422_naming_it(daemon, admin_token, led):
    _, team = led
    body = {"chain": {"key": "leaderId", "order": {"person/show": "id", "person/nope": "return"}}}
    reply = daemon.request("GET", f"{C}/team/show/{team['id']}", body, token=admin_token)
    problem = assert_rule(reply, "unknown-link")
    assert problem["link"] == {"position": 2, "endpoint": "person/nope"}


def test_an_unknown_first_link_is_422_at_position_0(daemon, admin_token):
    reply = daemon.request("GET", f"{C}/team/nope/1", leader_chain(), token=admin_token)
    assert assert_rule(reply, "unknown-link")["link"] == {"position": 0, "endpoint": "team/nope"}


def test_an_unknown_link_in_a_prechain_creates_nothing(daemon, admin_token, nothing_changes):
    body = {
        "name": team_name(),
        "leaderId": 1,
        "chain": {"key": "leaderId", "type": "prechain", "order": {"nobody/show": "return"}},
    }
    reply = daemon.request("POST", f"{C}/team/create", body, token=admin_token)
    assert assert_rule(reply, "unknown-link")["link"] == {"position": 1, "endpoint": "nobody/show"}


def test_an_unknown_link_in_a_postchain_changes_nothing(daemon, admin_token, led):
    leader, team = led
    body = {
        "email": "unknown.link@example.com",
        "chain": {"key": "leaderId", "type": "postchain", "order": {"person/nope": "id", "person/update": "return"}},
    }
    reply = daemon.request("PUT", f"{C}/team/show/{team['id']}", body, token=admin_token)
    assert assert_rule(reply, "unknown-link")["link"] == {"position": 1, "endpoint": "person/nope"}
    assert show_person(daemon, admin_token, leader["id"])["email"] == leader["email"]


# --- 400: malformed chain objects -----------------------------------------------------------


def _chain(**members):
    base = {"key": "leaderId", "type": "postchain", "order": {"person/update": "return"}}
    base.update(members)
    return {k: v for k, v in base.items() if v is not ...}


MALFORMED = [
    ("no-chain", None, "chain"),
    ("chain-string", "postchain", "chain"),
    ("chain-list", [{"person/update": "return"}], "chain"),
    ("chain-null", "null", "chain"),
    ("no-key", _chain(key=...), "chain.key"),
    ("key-empty", _chain(key=""), "chain.key"),
    ("key-number", _chain(key=5), "chain.key"),
    ("no-order", _chain(order=...), "chain.order"),
    ("order-empty", _chain(order={}), "chain.order"),
    ("order-list", _chain(order=["person/update"]), "chain.order.0"),
    ("order-string", _chain(order="person/update"), "chain.order"),
    ("unknown-type", _chain(type="sidechain"), "chain.type"),
    ("type-absent-not-get", _chain(type=...), "chain.type"),
    ("entry-no-slash", _chain(order={"personupdate": "return"}), "chain.order.personupdate"),
    ("entry-no-action", _chain(order={"person/": "return"}), "chain.order.person/"),
    ("entry-no-controller", _chain(order={"/update": "return"}), "chain.order./update"),
    ("entry-value-number", _chain(order={"person/update": 5}), "chain.order.person/update"),
    ("entry-value-empty", _chain(order={"person/update": ""}), "chain.order.person/update"),
    ("unknown-member", _chain(extra=True), "chain.extra"),
    ("combine-not-boolean", _chain(combine="maybe"), "chain.combine"),
]


@pytest.mark.parametrize("chain, field", [(c, f) for _, c, f in MALFORMED], ids=[i for i, _, _ in MALFORMED])
def test_a_malformed_chain_object_is_400_and_changes_nothing(daemon, admin_token, led, chain, field):
    leader, team = led
    body = {"email": "malformed@example.com"}
    if chain is not None:
        body["chain"] = None if chain == "null" else chain
    reply = daemon.request("PUT", f"{C}/team/show/{team['id']}", body, token=admin_token)
    problem = assert_problem(reply, 400, f"{C}/team/show/{team['id']}")
    assert problem["type"] == "urn:apid:problem:bad-request"
    assert field in error_fields(problem)
    stored = show_person(daemon, admin_token, leader["id"])
    assert stored["email"] == leader["email"] and stored["version"] == 0


@pytest.mark.parametrize(
    "order",
    [
        {"person/show": "return", "person/update": "return"},
        {"person/show": "return", "person/update": "id"},
        {"person/show": "id", "person/update": "id"},
    ],
    ids=["return-twice", "return-first", "no-return"],
)
def test_return_not_exactly_on_the_last_link_is_400_and_changes_nothing(daemon, admin_token, led, order):
    leader, team = led
    body = {"email": "return@example.com", "chain": {"key": "leaderId", "type": "postchain", "order": order}}
    problem = assert_problem(daemon.request("PUT", f"{C}/team/show/{team['id']}", body, token=admin_token), 400)
    assert problem["type"] == "urn:apid:problem:bad-request"
    assert "return" in problem["detail"]
    stored = show_person(daemon, admin_token, leader["id"])
    assert stored["email"] == leader["email"] and stored["version"] == 0


def test_return_not_on_the_last_link_names_the_field_in_errors(daemon, admin_token, led):
    _, team = led
    body = {
        "email": "return@example.com",
        "chain": {
            "key": "leaderId",
            "type": "postchain",
            "order": {"person/show": "return", "person/update": "return"},
        },
    }
    problem = assert_problem(daemon.request("PUT", f"{C}/team/show/{team['id']}", body, token=admin_token), 400)
    assert any(field.startswith("chain.order") for field in error_fields(problem))


def test_a_get_chain_without_a_body_is_400(daemon, admin_token, admin_team):
    problem = assert_problem(daemon.request("GET", f"{C}/team/show/{admin_team['id']}", token=admin_token), 400)
    assert error_fields(problem) == {"chain"}


def test_a_malformed_prechain_creates_nothing(daemon, admin_token, nothing_changes):
    body = {"name": team_name(), "leaderId": 1, "chain": {"type": "prechain", "order": {"person/show": "return"}}}
    problem = assert_problem(daemon.request("POST", f"{C}/team/create", body, token=admin_token), 400)
    assert "chain.key" in error_fields(problem)


# --- a link that fails stops the chain -----------------------------------------------------


def test_a_failing_link_answers_its_problem_with_the_link(daemon, admin_token, orphan_team):
    path = f"{C}/team/show/{orphan_team['id']}"
    problem = assert_problem(daemon.request("GET", path, leader_chain(combine=True), token=admin_token), 404, path)
    assert problem["type"] == "urn:apid:problem:not-found"
    assert str(MISSING_LEADER) in problem["detail"]
    assert problem["link"] == {"position": 1, "endpoint": "person/show"}
    assert problem["nonSafeCallCompleted"] is False


def test_a_failing_first_link_is_at_position_0(daemon, admin_token):
    problem = assert_problem(daemon.request("GET", f"{C}/team/show/424242", leader_chain(), token=admin_token), 404)
    assert "424242" in problem["detail"]
    assert problem["link"] == {"position": 0, "endpoint": "team/show"}
    assert problem["nonSafeCallCompleted"] is False


def test_a_failing_link_stops_the_chain_before_later_links(daemon, admin_token, orphan_team):
    """team/show > person/show (fails) > team/byLeader: the answer is person/show's problem."""
    chain = {"chain": {"key": "leaderId", "order": {"person/show": "id", "team/byLeader": "return"}}}
    problem = assert_problem(daemon.request("GET", f"{C}/team/show/{orphan_team['id']}", chain, token=admin_token), 404)
    assert problem["link"] == {"position": 1, "endpoint": "person/show"}


def test_a_postchain_whose_non_safe_call_fails_says_it_did_not_complete(daemon, admin_token, orphan_team):
    reply = daemon.request(
        "PUT", f"{C}/team/show/{orphan_team['id']}", update_chain("orphan@example.com"), token=admin_token
    )
    problem = assert_problem(reply, 404)
    assert problem["link"] == {"position": 1, "endpoint": "person/update"}
    assert problem["nonSafeCallCompleted"] is False
    assert "orphan@example.com" not in {p["email"] for p in everyone(daemon, admin_token)}


def test_a_postchain_non_safe_call_with_a_field_the_role_may_not_send_fails_at_its_link(daemon, admin_token, led):
    """dateCreated is a person field no role may send to update."""
    leader, team = led
    body = {
        "email": "ok@example.com",
        "dateCreated": "2020-01-01T00:00:00+00:00",
        "chain": {"key": "leaderId", "type": "postchain", "order": {"person/update": "return"}},
    }
    problem = assert_problem(daemon.request("PUT", f"{C}/team/show/{team['id']}", body, token=admin_token), 400)
    assert problem["link"] == {"position": 1, "endpoint": "person/update"}
    assert problem["nonSafeCallCompleted"] is False
    assert error_fields(problem) == {"dateCreated"}
    stored = show_person(daemon, admin_token, leader["id"])
    assert stored["email"] == leader["email"] and stored["version"] == 0


def test_a_prechain_whose_get_fails_after_the_post_says_the_post_completed(daemon, admin_token):
    name = team_name()
    reply = daemon.request(
        "POST", f"{C}/team/create", create_chain(name, MISSING_LEADER, combine=True), token=admin_token
    )
    problem = assert_problem(reply, 404, f"{C}/team/create")
    assert problem["link"] == {"position": 1, "endpoint": "person/show"}
    assert problem["nonSafeCallCompleted"] is True
    stored = teams_named(daemon, admin_token, name)
    assert len(stored) == 1
    assert stored[0]["leaderId"] == MISSING_LEADER
    assert show_team(daemon, admin_token, stored[0]["id"])["name"] == name


def test_a_prechain_whose_post_fails_says_it_did_not_complete(daemon, admin_token, nothing_changes):
    body = {"leaderId": 1, "chain": {"key": "leaderId", "type": "prechain", "order": {"person/show": "return"}}}
    problem = assert_problem(daemon.request("POST", f"{C}/team/create", body, token=admin_token), 400)
    assert problem["link"] == {"position": 0, "endpoint": "team/create"}
    assert problem["nonSafeCallCompleted"] is False


# --- a key missing from a link's output ----------------------------------------------------


def test_a_key_missing_from_the_first_link_is_422_missing_key(daemon, admin_token, admin_team):
    chain = {"chain": {"key": "captain", "order": {"person/show": "return"}}}
    problem = assert_rule(
        daemon.request("GET", f"{C}/team/show/{admin_team['id']}", chain, token=admin_token), "missing-key"
    )
    assert problem["link"] == {"position": 0, "endpoint": "team/show"}
    assert problem["key"] == "captain"
    assert problem["nonSafeCallCompleted"] is False


def test_a_key_missing_from_a_later_link_is_422_naming_that_link(daemon, admin_token, admin_team):
    chain = {"chain": {"key": "leaderId", "order": {"person/show": "nickname", "team/byLeader": "return"}}}
    problem = assert_rule(
        daemon.request("GET", f"{C}/team/show/{admin_team['id']}", chain, token=admin_token), "missing-key"
    )
    assert problem["link"] == {"position": 1, "endpoint": "person/show"}
    assert problem["key"] == "nickname"


def test_a_key_missing_after_a_prechain_post_says_the_post_completed(daemon, admin_token):
    name = team_name()
    body = {
        "name": name,
        "leaderId": 1,
        "chain": {"key": "captain", "type": "prechain", "order": {"person/show": "return"}},
    }
    problem = assert_rule(daemon.request("POST", f"{C}/team/create", body, token=admin_token), "missing-key")
    assert problem["link"] == {"position": 0, "endpoint": "team/create"}
    assert problem["key"] == "captain"
    assert problem["nonSafeCallCompleted"] is True
    assert len(teams_named(daemon, admin_token, name)) == 1


def test_a_key_missing_before_a_postchain_update_changes_nothing(daemon, admin_token, led):
    leader, team = led
    body = {
        "email": "nokey@example.com",
        "chain": {"key": "captain", "type": "postchain", "order": {"person/update": "return"}},
    }
    problem = assert_rule(daemon.request("PUT", f"{C}/team/show/{team['id']}", body, token=admin_token), "missing-key")
    assert problem["nonSafeCallCompleted"] is False
    assert show_person(daemon, admin_token, leader["id"])["email"] == leader["email"]


# --- ROLE_USER: a chain reaches only what the role reaches directly ---------------------------


def test_a_user_chain_to_their_own_record_sees_only_their_fields(daemon, user_token, user_id, user_team):
    reply = daemon.request("GET", f"{C}/team/show/{user_team['id']}", leader_chain(combine=True), token=user_token)
    team_out, person_out = assert_json(reply)
    assert team_out == show_team(daemon, user_token, user_team["id"])
    assert team_out == {"id": user_team["id"], "name": user_team["name"], "leaderId": user_id}
    assert person_out == show_person(daemon, user_token, user_id)
    assert set(person_out) == USER_FIELDS


def test_a_user_chain_to_another_person_is_403_at_that_link(daemon, admin_token, user_token, admin_team):
    assert daemon.request("GET", f"{V}/person/show/1", token=user_token).status == 403  # not directly either
    path = f"{C}/team/show/{admin_team['id']}"
    problem = assert_problem(daemon.request("GET", path, leader_chain(combine=True), token=user_token), 403, path)
    assert problem["link"] == {"position": 1, "endpoint": "person/show"}
    assert problem["nonSafeCallCompleted"] is False
    admin = show_person(daemon, admin_token, 1)
    assert admin["email"] not in reply_text(problem) and ADMIN[0] not in reply_text(problem)


def test_a_user_postchain_may_not_update_another_person(daemon, admin_token, user_token, admin_team):
    before = show_person(daemon, admin_token, 1)
    reply = daemon.request(
        "PUT", f"{C}/team/show/{admin_team['id']}", update_chain("taken@example.com"), token=user_token
    )
    problem = assert_problem(reply, 403)
    assert problem["link"] == {"position": 1, "endpoint": "person/update"}
    assert problem["nonSafeCallCompleted"] is False
    assert show_person(daemon, admin_token, 1) == before


def test_a_user_postchain_may_update_their_own_email(daemon, admin_token, user_token, user_id, user_team):
    before = show_person(daemon, admin_token, user_id)
    reply = daemon.request(
        "PUT",
        f"{C}/team/show/{user_team['id']}",
        update_chain("alice.chained@example.com", current_password=USER[1]),
        token=user_token,
    )
    assert assert_json(reply) == {"id": user_id, "version": before["version"] + 1}
    after = show_person(daemon, admin_token, user_id)
    assert after["email"] == "alice.chained@example.com"
    assert after["roles"] == before["roles"]


def test_a_user_postchain_may_not_send_fields_the_role_may_not_send(
    daemon, admin_token, user_token, user_id, user_team
):
    before = show_person(daemon, admin_token, user_id)
    body = {
        "roles": ["ROLE_ADMIN"],
        "username": "alice-admin",
        "chain": {"key": "leaderId", "type": "postchain", "order": {"person/update": "return"}},
    }
    problem = assert_problem(daemon.request("PUT", f"{C}/team/show/{user_team['id']}", body, token=user_token), 400)
    assert problem["link"] == {"position": 1, "endpoint": "person/update"}
    assert error_fields(problem) == {"roles", "username"}
    assert show_person(daemon, admin_token, user_id) == before


def test_a_user_cannot_pass_on_a_field_the_role_may_not_see(daemon, admin_token, user_token, user_team):
    assert "budget" not in show_team(daemon, user_token, user_team["id"])
    chain = {"chain": {"key": "budget", "order": {"person/show": "return"}}}
    problem = assert_rule(
        daemon.request("GET", f"{C}/team/show/{user_team['id']}", chain, token=user_token), "missing-key"
    )
    assert problem["link"] == {"position": 0, "endpoint": "team/show"}
    assert problem["key"] == "budget"
    assert "321" not in reply_text(problem)
    # an administrator's chain sees the budget and passes it on: link 1 gets it as its id (and fails,
    # 321 being no person id), so the chain got past link 0
    as_admin = daemon.request("GET", f"{C}/team/show/{user_team['id']}", chain, token=admin_token)
    assert as_admin.status in (400, 404), as_admin.body
    assert as_admin.json["link"] == {"position": 1, "endpoint": "person/show"}


def test_a_user_chain_with_a_link_the_role_may_not_call_is_403_before_any_link_runs(
    daemon, admin_token, user_token, user_id
):
    """The first link alone would succeed (the user may update their own email)."""
    before = show_person(daemon, admin_token, user_id)
    body = {
        "email": "alice.listed@example.com",
        "chain": {"key": "id", "type": "prechain", "order": {"person/list": "return"}},
    }
    problem = assert_problem(daemon.request("PUT", f"{C}/person/update/{user_id}", body, token=user_token), 403)
    assert "person/list" in problem["detail"]
    assert "nonSafeCallCompleted" not in problem  # refused up front, not by a link that ran
    assert show_person(daemon, admin_token, user_id) == before


def test_a_user_get_chain_with_a_link_the_role_may_not_call_is_403_up_front(daemon, user_token, user_team):
    chain = {"chain": {"key": "leaderId", "order": {"person/list": "return"}}}
    problem = assert_problem(daemon.request("GET", f"{C}/team/show/{user_team['id']}", chain, token=user_token), 403)
    assert "person/list" in problem["detail"]
    assert "nonSafeCallCompleted" not in problem


def test_a_user_postchain_ending_in_delete_is_403_and_deletes_nothing(daemon, admin_token, user_token, led):
    leader, team = led
    chain = {"chain": {"key": "leaderId", "type": "postchain", "order": {"person/delete": "return"}}}
    problem = assert_problem(daemon.request("DELETE", f"{C}/team/show/{team['id']}", chain, token=user_token), 403)
    assert "person/delete" in problem["detail"]
    assert "nonSafeCallCompleted" not in problem  # refused up front, not by a link that ran
    assert show_person(daemon, admin_token, leader["id"])["username"] == leader["username"]


def test_a_user_prechain_creating_a_team_is_403_and_creates_nothing(daemon, user_token, user_id, nothing_changes):
    name = team_name()
    problem = assert_problem(
        daemon.request("POST", f"{C}/team/create", create_chain(name, user_id), token=user_token), 403
    )
    assert "team/create" in problem["detail"]
    assert "nonSafeCallCompleted" not in problem


# --- versions -------------------------------------------------------------------------------


def test_c_calls_with_api_version_2_use_it_for_every_link(daemon, admin_token, admin_team):
    chain = {"chain": {"key": "id", "combine": True, "order": {"team/show": "return"}}}
    reply = daemon.request("GET", f"/c0.1-2/team/show/{admin_team['id']}", chain, token=admin_token)
    expected = {"id": admin_team["id"], "name": admin_team["name"]}
    assert assert_json(reply) == [expected, expected]
    # the same chain without the version segment answers version 1's fields
    current = assert_json(daemon.request("GET", f"{C}/team/show/{admin_team['id']}", chain, token=admin_token))
    assert current == [admin_team, admin_team]


def test_a_version_2_first_link_does_not_hand_on_what_version_2_hides(daemon, admin_token, admin_team):
    chain = {"chain": {"key": "leaderId", "order": {"team/show": "return"}}}
    # in version 1 the key is there and is passed on (leaderId 1 becomes the id of the next team/show)
    assert assert_json(daemon.request("GET", f"{C}/team/show/{admin_team['id']}", chain, token=admin_token))["id"] == 1
    reply = daemon.request("GET", f"/c0.1-2/team/show/{admin_team['id']}", chain, token=admin_token)
    problem = assert_rule(reply, "missing-key")
    assert problem["link"] == {"position": 0, "endpoint": "team/show"}
    assert problem["key"] == "leaderId"


@pytest.mark.parametrize("link", ["team/byLeader", "person/show"])
def test_a_later_link_is_resolved_in_version_2_too(daemon, admin_token, admin_team, link):
    chain = {"chain": {"key": "id", "order": {link: "return"}}}
    reply = daemon.request("GET", f"/c0.1-2/team/show/{admin_team['id']}", chain, token=admin_token)
    assert assert_rule(reply, "unknown-link")["link"] == {"position": 1, "endpoint": link}


def test_an_unknown_application_version_is_404(daemon, admin_token, admin_team):
    reply = daemon.request("GET", f"/c9.9/team/show/{admin_team['id']}", leader_chain(), token=admin_token)
    assert assert_problem(reply, 404)["servedVersion"] == "0.1"


# --- authentication -----------------------------------------------------------------------------


def test_a_chain_without_a_token_is_401(daemon, admin_team):
    reply = daemon.request("GET", f"{C}/team/show/{admin_team['id']}", leader_chain())
    assert_problem(reply, 401)
    assert reply.headers.get("WWW-Authenticate", "").startswith("Bearer")


def test_a_postchain_without_a_token_is_401_and_changes_nothing(daemon, admin_token, led):
    leader, team = led
    assert_problem(daemon.request("PUT", f"{C}/team/show/{team['id']}", update_chain("anon@example.com")), 401)
    assert_problem(
        daemon.request("PUT", f"{C}/team/show/{team['id']}", update_chain("anon@example.com"), token="not-a-jwt"), 401
    )
    assert show_person(daemon, admin_token, leader["id"])["email"] == leader["email"]


def test_a_prechain_without_a_token_creates_nothing(daemon, admin_token, nothing_changes):
    assert_problem(daemon.request("POST", f"{C}/team/create", create_chain(team_name(), 1)), 401)


# --- chainLimit: a deployment allowing two links ----------------------------------------------


@pytest.fixture(scope="module")
def short(tmp_path_factory):
    deployment = deployment_with_accounts(
        tmp_path_factory.mktemp("apid-chain-limit"), api={"chainLimit": 2}, accounts=(ADMIN_ACCOUNT,)
    )
    with running_daemon(deployment) as running:
        yield running


@pytest.fixture(scope="module")
def short_admin(short) -> str:
    return short.login(ADMIN[0], ADMIN[1])


def test_more_links_than_chain_limit_is_422_and_nothing_runs(short, short_admin):
    before = teams(short, short_admin)
    name = team_name()
    body = {
        "name": name,
        "leaderId": 1,
        "chain": {"key": "leaderId", "type": "prechain", "order": {"person/show": "id", "team/byLeader": "return"}},
    }
    problem = assert_rule(short.request("POST", f"{C}/team/create", body, token=short_admin), "chain-limit")
    assert "2" in problem["detail"]
    assert teams(short, short_admin) == before
    assert not teams_named(short, short_admin, name)


def test_more_links_than_chain_limit_in_a_get_chain_is_422(short, short_admin):
    team = new_team(short, short_admin, 1)
    chain = {"chain": {"key": "leaderId", "order": {"person/show": "id", "team/byLeader": "return"}}}
    assert_rule(short.request("GET", f"{C}/team/show/{team['id']}", chain, token=short_admin), "chain-limit")


def test_exactly_chain_limit_links_run(short, short_admin):
    name = team_name()
    reply = short.request("POST", f"{C}/team/create", create_chain(name, 1, combine=True), token=short_admin)
    created, leader = assert_json(reply)
    assert leader["id"] == 1 and leader["username"] == ADMIN[0]
    assert show_team(short, short_admin, created["id"])["name"] == name
