"""Deprecated API versions on a real daemon: `Deprecation`, `Sunset` and the successor `Link` on
every answer of their v, b and c calls (success or problem), none on current versions, and
410 Gone past the sunset.

The deployment's team.json (overriding the sample plugin's) has version 1 current, version 2
deprecated in the past with a sunset far ahead, and version 3 past its sunset; person's only
(current) version is announced as deprecated from a date still to come.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from email.utils import format_datetime

import pytest

from harness import REPO, create_team, deployment_with_accounts

SAMPLE_TEAM = REPO / "tests/sample_plugin/apid_sample/iostate/team.json"
V2_SINCE = datetime(2025, 1, 15, tzinfo=UTC)
V2_SUNSET = datetime(2099, 12, 31, 12, tzinfo=UTC)
PERSON_SINCE = datetime(2099, 1, 1, tzinfo=UTC)
V3_SUNSET = datetime(2025, 1, 1, tzinfo=UTC)
DOCS_LINK = '</docs>; rel="deprecation"; type="text/html"'
LIFECYCLE_HEADERS = ("Deprecation", "Sunset")


def deprecation(moment: datetime) -> str:
    return f"@{int(moment.timestamp())}"


def http_date(moment: datetime) -> str:
    return format_datetime(moment, usegmt=True)


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    deployment = deployment_with_accounts(tmp_path_factory.mktemp("apid"))
    team = json.loads(SAMPLE_TEAM.read_text())
    versions = team["VERSION"]
    versions["2"]["URI"]["show"]["ROLES"] = {"BATCH": ["ROLE_ADMIN", "ROLE_USER"]}
    versions["3"] = json.loads(json.dumps(versions["2"]))
    versions["2"].update(
        DEPRECATED=["01/15/2025", "team v2 answers the name only; use v1"], SUNSET="2099-12-31T13:00:00+01:00"
    )
    versions["3"].update(DEPRECATED="2024-06-01", SUNSET="2025-01-01")
    (deployment.root / "iostate" / "team.json").write_text(json.dumps(team))
    person_path = deployment.root / "iostate" / "person.json"
    person = json.loads(person_path.read_text())
    person["IOSTATE"]["VERSION"]["1"]["DEPRECATED"] = "2099-01-01"
    person_path.write_text(json.dumps(person))
    return deployment


@pytest.fixture(scope="module")
def team_id(daemon, admin_token) -> int:
    leader = daemon.request("GET", "/v0.1/person/list", token=admin_token).json[0]["id"]
    return create_team(daemon, admin_token, "deprecation team", leader, 10.0)["id"]


def assert_deprecated_v2(reply, kind: str = "v") -> None:
    assert reply.headers["Deprecation"] == deprecation(V2_SINCE)
    assert reply.headers["Sunset"] == http_date(V2_SUNSET)
    assert reply.headers.get_all("Link") == [f'</{kind}0.1/team/show>; rel="successor-version", {DOCS_LINK}']


def test_a_deprecated_version_answers_with_its_headers(daemon, user_token, team_id):
    reply = daemon.request("GET", f"/v0.1-2/team/show/{team_id}", token=user_token)
    assert reply.status == 200
    assert reply.json == {"id": team_id, "name": "deprecation team"}
    assert_deprecated_v2(reply)


def test_its_problems_carry_the_headers_too(daemon, user_token):
    missing = daemon.request("GET", "/v0.1-2/team/show/999999", token=user_token)
    assert missing.status == 404
    assert_deprecated_v2(missing)
    wrong_field = daemon.request("GET", "/v0.1-2/team/show?budget=1", token=user_token)
    assert wrong_field.status == 400
    assert wrong_field.content_type == "application/problem+json"
    assert_deprecated_v2(wrong_field)


def test_batch_and_chain_calls_of_the_version_carry_them(daemon, user_token, team_id):
    batch = daemon.request("POST", "/b0.1-2/team/show", {"batch": [{"id": team_id}, {"id": team_id}]}, token=user_token)
    assert batch.status == 200
    assert batch.json == {"id": team_id, "name": "deprecation team"}
    assert_deprecated_v2(batch, "b")
    chain = daemon.request("GET", f"/c0.1-2/team/show/{team_id}", {"chain": {}}, token=user_token)
    assert chain.status in (400, 422)  # a chain of no links is refused: the answer still says it all
    assert_deprecated_v2(chain, "c")


def test_the_successor_link_joins_the_link_relations(daemon, user_token, team_id):
    reply = daemon.request("GET", f"/v0.1-2/team/show/{team_id}", token=user_token, headers={"X-LINK-RELATIONS": "1"})
    assert reply.status == 200
    [links] = reply.headers.get_all("Link")
    assert links.startswith(f'</v0.1/team/show>; rel="successor-version", {DOCS_LINK}, ')
    assert f'</v0.1-2/team/show/{team_id}>; rel="self"; method="GET"' in links


def test_current_versions_carry_none(daemon, user_token, team_id):
    for path in (f"/v0.1/team/show/{team_id}", f"/v0.1-1/team/show/{team_id}", "/v0.1/team/show/999999"):
        reply = daemon.request("GET", path, token=user_token)
        assert reply.status in (200, 404)
        assert not [name for name in (*LIFECYCLE_HEADERS, "Link") if name in reply.headers], path
    batch = daemon.request("POST", "/b0.1/team/show", {"batch": [{"id": team_id}]}, token=user_token)
    assert batch.status == 200
    assert not [name for name in (*LIFECYCLE_HEADERS, "Link") if name in batch.headers]


def test_a_deprecation_to_come_is_announced_and_the_call_answers(daemon, admin_token):
    someone = daemon.request("GET", "/v0.1/person/list", token=admin_token).json[0]
    reply = daemon.request("GET", f"/v0.1/person/show/{someone['id']}", token=admin_token)
    assert reply.status == 200
    assert reply.json["username"] == someone["username"]
    assert reply.headers["Deprecation"] == deprecation(PERSON_SINCE)
    assert "Sunset" not in reply.headers
    assert reply.headers.get_all("Link") == [DOCS_LINK]  # the current version has no successor


@pytest.mark.parametrize(
    "kind, method, body",
    [
        ("v", "GET", None),
        ("b", "POST", {"batch": [{"id": 1}]}),
        ("c", "GET", {"chain": {}}),
    ],
)
def test_past_its_sunset_a_version_is_gone(daemon, user_token, kind, method, body):
    reply = daemon.request(method, f"/{kind}0.1-3/team/show", body, token=user_token)
    assert reply.status == 410
    assert reply.content_type == "application/problem+json"
    assert reply.json == {
        "type": "urn:apid:problem:gone",
        "title": "Gone",
        "status": 410,
        "detail": f"API version 3 of team was retired on {http_date(V3_SUNSET)}; call API version 1 "
        f"(/{kind}0.1/team/show)",
        "instance": f"/{kind}0.1-3/team/show",
        "currentApiVersion": "1",
        "successor": f"/{kind}0.1/team/show",
        "requestId": reply.headers["X-Request-ID"],
    }
    assert reply.headers["Deprecation"] == deprecation(datetime(2024, 6, 1, tzinfo=UTC))
    assert reply.headers["Sunset"] == http_date(V3_SUNSET)
    assert reply.headers.get_all("Link") == [f'</{kind}0.1/team/show>; rel="successor-version", {DOCS_LINK}']


def test_the_api_docs_show_the_dates(daemon, user_token):
    view = daemon.request("GET", "/v0.1/apidoc/show", token=user_token)
    assert view.status == 200
    versions = view.json["controllers"]["team"]["versions"]
    assert versions["2"]["deprecated"] == {
        "since": "2025-01-15T00:00:00Z",
        "sunset": "2099-12-31T12:00:00Z",
        "message": "team v2 answers the name only; use v1",
    }
    assert versions["1"]["deprecated"] is None
    document = daemon.request("GET", "/openapi.json", token=user_token).json
    assert document["paths"]["/v0.1-2/team/show/{id}"]["get"]["deprecated"] is True
    assert "deprecated" not in document["paths"]["/v0.1/team/show/{id}"]["get"]
