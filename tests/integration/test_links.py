"""Link relations: with X-LINK_RELATIONS (or X-LINK-RELATIONS) the answer carries an RFC 8288
Link header computed for the caller's roles; without it, none. Parsed with httplink."""

from __future__ import annotations

import pytest
from httplink import parse_link_header

from harness import V, create_team, new_person

REL = "urn:apid:rel:"


def links(reply) -> dict[str, tuple[str, str]]:
    """rel -> (target, method) of every link in the answer's Link header."""
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
    }


def test_a_user_gets_only_the_actions_their_role_may_call(daemon, user_token, user_id):
    reply = daemon.request("GET", f"{V}/person/show/{user_id}", token=user_token, headers={"X-LINK_RELATIONS": "1"})
    assert links(reply) == {
        "self": (f"{V}/person/show/{user_id}", "GET"),
        f"{REL}person/update": (f"{V}/person/update/{user_id}", "PUT"),
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


def test_without_the_request_header_there_is_no_link_header(daemon, admin_token):
    reply = daemon.request("GET", f"{V}/person/show/1", token=admin_token)
    assert reply.status == 200
    assert "Link" not in reply.headers
