"""Link relations: with X-LINK_RELATIONS (or X-LINK-RELATIONS) the answer carries an RFC 8288
Link header computed for the caller's roles; without it, none. Parsed with httplink."""

from __future__ import annotations

import pytest
from httplink import parse_link_header

from harness import V, create_team, new_person

REL = "urn:apid:rel:"


def links(reply) -> dict[str, tuple[str, str]]:
    """rel -> (target, method) of every link in the answer's Link header. Relation types are
    case-insensitive (RFC 8288 section 2.1): httplink lowers them (team/byleader)."""
    assert reply.status == 200, reply.body
    parsed = parse_link_header(reply.headers["Link"])
    found = {}
    for link in parsed.links:
        (rel,) = link.rel
        found[rel] = (link.target, dict(link.attributes)["method"])
    return found


@pytest.mark.parametrize("header", ["X-LINK_RELATIONS", "X-LINK-RELATIONS"])
def test_an_admin_gets_self_and_every_other_person_action(daemon, admin_token, header):
    person = new_person(daemon, admin_token)
    reply = daemon.request("GET", f"{V}/person/show/{person['id']}", token=admin_token, headers={header: "true"})
    assert links(reply) == {
        "self": (f"{V}/person/show/{person['id']}", "GET"),
        f"{REL}person/create": (f"{V}/person/create", "POST"),
        f"{REL}person/list": (f"{V}/person/list", "GET"),
        f"{REL}person/update": (f"{V}/person/update/{person['id']}", "PUT"),
        f"{REL}person/delete": (f"{V}/person/delete/{person['id']}", "DELETE"),
        f"{REL}team/list": (f"{V}/team/list?leaderId={person['id']}", "GET"),
        f"{REL}team/byleader": (f"{V}/team/byLeader?leaderId={person['id']}", "GET"),
    }


def test_a_user_gets_only_the_actions_their_role_may_call(daemon, user_token, user_id):
    reply = daemon.request("GET", f"{V}/person/show/{user_id}", token=user_token, headers={"X-LINK_RELATIONS": "1"})
    assert links(reply) == {
        "self": (f"{V}/person/show/{user_id}", "GET"),
        f"{REL}person/update": (f"{V}/person/update/{user_id}", "PUT"),
        f"{REL}team/list": (f"{V}/team/list?leaderId={user_id}", "GET"),
        f"{REL}team/byleader": (f"{V}/team/byLeader?leaderId={user_id}", "GET"),
    }


def test_an_fkey_in_the_answer_links_the_referenced_get_actions(daemon, admin_token, user_token, user_id):
    team = create_team(daemon, admin_token, "Linked", user_id, 10.0)
    admin = links(daemon.request("GET", f"{V}/team/show/{team['id']}", token=admin_token,
                                 headers={"X-LINK_RELATIONS": "1"}))
    assert admin[f"{REL}person/show"] == (f"{V}/person/show/{user_id}", "GET")
    assert f"{REL}person/list" not in admin  # takes no id: not a link for this leader
    assert f"{REL}person/update" not in admin  # only GET actions of the referenced controller
    user = links(daemon.request("GET", f"{V}/team/show/{team['id']}", token=user_token,
                                headers={"X-LINK_RELATIONS": "1"}))
    assert user[f"{REL}person/show"] == (f"{V}/person/show/{user_id}", "GET")
    assert f"{REL}team/create" not in user and f"{REL}team/create" in admin


def test_a_person_answer_links_the_teams_they_lead_and_the_link_answers_them(daemon, admin_token, user_token):
    """The reverse relation of team.leaderId (an FKEY to person.id): the user follows the link."""
    leader = new_person(daemon, admin_token)
    led = [create_team(daemon, admin_token, name, leader["id"], 1.0) for name in ("Led one", "Led two")]
    create_team(daemon, admin_token, "Led by another", 1, 1.0)
    found = links(daemon.request("GET", f"{V}/person/show/{leader['id']}", token=admin_token,
                                 headers={"X-LINK_RELATIONS": "1"}))
    target, method = found[f"{REL}team/list"]
    assert (target, method) == (f"{V}/team/list?leaderId={leader['id']}", "GET")
    reply = daemon.request(method, target, token=user_token)
    assert reply.status == 200, reply.body
    assert reply.json == [{key: team[key] for key in ("id", "name", "leaderId")} for team in led]
    # hook.userId is an FKEY to person as well, but no hook action takes userId
    assert not [rel for rel in found if rel.startswith(f"{REL}hook/")]


def test_a_team_answer_adds_its_id_only_to_actions_whose_id_is_the_teams(daemon, admin_token, user_id):
    team = create_team(daemon, admin_token, "Own id", user_id, 1.0)
    found = links(daemon.request("GET", f"{V}/team/show/{team['id']}", token=admin_token,
                                 headers={"X-LINK_RELATIONS": "1"}))
    assert found[f"{REL}team/summary"] == (f"{V}/team/summary/{team['id']}", "GET")
    assert found[f"{REL}team/byleader"] == (f"{V}/team/byLeader", "GET")  # takes leaderId: no team id
    assert found[f"{REL}team/list"] == (f"{V}/team/list", "GET")


def test_without_the_request_header_there_is_no_link_header(daemon, admin_token):
    reply = daemon.request("GET", f"{V}/person/show/1", token=admin_token)
    assert reply.status == 200
    assert "Link" not in reply.headers
