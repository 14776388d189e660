"""The testing kit (apid.testing): controllers through the real request path, in memory.

Every test here is a plain function: no port, no pytest-twisted, nothing turns the global
reactor. Work handed to a real thread pool or awaited on that reactor would never come back
here, so each answer received also shows that the kit needs no reactor.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from sqlalchemy import select, text
from twisted.internet.defer import Deferred

from apid.plugin import Call, Controller, action
from apid.plugin_host.discovery import PluginError
from apid.store.tables import person
from apid.testing import InMemoryApid, StillWaiting
from apid_sample import TeamController

ROOT = Path(__file__).resolve().parents[2]
# The first-party controllers ship their IO State inside a built wheel; from this checkout
# (an editable install) it is in iostate/, as the daemon's iostateDir finds it.
IOSTATE = ROOT / "iostate"


@pytest.fixture
def apid():
    with InMemoryApid(controllers=[TeamController], iostate_dir=IOSTATE) as kit:
        yield kit


@pytest.fixture
def admin(apid):
    return apid.caller("ROLE_ADMIN")


def create_team(apid, caller, name="Core", **fields):
    return apid.post(f"/v{apid.version}/team/create", {"name": name, "leaderId": caller.id, **fields}, caller=caller)


def test_a_v_call_runs_the_controller_and_answers_its_fields(apid, admin):
    created = create_team(apid, admin, budget=12.5)
    assert created.status == 200
    assert created.json == {"id": 1, "name": "Core", "leaderId": admin.id, "budget": 12.5}
    assert created.headers["content-type"] == "application/json"
    assert created.problem is None

    user = apid.caller("ROLE_USER")
    shown = apid.get(f"/v{apid.version}/team/show/1", caller=user)
    assert shown.status == 200
    assert shown.json == {"id": 1, "name": "Core", "leaderId": admin.id}  # budget: ROLE_ADMIN's only


def test_a_missing_record_is_a_404_problem(apid, admin):
    reply = apid.get(f"/v{apid.version}/team/show/9", caller=admin)
    assert reply.status == 404
    assert reply.headers["content-type"] == "application/problem+json"
    assert reply.problem["title"] == "Not Found"
    assert reply.problem["detail"] == "no team with id 9"
    assert reply.problem["instance"] == f"/v{apid.version}/team/show/9"


def test_a_call_without_a_token_is_a_401(apid):
    reply = apid.get(f"/v{apid.version}/team/list")
    assert reply.status == 401
    assert reply.problem["status"] == 401


def test_a_role_that_may_not_call_the_endpoint_is_refused_with_403(apid):
    user = apid.caller("ROLE_USER")
    reply = create_team(apid, user)
    assert reply.status == 403
    assert reply.problem["detail"] == "your roles may not call team/create"
    assert apid.events == []


def test_bad_fields_are_one_400_problem_listing_each(apid, admin):
    reply = apid.post(f"/v{apid.version}/team/create", {"name": 3, "nickname": "x"}, caller=admin)
    assert reply.status == 400
    fields = {error["field"]: error["reason"] for error in reply.problem["errors"]}
    assert set(fields) == {"name", "nickname", "leaderId"}
    assert fields["nickname"] == "is not a field of team"
    assert fields["leaderId"] == "is required"


def test_a_batch_runs_every_element_and_answers_them_combined(apid, admin):
    reply = apid.batch(
        "team/create",
        [{"name": "A", "leaderId": admin.id}, {"name": "B", "leaderId": admin.id}],
        caller=admin,
        combine=True,
    )
    assert reply.status == 200
    assert [team["name"] for team in reply.json] == ["A", "B"]

    shown = apid.batch("team/show", [{"id": 2}, {"id": 7}], caller=admin, combine=True)
    assert shown.status == 207
    assert shown.json["data"][0]["name"] == "B"
    assert shown.json["errors"][0]["index"] == 1
    assert shown.json["errors"][0]["status"] == 404


def test_a_chain_passes_each_links_key_to_the_next(apid, admin):
    create_team(apid, admin)
    reply = apid.chain(
        "GET", "team/show/1", {"key": "leaderId", "combine": True, "order": {"person/show": "return"}}, caller=admin
    )
    assert reply.status == 200
    team, leader = reply.json
    assert team["name"] == "Core"
    assert leader["id"] == admin.id and leader["username"] == admin.username


def test_link_relations_come_only_when_asked(apid, admin):
    create_team(apid, admin)
    plain = apid.get(f"/v{apid.version}/team/show/1", caller=admin)
    assert "link" not in plain.headers and plain.links == []

    linked = apid.get(f"/v{apid.version}/team/show/1", caller=admin, links=True)
    assert {"href": f"/v{apid.version}/team/show/1", "rel": "self", "method": "GET"} in linked.links
    assert {
        "href": f"/v{apid.version}/person/show/{admin.id}",
        "rel": "urn:apid:rel:person/show",
        "method": "GET",
    } in linked.links


def test_a_create_emits_its_event_with_the_record_the_action_returned(apid, admin):
    create_team(apid, admin, name="Ops")
    apid.post(
        f"/v{apid.version}/person/create",
        {"username": "jdoe", "password": "a-long-password", "email": "jdoe@example.com"},
        caller=admin,
    )
    apid.post(f"/v{apid.version}/person/create", {"username": "x"}, caller=admin)  # a 400: no event

    assert [event.type for event in apid.events] == ["team/create", "person/create"]
    team_event, person_event = apid.events
    assert team_event.data == {"id": 1, "name": "Ops", "leaderId": admin.id, "budget": 0}
    assert team_event.endpoint.controller == "team" and team_event.endpoint.method == "POST"
    assert person_event.data["username"] == "jdoe"
    assert "password" not in person_event.data


def test_what_a_call_stored_can_be_read_from_the_engine(apid, admin):
    reply = apid.post(
        f"/v{apid.version}/person/create",
        {"username": "jdoe", "password": "a-long-password", "email": "jdoe@example.com", "roles": ["ROLE_USER"]},
        caller=admin,
    )
    assert reply.status == 200
    with apid.engine.connect() as connection:
        row = connection.execute(select(person).where(person.c.username == "jdoe")).one()
    assert row.id == reply.json["id"]
    assert row.email == "jdoe@example.com"
    assert row.password.startswith("$argon2id$")  # hashed, never the password itself


def test_query_fields_a_put_and_a_delete_reach_the_action(apid, admin):
    other = apid.caller("ROLE_USER", username="other")
    page = apid.get(f"/v{apid.version}/person/list", {"offset": 1, "max": 1}, caller=admin)
    assert [account["username"] for account in page.json] == ["other"]

    changed = apid.put(f"/v{apid.version}/person/update/{other.id}", {"email": "new@example.com"}, caller=admin)
    assert changed.status == 200
    with apid.engine.connect() as connection:
        assert connection.execute(select(person.c.email).where(person.c.id == other.id)).scalar() == "new@example.com"
    assert apid.delete(f"/v{apid.version}/person/delete/{other.id}", caller=admin).status == 200
    assert apid.get(f"/v{apid.version}/person/show/{other.id}", caller=admin).status == 404
    assert apid.get(f"/v{apid.version}/team/list", caller=other).status == 401  # its account is gone


def test_a_caller_is_a_real_account_with_its_roles(apid, admin):
    manager = apid.caller("ROLE_USER", username="manager")
    assert manager.roles == {"ROLE_USER"}
    own = apid.get(f"/v{apid.version}/person/show/{manager.id}", caller=manager)
    assert own.status == 200 and own.json["username"] == "manager"
    assert apid.get(f"/v{apid.version}/person/show/{admin.id}", caller=manager).status == 403
    seen = apid.get(f"/v{apid.version}/person/show/{manager.id}", caller=admin)
    assert seen.json["roles"] == ["ROLE_USER"]


def test_two_kits_side_by_side_share_nothing():
    with (
        InMemoryApid([TeamController], iostate_dir=IOSTATE) as first,
        InMemoryApid([TeamController], iostate_dir=IOSTATE) as second,
    ):
        first_admin = first.caller("ROLE_ADMIN", username="first")
        second_admin = second.caller("ROLE_ADMIN", username="second")
        assert create_team(first, first_admin).status == 200

        assert second.get(f"/v{second.version}/team/show/1", caller=second_admin).status == 404
        assert second.get(f"/v{second.version}/team/list", caller=first_admin).status == 401  # another secret
        assert [event.type for event in first.events] == ["team/create"] and second.events == []
        with second.engine.connect() as connection:
            assert connection.execute(select(person.c.username)).scalars().all() == ["second"]


class WaitingController(Controller):
    """An action awaiting something the kit never runs (as real I/O would be)."""

    name = "wait"

    @action
    async def forever(self, call: Call) -> dict:
        return await Deferred()


WAIT_IOSTATE = {
    "NAME": "wait",
    "NETWORKGRP": "public",
    "VALUES": {"id": {"type": "Long", "key": "PKEY", "description": "Nothing", "mockData": "1"}},
    "CURRENTSTABLE": "1",
    "VERSION": {
        "1": {
            "DEFAULTACTION": "forever",
            "URI": {
                "forever": {
                    "METHOD": "GET",
                    "DESCRIPTION": "Never answers",
                    "REQUEST": {},
                    "RESPONSE": {"permitAll": ["id"]},
                }
            },
        }
    },
}


def test_a_call_still_waiting_raises_instead_of_hanging(tmp_path):
    for shipped in IOSTATE.glob("*.json"):
        shutil.copy(shipped, tmp_path)
    (tmp_path / "wait.json").write_text(json.dumps(WAIT_IOSTATE))
    with InMemoryApid([WaitingController], iostate_dir=tmp_path, timeout=0.5) as kit:
        user = kit.caller("ROLE_USER")
        with pytest.raises(StillWaiting, match=re.escape("GET /v0.1/wait/forever is still waiting after 0.5 s")):
            kit.get(f"/v{kit.version}/wait/forever", caller=user)


def test_rate_limiting_is_off_unless_asked(apid, admin):
    for _ in range(3):
        reply = apid.get(f"/v{apid.version}/team/list", caller=admin)
    assert reply.status == 200 and "ratelimit" not in reply.headers

    with InMemoryApid([TeamController], iostate_dir=IOSTATE, rate_limits={"ROLE_USER": 2}) as limited:
        user = limited.caller("ROLE_USER")
        answers = [limited.get(f"/v{limited.version}/team/list", caller=user) for _ in range(3)]
    assert [reply.status for reply in answers] == [200, 200, 429]
    assert "ratelimit" in answers[0].headers


def test_a_class_the_kit_cannot_load_fails_as_the_daemon_would():
    class Nameless(Controller):
        pass

    with pytest.raises(PluginError, match="Nameless sets no controller name"):
        InMemoryApid([Nameless], iostate_dir=IOSTATE)
    with pytest.raises(PluginError, match="controller 'team' is already provided by"):
        InMemoryApid([TeamController, TeamController], iostate_dir=IOSTATE)


NOTES_REVISION = """
import sqlalchemy as sa
from alembic import op

revision = "notes0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "kit_note",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("author", sa.Integer, sa.ForeignKey("person.id", ondelete="CASCADE"), nullable=False),
        sa.Column("text", sa.String(200), nullable=False),
    )
"""


def test_a_plugins_migrations_run_after_apids_schema(tmp_path, monkeypatch):
    migrations = tmp_path / "kit_notes" / "migrations"
    migrations.mkdir(parents=True)
    (tmp_path / "kit_notes" / "__init__.py").write_text("")
    (migrations / "__init__.py").write_text("")
    (migrations / "0001_notes.py").write_text(NOTES_REVISION)
    monkeypatch.syspath_prepend(str(tmp_path))

    with InMemoryApid(migrations=["kit_notes.migrations"], iostate_dir=IOSTATE) as kit:
        author = kit.caller("ROLE_USER")
        with kit.engine.begin() as connection:
            connection.execute(
                text("INSERT INTO kit_note (author, text) VALUES (:author, 'hello')"), {"author": author.id}
            )
            assert connection.execute(text("SELECT version_num FROM alembic_version_kit_notes")).scalar() == "notes0001"
            assert connection.execute(text("SELECT count(*) FROM kit_note")).scalar() == 1


def test_a_migrations_package_that_is_not_there_fails_naming_it():
    with pytest.raises(PluginError, match=re.escape("migrations package kit_nowhere.migrations failed to load")):
        InMemoryApid(migrations=["kit_nowhere.migrations"], iostate_dir=IOSTATE)
