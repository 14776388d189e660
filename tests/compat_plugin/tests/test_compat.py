"""apid 0.1's plugin API, as its docs showed it, through today's apid: the frozen plugin answers
as it did, and each deprecated form it uses warns `DeprecationWarning` naming today's form."""

from __future__ import annotations

import apid_compat
import pytest
from apid_compat import CompatController, declared_rules
from sqlalchemy import text

import apid.plugin
import apid.records
import apid.testing
from apid.testing import Event, InMemoryApid, Login, Reply, StillWaiting

# The public names of apid 0.1.0, by module: a later apid keeps every one.
PLUGIN_0_1 = [
    "Account", "Accounts", "ActionRules", "BadRequest", "Call", "Caller", "Conflict", "Controller", "Database",
    "Endpoint", "FieldError", "Forbidden", "Hooks", "InvalidFields", "NotFound", "PeerPinger", "Problem",
    "RouteCall", "RuleSet", "SecuritySettings", "Services", "UnitOfWork", "Unprocessable", "Validator", "action",
    "route",
]  # fmt: skip
RECORDS_0_1 = ["Record", "delete_row", "get_row", "insert_row", "list_rows", "update_row"]
TESTING_0_1 = ["Event", "InMemoryApid", "Login", "Reply", "StillWaiting"]
NEW_FORM = r"InvalidFields\(errors=\[\.\.\.\]\)"


@pytest.fixture
def kit():
    with InMemoryApid([CompatController]) as kit:
        yield kit


@pytest.mark.parametrize(
    "module, names", [(apid.plugin, PLUGIN_0_1), (apid.records, RECORDS_0_1), (apid.testing, TESTING_0_1)]
)
def test_every_name_of_0_1_is_still_exported(module, names):
    assert set(names) <= set(module.__all__)


def test_the_plugin_uses_every_public_name_of_0_1():
    used = {name for name in PLUGIN_0_1 + RECORDS_0_1 if hasattr(apid_compat, name)}
    assert used == set(PLUGIN_0_1 + RECORDS_0_1)
    assert declared_rules() == apid.plugin.action_rules(CompatController.create)


def test_calls_answer_as_in_0_1(kit):
    user: Login = kit.caller("ROLE_USER")
    created: Reply = kit.post("/v0.1/compat/create", {"text": "hello"}, caller=user)
    assert created.status == 200 and created.json == {"id": 1, "text": "hello", "author": user.username}
    assert kit.get("/v0.1/compat/show/1", caller=user).json["text"] == "hello"
    assert kit.get("/v0.1/compat/list", {"max": 5}, caller=user).json == [created.json]
    changed = kit.put("/v0.1/compat/update", {"id": 1, "text": "hi"}, caller=user)
    assert changed.json["editor"] == user.username
    assert kit.put("/v0.1/compat/update", {"id": 1, "text": "hi"}, caller=user).problem["status"] == 409
    assert kit.get("/v0.1/compat/show/1", caller=kit.caller("ROLE_USER")).status == 403
    assert kit.batch("compat/create", [{"text": "a"}, {"text": "b"}], caller=user, combine=True).status == 200
    assert kit.delete("/v0.1/compat/delete/1", caller=user).json == {"id": 1, "text": "hi"}
    assert kit.get("/v0.1/compat/show/1", caller=user).status == 404
    assert [event.type for event in kit.events if isinstance(event, Event)][:1] == ["compat/create"]
    assert kit.get("/compatCount", caller=user).json["caller"] == user.username
    with kit.engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM person")).scalar() == 2
    assert issubclass(StillWaiting, RuntimeError)


def test_a_broken_rule_is_one_400_as_in_0_1(kit):
    reply = kit.post("/v0.1/compat/create", {"text": "LOUD"}, caller=kit.caller("ROLE_USER"))
    assert reply.status == 400
    assert reply.problem["errors"] == [{"field": "text", "reason": "must not be all capitals"}]


def test_invalid_fields_with_the_list_first_warns_and_answers_the_same_400(kit):
    user = kit.caller("ROLE_USER")
    with pytest.warns(DeprecationWarning, match=NEW_FORM) as warned:
        reply = kit.post("/v0.1/compat/create", {"text": "x" * 201}, caller=user)
    assert warned[0].filename == apid_compat.__file__  # the warning points at the plugin's line
    assert reply.status == 400
    assert reply.problem["type"] == "urn:apid:problem:invalid-fields"
    assert reply.problem["errors"] == [{"field": "text", "reason": "must be at most 200 characters"}]
    assert reply.problem["detail"] == "invalid request fields: text"


def test_invalid_fields_with_the_list_first_and_a_detail_warns(kit):
    with pytest.warns(DeprecationWarning, match=NEW_FORM):
        reply = kit.post("/v0.1/compat/create", {"text": "reserved"}, caller=kit.caller("ROLE_USER"))
    assert (reply.status, reply.problem["detail"]) == (400, "that text is reserved")


def test_every_0_1_form_of_invalid_fields_builds_the_same_problem():
    errors = [{"field": "a", "reason": "is wrong"}]
    with pytest.warns(DeprecationWarning, match=NEW_FORM):
        positional = apid.plugin.InvalidFields(errors, "detail")
    with pytest.warns(DeprecationWarning, match=NEW_FORM):
        keyword = apid.plugin.InvalidFields(errors, detail="detail")
    today = apid.plugin.InvalidFields("detail", errors=errors)
    assert positional.to_dict() == keyword.to_dict() == today.to_dict()
    with pytest.raises(TypeError):
        apid.plugin.InvalidFields()
