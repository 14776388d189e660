"""Strict reading of IO State files (DESIGN 4.2, SPEC "IO State entry")."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

from apid.config.api import SecurityConfig
from apid.config.files import load_api
from apid.config.kinds import API_FILE
from apid.iostate import (
    IOStateError,
    RuleSet,
    bind_references,
    check_actions,
    check_fields,
    parse,
    parse_text,
    read_dir,
)
from apid.iostate.model import CallLimit, Deprecation
from apid.plugin_host.field_declarations import declared_fields
from apid_person import PersonController
from apid_sample import TeamController

REPO = Path(__file__).resolve().parents[2]
PERSON_FILE = REPO / "iostate" / "person.json"
TEAM_FILE = REPO / "tests" / "sample_plugin" / "apid_sample" / "iostate" / "team.json"
SOURCE = "person.json"


@pytest.fixture(scope="module")
def security() -> SecurityConfig:
    return load_api(REPO / "etc" / API_FILE, REPO).security


@pytest.fixture
def person() -> dict:
    """The inner IOSTATE object of the repository's person.json, to change one thing in."""
    return json.loads(PERSON_FILE.read_text(encoding="utf-8"))["IOSTATE"]


@pytest.fixture
def team() -> dict:
    return json.loads(TEAM_FILE.read_text(encoding="utf-8"))


def refused(document: dict, security: SecurityConfig, *fragments: str) -> str:
    with pytest.raises(IOStateError) as info:
        parse(document, SOURCE, security)
    message = str(info.value)
    assert message.startswith(f"{SOURCE}: ")
    for fragment in fragments:
        assert fragment in message
    return message


# --- the real files -------------------------------------------------------------------------------


def test_person_json_parses(security):
    state = parse_text(PERSON_FILE.read_text(encoding="utf-8"), str(PERSON_FILE), security)
    assert state.name == "person"
    assert state.network_group == "public"
    assert state.source == str(PERSON_FILE)
    assert set(state.versions["1"].endpoints) == {"create", "show", "list", "update", "delete", "cancelReverts"}


def test_team_json_parses_with_two_versions(security):
    state = parse_text(TEAM_FILE.read_text(encoding="utf-8"), str(TEAM_FILE), security)
    assert state.name == "team"
    assert state.current_stable == "1"
    assert set(state.versions) == {"1", "2"}
    assert set(state.versions["2"].endpoints) == {"show"}


def test_person_create_fields_of_the_spec(security, person):
    create = parse(person, SOURCE, security).versions["1"].endpoints["create"]
    assert create.method == "POST"
    assert create.request.permit_all == {"username", "password", "email"}
    assert create.response.permit_all == {"id", "version"}


def test_value_types_and_keys_are_read(security, team):
    values = parse(team, SOURCE, security).values
    assert values["id"].type.name == "Long"
    assert values["id"].key == "PKEY"
    assert (values["leaderId"].key, values["leaderId"].reference) == ("FKEY", "person")
    assert values["budget"].type.name == "Float"


def test_wrapped_and_unwrapped_forms_give_the_same_state(security, person):
    wrapped = parse({"IOSTATE": person}, SOURCE, security)
    unwrapped = parse(person, SOURCE, security)
    assert wrapped == unwrapped


def test_currentstable_and_version_blocks(security, team):
    state = parse(team, SOURCE, security)
    assert state.current_stable == "1"
    assert state.versions["1"].default_action == "list"
    assert state.versions["2"].default_action == "show"
    assert state.versions["2"].endpoints["show"].api_version == "2"
    assert state.versions["2"].endpoints["show"].response.permit_all == {"id", "name"}


JAN_1_2025 = 1735689600  # 2025-01-01T00:00:00Z
JUN_30_2026 = 1782777600  # 2026-06-30T00:00:00Z


@pytest.mark.parametrize(
    "written, since, message",
    [
        ("2025-01-01", JAN_1_2025, None),
        ("2025-01-01T00:00:00Z", JAN_1_2025, None),
        ("2025-01-01T02:30:00+02:30", JAN_1_2025, None),
        ("01/01/2025", JAN_1_2025, None),
        (
            ["01/01/2025", "team v2 is retired, use /v0.1/team/show"],
            JAN_1_2025,
            "team v2 is retired, use /v0.1/team/show",
        ),
        (["2025-01-01", "use v1"], JAN_1_2025, "use v1"),
    ],
)
def test_deprecated_forms(security, team, written, since, message):
    team["VERSION"]["2"]["DEPRECATED"] = written
    state = parse(team, SOURCE, security)
    assert state.versions["2"].deprecated == Deprecation(since=since, message=message, sunset=None)
    assert state.versions["1"].deprecated is None


@pytest.mark.parametrize("sunset", ["2026-06-30", "06/30/2026", "2026-06-30T00:00:00Z"])
def test_sunset_forms(security, team, sunset):
    team["VERSION"]["2"].update(DEPRECATED="2025-01-01", SUNSET=sunset)
    deprecation = parse(team, SOURCE, security).versions["2"].deprecated
    assert (deprecation.since, deprecation.sunset) == (JAN_1_2025, JUN_30_2026)
    assert not deprecation.gone(JUN_30_2026 - 1)
    assert deprecation.gone(JUN_30_2026)


def test_sunset_on_the_day_of_deprecation_is_allowed(security, team):
    team["VERSION"]["2"].update(DEPRECATED="2025-01-01", SUNSET="2025-01-01")
    assert parse(team, SOURCE, security).versions["2"].deprecated.sunset == JAN_1_2025


DATE_FORMS = (
    'must be a date: "YYYY-MM-DD", an ISO 8601 date-time with its UTC offset ("2026-06-30T12:00:00Z") or "MM/DD/YYYY"'
)
LIST_FORM = 'DEPRECATED as a list must be [date, "message"]'


@pytest.mark.parametrize(
    "member, written, expected",
    [
        ("DEPRECATED", "2025-13-01", f"DEPRECATED {DATE_FORMS}; got '2025-13-01'"),
        ("DEPRECATED", "31/12/2025", f"DEPRECATED {DATE_FORMS}; got '31/12/2025'"),
        ("DEPRECATED", "2025-01-01T00:00:00", f"DEPRECATED {DATE_FORMS}; got '2025-01-01T00:00:00'"),  # no offset
        ("DEPRECATED", "soon", f"DEPRECATED {DATE_FORMS}; got 'soon'"),
        ("DEPRECATED", 20250101, f"DEPRECATED {DATE_FORMS}; got 20250101"),
        ("DEPRECATED", {"sunset": "2027-01-01"}, f"DEPRECATED {DATE_FORMS}; got {{'sunset': '2027-01-01'}}"),
        ("DEPRECATED", ["01/01/2025"], f"{LIST_FORM}; got ['01/01/2025']"),
        ("DEPRECATED", ["01/01/2025", ""], f"{LIST_FORM}; got ['01/01/2025', '']"),
        ("DEPRECATED", ["01/01/2025", "a", "b"], f"{LIST_FORM}; got ['01/01/2025', 'a', 'b']"),
        ("DEPRECATED", ["never", "use v1"], f"DEPRECATED {DATE_FORMS}; got 'never'"),
        ("SUNSET", "2026-02-30", f"SUNSET {DATE_FORMS}; got '2026-02-30'"),
        ("SUNSET", ["2026-06-30", "bye"], f"SUNSET {DATE_FORMS}; got ['2026-06-30', 'bye']"),
    ],
)
def test_bad_dates_are_refused(security, team, member, written, expected):
    team["VERSION"]["2"].update(DEPRECATED="2025-01-01", SUNSET="2026-06-30")
    team["VERSION"]["2"][member] = written
    assert refused(team, security) == f"{SOURCE}: controller team, version 2: {expected}"


def test_sunset_before_deprecated_is_refused(security, team):
    team["VERSION"]["2"].update(DEPRECATED="2026-06-30", SUNSET="2026-06-29T23:59:59Z")
    refused(team, security, "version 2: SUNSET '2026-06-29T23:59:59Z' is before DEPRECATED '2026-06-30'")


def test_sunset_needs_deprecated(security, team):
    team["VERSION"]["2"]["SUNSET"] = "2026-06-30"
    refused(team, security, "version 2: SUNSET needs DEPRECATED")


def test_sunset_on_currentstable_is_refused(security, team):
    team["VERSION"]["1"].update(DEPRECATED="2025-01-01", SUNSET="2026-06-30")
    refused(team, security, "version 1: SUNSET is not allowed on the CURRENTSTABLE version")


def test_currentstable_may_be_deprecated(security, team):
    team["VERSION"]["1"]["DEPRECATED"] = "2025-01-01"
    assert parse(team, SOURCE, security).versions["1"].deprecated.since == JAN_1_2025


def test_numeric_currentstable_names_the_version(security, team):
    team["CURRENTSTABLE"] = 2
    assert parse(team, SOURCE, security).current_stable == "2"


# --- roles and fields ------------------------------------------------------------------------------


def test_permit_all_is_merged_into_each_role_request_fields(security, person):
    create = parse(person, SOURCE, security).versions["1"].endpoints["create"]
    assert create.request_fields({"ROLE_ADMIN"}) == {"username", "password", "email", "enabled", "roles"}
    assert create.request_fields(frozenset()) == {"username", "password", "email"}


def test_permit_all_is_merged_into_each_role_response_fields(security, person):
    show = parse(person, SOURCE, security).versions["1"].endpoints["show"]
    assert show.response_fields({"ROLE_USER"}) == {"id", "version", "username", "email"}
    admin = show.response_fields({"ROLE_ADMIN"})
    assert {"id", "username", "enabled", "roles", "dateCreated"} <= admin
    assert "password" not in admin


def test_default_absent_means_the_network_group_roles(security, team):
    list_ = parse(team, SOURCE, security).versions["1"].endpoints["list"]
    assert list_.roles == security.network_roles["public"] == {"ROLE_ADMIN", "ROLE_USER"}


def test_granted_is_the_intersection_with_the_endpoint_roles(security, person):
    create = parse(person, SOURCE, security).versions["1"].endpoints["create"]
    assert create.granted({"ROLE_USER", "ROLE_ADMIN"}) == {"ROLE_ADMIN"}
    assert create.granted({"ROLE_USER"}) == frozenset()


def test_batch_and_hook_roles_are_read(security, person):
    endpoints = parse(person, SOURCE, security).versions["1"].endpoints
    assert endpoints["update"].batch_roles == {"ROLE_ADMIN"}
    assert endpoints["show"].batch_roles == {"ROLE_ADMIN", "ROLE_USER"}
    assert endpoints["list"].hook_roles == frozenset()


def test_method_is_upper_cased_and_safety_follows(security, person):
    person["VERSION"]["1"]["URI"]["show"]["METHOD"] = "get"
    endpoints = parse(person, SOURCE, security).versions["1"].endpoints
    assert endpoints["show"].method == "GET"
    assert endpoints["show"].is_safe
    assert not endpoints["create"].is_safe


# --- strict rules: each refusal names file, controller, action and the culprit ---------------------


def test_role_not_in_the_network_group_is_refused(security, person):
    person["VERSION"]["1"]["URI"]["show"]["ROLES"]["DEFAULT"].append("ROLE_ANONYMOUS")
    refused(
        person,
        security,
        "controller person",
        "action show",
        "ROLES.DEFAULT",
        "'ROLE_ANONYMOUS'",
        "networkRoles[public]",
    )


def test_unknown_role_is_refused(security, person):
    person["VERSION"]["1"]["URI"]["create"]["ROLES"]["DEFAULT"] = ["ROLE_GHOST"]
    refused(person, security, "controller person", "action create", "'ROLE_GHOST'")


def test_batch_role_outside_the_endpoint_roles_is_refused(security, person):
    person["VERSION"]["1"]["URI"]["create"]["ROLES"]["BATCH"] = ["ROLE_ADMIN", "ROLE_USER"]
    refused(
        person,
        security,
        "controller person",
        "action create",
        "ROLES.BATCH",
        "'ROLE_USER'",
        "the endpoint's roles",
    )


def test_hook_role_outside_the_endpoint_roles_is_refused(security, person):
    person["VERSION"]["1"]["URI"]["delete"]["ROLES"]["HOOK"] = ["ROLE_USER"]
    refused(person, security, "controller person", "action delete", "ROLES.HOOK", "'ROLE_USER'")


def test_request_field_not_in_values_is_refused(security, person):
    person["VERSION"]["1"]["URI"]["create"]["REQUEST"]["permitAll"].append("nickname")
    refused(
        person,
        security,
        "controller person",
        "action create",
        "REQUEST permitAll",
        "'nickname'",
        "not defined in VALUES",
    )


def test_response_field_not_in_values_is_refused(security, person):
    person["VERSION"]["1"]["URI"]["show"]["RESPONSE"]["ROLE_ADMIN"].append("salary")
    refused(person, security, "action show", "RESPONSE ROLE_ADMIN", "'salary'")


def test_request_role_the_endpoint_does_not_admit_is_refused(security, person):
    person["VERSION"]["1"]["URI"]["create"]["REQUEST"]["ROLE_USER"] = ["enabled"]
    refused(
        person,
        security,
        "controller person",
        "action create",
        "REQUEST ROLE_USER",
        "'ROLE_USER' may not call this endpoint",
    )


def test_response_role_the_endpoint_does_not_admit_is_refused(security, person):
    person["VERSION"]["1"]["URI"]["list"]["RESPONSE"]["ROLE_USER"] = ["id"]
    refused(person, security, "action list", "RESPONSE ROLE_USER", "'ROLE_USER'")


@pytest.mark.parametrize("method", ["PATCH", "HEAD", "OPTIONS"])
def test_method_other_than_get_post_put_delete_is_refused(security, person, method):
    person["VERSION"]["1"]["URI"]["update"]["METHOD"] = method
    refused(person, security, "controller person", "action update", "METHOD must be one of", repr(method))


def test_missing_method_is_refused(security, person):
    del person["VERSION"]["1"]["URI"]["update"]["METHOD"]
    refused(person, security, "action update", "METHOD must be a non-empty string")


def test_unknown_network_group_is_refused(security, person):
    person["NETWORKGRP"] = "intranet"
    refused(person, security, "controller person", "NETWORKGRP 'intranet'", "open, public, private")


def test_unknown_values_type_is_refused(security, person):
    person["VALUES"]["email"]["type"] = "Emial"
    refused(person, security, "controller person", "field email", "unknown type 'Emial'")


def test_fkey_without_reference_is_refused(security, team):
    del team["VALUES"]["leaderId"]["reference"]
    refused(team, security, "controller team", "field leaderId", "FKEY field needs a reference")


def test_reference_without_fkey_is_refused(security, team):
    team["VALUES"]["name"]["reference"] = "person"
    refused(team, security, "field name", "reference is only allowed with key FKEY")


@pytest.mark.parametrize("reference", ["person.", ".id", "per-son", "person id", "", 7, ["person"]])
def test_a_reference_that_is_not_controller_or_controller_dot_field_is_refused(security, team, reference):
    team["VALUES"]["leaderId"]["reference"] = reference
    refused(
        team,
        security,
        "controller team",
        "field leaderId",
        'reference must be "controller" or "controller.field"',
        repr(reference),
    )


# --- references, bound against the other controllers ---------------------------------------------


def bound(security, person: dict, team: dict) -> dict:
    """person and team parsed, then their references bound, as plugins.bind does."""
    return bind_references(
        {"person": parse(person, "person.json", security), "team": parse(team, "team.json", security)}
    )


def refused_reference(security, person: dict, team: dict, *fragments: str) -> None:
    with pytest.raises(IOStateError) as info:
        bound(security, person, team)
    message = str(info.value)
    assert message.startswith("team.json: controller team, field leaderId: FKEY reference ")
    for fragment in fragments:
        assert fragment in message


def test_a_reference_names_the_controller_and_the_field(security, person, team):
    assert team["VALUES"]["leaderId"]["reference"] == "person.id"
    leader = parse(team, "team.json", security).values["leaderId"]
    assert (leader.reference, leader.referenced_field) == ("person", "id")
    assert bound(security, person, team)["team"].values["leaderId"].referenced_field == "id"


def test_a_reference_naming_the_controller_alone_means_its_pkey(security, person, team):
    team["VALUES"]["leaderId"]["reference"] = "person"
    leader = parse(team, "team.json", security).values["leaderId"]
    assert (leader.reference, leader.referenced_field) == ("person", None)
    states = bound(security, person, team)
    assert states["team"].values["leaderId"].referenced_field == "id"
    assert states["team"].values["leaderId"].references("person", "id")
    assert states["person"] == parse(person, "person.json", security)  # no FKEY: unchanged


def test_a_reference_to_a_controller_not_installed_is_refused(security, person, team):
    team["VALUES"]["leaderId"]["reference"] = "company.id"
    refused_reference(security, person, team, "'company.id' is not an installed controller")


def test_a_reference_to_a_field_not_in_values_is_refused(security, person, team):
    team["VALUES"]["leaderId"]["reference"] = "person.nope"
    refused_reference(security, person, team, "'person.nope'", "controller person has no field 'nope' in VALUES")


def test_a_reference_to_a_field_that_is_not_the_pkey_is_refused(security, person, team):
    team["VALUES"]["leaderId"]["reference"] = "person.email"
    refused_reference(
        security,
        person,
        team,
        "'person.email'",
        "an FKEY references its controller's PKEY",
        "'email' is not person's (its PKEY is 'id')",
    )


def test_a_reference_to_a_controller_without_a_pkey_is_refused(security, person, team):
    del person["VALUES"]["id"]["key"]
    refused_reference(security, person, team, "'person.id'", "it has no PKEY")
    team["VALUES"]["leaderId"]["reference"] = "person"
    refused_reference(security, person, team, "'person': controller person has no PKEY field to reference")


def test_the_reverse_relations_of_a_controller_are_the_fkeys_pointing_to_it(security, person, team):
    rules = RuleSet(controllers=bound(security, person, team))
    assert [(state.name, spec.name) for state, spec in rules.referring("person")] == [("team", "leaderId")]
    assert rules.referring("team") == []
    assert rules.controller("person").primary_key == "id"


def test_unknown_key_kind_is_refused(security, person):
    person["VALUES"]["id"]["key"] = "PRIMARY"
    refused(person, security, "field id", "key must be one of PKEY, FKEY, INDEX", "'PRIMARY'")


def test_currentstable_not_in_version_is_refused(security, team):
    team["CURRENTSTABLE"] = "3"
    refused(team, security, "controller team", "CURRENTSTABLE '3' is not a key of VERSION")


def test_empty_version_is_refused(security, team):
    team["VERSION"] = {}
    refused(team, security, "controller team", "VERSION must hold at least one API version")


def test_defaultaction_not_an_action_is_refused(security, team):
    team["VERSION"]["2"]["DEFAULTACTION"] = "list"
    refused(team, security, "controller team", "version 2", "DEFAULTACTION 'list' is not an action")


def test_defaultaction_that_is_not_a_string_is_refused(security, team):
    team["VERSION"]["1"]["DEFAULTACTION"] = ["list"]
    refused(team, security, "controller team", "version 1", "DEFAULTACTION")


def test_unknown_top_level_member_is_refused(security, person):
    person["NETWORKGROUP"] = "public"
    refused(person, security, "unknown members ['NETWORKGROUP']")


def test_unknown_member_beside_iostate_is_refused(security, person):
    refused({"IOSTATE": person, "EXTRA": 1}, security, "unknown members ['EXTRA', 'IOSTATE']")


def test_unknown_version_block_member_is_refused(security, team):
    team["VERSION"]["1"]["DEFAULT_ACTION"] = "list"
    refused(team, security, "version 1", "unknown members ['DEFAULT_ACTION']")


def test_unknown_action_member_is_refused(security, person):
    person["VERSION"]["1"]["URI"]["show"]["RESPONSES"] = {}
    refused(person, security, "controller person", "action show", "unknown members ['RESPONSES']")


def test_unknown_roles_member_is_refused(security, person):
    person["VERSION"]["1"]["URI"]["show"]["ROLES"]["ADMIN"] = ["ROLE_ADMIN"]
    refused(person, security, "action show", "ROLES has unknown members ['ADMIN']")


def test_unknown_values_entry_member_is_refused(security, person):
    person["VALUES"]["email"]["required"] = True
    refused(person, security, "field email", "unknown members ['required']")


def test_field_list_that_is_not_a_list_of_strings_is_refused(security, person):
    person["VERSION"]["1"]["URI"]["show"]["REQUEST"]["permitAll"] = "id"
    refused(person, security, "action show", "REQUEST permitAll", "must be a list of strings")


def test_document_that_is_not_an_object_is_refused(security):
    with pytest.raises(IOStateError, match=r"^person\.json: an IO State file must be a JSON object"):
        parse([], SOURCE, security)


def test_invalid_json_is_refused(security):
    with pytest.raises(IOStateError, match=r"^broken\.json: not valid JSON"):
        parse_text('{"NAME": "person",', "broken.json", security)


def test_one_bad_rule_refuses_the_whole_file(security, person):
    person["VERSION"]["2"] = copy.deepcopy(person["VERSION"]["1"])
    person["VERSION"]["2"]["URI"]["list"]["METHOD"] = "PATCH"
    refused(person, security, "version 2", "action list", "'PATCH'")


# --- read_dir and check_actions ------------------------------------------------------------------


def test_read_dir_keys_states_by_name(security, tmp_path):
    (tmp_path / "a.json").write_text(PERSON_FILE.read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "b.json").write_text(TEAM_FILE.read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "notes.txt").write_text("not an IO State file", encoding="utf-8")
    states = read_dir(tmp_path, security)
    assert set(states) == {"person", "team"}
    assert states["team"].source == str(tmp_path / "b.json")


def test_read_dir_of_a_missing_folder_is_empty(security, tmp_path):
    assert read_dir(tmp_path / "absent", security) == {}


def test_read_dir_refuses_two_files_with_the_same_name(security, tmp_path):
    for name in ("a.json", "b.json"):
        (tmp_path / name).write_text(TEAM_FILE.read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(IOStateError) as info:
        read_dir(tmp_path, security)
    message = str(info.value)
    assert message.startswith(f"{tmp_path / 'b.json'}: controller team")
    assert f"also defined in {tmp_path / 'a.json'}" in message


def test_read_dir_refuses_a_bad_file_naming_it(security, tmp_path):
    (tmp_path / "team.json").write_text('{"NAME": ', encoding="utf-8")
    with pytest.raises(IOStateError, match="^" + re.escape(f"{tmp_path / 'team.json'}: not valid JSON")):
        read_dir(tmp_path, security)


def test_read_dir_refuses_a_file_that_is_not_utf8_naming_it(security, tmp_path):
    (tmp_path / "team.json").write_bytes(b'{"NAME": "\xff"}')
    with pytest.raises(IOStateError, match=re.escape("team.json")):
        read_dir(tmp_path, security)


def test_check_actions_accepts_the_real_controllers(security):
    person = parse_text(PERSON_FILE.read_text(encoding="utf-8"), str(PERSON_FILE), security)
    team = parse_text(TEAM_FILE.read_text(encoding="utf-8"), str(TEAM_FILE), security)
    check_actions(person, PersonController.actions(), "apid-person")
    check_actions(team, TeamController.actions(), "apid-sample")


def test_check_actions_refuses_an_action_the_controller_does_not_implement(security, team):
    team["VERSION"]["2"]["URI"]["archive"] = {"METHOD": "POST"}
    state = parse(team, "team.json", security)
    with pytest.raises(IOStateError) as info:
        check_actions(state, TeamController.actions(), "apid-sample")
    message = str(info.value)
    assert message.startswith("team.json: controller team, version 2, action archive")
    assert "apid-sample" in message
    assert "(it has: audit, byLeader, create, list, relay, show, summary)" in message


# --- RATELIMIT: calls per window per caller, on top of the daily limit ------------------------


def rate_limits(security, person: dict, limits) -> dict:
    person["VERSION"]["1"]["URI"]["show"]["RATELIMIT"] = limits
    return parse(person, SOURCE, security).versions["1"].endpoints["show"].rate_limits


def test_ratelimit_in_the_original_framework_form_is_calls_per_ten_minutes(security, person):
    assert rate_limits(security, person, {"ROLE_USER": "100", "ROLE_ADMIN": "*"}) == {
        "ROLE_USER": CallLimit(100, 600),
        "ROLE_ADMIN": CallLimit(None, 600),
    }


def test_ratelimit_in_apids_form_names_the_window(security, person):
    assert rate_limits(security, person, {"ROLE_USER": {"limit": 3, "window": 60}, "ROLE_ADMIN": 1000}) == {
        "ROLE_USER": CallLimit(3, 60),
        "ROLE_ADMIN": CallLimit(1000, 600),
    }
    assert rate_limits(security, person, {"ROLE_USER": {"limit": 3}}) == {"ROLE_USER": CallLimit(3, 600)}


def test_no_ratelimit_means_no_endpoint_limit(security, person):
    assert parse(person, SOURCE, security).versions["1"].endpoints["show"].rate_limits == {}


@pytest.mark.parametrize(
    "limit",
    [
        "0",
        0,
        -5,
        "ten",
        "",
        "**",
        True,
        None,
        1.5,
        "1.5",
        "²",
        [100],
        {"limit": 0},
        {"limit": "100"},
        {"window": 60},
        {"limit": 5, "window": 0},
        {"limit": 5, "window": "60"},
        {"limit": 5, "per": 60},
    ],
)
def test_a_bad_ratelimit_is_refused(security, person, limit):
    person["VERSION"]["1"]["URI"]["show"]["RATELIMIT"] = {"ROLE_USER": limit}
    refused(person, security, "controller person", "version 1", "action show", "RATELIMIT ROLE_USER")


def test_a_ratelimit_that_is_not_an_object_is_refused(security, person):
    person["VERSION"]["1"]["URI"]["show"]["RATELIMIT"] = "100"
    refused(person, security, "action show", "RATELIMIT must be a JSON object")


def test_a_ratelimit_role_the_endpoint_does_not_admit_is_refused(security, person):
    person["VERSION"]["1"]["URI"]["list"]["RATELIMIT"] = {"ROLE_USER": "100"}  # list is ROLE_ADMIN's only
    refused(person, security, "action list", "RATELIMIT ROLE_USER", "'ROLE_USER' may not call this endpoint")


# --- check_fields: the fields the code declares ------------------------------------------------


def test_check_fields_accepts_the_real_controllers(security):
    for path, controller in ((PERSON_FILE, PersonController), (TEAM_FILE, TeamController)):
        state = parse_text(path.read_text(encoding="utf-8"), str(path), security)
        check_fields(state, declared_fields(controller).fields, controller.name)


def test_check_fields_refuses_a_request_field_the_code_does_not_declare_naming_where(security, team):
    team["VALUES"]["reorderLevel"] = {"type": "Integer"}
    team["VERSION"]["1"]["URI"]["create"]["REQUEST"]["ROLE_ADMIN"] = ["reorderLevel"]
    state = parse(team, "team.json", security)
    with pytest.raises(IOStateError) as info:
        check_fields(state, declared_fields(TeamController).fields, "team (distribution apid-sample)")
    assert str(info.value) == (
        "team.json: controller team, version 1, action create, REQUEST ROLE_ADMIN: field 'reorderLevel' is not "
        "one the controller of team (distribution apid-sample) stores or answers (it declares: budget, id, "
        "leaderId, led, max, name, offset); start apid with code that handles it before loading these rules"
    )


def test_check_fields_refuses_a_response_field_before_an_unused_one(security, team):
    team["VALUES"]["spare"] = {"type": "String"}
    team["VALUES"]["motto"] = {"type": "String"}
    team["VERSION"]["2"]["URI"]["show"]["RESPONSE"]["permitAll"].append("motto")
    state = parse(team, "team.json", security)
    with pytest.raises(IOStateError, match=re.escape("version 2, action show, RESPONSE permitAll: field 'motto'")):
        check_fields(state, declared_fields(TeamController).fields, "apid-sample")
    del team["VALUES"]["motto"], team["VERSION"]["2"]["URI"]["show"]["RESPONSE"]["permitAll"][-1]
    with pytest.raises(IOStateError, match="^" + re.escape("team.json: controller team, VALUES: field 'spare'")):
        check_fields(parse(team, "team.json", security), declared_fields(TeamController).fields, "apid-sample")


def test_check_fields_leaves_a_controller_that_declares_nothing_unchecked(security, team):
    team["VALUES"]["anything"] = {"type": "String"}
    check_fields(parse(team, "team.json", security), None, "apid-sample")


# --- answers in their VALUES types -------------------------------------------------------------


def test_each_response_field_whose_type_converts_answers_converted(security, team):
    endpoints = parse(team, "team.json", security).versions["1"].endpoints
    assert sorted(endpoints["show"].conversions) == ["budget", "id", "leaderId"]
    assert sorted(endpoints["summary"].conversions) == ["id", "leaderId", "led"]
    assert endpoints["show"].conversions["budget"](1) == 1.0
