"""The same daemon on a real PostgreSQL: migrations, then person CRUD, checked in the database."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect, select, text

from apid.auth.accounts import insert_account
from apid.store.tables import metadata, person, person_role, role
from assertions import assert_problem
from event_streams import EventStream
from harness import ADMIN, Deployment, burst, deployment_with_accounts, running_daemon, wait_for

pytestmark = pytest.mark.postgresql


@pytest.fixture(scope="module")
def deployment(tmp_path_factory, postgres) -> Deployment:
    """The module's deployment, its database the PostgreSQL server's."""
    return deployment_with_accounts(tmp_path_factory.mktemp("apid-pg"), server={"database": {"url": postgres.url}})


def test_migrate_creates_the_schema_and_is_idempotent(deployment, postgres):
    again = deployment.cli("migrate")
    assert again.returncode == 0, again.stderr
    tables = set(inspect(create_engine(postgres.url)).get_table_names())
    assert {"person", "role", "person_role", "hook", "alembic_version"} <= tables
    hook_columns = {c["name"] for c in inspect(create_engine(postgres.url)).get_columns("hook")}
    assert {
        "attempts",
        "date_created",
        "format",
        "last_modified",
        "user_id",
        "is_enabled",
        "url",
        "service",
    } <= hook_columns
    with create_engine(postgres.url).connect() as connection:
        assert compare_metadata(MigrationContext.configure(connection), metadata) == []


def test_person_crud_is_stored_in_postgresql(daemon, admin_token, postgres):
    created = daemon.request(
        "POST",
        "/v0.1/person/create",
        {"username": "pgperson", "password": "pg-password-1", "email": "pg@example.com"},
        token=admin_token,
    )
    assert created.status == 200, created.body
    person_id = created.json["id"]
    engine = create_engine(postgres.url)
    with engine.connect() as connection:
        row = connection.execute(select(person).where(person.c.id == person_id)).one()
        roles = (
            connection.execute(
                select(role.c.authority)
                .join(person_role, person_role.c.role_id == role.c.id)
                .where(person_role.c.person_id == person_id)
            )
            .scalars()
            .all()
        )
    assert (row.username, row.email, row.enabled) == ("pgperson", "pg@example.com", True)
    assert row.password.startswith("$argon2id$")
    assert roles == ["ROLE_USER"]

    updated = daemon.request(
        "PUT", f"/v0.1/person/update/{person_id}", {"email": "pg2@example.com", "version": 0}, token=admin_token
    )
    assert updated.json == {"id": person_id, "version": 1}
    shown = daemon.request("GET", f"/v0.1/person/show/{person_id}", token=admin_token)
    assert shown.json["email"] == "pg2@example.com"

    duplicate = daemon.request(
        "POST",
        "/v0.1/person/create",
        {"username": "pgperson", "password": "pg-password-1", "email": "other@example.com"},
        token=admin_token,
    )
    assert duplicate.status == 409

    deleted = daemon.request("DELETE", f"/v0.1/person/delete/{person_id}", token=admin_token)
    assert deleted.json == {"id": person_id}
    with engine.connect() as connection:
        assert connection.execute(select(person).where(person.c.id == person_id)).first() is None
        assert connection.execute(select(person_role).where(person_role.c.person_id == person_id)).first() is None


def test_two_concurrent_creates_of_one_name_in_two_letter_cases_make_one_account(daemon, admin_token, postgres):
    """`Bob` (apid's insert_account, as `apid user add` runs it) and `bob` (person/create on
    the daemon) made at once: the daemon's check for a taken name runs while Bob's transaction
    is still open, so it sees nothing, and its insert waits on the unique index of
    person.username_key until Bob commits; then it is refused with the check's own 409."""
    engine = create_engine(postgres.url)
    try:
        with engine.connect() as first, ThreadPoolExecutor(1) as client:
            first.begin()
            insert_account(first, "Bob", "bob.upper@example.com", "not-a-real-hash", ["ROLE_USER"])
            second = client.submit(
                daemon.request,
                "POST",
                "/v0.1/person/create",
                {"username": "bob", "password": "bob-password-1", "email": "bob.lower@example.com"},
                token=admin_token,
            )

            def waiting_on_bob() -> bool:
                with engine.connect() as watcher:  # a transaction of its own: activity is read once in one
                    return (
                        watcher.execute(
                            text(  # the daemon's insert, blocked by the first transaction
                                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                "AND query LIKE 'INSERT INTO person %'"
                            )
                        ).scalar()
                        == 1
                    )

            assert wait_for(waiting_on_bob), "the second create did not wait for the first: no unique key"
            first.commit()
            answer = second.result(timeout=30)
        assert assert_problem(answer, 409)["field"] == "username"
        with engine.connect() as connection:
            named = connection.execute(
                select(person.c.username, person.c.email).where(person.c.username_key == "bob")
            ).all()
        assert [tuple(row) for row in named] == [("Bob", "bob.upper@example.com")]
    finally:
        engine.dispose()


def test_two_daemons_on_postgresql_deliver_each_webhook_once(tmp_path, postgres, deployment, own_receiver):
    """Two daemons of another deployment on the module's database (its accounts), with webhooks on."""
    hooked = Deployment(
        tmp_path,
        server={
            "database": {"url": postgres.url},
            "webhookActive": True,
            "webhooks": {"timeout": 1, "lease": 3, "poll": 0.2},
        },
        api={"cors": {"allowedOrigins": [own_receiver.origin]}},
    )
    hooked.write()
    engine = create_engine(postgres.url)
    with engine.begin() as connection:
        admin_id = connection.execute(select(person.c.id).where(person.c.username == ADMIN[0])).scalar_one()
        connection.exec_driver_sql(  # the specification's insert
            "insert into hook (attempts, date_created, format, last_modified, user_id, is_enabled, url, service) "
            f"values (0, now(), 'JSON', now(), {admin_id}, true, '{own_receiver.origin}/pg', 'team')"
        )
    try:
        with running_daemon(hooked) as first, running_daemon(hooked) as second:
            for daemon in (first, second):
                burst(daemon, daemon.login(*ADMIN[:2]), 100)
            deadline = time.monotonic() + 30
            while len(own_receiver.received) < 200 and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.5)
        ids = [r.headers["webhook-id"] for r in own_receiver.received]
        assert len(ids) == len(set(ids)) == 200
        with engine.connect() as connection:
            assert connection.exec_driver_sql("select state, count(*) from hook_message group by state").all() == [
                ("delivered", 200)
            ]
    finally:
        engine.dispose()


def test_two_daemons_on_postgresql_stream_each_other_s_changes(daemon, deployment, admin_token):
    """A change made through one daemon reaches the live event streams of another on the same
    database within a second, in the order made (apid.events.feed reads the shared log)."""
    with (
        running_daemon(deployment) as other,
        EventStream(other.port, other.login(*ADMIN[:2]), "/events?services=person") as stream,
    ):
        assert stream.status == 200
        for n in range(3):
            started = time.monotonic()
            reply = daemon.request(
                "POST",
                "/v0.1/person/create",
                {"username": f"pgstream{n}", "password": f"pgstream-password-{n}", "email": f"s{n}@example.com"},
                token=admin_token,
            )
            assert reply.status == 200, reply.body
            event = stream.next(timeout=2)
            assert time.monotonic() - started < 1.0
            assert (event.event, event.message["data"]["id"]) == ("person/create", reply.json["id"])
