"""Answers carry each value in its VALUES type's form, whatever the code or the database made of
it: a `Float` stored as `1` answers `1.0` from create as from show, in answers and in webhook
payloads alike (issue 27, item 1)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path

import pytest

from apid.calls.pipeline import filter_output
from apid.config.files import load_api
from apid.config.kinds import API_FILE
from apid.hooks.events import messages_for
from apid.hooks.queue import Subscriber
from apid.iostate import Endpoint, parse_text
from apid.iostate.types import INT64, value_type
from apid.testing import InMemoryApid
from apid_sample import TeamController

REPO = Path(__file__).resolve().parents[2]
TEAM_FILE = REPO / "tests" / "sample_plugin" / "apid_sample" / "iostate" / "team.json"


@pytest.mark.parametrize(
    "type_name, stored, answered",
    [
        ("Float", 1, 1.0),
        ("Float", Decimal("2.5"), 2.5),
        ("Float", 2.5, 2.5),
        ("Long", Decimal("7"), 7),
        ("Long", 7.0, 7),
        ("Integer", Decimal("-3"), -3),
        ("Boolean", 1, True),
        ("Boolean", 0, False),
    ],
)
def test_a_value_answers_in_its_types_form(type_name, stored, answered):
    value = value_type(type_name).answer(stored)
    assert value == answered and type(value) is type(answered)


@pytest.mark.parametrize(
    "type_name, stored",
    [
        ("Float", True),  # not a number of the type's: the plugin's mistake stays visible
        ("Float", "1.5"),
        ("Float", None),
        ("Float", 10**400),  # past a double
        ("Long", 7.5),
        ("Long", Decimal("7.5")),
        ("Long", float(2**70)),  # whole, but past 64 bits
        ("Long", True),
        ("Boolean", 2),
        ("Boolean", True),
    ],
)
def test_a_value_that_is_not_the_types_is_answered_as_it_is(type_name, stored):
    assert value_type(type_name).answer(stored) is stored


def test_types_whose_values_answer_as_they_are_convert_nothing():
    assert [name for name in ("String", "Date", "Email", "URL", "List", "Map") if value_type(name).answer] == []
    assert value_type("Long").answer(Decimal(INT64[1])) == INT64[1]


@pytest.fixture(scope="module")
def team() -> Mapping[str, Endpoint]:
    """The sample team's endpoints of API version 1."""
    security = load_api(REPO / "etc" / API_FILE, REPO).security
    return parse_text(TEAM_FILE.read_text(encoding="utf-8"), str(TEAM_FILE), security).versions["1"].endpoints


def test_filtering_an_answer_converts_each_kept_field(team):
    show = team["show"]
    output = [{"id": Decimal("1"), "name": "Platform", "budget": 1000, "secret": 1}, {"id": 2, "budget": None}]
    shown = filter_output(output, show.response_fields({"ROLE_ADMIN"}), show.conversions)
    assert shown == [{"id": 1, "name": "Platform", "budget": 1000.0}, {"id": 2, "budget": None}]
    assert type(shown[0]["id"]) is int and type(shown[0]["budget"]) is float


def test_a_webhook_payload_carries_the_values_converted(team):
    owner = Subscriber(hook_id=1, user_id=1, roles=frozenset({"ROLE_ADMIN"}))
    record = {"id": 1, "name": "Platform", "leaderId": 1, "budget": 1}
    (message,) = messages_for([owner], team["create"], record, 0.0, filter_output)
    assert json.loads(message.payload)["data"] == {"id": 1, "name": "Platform", "leaderId": 1, "budget": 1.0}
    assert '"budget":1.0' in message.payload


def test_create_and_show_answer_a_float_sent_as_a_whole_number_alike():
    with InMemoryApid([TeamController]) as apid:
        admin = apid.caller("ROLE_ADMIN")
        created = apid.post("/v0.1/team/create", {"name": "Platform", "leaderId": admin.id, "budget": 1}, caller=admin)
        assert created.status == 200, created.problem
        shown = apid.get(f"/v0.1/team/show/{created.json['id']}", caller=admin)
        assert '"budget":1.0' in created.text and '"budget":1.0' in shown.text


def test_a_date_time_is_answered_with_its_offset_a_naive_one_as_utc():
    """A DateTime column read from SQLite is naive: answered bare, it would not be the RFC 3339
    date-time the documents promise."""
    from datetime import UTC, datetime, timedelta, timezone

    from apid.plugin import Call, Page, action

    class Clock(TeamController):
        @action
        def show(self, call: Call) -> dict:
            return {"id": 1, "name": datetime(2026, 11, 28, 12, 0, 0), "leaderId": 1}

        @action(page=Page(default=10, maximum=100))  # the rules' list reads the page
        def list(self, call: Call) -> list:
            plus_two = timezone(timedelta(hours=2))
            return [
                {"name": datetime(2026, 11, 28, 14, 0, tzinfo=plus_two)},
                {"name": datetime(2026, 11, 28, tzinfo=UTC)},
            ]

    with InMemoryApid([Clock], iostate_dir=TEAM_FILE.parent) as apid:
        admin = apid.caller("ROLE_ADMIN")
        shown = apid.get("/v0.1/team/show/1", caller=admin)
        listed = apid.get("/v0.1/team/list", caller=admin)
    assert shown.json["name"] == "2026-11-28T12:00:00+00:00", shown.text
    assert [team["name"] for team in listed.json] == ["2026-11-28T14:00:00+02:00", "2026-11-28T00:00:00+00:00"]
