"""Every copy of a record passes the action's own per-record check (issue 33, item 5): who may
receive a copy (`apid.plugin_host.record_access`), as the actions declare it (`@action(may_see=...)`,
`caller_independent`), bound to the rules at load; the refusal of a HOOK role that would hand
one user's record to another; and the person events made outside endpoints (`AccountEvents`)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from sqlalchemy import select
from twisted.logger import LogLevel, globalLogPublisher

from apid.auth.accounts import get_account, insert_account
from apid.calls.pipeline import filter_output
from apid.config.files import load_api
from apid.config.kinds import API_FILE
from apid.hooks.events import AccountEvents
from apid.hooks.registry import insert_hook
from apid.iostate import IOStateError, check_hook_roles, parse
from apid.plugin import Call, Caller, Controller, action, action_rules
from apid.plugin_host.discovery import Bound, FoundPlugin, LoadedController, bind
from apid.plugin_host.record_access import may_receive, receiver
from apid.plugin_host.rules import RuleBook
from apid.store.database import run_read, run_write
from apid.store.tables import hook_message
from apid_apikey import ApiKeyController
from apid_hook import HookController
from apid_person import PersonController
from apid_sample import TeamController

REPO = Path(__file__).resolve().parents[2]
SECURITY = load_api(REPO / "etc" / API_FILE, REPO).security
PERSON = json.loads((REPO / "iostate" / "person.json").read_text(encoding="utf-8"))
TEAM = json.loads((REPO / "tests" / "sample_plugin" / "apid_sample" / "iostate" / "team.json").read_text())
ADMIN, USER = SECURITY.superuser_role, SECURITY.user_role


def loaded(cls: type[Controller], distribution: str) -> LoadedController:
    entry_point = SimpleNamespace(value=f"{cls.__module__}:{cls.__qualname__}", load=lambda: cls)
    return LoadedController(FoundPlugin(cls.name, distribution, entry_point), cls)


def hooked(document: dict, action: str, *roles: str) -> dict:
    """The IO State document with `roles` in the action's DEFAULT and HOOK roles."""
    document = json.loads(json.dumps(document))
    uri = document.get("IOSTATE", document)["VERSION"]["1"]["URI"][action]
    uri.setdefault("ROLES", {})
    uri["ROLES"]["DEFAULT"] = sorted({*uri["ROLES"].get("DEFAULT", []), *roles})
    uri["ROLES"]["HOOK"] = list(roles)
    return document


def bound(directory: Path, person: dict = PERSON, team: dict = TEAM, person_cls=PersonController) -> Bound:
    (directory / "person.json").write_text(json.dumps(person))
    (directory / "team.json").write_text(json.dumps(team))
    controllers = [loaded(person_cls, "apid"), loaded(TeamController, "apid-sample-plugin")]
    return bind(controllers, directory, SECURITY)


def endpoint(rules, controller: str, action: str):
    return rules.controller(controller).versions["1"].endpoints[action]


def account(rules, user_id: int, *roles: str, at=("person", "update")) -> Caller:
    return receiver(endpoint(rules, *at), user_id, f"user{user_id}", frozenset(roles))


@pytest.fixture(scope="module")
def bound_rules(tmp_path_factory):
    return bound(tmp_path_factory.mktemp("rules"), person=hooked(PERSON, "update", ADMIN, USER)).rules


# --- refused at load: a user role in HOOK of an action that declares neither ----------------------


def test_a_user_role_in_hook_of_an_undeclared_action_is_refused_naming_file_action_and_role(tmp_path):
    team = hooked(TEAM, "create", ADMIN, USER)  # team/create declares no may_see, and is not caller-independent
    with pytest.raises(IOStateError) as info:
        bound(tmp_path, team=team)
    message = str(info.value)
    assert message.startswith(
        f"{tmp_path / 'team.json'}: controller team, version 1, action create, ROLES.HOOK: role 'ROLE_USER' is "
        "refused: the controller of team (distribution apid-sample-plugin) declares neither who may see the "
        "records create answers (@action(may_see=...)) nor that they are the same for every caller"
    )
    assert "give HOOK ROLE_ADMIN only, or declare one of them" in message


def test_administrators_safe_actions_and_declared_actions_pass_the_check():
    state = parse(hooked(hooked(TEAM, "create", ADMIN), "show", ADMIN, USER), "team.json", SECURITY)
    check_hook_roles(state, [], ADMIN, "apid-sample")  # administrators only; a GET makes no events
    user_hook = parse(hooked(TEAM, "create", USER), "team.json", SECURITY)
    check_hook_roles(user_hook, ["create"], ADMIN, "apid-sample")  # declared
    with pytest.raises(IOStateError, match=r"^team.json: controller team, version 1, action create, ROLES.HOOK"):
        check_hook_roles(user_hook, ["show", "list"], ADMIN, "apid-sample")


def test_person_hook_and_apikey_declare_who_may_see_every_record_they_change(tmp_path):
    bound(tmp_path, person=hooked(hooked(PERSON, "update", ADMIN, USER), "delete", ADMIN))  # accepted
    changing = {
        PersonController: ("create", "update", "delete"),
        HookController: ("create", "update", "delete", "enable", "disable", "rotateSecret", "redeliver", "ping"),
        ApiKeyController: ("create", "revoke"),
    }
    for cls, names in changing.items():
        for name in names:
            assert action_rules(cls.actions()[name]).may_see is not None, f"{cls.name}/{name}"


@pytest.mark.parametrize("controller, secret", [(HookController, "secret"), (ApiKeyController, "key")])
def test_a_hook_or_key_goes_to_its_owner_and_administrators_and_its_secret_to_nobody(controller, secret):
    check = action_rules(controller.actions()["create"]).may_see
    admin, bob = Caller(1, "root", frozenset({ADMIN}), True), Caller(3, "bob", frozenset({USER}), False)
    assert check(bob, {"id": 5, "userId": 3}) and check(admin, {"id": 5, "userId": 3})
    assert not check(bob, {"id": 6, "userId": 2})
    assert not check(bob, {"id": 5, "userId": 3, secret: "whsec_..."})
    assert not check(admin, {"id": 5, "userId": 3, secret: "whsec_..."})


def test_a_reload_refusing_a_user_role_in_hook_keeps_the_rules_in_force(tmp_path):
    first = bound(tmp_path)
    book = RuleBook(first, tmp_path, SECURITY)
    (tmp_path / "team.json").write_text(json.dumps(hooked(TEAM, "create", USER)))
    with pytest.raises(IOStateError, match=r"action create, ROLES\.HOOK: role 'ROLE_USER' is refused"):
        book.read()
    assert book.current is first.rules


# --- who may receive a copy ------------------------------------------------------------------------


def test_a_person_record_goes_to_its_owner_and_administrators_only(bound_rules):
    update = endpoint(bound_rules, "person", "update")
    alice = {"id": 2, "username": "alice", "email": "alice@example.com"}
    assert may_receive(update, account(bound_rules, 2, USER), alice)  # her own
    assert may_receive(update, account(bound_rules, 1, ADMIN), alice)
    assert not may_receive(update, account(bound_rules, 3, USER), alice)  # bob: person/show of it answers him 403


def test_the_receiver_is_a_caller_with_the_roles_the_endpoint_grants(bound_rules):
    bob = account(bound_rules, 3, USER, "ROLE_OTHER")
    assert (bob.id, bob.username, bob.roles, bob.is_superuser) == (3, "user3", frozenset({USER}), False)
    assert bob.all_roles == {USER, "ROLE_OTHER"} and bob.api_key is None
    admin = receiver(endpoint(bound_rules, "person", "create"), 1, "root", frozenset({ADMIN, USER}))
    assert admin.is_superuser and admin.roles == {ADMIN}  # person/create admits administrators only


def test_without_may_see_administrators_receive_and_caller_independent_opens_it_to_every_role(bound_rules):
    create = endpoint(bound_rules, "team", "create")  # undeclared
    team = {"id": 1, "name": "Core", "leaderId": 2}
    assert may_receive(create, account(bound_rules, 1, ADMIN, at=("team", "create")), team)
    assert not may_receive(create, account(bound_rules, 2, USER, at=("team", "create")), team)
    show = endpoint(bound_rules, "team", "show")  # caller-independent
    assert may_receive(show, account(bound_rules, 3, USER, at=("team", "show")), team)


class Notes(Controller):
    """Checks that fail: a plugin's bug never becomes a leak."""

    name = "notes"

    @action(may_see=lambda caller, record: record["owner"] == caller.id)
    def create(self, call: Call) -> dict:
        return {}

    @action(may_see=lambda caller, record: record.get("owner"))  # not a bool
    def update(self, call: Call) -> dict:
        return {}


def notes_rules(tmp_path):
    document = {
        "NAME": "notes",
        "NETWORKGRP": "public",
        "VALUES": {"id": {"type": "Long", "key": "PKEY", "description": "Note id"}},
        "CURRENTSTABLE": "1",
        "VERSION": {"1": {"URI": {a: {"METHOD": "POST", "ROLES": {"HOOK": [USER]}} for a in ("create", "update")}}},
    }
    (tmp_path / "notes.json").write_text(json.dumps(document))
    return bind([loaded(Notes, "notes-dist")], tmp_path, SECURITY).rules


def test_a_check_that_raises_or_answers_no_bool_sends_nothing_and_is_logged(tmp_path):
    rules = notes_rules(tmp_path)
    logged: list[dict] = []
    globalLogPublisher.addObserver(logged.append)
    try:
        create, update = endpoint(rules, "notes", "create"), endpoint(rules, "notes", "update")
        assert not may_receive(create, receiver(create, 2, "bob", frozenset({USER})), {"id": 1})  # KeyError
        assert not may_receive(update, receiver(update, 2, "bob", frozenset({USER})), {"id": 1, "owner": 2})
        assert may_receive(create, receiver(create, 2, "bob", frozenset({USER})), {"id": 1, "owner": 2})
    finally:
        globalLogPublisher.removeObserver(logged.append)
    [failure] = [event for event in logged if event.get("log_level") == LogLevel.critical]
    assert failure["endpoint"] == "notes/create" and failure["person"] == 2
    assert "log_failure" in failure


def test_an_endpoint_not_bound_to_its_action_sends_nobody_a_copy():
    unbound = parse(hooked(PERSON, "update", ADMIN, USER), "person.json", SECURITY).versions["1"].endpoints["update"]
    admin = receiver(unbound, 1, "root", frozenset({ADMIN}))
    assert not may_receive(unbound, admin, {"id": 1})


# --- account events made outside endpoints go through the same check -------------------------------


def test_account_events_reach_the_owner_and_administrators_but_no_other_user(engine, alice, bob, bound_rules):
    root = run_write(engine, insert_account, "root", "root@example.com", "not-a-real-hash", [ADMIN]).id
    hooks = {
        person: run_write(engine, insert_hook, person, f"http://127.0.0.1:9000/{person}", "person", "whsec_x").id
        for person in (root, alice, bob)
    }
    events = AccountEvents(rules=lambda: bound_rules, filter_output=filter_output, clock=lambda: 1_800_000_000.0)

    run_write(engine, lambda connection: events.record(connection, "update", get_account(connection, alice)))

    rows = run_read(engine, lambda c: c.execute(select(hook_message.c.hook_id, hook_message.c.payload)).all())
    assert sorted(hook_id for hook_id, _ in rows) == sorted([hooks[root], hooks[alice]])  # never bob's
    assert {json.loads(payload)["data"]["id"] for _, payload in rows} == {alice}
