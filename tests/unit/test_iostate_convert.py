"""Files written for the original framework: what the loader reads as they are, and what
`apid iostate convert` rewrites (issue 14, item 5)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from apid.cli.main import main
from apid.config.api import SecurityConfig
from apid.config.files import load_api
from apid.config.kinds import API_FILE
from apid.iostate import IOStateError, parse
from apid.iostate.convert import convert
from apid.iostate.model import CallLimit

REPO = Path(__file__).resolve().parents[2]
ORIGINAL_TEAM = REPO / "tests" / "data" / "beapi_team.json"
SOURCE = "team.json"


@pytest.fixture(scope="module")
def security() -> SecurityConfig:
    return load_api(REPO / "etc" / API_FILE, REPO).security


def original_team() -> dict:
    return json.loads(ORIGINAL_TEAM.read_text(encoding="utf-8"))


def minimal(**top) -> dict:
    """An apid-form file of one action, `show`, with `top` members replacing or added."""
    document = {
        "NAME": "thing",
        "NETWORKGRP": "public",
        "CURRENTSTABLE": "1",
        "VALUES": {"id": {"type": "Long", "key": "PKEY"}, "name": {"type": "String"}},
        "VERSION": {
            "1": {
                "URI": {
                    "show": {
                        "METHOD": "GET",
                        "REQUEST": {"permitAll": ["id"]},
                        "RESPONSE": {"permitAll": ["id", "name"]},
                    }
                }
            }
        },
    }
    document.update(top)
    return document


def show(document: dict) -> dict:
    return document["VERSION"]["1"]["URI"]["show"]


# --- the original framework's file -----------------------------------------------------------------


def test_the_original_file_is_refused_as_it_is(security):
    with pytest.raises(IOStateError, match=r"unknown members \['currentstable', 'networkGrp', 'values'\]"):
        parse(original_team(), SOURCE, security)


def test_the_original_file_converts_and_then_loads(security):
    done = convert(original_team(), security)
    state = parse(done.document, SOURCE, security)

    assert state.network_group == "public"
    assert state.values["id"].key == "PKEY"
    assert (state.values["leaderId"].key, state.values["leaderId"].reference) == ("FKEY", "person")
    show_v1 = state.versions["1"].endpoints["show"]
    assert show_v1.response_fields({"ROLE_ADMIN"}) == set(state.values)  # "*"
    assert show_v1.response_fields({"ROLE_USER"}) == {"id", "name", "leaderId"}
    assert show_v1.rate_limits == {"ROLE_USER": CallLimit(100, 600), "ROLE_ADMIN": CallLimit(None, 600)}
    assert state.versions["1"].default_action == "list"
    assert state.versions["1"].endpoints["list"].roles == security.network_roles["public"]
    assert state.versions["2"].deprecated.message == "team v2 answers the name only; use v1"
    assert "controller team, version 2: removed '_DEPRECATED' (the original framework ignores it)" in done.changes
    assert (
        "controller team, version 1, action show, RATELIMIT: removed role 'ROLE_ANONYMOUS': it may not call this action"
    ) in done.changes
    assert "renamed 'networkGrp' to 'NETWORKGRP'" in done.changes
    assert len(done.changes) == 16


def test_a_file_of_the_original_forms_apid_reads_loads_unchanged_and_converts_to_itself(security):
    document = {
        "IOSTATE": minimal(
            VERSION={
                "1": {
                    "DEFAULTACTION": "show",
                    "DEPRECATED": ["12/31/2030", "use v2"],
                    "URI": {
                        "show": {
                            "METHOD": "GET",
                            "UPDATECACHE": True,
                            "ROLES": {},
                            "RATELIMIT": {"ROLE_USER": "100", "ROLE_ADMIN": "*"},
                            "REQUEST": {"permitAll": ["*"]},
                            "RESPONSE": {"permitAll": ["id"], "ROLE_ADMIN": ["*"]},
                        }
                    },
                },
                "2": {"URI": {"show": {"METHOD": "GET"}}},
            },
            CURRENTSTABLE="2",
        )
    }
    state = parse(document, SOURCE, security)
    endpoint = state.versions["1"].endpoints["show"]
    assert endpoint.request_fields({"ROLE_USER"}) == {"id", "name"}
    assert endpoint.response_fields({"ROLE_USER"}) == {"id"}
    assert endpoint.response_fields({"ROLE_ADMIN"}) == {"id", "name"}
    assert endpoint.rate_limits["ROLE_USER"] == CallLimit(100, 600)

    done = convert(copy.deepcopy(document), security)
    assert done.changes == []
    assert done.document == document


def test_a_field_named_star_is_refused_and_converted_away(security):
    document = minimal()
    document["VALUES"]["*"] = {"type": "String"}
    with pytest.raises(IOStateError, match=r"field \*: '\*' is not a field name"):
        parse(document, SOURCE, security)
    done = convert(document, security)
    assert "*" not in done.document["VALUES"]
    parse(done.document, SOURCE, security)


# --- one conversion each ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "entry, expected",
    [
        ({"type": "Long", "key": ["PKEY"]}, {"type": "Long", "key": "PKEY"}),
        ({"type": "Long", "key": "pkey"}, {"type": "Long", "key": "PKEY"}),
        ({"type": "Long", "key": "PRIMARY"}, {"type": "Long", "key": "PKEY"}),
        ({"type": "PKEY"}, {"type": "Long", "key": "PKEY"}),
        ({"Type": "Long", "KEY": "PKEY", "mockdata": 1}, {"type": "Long", "key": "PKEY", "mockData": 1}),
    ],
)
def test_key_forms(security, entry, expected):
    document = minimal()
    document["VALUES"]["id"] = entry
    done = convert(document, security)
    assert done.document["VALUES"]["id"] == expected
    assert done.changes and all(change.startswith("controller thing, field id: ") for change in done.changes)
    assert parse(done.document, SOURCE, security).primary_key == "id"


@pytest.mark.parametrize(
    "entry",
    [
        {"type": "Long", "key": "FOREIGN"},
        {"type": "Long", "key": "FKEY", "reference": "self"},
        {"type": "Long", "key": "INDEX", "reference": "self"},
        {"type": "FKEY"},
    ],
)
def test_a_foreign_key_without_a_controller_references_its_own(security, entry):
    document = minimal()
    document["VALUES"]["parentId"] = entry
    field = convert(document, security).document["VALUES"]["parentId"]
    assert (field["type"], field["key"], field["reference"]) == ("Long", "FKEY", "thing")
    state = parse(convert(document, security).document, SOURCE, security)
    assert state.values["parentId"].reference == "thing"


def test_the_original_defaults_are_written_out(security):
    document = minimal(VERSION={"1": {"URI": {"index": {"METHOD": "GET"}}}})
    del document["NETWORKGRP"]
    done = convert({"iostate": document}, security)
    assert set(done.document) == {"IOSTATE"}
    converted = done.document["IOSTATE"]
    assert converted["NETWORKGRP"] == "public"
    assert converted["VERSION"]["1"]["DEFAULTACTION"] == "index"
    assert done.changes[0] == "renamed 'iostate' to 'IOSTATE'"
    assert parse(done.document, SOURCE, security).versions["1"].default_action == "index"


def test_text_lists_and_permit_all_spellings(security):
    document = minimal()
    show(document).update(
        ROLES={"batch": "ROLE_ADMIN, ROLE_USER", "DEFAULT": []},
        REQUEST={"PERMITALL": "id"},
        RESPONSE={"permitAll": ["id"], "ROLE_USER": ""},
    )
    done = convert(document, security)
    converted = show(done.document)
    assert converted["ROLES"] == {"BATCH": ["ROLE_ADMIN", "ROLE_USER"]}
    assert converted["REQUEST"] == {"permitAll": ["id"]}
    assert converted["RESPONSE"] == {"permitAll": ["id"], "ROLE_USER": []}
    endpoint = parse(done.document, SOURCE, security).versions["1"].endpoints["show"]
    assert endpoint.batch_roles == {"ROLE_ADMIN", "ROLE_USER"}


def test_lists_of_roles_that_may_not_call_the_action_are_dropped(security):
    document = minimal()
    show(document).update(
        ROLES={"DEFAULT": ["ROLE_ADMIN"]}, RESPONSE={"permitAll": ["id"], "ROLE_USER": ["name"], "ROLE_ADMIN": ["name"]}
    )
    done = convert(document, security)
    assert show(done.document)["RESPONSE"] == {"permitAll": ["id"], "ROLE_ADMIN": ["name"]}
    assert done.changes == [
        "controller thing, version 1, action show, RESPONSE: removed role 'ROLE_USER': it may not call this action"
    ]


@pytest.mark.parametrize(
    "document, message",
    [
        (minimal(NICKNAME="x"), r"unknown members \['NICKNAME'\]"),
        (minimal(networkGrp="public"), r"unknown members \['networkGrp'\]"),  # both spellings: not guessed
    ],
)
def test_what_convert_cannot_decide_is_still_refused(security, document, message):
    done = convert(document, security)
    with pytest.raises(IOStateError, match=message):
        parse(done.document, SOURCE, security)


# --- apid iostate convert ------------------------------------------------------------------------


def test_the_command_writes_the_apid_form_and_lists_the_changes(tmp_path, capsys):
    out = tmp_path / "team.json"
    assert (
        main(["iostate", "convert", str(ORIGINAL_TEAM), "--output", str(out), "--config-dir", str(REPO / "etc")]) == 0
    )
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 16
    assert f"{ORIGINAL_TEAM}: controller team, field id: key 'PRIMARY' is 'PKEY'" in lines
    assert json.loads(out.read_text())["IOSTATE"]["NETWORKGRP"] == "public"


def test_the_command_exits_1_with_the_loaders_message_when_the_result_does_not_load(tmp_path, capsys):
    source = tmp_path / "thing.json"
    document = minimal()
    show(document)["RESPONSE"]["permitAll"].append("nickname")
    source.write_text(json.dumps(document))
    assert main(["iostate", "convert", str(source), "--config-dir", str(REPO / "etc")]) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out) == document  # written all the same, to fix by hand
    assert "field 'nickname' is not defined in VALUES" in captured.err
    assert str(source) in captured.err
