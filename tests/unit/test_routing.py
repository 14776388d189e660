"""The URL grammar `/{t}{app}[-{api}]/{controller}[/{action}[/{id}]]` (DESIGN 4.1, SPEC Versioning)."""

from __future__ import annotations

import pytest

from apid.calls.paths import call_path, parse_target
from apid.problems import NotFound

APP = "1.0"


@pytest.mark.parametrize("prefix, kind", [("v1.0", "v"), ("b1.0", "b"), ("c1.0", "c")])
def test_each_prefix_names_its_kind_of_call(prefix, kind):
    target = parse_target(APP, prefix, "person", "show", "7")
    assert (target.kind, target.controller, target.action, target.id) == (kind, "person", "show", "7")


def test_without_api_suffix_the_api_version_is_none():
    assert parse_target(APP, "v1.0", "person", "show", None).api_version is None


@pytest.mark.parametrize("prefix, api", [("v1.0-2", "2"), ("b1.0-1.1", "1.1"), ("c1.0-beta_2", "beta_2")])
def test_api_suffix_selects_a_version_block(prefix, api):
    assert parse_target(APP, prefix, "team", "show", None).api_version == api


def test_action_and_id_may_be_absent():
    target = parse_target(APP, "v1.0", "team", None, None)
    assert (target.action, target.id) == (None, None)


def test_a_multi_digit_app_version_is_served():
    assert parse_target("12.34", "v12.34", "team", "list", None).kind == "v"


@pytest.mark.parametrize("prefix", ["v2.0", "b1.1", "c0.9-2", "v01.0", "v1.00"])
def test_another_app_version_is_not_found_naming_the_served_one(prefix):
    with pytest.raises(NotFound) as info:
        parse_target(APP, prefix, "person", "show", None)
    problem = info.value
    assert problem.status == 404
    assert problem.extensions == {"servedVersion": APP}
    assert problem.to_dict()["servedVersion"] == APP
    assert "serves 1.0" in problem.detail


@pytest.mark.parametrize(
    "prefix",
    [
        "x1.0",
        "V1.0",
        "v1",
        "v1.",
        "v.0",
        "1.0",
        "v",
        "",
        "v1.0-",
        "v1.0-a/b",
        "v1.0-a-b",
        "vb1.0",
        "v1.0.0",
        "v١.٠",
        "v1.0\n",
    ],
)
def test_a_bad_prefix_is_not_found(prefix):
    with pytest.raises(NotFound) as info:
        parse_target(APP, prefix, "person", "show", None)
    assert info.value.status == 404
    assert "servedVersion" not in info.value.extensions


@pytest.mark.parametrize("controller", ["per-son", "1person", "person.json", "", "..", "person\n", "pérson"])
def test_a_bad_controller_name_is_not_found(controller):
    with pytest.raises(NotFound) as info:
        parse_target(APP, "v1.0", controller, "show", None)
    assert repr(controller) in info.value.detail


@pytest.mark.parametrize("action", ["show-all", "9show", "", "show now"])
def test_a_bad_action_name_is_not_found(action):
    with pytest.raises(NotFound) as info:
        parse_target(APP, "v1.0", "person", action, None)
    assert repr(action) in info.value.detail


@pytest.mark.parametrize("name", ["person", "_private", "Team2", "a_b_c"])
def test_identifier_names_are_accepted(name):
    assert parse_target(APP, "v1.0", name, name, None).controller == name


def test_call_path_builds_the_path_parse_target_reads():
    assert call_path("b", APP, "2", "team", "show") == "/b1.0-2/team/show"
    assert call_path("v", APP, None, "person", "list") == "/v1.0/person/list"
    _, prefix, controller, action = call_path("c", APP, "2", "team", "show").split("/")
    target = parse_target(APP, prefix, controller, action, None)
    assert (target.kind, target.api_version, target.controller, target.action) == ("c", "2", "team", "show")
