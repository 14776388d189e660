"""The single-call pipeline (DESIGN 3): resolve, method, roles, request fields, action, response fields."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
import pytest_twisted
from hypothesis import given
from hypothesis import strategies as st
from twisted.internet import reactor, task
from twisted.internet.defer import succeed
from twisted.logger import LogLevel, formatEvent, globalLogPublisher

from apid.auth.tokens import Principal, anonymous_caller
from apid.calls.pipeline import CallRequest, Pipeline, Purpose, filter_output
from apid.config.files import load_api
from apid.iostate import RuleSet, parse_text
from apid.plugin import ActionRules, Call, Controller, Limits, action, action_rules
from apid.problems import Forbidden, InternalError, InvalidFields, MethodNotAllowed, NotFound, Unauthorized

ROOT = Path(__file__).resolve().parents[2]
SECURITY = load_api(ROOT / "etc" / "service_api.yml", ROOT).security
PERSON = parse_text((ROOT / "iostate" / "person.json").read_text(), "person.json", SECURITY)
RULES = RuleSet(controllers={"person": PERSON})

RECORD = {
    "id": 1,
    "version": 3,
    "username": "jdoe",
    "email": "jdoe@example.com",
    "password": "hash",
    "enabled": True,
    "accountLocked": False,
    "accountExpired": False,
    "passwordExpired": False,
    "roles": ["ROLE_USER"],
    "dateCreated": "2026-01-01",
    "lastUpdated": "2026-01-02",
}
PUBLIC = {"id", "version", "username", "email"}


def principal(*roles: str) -> Principal:
    return Principal(user_id=1, username="jdoe", roles=frozenset(roles), token_id="t", expires=0, issued_at=0.0)


ADMIN = principal("ROLE_ADMIN")
USER = principal("ROLE_USER")


class People(Controller):
    """Answers every person action with `answer(call)` and remembers the calls."""

    name = "person"

    def __init__(self, answer=lambda call: dict(RECORD)) -> None:
        super().__init__(None)
        self.answer = answer
        self.calls: list[Call] = []

    def _run(self, call: Call):
        self.calls.append(call)
        return self.answer(call)

    show = create = list = update = delete = action(_run)


def run(
    who=USER,
    action="show",
    method="GET",
    body=None,
    text=None,
    controller="person",
    api_version=None,
    purpose=Purpose.DEFAULT,
    people=None,
):
    people = people or People()
    pipeline = Pipeline(rules=lambda: RULES, controllers={"person": people}, superuser_role=SECURITY.superuser_role)
    request = CallRequest(
        controller=controller, action=action, api_version=api_version, method=method, body=body or {}, text=text or {}
    )
    return pipeline.run(who, request, purpose)


async def fields_sent(who=USER, **kwargs) -> dict:
    people = People()
    await run(who, people=people, **kwargs)
    return dict(people.calls[0].fields)


async def invalid(**kwargs) -> list[dict]:
    with pytest.raises(InvalidFields) as caught:
        await run(**kwargs)
    assert caught.value.status == 400
    return caught.value.extensions["errors"]


# --- resolve and method -----------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_unknown_controller_is_not_found():
    with pytest.raises(NotFound, match="no controller named 'nobody'"):
        await run(controller="nobody")


@pytest_twisted.ensureDeferred
async def test_unknown_api_version_is_not_found_and_lists_the_versions():
    with pytest.raises(NotFound, match=r"person has no API version '9' \(it has 1\)"):
        await run(api_version="9")


@pytest_twisted.ensureDeferred
async def test_unknown_action_is_not_found():
    with pytest.raises(NotFound, match=re.escape("person (API version 1) has no action 'explode'")):
        await run(action="explode")


@pytest_twisted.ensureDeferred
async def test_no_action_runs_the_default_action():
    assert (await run(action=None)).endpoint.action == "show"


@pytest_twisted.ensureDeferred
async def test_wrong_method_is_not_allowed_with_allow_list():
    with pytest.raises(MethodNotAllowed) as caught:
        await run(ADMIN, action="create", method="GET")
    assert caught.value.status == 405
    assert caught.value.extensions["allow"] == ["POST"]
    assert caught.value.headers["Allow"] == "POST"


# --- roles ------------------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_role_outside_the_endpoint_roles_is_forbidden():
    with pytest.raises(Forbidden, match=re.escape("your roles may not call person/create") + "$"):
        await run(USER, action="create", method="POST", body={"username": "x"})


@pytest_twisted.ensureDeferred
async def test_role_of_another_network_group_is_forbidden():
    with pytest.raises(Forbidden):
        await run(principal("ROLE_ANONYMOUS"))


@pytest_twisted.ensureDeferred
async def test_a_caller_without_a_token_is_told_to_log_in_not_forbidden():
    """person is in the public group, which has no anonymous role: a 401, not a 403, for its
    endpoints and for an unknown one alike, before the method is looked at."""
    nobody = anonymous_caller("ROLE_ANONYMOUS")
    with pytest.raises(Unauthorized):
        await run(nobody)
    pipeline = Pipeline(rules=lambda: RULES, controllers={"person": People()}, superuser_role=SECURITY.superuser_role)
    for controller, name in (("person", "show"), ("person", "nothing"), ("nobody", "show")):
        with pytest.raises(Unauthorized):
            pipeline.check_anonymous(nobody, CallRequest(controller, name, None, "POST"))
    pipeline.check_anonymous(USER, CallRequest("nobody", "show", None, None))  # a token: nothing to check here


@pytest_twisted.ensureDeferred
async def test_batch_with_a_role_outside_batch_roles_is_forbidden():
    assert (await run(USER, action="update", method="PUT", body={"id": 1})).data == {"id": 1, "version": 3}
    with pytest.raises(Forbidden, match="in a batch"):
        await run(USER, action="update", method="PUT", body={"id": 1}, purpose=Purpose.BATCH)


@pytest_twisted.ensureDeferred
async def test_batch_with_a_batch_role_runs():
    result = await run(ADMIN, action="update", method="PUT", body={"id": 1}, purpose=Purpose.BATCH)
    assert result.granted == {"ROLE_ADMIN"}


@pytest_twisted.ensureDeferred
async def test_caller_is_superuser_only_with_the_superuser_role():
    people = People()
    await run(ADMIN, people=people)
    await run(USER, people=people)
    await run(principal("ROLE_USER", "ROLE_ADMIN"), people=people)
    assert [c.caller.is_superuser for c in people.calls] == [True, False, True]
    assert people.calls[1].caller.roles == {"ROLE_USER"}
    assert (people.calls[1].caller.id, people.calls[1].caller.username) == (1, "jdoe")


# --- request fields ---------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_each_bad_field_is_listed():
    errors = await invalid(
        who=USER,
        action="update",
        method="PUT",
        body={"id": 1, "enabled": False, "nickname": "j", "email": "not-an-email"},
    )
    assert {e["field"]: e["reason"] for e in errors} == {
        "enabled": "may not be sent to person/update by your role",
        "nickname": "is not a field of person",
        "email": "expected an email address (Email)",
    }


@pytest_twisted.ensureDeferred
async def test_a_field_the_role_may_send_is_admitted():
    assert await fields_sent(ADMIN, action="update", method="PUT", body={"id": 1, "enabled": False}) == {
        "id": 1,
        "enabled": False,
    }


@pytest_twisted.ensureDeferred
async def test_badly_typed_body_value_is_invalid():
    errors = await invalid(who=USER, body={"id": "1"})
    assert errors == [{"field": "id", "reason": "expected a whole number (Long)"}]


@pytest_twisted.ensureDeferred
async def test_text_fields_are_parsed_by_type():
    assert await fields_sent(ADMIN, action="list", text={"offset": ["5"], "max": ["20"]}) == {"offset": 5, "max": 20}


@pytest_twisted.ensureDeferred
async def test_badly_typed_text_value_is_invalid():
    errors = await invalid(who=USER, text={"id": ["abc"]})
    assert errors == [{"field": "id", "reason": "expected a whole number (Long)"}]


@pytest_twisted.ensureDeferred
async def test_text_field_given_twice_is_invalid():
    errors = await invalid(who=USER, text={"id": ["1", "2"]})
    assert errors == [{"field": "id", "reason": "was given more than once (Long)"}]


@pytest_twisted.ensureDeferred
async def test_body_field_wins_over_text_field():
    assert await fields_sent(USER, body={"id": 7}, text={"id": ["42"]}) == {"id": 7}


@pytest_twisted.ensureDeferred
async def test_bad_text_field_is_refused_even_when_the_body_has_it():
    """The body wins on a clash, but /person/update/abc with {"id": 7} is a bad request, not an
    update of person 7 (found by fuzzing: the path's id broke the OpenAPI document's type)."""
    errors = await invalid(who=USER, body={"id": 7}, text={"id": ["abc"]})
    assert errors == [{"field": "id", "reason": "expected a whole number (Long), in the path or query"}]


# --- response fields --------------------------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_user_sees_only_the_user_response_fields():
    assert set((await run(USER)).data) == PUBLIC


@pytest_twisted.ensureDeferred
async def test_admin_sees_more_fields_but_never_the_password():
    data = (await run(ADMIN)).data
    assert set(data) == set(RECORD) - {"password"}
    assert data["roles"] == ["ROLE_USER"]


@pytest_twisted.ensureDeferred
async def test_lists_are_filtered_per_record():
    people = People(lambda call: [dict(RECORD), dict(RECORD, id=2, password="other")])
    data = (await run(ADMIN, action="list", people=people)).data
    assert [r["id"] for r in data] == [1, 2]
    assert all("password" not in r for r in data)


# --- what the action returns or raises --------------------------------------------------------


@pytest_twisted.ensureDeferred
async def test_action_returning_a_deferred_works():
    people = People(lambda call: task.deferLater(reactor, 0, lambda: dict(RECORD)))
    assert set((await run(people=people)).data) == PUBLIC


@pytest_twisted.ensureDeferred
async def test_action_returning_a_coroutine_works():
    async def answer(call):
        return dict(RECORD, username=f"user{call.fields['id']}")

    data = (await run(text={"id": ["5"]}, people=People(answer))).data
    assert data["username"] == "user5"


@pytest_twisted.ensureDeferred
async def test_action_returning_a_plain_scalar_is_passed_through():
    assert (await run(people=People(lambda call: 42))).data == 42


@pytest_twisted.ensureDeferred
async def test_problem_raised_by_the_action_passes_through():
    problem = NotFound("no person with id 9")

    def answer(call):
        raise problem

    with pytest.raises(NotFound) as caught:
        await run(people=People(answer))
    assert caught.value is problem


@pytest_twisted.ensureDeferred
async def test_other_exception_becomes_an_internal_error_without_its_message():
    def answer(call):
        raise RuntimeError("password=hunter2 at db.example")

    with pytest.raises(InternalError) as caught:
        await run(people=People(answer))
    assert caught.value.status == 500
    assert caught.value.detail == "person/show failed; the error was logged"
    assert "hunter2" not in str(caught.value.to_dict())
    assert caught.value.__cause__ is None


@pytest_twisted.ensureDeferred
async def test_failing_deferred_becomes_an_internal_error():
    def fail():
        raise KeyError("secret")

    people = People(lambda call: task.deferLater(reactor, 0, fail))
    with pytest.raises(InternalError, match="person/show failed"):
        await run(people=people)


@pytest_twisted.ensureDeferred
async def test_an_action_awaiting_asyncio_under_the_default_reactor_is_a_500_naming_the_setting_logged_once():
    async def answer(call):
        await asyncio.sleep(0.01)
        return dict(RECORD)

    logged: list[dict] = []
    globalLogPublisher.addObserver(logged.append)
    try:
        pipeline = Pipeline(
            rules=lambda: RULES, controllers={"person": People(answer)}, superuser_role=SECURITY.superuser_role
        )
        for _ in range(2):
            with pytest.raises(InternalError) as caught:
                await pipeline.run(
                    USER, CallRequest(controller="person", action="show", api_version=None, method="GET")
                )
            assert caught.value.status == 500
            assert "person/show awaits asyncio" in caught.value.detail
            assert "`reactor: asyncio` in service_server.yml" in caught.value.detail
    finally:
        globalLogPublisher.removeObserver(logged.append)
    told = [event for event in logged if event.get("log_namespace") == "apid.pipeline"]
    assert len(told) == 1, told
    assert told[0]["log_level"] is LogLevel.error and told[0]["endpoint"] == "person/show"
    assert "reactor: asyncio" in told[0]["log_format"] and "no running event loop" in told[0]["error"]


# --- filter_output ----------------------------------------------------------------------------

KEYS = st.sampled_from(["id", "name", "email", "password", "roles", "version"])
RECORDS = st.dictionaries(KEYS, st.integers(0, 9), max_size=6)


@given(data=RECORDS | st.lists(RECORDS, max_size=3), allowed=st.frozensets(KEYS))
def test_filter_output_keeps_exactly_the_allowed_keys(data, allowed):
    out = filter_output(data, allowed)
    records = [(data, out)] if isinstance(data, dict) else list(zip(data, out, strict=True))
    assert isinstance(out, type(data))
    for original, kept in records:
        assert set(kept) <= allowed
        assert kept == {k: v for k, v in original.items() if k in allowed}


def test_filter_output_filters_a_tuple_of_records():
    out = filter_output(({"id": 1, "password": "hash"},), frozenset({"id"}))
    assert [dict(r) for r in out] == [{"id": 1}]


# --- the fields an action declares: one problem for every bad field ------------------------------------


def policy(fields) -> list[dict]:
    """A field rule in the shape of the account policy: returns its errors."""
    password = fields.get("password")
    return [{"field": "password", "reason": "is too short"}] if password is not None and len(password) < 8 else []


class Declared(People):
    """People whose create and update declare their required fields and a field rule."""

    def _create(self, call: Call):
        return self._run(call)

    def _update(self, call: Call):
        return self._run(call)

    create = action(requires=("username", "password", "email"), validate=policy)(_create)
    update = action(requires=("id",), validate=policy)(_update)


async def declared_errors(who=ADMIN, action="create", method="POST", body=None, people=None) -> dict[str, str]:
    people = people or Declared()
    errors = await invalid(who=who, action=action, method=method, body=body, people=people)
    assert people.calls == []
    return {error["field"]: error["reason"] for error in errors}


@pytest_twisted.ensureDeferred
async def test_unknown_missing_and_policy_errors_come_in_one_problem():
    errors = await declared_errors(body={"nickname": "n", "username": "jdoe", "password": "x"})
    assert errors == {"nickname": "is not a field of person", "email": "is required", "password": "is too short"}


@pytest_twisted.ensureDeferred
async def test_not_allowed_badly_typed_missing_and_policy_errors_come_in_one_problem():
    errors = await declared_errors(USER, "update", "PUT", {"enabled": False, "version": "7", "password": "short"})
    assert errors == {
        "enabled": "may not be sent to person/update by your role",
        "version": "expected a whole number (Long)",
        "id": "is required",
        "password": "is too short",
    }


@pytest_twisted.ensureDeferred
async def test_a_required_field_sent_as_null_is_missing():
    body = {"username": "jdoe", "password": "long-enough", "email": None}
    assert await declared_errors(body=body) == {"email": "is required"}


@pytest_twisted.ensureDeferred
async def test_a_required_field_of_the_wrong_type_is_reported_once():
    body = {"username": ["jdoe"], "password": "long-enough", "email": "jdoe@example.com"}
    assert await declared_errors(body=body) == {"username": "expected a string (String)"}


@pytest_twisted.ensureDeferred
async def test_validate_sees_only_the_admitted_typed_fields():
    seen = []
    people = People()
    people.update = action(validate=lambda fields: seen.append(dict(fields)))(lambda call: dict(RECORD))
    await invalid(
        who=USER,
        action="update",
        method="PUT",
        people=people,
        body={"enabled": False, "email": "bad"},
        text={"id": ["5"]},
    )
    assert seen == [{"id": 5}]


@pytest_twisted.ensureDeferred
async def test_validate_may_raise_invalid_fields_instead_of_returning_them():
    def refuse(fields):
        raise InvalidFields(errors=[{"field": "email", "reason": "is taken"}])

    people = People()
    people.create = action(requires=("username",), validate=refuse)(lambda call: dict(RECORD))
    errors = await invalid(who=ADMIN, action="create", method="POST", people=people, body={"email": "a@example.com"})
    assert errors == [{"field": "username", "reason": "is required"}, {"field": "email", "reason": "is taken"}]


@pytest_twisted.ensureDeferred
async def test_a_validate_that_fails_is_an_internal_error_and_the_action_does_not_run():
    def broken(fields):
        raise KeyError("secret")

    people = People()
    people.create = action(validate=broken)(lambda call: people._run(call))
    with pytest.raises(InternalError, match="person/create failed; the error was logged"):
        await run(ADMIN, action="create", method="POST", people=people)
    assert people.calls == []


@pytest_twisted.ensureDeferred
async def test_the_action_runs_when_every_declared_rule_holds():
    people = Declared()
    body = {"username": "jdoe", "password": "long-enough", "email": "jdoe@example.com"}
    await run(ADMIN, action="create", method="POST", body=body, people=people)
    assert dict(people.calls[0].fields) == body


def test_a_bare_action_declares_nothing_and_a_declaring_one_keeps_its_rules():
    assert action_rules(People.show) == ActionRules()
    assert action_rules(Declared.create) == ActionRules(requires=("username", "password", "email"), validate=policy)


# --- the call's unit of work (issue 11, item 5) -------------------------------------------------------


class Writes:
    """A database and an event recorder in one, remembering what each was asked to do."""

    def __init__(self) -> None:
        self.plain: list = []
        self.with_events: list = []
        self.recorded: list = []

    def write(self, work, *args):
        self.plain.append(work)
        return succeed(work("connection", *args))

    async def record(self, endpoint, output):
        self.recorded.append((endpoint.path, output))


class EventWrites(Writes):
    def write(self, endpoint, work, *args):  # the recorder's: the endpoint first
        self.with_events.append((endpoint.path, work))
        return succeed(work("connection", *args))


def pipeline_with(db, events, answer):
    return Pipeline(
        rules=lambda: RULES,
        controllers={"person": People(answer)},
        superuser_role=SECURITY.superuser_role,
        events=events,
        db=db,
    )


@pytest_twisted.ensureDeferred
async def test_a_write_through_the_call_records_its_events_in_the_same_transaction():
    db, events = Writes(), EventWrites()
    pipeline = pipeline_with(db, events, lambda call: call.write(lambda connection, name: {"id": 9, "name": name}, "x"))
    result = await pipeline.run(
        ADMIN,
        CallRequest("person", "create", None, "POST", {"username": "u", "password": "p4ssword!", "email": "u@x.org"}),
    )
    assert result.data == {"id": 9}
    assert [path for path, _ in events.with_events] == ["person/create"]
    assert events.recorded == [] and db.plain == []  # not recorded a second time, after the action


@pytest_twisted.ensureDeferred
async def test_an_action_writing_another_way_gets_its_events_after_it_returns():
    db, events = Writes(), EventWrites()
    pipeline = pipeline_with(db, events, lambda call: dict(RECORD))
    await pipeline.run(ADMIN, CallRequest("person", "delete", None, "DELETE", {}, {"id": ["1"]}))
    assert events.recorded == [("person/delete", RECORD)] and events.with_events == []


@pytest_twisted.ensureDeferred
async def test_a_write_of_a_safe_call_or_without_webhooks_is_a_plain_write():
    db = Writes()
    answer = lambda call: call.write(lambda connection: dict(RECORD))  # noqa: E731
    await pipeline_with(db, EventWrites(), answer).run(
        ADMIN, CallRequest("person", "show", None, "GET", {}, {"id": ["1"]})
    )
    await pipeline_with(db, None, answer).run(ADMIN, CallRequest("person", "delete", None, "DELETE", {}, {"id": ["1"]}))
    assert len(db.plain) == 2


def test_a_call_made_outside_the_daemon_has_no_unit_of_work():
    call = Call(endpoint=PERSON.versions[PERSON.current_stable].endpoints["show"], fields={}, caller=None)
    with pytest.raises(RuntimeError, match="no unit of work"):
        call.write(lambda connection: None)


class Carrying(People):
    """An action that declares the fields every record it answers holds."""

    @action(answers="record", carries=("id", "version", "enabled"))
    def show(self, call: Call):
        return self._run(call)

    list = show


@pytest_twisted.ensureDeferred
async def test_an_answer_with_every_field_it_carries_passes_and_one_missing_the_roles_see_is_a_500_logged():
    assert (await run(ADMIN, people=Carrying())).data["enabled"] is True
    # the user does not receive `enabled`: nothing is promised to them, so its absence is fine
    assert (await run(USER, people=Carrying(lambda call: {**RECORD, "enabled": None}))).data["id"] == 1
    logged: list[dict] = []
    globalLogPublisher.addObserver(logged.append)
    try:
        for broken in ({**RECORD, "version": None}, {k: v for k, v in RECORD.items() if k != "version"}):
            with pytest.raises(InternalError, match="person/show failed; the error was logged"):
                await run(USER, people=Carrying(lambda call, broken=broken: broken))
        with pytest.raises(InternalError):  # in a list, any record
            await run(ADMIN, action="list", people=Carrying(lambda call: [RECORD, {**RECORD, "enabled": None}]))
    finally:
        globalLogPublisher.removeObserver(logged.append)
    said = [formatEvent(event) for event in logged if event.get("log_namespace") == "apid.pipeline"]
    assert len(said) == 3 and all("which it declares it carries" in line for line in said), said
    assert "['version']" in said[0] and "['enabled']" in said[2]


def test_carries_names_fields_of_a_record():
    with pytest.raises(ValueError, match=r"\('id',\), not 'id'"):
        action(answers="record", carries="id")
    with pytest.raises(ValueError, match='answers "nothing"'):
        action(answers="nothing", carries=("id",))
    assert action_rules(Carrying.show).carries == ("id", "version", "enabled")


class Limited(People):
    @action(answers="record", limits={"username": Limits(min_length=3, max_length=8), "roles": Limits(min_items=1)})
    def update(self, call: Call):
        return self._run(call)


@pytest_twisted.ensureDeferred
async def test_a_field_past_its_limits_is_one_more_bad_field_of_the_one_400():
    errors = await invalid(
        who=ADMIN, action="update", method="PUT", body={"id": 1, "username": "jo", "roles": [], "nope": 1},
        people=Limited(),
    )  # fmt: skip
    assert sorted((e["field"], e["reason"]) for e in errors) == [
        ("nope", "is not a field of person"),
        ("roles", "must list at least one item"),
        ("username", "must be 3 to 8 characters"),
    ]
    # within its limits, or absent (null is absent), a field passes
    await run(ADMIN, action="update", method="PUT", body={"id": 1, "username": "jdoe", "roles": None}, people=Limited())


def test_a_limits_pattern_that_is_no_regular_expression_is_an_error_at_import():
    with pytest.raises(re.error):
        Limits(pattern="(unclosed")
