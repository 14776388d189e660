"""The role-filtered view of the API (apid.openapi.view) and the `apidoc` controller that answers it,
against the repository's IO State files and the sample plugin's team.json."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import pytest_twisted

from apid.auth.tokens import Principal
from apid.calls.pipeline import CallRequest, Pipeline
from apid.config.files import load_api
from apid.iostate import RuleSet, parse_text
from apid.iostate.types import value_type
from apid.openapi.view import api_view, mock_value, views_of
from apid.plugin_host.discovery import load_all
from apid.problems import Forbidden, NotFound
from apid_apidoc import ApidocController
from iostate_rules import SAMPLE_TEAM, documented_calls, expected_calls, network_roles, read_states

ROOT = Path(__file__).resolve().parents[2]
SECURITY = load_api(ROOT / "etc" / "service_api.yml", ROOT).security
BOUND = load_all(ROOT / "iostate", SECURITY)  # the installed plugins: first-party and the sample's team
RULES = BOUND.rules
STATES = read_states(ROOT / "iostate", SAMPLE_TEAM)
GROUPS = network_roles()
ADMIN, USER = "ROLE_ADMIN", "ROLE_USER"


def view(*roles: str):
    return api_view(RULES, roles, "0.1")


@pytest.mark.parametrize("roles", [{ADMIN}, {USER}, {ADMIN, USER}, {"ROLE_ANONYMOUS"}, set()])
def test_a_view_holds_exactly_what_the_io_state_files_give_the_roles(roles):
    assert documented_calls(view(*roles).to_dict()) == expected_calls(STATES, roles, GROUPS)


def test_admin_and_user_views_differ_exactly_as_their_io_state_does():
    admin, user = documented_calls(view(ADMIN).to_dict()), documented_calls(view(USER).to_dict())
    expected_admin, expected_user = expected_calls(STATES, {ADMIN}, GROUPS), expected_calls(STATES, {USER}, GROUPS)
    assert set(admin) - set(user) == set(expected_admin) - set(expected_user) != set()
    assert set(user) - set(admin) == set(expected_user) - set(expected_admin)
    differing = {key for key in set(admin) & set(user) if admin[key] != user[key]}
    assert (
        differing
        == {key for key in set(expected_admin) & set(expected_user) if expected_admin[key] != expected_user[key]}
        != set()
    )


def test_nothing_only_another_role_may_see_gets_into_a_view():
    document = view(USER).to_dict()
    assert "server" not in document["controllers"]  # private: ROLE_ADMIN only
    person = document["controllers"]["person"]["versions"]["1"]["actions"]
    assert set(person) == {"show", "update", "cancelReverts"}
    assert set(person["show"]["response"]) == {"id", "version", "username", "email"}
    assert "roles" not in person["update"]["request"] and "enabled" not in person["update"]["request"]
    assert person["update"]["batch"] is False and person["update"]["hook"] is False
    text = json.dumps(document)
    assert ADMIN not in text and "accountLocked" not in text and "budget" not in text


def test_a_version_or_default_action_the_roles_may_not_call_is_left_out():
    states = dict(RULES.controllers)
    person = json.loads((ROOT / "iostate/person.json").read_text())["IOSTATE"]
    person["VERSION"]["2"] = {
        "DEFAULTACTION": "list",
        "URI": {"list": person["VERSION"]["1"]["URI"]["list"], "show": person["VERSION"]["1"]["URI"]["show"]},
    }
    states["person"] = parse_text(json.dumps(person), "person.json", SECURITY)
    rules = RuleSet(controllers=states)
    user = api_view(rules, {USER}, "0.1").to_dict()["controllers"]["person"]["versions"]
    assert user["2"] == {
        "current": False,
        "defaultAction": None,
        "deprecated": None,
        "actions": {"show": user["2"]["actions"]["show"]},
    }
    assert user["2"]["actions"]["show"]["paths"]["v"] == ["/v0.1-2/person/show", "/v0.1-2/person/show/{id}"]
    del person["VERSION"]["2"]["URI"]["show"]
    states["person"] = parse_text(json.dumps(person), "person.json", SECURITY)
    assert set(api_view(RuleSet(controllers=states), {USER}, "0.1").to_dict()["controllers"]["person"]["versions"]) == {
        "1"
    }


def test_an_action_says_its_method_description_paths_and_fields():
    admin = view(ADMIN).to_dict()
    assert admin["version"] == "0.1" and admin["roles"] == [ADMIN]
    team = admin["controllers"]["team"]["versions"]
    show = team["1"]["actions"]["show"]
    assert show["method"] == "GET"
    assert show["description"] == "One team"
    assert show["paths"] == {
        "v": ["/v0.1/team/show", "/v0.1/team/show/{id}"],
        "b": ["/b0.1/team/show"],
        "c": ["/c0.1/team/show/{id}"],
    }
    assert show["response"]["leaderId"] == {
        "type": "Long",
        "description": "The person leading the team",
        "mockData": 1,
        "key": "FKEY",
        "reference": "person",
    }
    assert show["request"]["id"]["key"] == "PKEY"
    assert show["response"]["budget"]["mockData"] == 1000.5
    # the default action is also called by the controller's path alone; version 2 is not current
    assert team["1"]["actions"]["list"]["paths"]["v"] == ["/v0.1/team/list", "/v0.1/team"]
    assert team["1"]["current"] is True and team["1"]["defaultAction"] == "list"
    assert team["2"]["current"] is False
    assert team["2"]["actions"]["show"]["paths"]["v"] == ["/v0.1-2/team/show", "/v0.1-2/team/show/{id}", "/v0.1-2/team"]
    create = team["1"]["actions"]["create"]
    assert create["paths"]["c"] == ["/c0.1/team/create"]  # no id to send: no /{id} form
    assert create["hook"] is True and create["batch"] is True
    # a role that may not batch it gets no /b path
    assert view(USER).to_dict()["controllers"]["team"]["versions"]["1"]["actions"]["list"]["paths"]["b"] == []


def test_fields_are_listed_in_the_order_values_gives_them():
    person = view(ADMIN).to_dict()["controllers"]["person"]["versions"]["1"]["actions"]["list"]["response"]
    values = json.loads((ROOT / "iostate/person.json").read_text())["IOSTATE"]["VALUES"]
    assert list(person) == [name for name in values if name in person]


@pytest.mark.parametrize(
    "kind, raw, value",
    [
        ("Long", "1", 1),
        ("Long", 7, 7),
        ("Integer", "0", 0),
        ("Float", "1000.5", 1000.5),
        ("Boolean", "true", True),
        ("Boolean", "false", False),
        ("List", '["ROLE_USER"]', ["ROLE_USER"]),
        ("List", "a,b", ["a", "b"]),
        ("Map", "{}", {}),
        ("String", "jdoe", "jdoe"),
        ("String", "1", "1"),
        ("String", "null", None),
        ("Date", "2026-01-01T00:00:00+00:00", "2026-01-01T00:00:00+00:00"),
        ("Email", "jdoe@example.com", "jdoe@example.com"),
        ("Long", "lots", "lots"),  # not a Long: shown as written
        ("Boolean", 3, 3),
        ("Long", None, None),
    ],
)
def test_mock_data_is_read_as_a_value_of_its_type_where_it_can_be(kind, raw, value):
    assert mock_value(value_type(kind), raw) == value


def test_deprecation_and_sunset_are_shown_as_utc_times_with_the_message():
    team = json.loads(SAMPLE_TEAM.read_text())
    team["VERSION"]["2"].update(DEPRECATED=["12/31/2025", "use v1"], SUNSET="2026-06-30T12:00:00+02:00")
    rules = RuleSet(controllers={"team": parse_text(json.dumps(team), "team.json", SECURITY)})
    versions = api_view(rules, {USER}, "0.1").to_dict()["controllers"]["team"]["versions"]
    assert versions["2"]["deprecated"] == {
        "since": "2025-12-31T00:00:00Z",
        "message": "use v1",
        "sunset": "2026-06-30T10:00:00Z",
    }
    assert versions["1"]["deprecated"] is None


# --- the apidoc controller through the pipeline ------------------------------------------------------


def principal(*roles: str) -> Principal:
    return Principal(user_id=1, username="jdoe", roles=frozenset(roles), token_id="t", expires=0, issued_at=0.0)


class RuleBookDouble:
    def __init__(self, rules: RuleSet) -> None:
        self.current = rules


@pytest.fixture
def book() -> RuleBookDouble:
    return RuleBookDouble(RULES)


@pytest.fixture
def pipeline(book) -> Pipeline:
    services = SimpleNamespace(api_view=views_of(lambda: book.current, "0.1"))
    return Pipeline(
        rules=lambda: book.current, controllers={"apidoc": ApidocController(services)}, superuser_role=ADMIN
    )


def show(pipeline: Pipeline, who: Principal, **text: str):
    request = CallRequest(
        controller="apidoc",
        action="show",
        api_version=None,
        method="GET",
        text={name: [value] for name, value in text.items()},
    )
    return pipeline.run(who, request)


@pytest_twisted.ensureDeferred
async def test_apidoc_show_answers_the_view_of_all_the_callers_roles(pipeline):
    result = await show(pipeline, principal(USER))
    assert result.data == view(USER).to_dict()
    both = await show(pipeline, principal(USER, ADMIN))
    assert both.data == view(USER, ADMIN).to_dict()


@pytest_twisted.ensureDeferred
async def test_apidoc_show_narrows_to_one_controller_the_caller_may_call(pipeline):
    result = await show(pipeline, principal(USER), controller="person")
    assert set(result.data["controllers"]) == {"person"}
    with pytest.raises(NotFound, match="your roles may call no controller named 'server'"):
        await show(pipeline, principal(USER), controller="server")
    with pytest.raises(NotFound):
        await show(pipeline, principal(USER), controller="ghost")


@pytest_twisted.ensureDeferred
async def test_apidoc_show_reads_the_rules_in_force_at_each_call(pipeline, book):
    person = json.loads((ROOT / "iostate/person.json").read_text())["IOSTATE"]
    del person["VERSION"]["1"]["URI"]["update"]
    book.current = RuleSet(
        controllers={**RULES.controllers, "person": parse_text(json.dumps(person), "person.json", SECURITY)}
    )
    result = await show(pipeline, principal(USER), controller="person")
    assert set(result.data["controllers"]["person"]["versions"]["1"]["actions"]) == {"show", "cancelReverts"}


@pytest_twisted.ensureDeferred
async def test_apidoc_show_is_governed_by_its_io_state(pipeline):
    with pytest.raises(Forbidden):
        await show(pipeline, principal("ROLE_ANONYMOUS"))
