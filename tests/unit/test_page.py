"""`Page` (apid.plugin): one declaration of a list action's paging, which the daemon enforces
with the call's other fields, `call.page()` reads, and the API documents state
(tests/unit/test_openapi.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from apid.plugin import Call, Controller, Page, action, action_rules
from apid.testing import InMemoryApid
from apid_sample import TeamController

IOSTATE = Path(__file__).resolve().parents[2] / "iostate"


@pytest.fixture
def apid():
    with InMemoryApid(controllers=[TeamController], iostate_dir=IOSTATE) as kit:
        yield kit


def errors(reply) -> dict[str, str]:
    assert reply.status == 400, reply.body
    return {error["field"]: error["reason"] for error in reply.json["errors"]}


def test_a_declared_page_is_checked_with_the_calls_other_fields_before_the_action_runs(apid):
    admin = apid.caller("ROLE_ADMIN")
    reply = apid.get(f"/v{apid.version}/person/list", {"offset": -1, "max": 101, "nickname": "x"}, caller=admin)
    assert errors(reply) == {
        "nickname": "is not a field of person",
        "offset": "must be at least 0",
        "max": "must be 1 to 100",
    }


def test_call_page_reads_the_declared_page(apid):
    admin, team = apid.caller("ROLE_ADMIN"), f"/v{apid.version}/team"
    for n in range(3):
        assert apid.post(f"{team}/create", {"name": f"t{n}", "leaderId": admin.id}, caller=admin).status == 200
    assert len(apid.get(f"{team}/list", {"max": 2}, caller=admin).json) == 2
    assert len(apid.get(f"{team}/list", caller=admin).json) == 3  # default 100
    assert errors(apid.get(f"{team}/list", {"max": 1001}, caller=admin)) == {"max": "must be 1 to 1000"}
    assert action_rules(TeamController.list).page == Page(default=100, maximum=1000)


def test_call_page_arguments_override_the_declaration_and_default_to_20_and_100():
    paging = Page(default=10, maximum=50)
    declared = Call(endpoint=None, fields={"max": 50}, caller=None, paging=paging)  # type: ignore[arg-type]
    assert declared.page() == (0, 50)
    assert declared.page(maximum=60) == (0, 50)
    undeclared = Call(endpoint=None, fields={}, caller=None)  # type: ignore[arg-type]
    assert undeclared.page() == (0, 20) and undeclared.paged == (0, 20)
    assert undeclared.page(default=5) == (0, 5)


def test_a_page_whose_default_is_out_of_its_range_is_refused_at_import():
    with pytest.raises(ValueError, match="the default is 1 to the maximum"):

        class Broken(Controller):
            name = "broken"

            @action(page=Page(default=0, maximum=10))
            async def list(self, call: Call) -> list[dict]:
                return []
