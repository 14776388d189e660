"""Every change is an event, and a change and its events commit together (issue 11, items 4
and 5), against the real daemon, a real receiver on loopback, SQLite and PostgreSQL.

Sign-up, validation, a password reset and `apid user add` create or change `person` records
outside IO State endpoints: subscribers hear of them exactly as of `person/create` and
`person/update` (same types, payloads filtered by the owner's RESPONSE fields). The person
controller writes through its call's unit of work, so kill -9 in the middle of a burst of
creations leaves every created account with its event and no event without its account.
"""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest
from sqlalchemy import create_engine, text

from harness import ADMIN, Daemon, Deployment, V, deployment_with_accounts, person_fields, running_daemon, wait_for
from outbox import Outbox, link_at
from receiver import Receiver
from sessions import reset_password

SETTINGS = {"timeout": 1, "lease": 3, "poll": 0.2, "retryBase": 0.1, "retryFactor": 2, "retryMax": 0.4}


def hooked_deployment(root, receiver: Receiver, **server) -> Deployment:
    return deployment_with_accounts(
        root,
        server={"webhookActive": True, "webhooks": SETTINGS, **server},
        api={"cors": {"allowedOrigins": [receiver.origin]}},
    )


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgresql)])
def database_url(request, tmp_path_factory) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path_factory.mktemp('events-db') / 'apid.db'}"
    return request.getfixturevalue("postgres").new_database(f"events_{uuid.uuid4().hex[:8]}")


@pytest.fixture(scope="module")
def deployment(tmp_path_factory, receiver, database_url):
    return hooked_deployment(tmp_path_factory.mktemp("events"), receiver, database={"url": database_url})


@pytest.fixture(scope="module")
def hook_path(daemon, admin_token, receiver) -> str:
    """The administrator's hook on `person`, at a receiver path of this module."""
    path = f"/people-{uuid.uuid4().hex[:6]}"
    reply = daemon.request(
        "POST", f"{V}/hook/create", {"url": receiver.origin + path, "service": "person"}, token=admin_token
    )
    assert reply.status == 200, reply.body
    return path


def events(receiver: Receiver, path: str) -> list[dict]:
    return [r.json for r in receiver.received if r.path == path]


def event_of(receiver: Receiver, path: str, type_: str, person_id: int, **data) -> dict:
    """The one event of this type about this person, waited for; its data checked."""

    def found() -> list[dict]:
        return [
            e
            for e in events(receiver, path)
            if e["type"] == type_
            and e["data"].get("id") == person_id
            and all(e["data"].get(k) == v for k, v in data.items())
        ]

    assert wait_for(lambda: found(), timeout=15), (type_, person_id, events(receiver, path)[-5:])
    (event,) = found()
    return event


def person_id_named(database_url: str, name: str) -> int:
    engine = create_engine(database_url)
    try:
        with engine.connect() as connection:
            return connection.execute(text("select id from person where username = :n"), {"n": name}).scalar_one()
    finally:
        engine.dispose()


def test_sign_up_validation_and_reset_are_person_events(
    daemon, deployment, database_url, admin_token, receiver, hook_path
):
    name, password, address = f"ev{uuid.uuid4().hex[:6]}", "signed-up-password", f"ev{uuid.uuid4().hex[:6]}@example.org"
    outbox = Outbox(deployment)
    reply = daemon.request("POST", "/register", {"username": name, "password": password, "email": address})
    assert reply.status == 200, reply.body
    person_id = person_id_named(database_url, name)
    created = event_of(receiver, hook_path, "person/create", person_id)
    # the payload of person/create for an administrator: its RESPONSE fields, nothing more
    assert created["data"] == {"id": person_id, "version": 0}

    (mail,) = outbox.wait(address)
    assert daemon.request("GET", link_at(mail, "http://127.0.0.1:8080")).status == 302
    event_of(receiver, hook_path, "person/update", person_id, version=1)

    reset_password(daemon, deployment, address, "after-the-reset-1")
    event_of(receiver, hook_path, "person/update", person_id, version=2)


def test_an_account_made_on_the_command_line_is_a_person_event(daemon, deployment, database_url, receiver, hook_path):
    name = f"cli{uuid.uuid4().hex[:6]}"
    done = deployment.cli(
        "user",
        "add",
        name,
        "--email",
        f"{name}@example.org",
        "--role",
        "ROLE_USER",
        "--password-stdin",
        input="cli-password-123\n",
    )
    assert done.returncode == 0, done.stderr
    event_of(receiver, hook_path, "person/create", person_id_named(database_url, name), version=0)


def test_a_registration_that_creates_nothing_is_no_event(daemon, deployment, receiver, hook_path):
    before = len(events(receiver, hook_path))
    reply = daemon.request(
        "POST", "/register", {"username": "someone-new", "password": "some-password-1", "email": ADMIN[2]}
    )  # the address is taken
    assert reply.status == 200
    unknown = daemon.request("GET", f"/validate?id={'x' * 43}")
    assert unknown.status == 400
    time.sleep(1)
    assert len(events(receiver, hook_path)) == before


def test_events_through_the_api_are_unchanged(daemon, admin_token, receiver, hook_path):
    reply = daemon.request("POST", f"{V}/person/create", person_fields("api"), token=admin_token)
    assert reply.status == 200, reply.body
    person_id = reply.json["id"]
    assert event_of(receiver, hook_path, "person/create", person_id)["data"] == {"id": person_id, "version": 0}
    assert daemon.request("DELETE", f"{V}/person/delete/{person_id}", token=admin_token).status == 200
    assert event_of(receiver, hook_path, "person/delete", person_id)["data"] == {"id": person_id}


# --- kill -9: a change never without its event, an event never without its change -----------------


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgresql)])
def crash_deployment(request, tmp_path, receiver) -> tuple[Deployment, str]:
    if request.param == "sqlite":
        deployment = hooked_deployment(tmp_path, receiver)
        return deployment, f"sqlite:///{deployment.root / 'var' / 'test.db'}"
    url = request.getfixturevalue("postgres").new_database(f"crash_{uuid.uuid4().hex[:8]}")
    return hooked_deployment(tmp_path, receiver, database={"url": url}), url


def test_kill_9_during_a_burst_of_changes_leaves_each_with_its_event(crash_deployment, receiver):
    deployment, url = crash_deployment
    daemon = Daemon(deployment).start()
    stop = threading.Event()
    try:
        token = daemon.login(*ADMIN[:2])
        hook = daemon.request(
            "POST", f"{V}/hook/create", {"url": receiver.origin + "/crash", "service": "person"}, token=token
        )
        assert hook.status == 200, hook.body

        answered: list[int] = []  # one item per creation answered 200 (list.append is atomic)

        def create_until_stopped() -> None:
            while not stop.is_set():
                try:
                    if daemon.request("POST", f"{V}/person/create", person_fields("crash"), token=token).status == 200:
                        answered.append(1)
                except OSError:
                    return  # the daemon is gone

        workers = [threading.Thread(target=create_until_stopped) for _ in range(4)]
        for worker in workers:
            worker.start()
        # past a dozen answered creations (however loaded the machine), with more in flight
        assert wait_for(lambda: len(answered) > 12, timeout=60)
        daemon.process.kill()  # SIGKILL, with creations in flight
        daemon.process.wait()
        stop.set()
        for worker in workers:
            worker.join(timeout=30)
    finally:
        stop.set()
        daemon.stop()

    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            created = set(connection.execute(text("select id from person where username like 'crash%'")).scalars())
            payloads = connection.execute(text("select payload from hook_message where type = 'person/create'"))
            announced = {json.loads(payload)["data"]["id"] for payload in payloads.scalars()}
    finally:
        engine.dispose()
    assert len(created) > 10, "the burst should have created accounts before the kill"
    assert created == announced


FAIL_MESSAGES = {
    "sqlite": [
        "CREATE TRIGGER refuse_messages BEFORE INSERT ON hook_message "
        "BEGIN SELECT RAISE(ABORT, 'injected failure'); END"
    ],
    "postgresql": [
        "CREATE FUNCTION refuse_messages() RETURNS trigger AS $$ BEGIN RAISE EXCEPTION 'injected failure'; END $$ "
        "LANGUAGE plpgsql",
        "CREATE TRIGGER refuse_messages BEFORE INSERT ON hook_message FOR EACH ROW EXECUTE FUNCTION refuse_messages()",
    ],
}


def test_a_change_whose_events_cannot_be_written_is_not_made(crash_deployment, receiver):
    """The deterministic form of the crash: the events' insert fails inside the transaction
    (a trigger refuses it), so the account it belongs to is not created either."""
    deployment, url = crash_deployment
    with running_daemon(deployment) as daemon:
        token = daemon.login(*ADMIN[:2])
        hook = daemon.request(
            "POST", f"{V}/hook/create", {"url": receiver.origin + "/refused", "service": "person"}, token=token
        )
        assert hook.status == 200, hook.body
        engine = create_engine(url)
        try:
            with engine.begin() as connection:
                for statement in FAIL_MESSAGES[engine.dialect.name]:
                    connection.execute(text(statement))
            fields = person_fields("refused")
            reply = daemon.request("POST", f"{V}/person/create", fields, token=token)
            assert reply.status == 500, reply.body
            assert "Traceback" not in reply.body.decode()
            with engine.connect() as connection:
                made = connection.execute(
                    text("select count(*) from person where username = :n"), {"n": fields["username"]}
                ).scalar_one()
            assert made == 0
        finally:
            engine.dispose()
