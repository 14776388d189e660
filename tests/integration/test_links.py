"""Link relations: with X-LINK_RELATIONS (or X-LINK-RELATIONS) the answer carries an RFC 8288
Link header computed for the caller's roles; without it, none but a list's pagination links.
Batches carry their target's links, chains their last link's. Parsed with httplink."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest
from httplink import parse_link_header

from harness import V, create_team, new_person

REL = "urn:apid:rel:"
B, C = "/b0.1", "/c0.1"
WANT = {"X-LINK_RELATIONS": "1"}


def links(reply, status: int = 200) -> dict[str, tuple[str, str]]:
    """rel -> (target, method) of every link in the answer's Link header, in its order. Relation
    types are case-insensitive (RFC 8288 section 2.1): httplink lowers them (team/byleader)."""
    assert reply.status == status, reply.body
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
        f"{REL}person/cancelreverts": (f"{V}/person/cancelReverts/{person['id']}", "PUT"),
        f"{REL}person/delete": (f"{V}/person/delete/{person['id']}", "DELETE"),
        f"{REL}team/list": (f"{V}/team/list?leaderId={person['id']}", "GET"),
        f"{REL}team/byleader": (f"{V}/team/byLeader?leaderId={person['id']}", "GET"),
    }


def test_a_user_gets_only_the_actions_their_role_may_call(daemon, user_token, user_id):
    reply = daemon.request("GET", f"{V}/person/show/{user_id}", token=user_token, headers={"X-LINK_RELATIONS": "1"})
    assert links(reply) == {
        "self": (f"{V}/person/show/{user_id}", "GET"),
        f"{REL}person/update": (f"{V}/person/update/{user_id}", "PUT"),
        f"{REL}person/cancelreverts": (f"{V}/person/cancelReverts/{user_id}", "PUT"),
        f"{REL}team/list": (f"{V}/team/list?leaderId={user_id}", "GET"),
        f"{REL}team/byleader": (f"{V}/team/byLeader?leaderId={user_id}", "GET"),
    }


def test_an_fkey_in_the_answer_links_the_referenced_get_actions(daemon, admin_token, user_token, user_id):
    team = create_team(daemon, admin_token, "Linked", user_id, 10.0)
    admin = links(
        daemon.request("GET", f"{V}/team/show/{team['id']}", token=admin_token, headers={"X-LINK_RELATIONS": "1"})
    )
    assert admin[f"{REL}person/show"] == (f"{V}/person/show/{user_id}", "GET")
    assert f"{REL}person/list" not in admin  # takes no id: not a link for this leader
    assert f"{REL}person/update" not in admin  # only GET actions of the referenced controller
    user = links(
        daemon.request("GET", f"{V}/team/show/{team['id']}", token=user_token, headers={"X-LINK_RELATIONS": "1"})
    )
    assert user[f"{REL}person/show"] == (f"{V}/person/show/{user_id}", "GET")
    assert f"{REL}team/create" not in user and f"{REL}team/create" in admin


def test_a_person_answer_links_the_teams_they_lead_and_the_link_answers_them(daemon, admin_token, user_token):
    """The reverse relation of team.leaderId (an FKEY to person.id): the user follows the link."""
    leader = new_person(daemon, admin_token)
    led = [create_team(daemon, admin_token, name, leader["id"], 1.0) for name in ("Led one", "Led two")]
    create_team(daemon, admin_token, "Led by another", 1, 1.0)
    found = links(
        daemon.request("GET", f"{V}/person/show/{leader['id']}", token=admin_token, headers={"X-LINK_RELATIONS": "1"})
    )
    target, method = found[f"{REL}team/list"]
    assert (target, method) == (f"{V}/team/list?leaderId={leader['id']}", "GET")
    reply = daemon.request(method, target, token=user_token)
    assert reply.status == 200, reply.body
    assert reply.json == [{key: team[key] for key in ("id", "name", "leaderId")} for team in led]
    # hook.userId is an FKEY to person as well, but no hook action takes userId
    assert not [rel for rel in found if rel.startswith(f"{REL}hook/")]


def test_a_team_answer_adds_its_id_only_to_actions_whose_id_is_the_teams(daemon, admin_token, user_id):
    team = create_team(daemon, admin_token, "Own id", user_id, 1.0)
    found = links(
        daemon.request("GET", f"{V}/team/show/{team['id']}", token=admin_token, headers={"X-LINK_RELATIONS": "1"})
    )
    assert found[f"{REL}team/summary"] == (f"{V}/team/summary/{team['id']}", "GET")
    assert found[f"{REL}team/byleader"] == (f"{V}/team/byLeader", "GET")  # takes leaderId: no team id
    assert found[f"{REL}team/list"] == (f"{V}/team/list", "GET")


def test_without_the_request_header_there_is_no_link_header(daemon, admin_token):
    reply = daemon.request("GET", f"{V}/person/show/1", token=admin_token)
    assert reply.status == 200
    assert "Link" not in reply.headers


# --- pagination links: always on a paged list -------------------------------------------------


def test_person_list_pages_by_its_next_links_to_the_end_without_the_header(daemon, admin_token):
    for _ in range(3):
        new_person(daemon, admin_token)
    everyone = daemon.request("GET", f"{V}/person/list?max=100", token=admin_token).json
    assert 3 <= len(everyone) < 100
    reply = daemon.request("GET", f"{V}/person/list?max=2", token=admin_token)
    assert links(reply) == {"next": (f"{V}/person/list?offset=2&max=2", "GET")}  # no self: not asked
    seen, pages = list(reply.json), 1
    while "next" in links(reply):
        target, method = links(reply)["next"]
        reply = daemon.request(method, target, token=admin_token)
        seen += reply.json
        pages += 1
    assert seen == everyone
    last = 2 * (pages - 1)
    assert links(reply) == {
        "prev": (f"{V}/person/list?offset={last - 2}&max=2", "GET"),
        "first": (f"{V}/person/list?offset=0&max=2", "GET"),
    }


def test_person_list_pages_by_next_offset_without_parsing_link(daemon, admin_token):
    """Next-Offset: where the next page starts while a page is full; absent after the last."""
    everyone = daemon.request("GET", f"{V}/person/list?max=100", token=admin_token).json
    seen, offset = [], 0
    while offset is not None:
        reply = daemon.request("GET", f"{V}/person/list?offset={offset}&max=2", token=admin_token)
        seen += reply.json
        following = reply.headers.get("Next-Offset")
        if following is not None:  # the next link's offset, as a number
            target, _ = links(reply)["next"]
            assert int(following) == offset + 2 == int(parse_qs(urlsplit(target).query)["offset"][0])
        offset = None if following is None else int(following)
    assert seen == everyone
    assert "Next-Offset" not in daemon.request("GET", f"{V}/person/show/1", token=admin_token).headers


def test_a_list_asked_for_links_gets_self_then_its_page_links_then_the_actions(daemon, admin_token):
    found = links(daemon.request("GET", f"{V}/person/list?offset=1&max=1", token=admin_token, headers=WANT))
    assert list(found)[:4] == ["self", "next", "prev", "first"]
    assert found["self"] == (f"{V}/person/list?offset=1&max=1", "GET")
    assert found["next"] == (f"{V}/person/list?offset=2&max=1", "GET")
    assert found[f"{REL}person/create"] == (f"{V}/person/create", "POST")


def test_team_list_pages_keep_the_leader_filter_and_the_links_answer_the_rest(daemon, admin_token, user_token):
    leader = new_person(daemon, admin_token)
    led = [create_team(daemon, admin_token, f"Paged {n}", leader["id"], 1.0) for n in range(3)]
    create_team(daemon, admin_token, "Not paged", 1, 1.0)
    query = f"leaderId={leader['id']}"
    first = daemon.request("GET", f"{V}/team/list?{query}&max=2", token=user_token)
    assert [team["id"] for team in first.json] == [team["id"] for team in led[:2]]
    assert links(first) == {"next": (f"{V}/team/list?{query}&offset=2&max=2", "GET")}
    second = daemon.request("GET", links(first)["next"][0], token=user_token)
    assert [team["id"] for team in second.json] == [led[2]["id"]]
    assert links(second) == {
        "prev": (f"{V}/team/list?{query}&offset=0&max=2", "GET"),
        "first": (f"{V}/team/list?{query}&offset=0&max=2", "GET"),
    }
    # the default page (100 teams) is not full: no link at all
    assert "Link" not in daemon.request("GET", f"{V}/team/list?{query}", token=user_token).headers


# --- batches, chains, problems --------------------------------------------------------------


def test_a_batch_carries_the_links_of_its_target_endpoint(daemon, admin_token, user_token, user_id):
    team = create_team(daemon, admin_token, "Batched", user_id, 1.0)
    expected = {
        "self": (f"{B}/team/show", "POST"),
        f"{REL}team/list": (f"{V}/team/list", "GET"),
        f"{REL}team/byleader": (f"{V}/team/byLeader", "GET"),
        f"{REL}team/summary": (f"{V}/team/summary", "GET"),
        f"{REL}team/audit": (f"{V}/team/audit", "GET"),
        f"{REL}team/relay": (f"{V}/team/relay", "GET"),
    }
    batch = {"batch": [{"id": team["id"]}, {"id": team["id"]}]}
    assert links(daemon.request("POST", f"{B}/team/show", batch, token=user_token, headers=WANT)) == expected
    admin = links(daemon.request("POST", f"{B}/team/show", batch, token=admin_token, headers=WANT))
    assert admin[f"{REL}team/create"] == (f"{V}/team/create", "POST")  # the admin's roles may call it
    failed = {"batch": [{"id": team["id"]}, {"id": 987654321}]}
    assert links(daemon.request("POST", f"{B}/team/show", failed, token=user_token, headers=WANT), 207) == expected
    assert "Link" not in daemon.request("POST", f"{B}/team/show", batch, token=user_token).headers


def test_a_chain_carries_the_links_of_its_last_link_for_its_record(daemon, admin_token):
    leader = new_person(daemon, admin_token)
    team = create_team(daemon, admin_token, "Chained", leader["id"], 1.0)
    chain = {"chain": {"key": "id", "combine": True, "order": {"team/byLeader": "return"}}}
    reply = daemon.request("GET", f"{C}/person/show/{leader['id']}", chain, token=admin_token, headers=WANT)
    assert reply.json[1]["id"] == team["id"]
    found = links(reply)
    assert next(iter(found)) == "self" and found["self"] == (f"{C}/person/show/{leader['id']}", "GET")
    assert found[f"{REL}team/show"] == (f"{V}/team/show/{team['id']}", "GET")
    assert found[f"{REL}team/summary"] == (f"{V}/team/summary/{team['id']}", "GET")
    assert found[f"{REL}person/show"] == (f"{V}/person/show/{leader['id']}", "GET")  # the team's leaderId
    assert f"{REL}team/byleader" not in found and f"{REL}person/update" not in found  # the last link's, only


def test_a_problem_carries_no_link(daemon, admin_token):
    """The daemon serves no page of a problem type to link (docs/links-and-cors.md, Problems)."""
    reply = daemon.request("GET", f"{V}/team/show/987654321", token=admin_token, headers=WANT)
    assert reply.status == 404
    assert "Link" not in reply.headers
