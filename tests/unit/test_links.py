"""Which links an answer gets (docs/links-and-cors.md): the controller's own actions with the
record's PKEY, the referenced controllers' GET actions for each FKEY, and the reverse
relations (the GET actions of controllers with an FKEY to this one), all for the caller's roles."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from httplink import parse_link_header

from apid.calls.links import link_header, next_offset, page_links
from apid.config.files import load_api
from apid.config.kinds import API_FILE
from apid.iostate import RuleSet, bind_references, parse

REPO = Path(__file__).resolve().parents[2]
SECURITY = load_api(REPO / "etc" / API_FILE, REPO).security
ADMIN, USER = frozenset({"ROLE_ADMIN"}), frozenset({"ROLE_USER"})


def document(path: Path) -> dict:
    loaded = json.loads(path.read_text(encoding="utf-8"))
    return loaded.get("IOSTATE", loaded)


@pytest.fixture
def files() -> dict[str, dict]:
    """person, hook and the sample team, as dicts to change one thing in."""
    return {
        "person": document(REPO / "iostate/person.json"),
        "hook": document(REPO / "iostate/hook.json"),
        "team": document(REPO / "tests/sample_plugin/apid_sample/iostate/team.json"),
    }


def rules_of(files: dict[str, dict]) -> RuleSet:
    return RuleSet(
        controllers=bind_references({name: parse(doc, f"{name}.json", SECURITY) for name, doc in files.items()})
    )


def rel(path: str) -> str:
    """The relation type of an endpoint, as the parser gives it: relation types are
    case-insensitive (RFC 8288 section 2.1), so httplink lowers them."""
    return f"urn:apid:rel:{path}".lower()


def links(rules: RuleSet, path: str, data: dict, roles: frozenset[str]) -> list[tuple[str, str, str]]:
    """(rel, target, method) of every link, in the header's order, for an answer of `path`."""
    controller, action = path.split("/")
    endpoint = rules.controller(controller).versions["1"].endpoints[action]
    header = link_header(rules, endpoint, data, roles, "0.1", None, f"/v0.1/{path}")
    return [(*link.rel, link.target, dict(link.attributes)["method"]) for link in parse_link_header(header).links]


def rels(found: list[tuple[str, str, str]]) -> dict[str, str]:
    return {rel: target for rel, target, _ in found}


PERSON_7 = {"id": 7, "version": 0, "username": "lead", "email": "lead@example.com"}
TEAM_3 = {"id": 3, "name": "Ops", "leaderId": 7}


def test_a_person_answer_links_the_team_actions_that_take_its_id_as_leader_id(files):
    found = links(rules_of(files), "person/show", PERSON_7, USER)
    assert found == [
        ("self", "/v0.1/person/show", "GET"),
        (rel("person/update"), "/v0.1/person/update/7", "PUT"),
        (rel("person/cancelReverts"), "/v0.1/person/cancelReverts/7", "PUT"),
        (rel("team/list"), "/v0.1/team/list?leaderId=7", "GET"),
        (rel("team/byLeader"), "/v0.1/team/byLeader?leaderId=7", "GET"),
    ]
    # hook.userId is an FKEY to person too, but no hook action takes userId: no hook link


def test_no_reverse_link_to_an_action_the_role_may_not_call(files):
    files["team"]["VERSION"]["1"]["URI"]["list"]["ROLES"] = {"DEFAULT": ["ROLE_ADMIN"]}
    rules = rules_of(files)
    assert rel("team/list") not in rels(links(rules, "person/show", PERSON_7, USER))
    assert rels(links(rules, "person/show", PERSON_7, ADMIN))[rel("team/list")] == "/v0.1/team/list?leaderId=7"


def test_no_reverse_link_to_an_action_the_role_may_not_send_the_fkey_to(files):
    files["team"]["VERSION"]["1"]["URI"]["list"]["REQUEST"] = {"ROLE_ADMIN": ["leaderId"]}
    rules = rules_of(files)
    user = rels(links(rules, "person/show", PERSON_7, USER))
    assert rel("team/list") not in user and user[rel("team/byLeader")] == "/v0.1/team/byLeader?leaderId=7"
    assert rels(links(rules, "person/show", PERSON_7, ADMIN))[rel("team/list")] == "/v0.1/team/list?leaderId=7"


def test_no_reverse_link_when_the_answer_lacks_the_referenced_field(files):
    found = rels(links(rules_of(files), "person/update", {"version": 1}, ADMIN))
    assert not [name for name in found if name.startswith(rel("team/"))]
    assert found[rel("person/show")] == "/v0.1/person/show"  # and no id to add to the own actions


def test_a_team_answer_adds_its_id_only_to_actions_whose_id_is_the_teams(files):
    rules = rules_of(files)
    found = links(rules, "team/show", TEAM_3, USER)
    assert found[:4] == [
        ("self", "/v0.1/team/show", "GET"),
        (rel("team/list"), "/v0.1/team/list", "GET"),
        (rel("team/byLeader"), "/v0.1/team/byLeader", "GET"),  # takes leaderId, not the team's id
        (rel("team/summary"), "/v0.1/team/summary/3", "GET"),
    ]
    assert found[-1] == (rel("person/show"), "/v0.1/person/show/7", "GET")  # the FKEY: person.id, in the path
    endpoints = rules.controller("team").versions["1"].endpoints
    takes_id = {rel(f"team/{action}") for action, endpoint in endpoints.items() if "id" in endpoint.request.permit_all}
    assert {name for name, target, _ in found if target.endswith("/3")} == takes_id - {rel("team/show")}


def test_a_pkey_not_named_id_goes_in_the_query_and_an_id_that_is_not_the_pkey_gets_nothing(files):
    """team keyed by `code`: `id` is then some other number, and the path fills `id`."""
    values = files["team"]["VALUES"]
    del values["id"]["key"]
    values["code"] = {"type": "String", "key": "PKEY", "description": "Team code"}
    files["team"]["VERSION"]["1"]["URI"]["summary"]["REQUEST"] = {"permitAll": ["code"]}
    found = rels(links(rules_of(files), "team/byLeader", {**TEAM_3, "code": "ops/a b"}, ADMIN))
    assert found[rel("team/summary")] == "/v0.1/team/summary?code=ops%2Fa%20b"
    assert found[rel("team/show")] == "/v0.1/team/show"


def test_an_fkey_naming_its_controller_alone_links_as_one_naming_the_field(files):
    files["team"]["VALUES"]["leaderId"]["reference"] = "person"
    assert links(rules_of(files), "person/show", PERSON_7, USER)[-2:] == [
        (rel("team/list"), "/v0.1/team/list?leaderId=7", "GET"),
        (rel("team/byLeader"), "/v0.1/team/byLeader?leaderId=7", "GET"),
    ]
    assert rels(links(rules_of(files), "team/show", TEAM_3, USER))[rel("person/show")] == "/v0.1/person/show/7"


# --- pagination: next, prev and first from the page the action answered ---------------------


def paging(
    rules: RuleSet, path: str, data: list, page: tuple[int, int] | None, uri: str, roles: frozenset[str] = ADMIN
) -> dict[str, str]:
    controller, action = path.split("/")
    endpoint = rules.controller(controller).versions["1"].endpoints[action]
    found = page_links(endpoint, endpoint.granted(roles), data, page, uri)
    parsed = parse_link_header(", ".join(found)).links if found else []
    assert all(dict(link.attributes)["method"] == "GET" for link in parsed)
    return {rel_type: link.target for link in parsed for rel_type in link.rel}


def test_a_full_first_page_links_only_the_next(files):
    assert paging(rules_of(files), "person/list", [PERSON_7] * 2, (0, 2), "/v0.1/person/list?max=2") == {
        "next": "/v0.1/person/list?offset=2&max=2"
    }


def test_a_short_page_past_the_start_links_prev_and_first_but_no_next(files):
    assert paging(rules_of(files), "person/list", [PERSON_7], (3, 5), "/v0.1/person/list?offset=3&max=5") == {
        "prev": "/v0.1/person/list?offset=0&max=5",
        "first": "/v0.1/person/list?offset=0&max=5",
    }


def test_the_other_query_fields_stay_and_the_default_page_size_is_named(files):
    """No max sent: the page size the action chose (Call.page's default) goes in the links."""
    found = paging(rules_of(files), "team/list", [TEAM_3] * 20, (40, 20), "/v0.1/team/list?offset=40&leaderId=7")
    assert found == {
        "next": "/v0.1/team/list?leaderId=7&offset=60&max=20",
        "prev": "/v0.1/team/list?leaderId=7&offset=20&max=20",
        "first": "/v0.1/team/list?leaderId=7&offset=0&max=20",
    }


def test_no_page_links_without_a_page_an_array_or_the_right_to_send_the_page_fields(files):
    rules = rules_of(files)
    assert paging(rules, "person/list", [PERSON_7], None, "/v0.1/person/list") == {}  # the action did not page
    assert paging(rules, "person/show", PERSON_7, (0, 1), "/v0.1/person/show/7") == {}  # not an array
    files["team"]["VERSION"]["1"]["URI"]["list"]["REQUEST"] = {
        "permitAll": ["leaderId"],
        "ROLE_ADMIN": ["offset", "max"],
    }
    rules = rules_of(files)
    assert paging(rules, "team/list", [TEAM_3], (0, 1), "/v0.1/team/list", USER) == {}
    assert paging(rules, "team/list", [TEAM_3], (0, 1), "/v0.1/team/list", ADMIN) == {
        "next": "/v0.1/team/list?offset=1&max=1"
    }


def test_with_related_links_the_page_links_follow_self_whose_method_is_the_calls(files):
    rules = rules_of(files)
    endpoint = rules.controller("team").versions["1"].endpoints["list"]
    paged = page_links(endpoint, endpoint.granted(ADMIN), [TEAM_3], (0, 1), "/v0.1/team/list?max=1")
    header = link_header(rules, endpoint, [TEAM_3], ADMIN, "0.1", None, "/b0.1/team/list", "POST", paged)
    found = [(*link.rel, link.target, dict(link.attributes)["method"]) for link in parse_link_header(header).links]
    assert found[:3] == [
        ("self", "/b0.1/team/list", "POST"),
        ("next", "/v0.1/team/list?offset=1&max=1", "GET"),
        (rel("team/create"), "/v0.1/team/create", "POST"),
    ]


def test_next_offset_is_where_a_full_page_leaves_off_and_none_after_the_last():
    assert next_offset([1, 2], (0, 2)) == 2
    assert next_offset([1, 2, 3], (40, 2)) == 42  # an action that answered more than asked
    assert next_offset([1], (40, 2)) is None
    assert next_offset([], (0, 20)) is None
    assert next_offset({"id": 1}, (0, 1)) is None and next_offset([1], None) is None
