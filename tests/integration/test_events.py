"""The live event stream, `GET /events`, through the real daemon (issue 38): each subscriber is
told of the changes it may see, with its own fields, as they happen; a client back with
Last-Event-ID gets exactly what it missed; a caller who no longer stands is cut off.

The deployment gives person/update's HOOK to users too (the action's own check then lets an
account hear only of its own record) and its RESPONSE more fields for administrators, so that
what each stream receives differs by role and by record.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from event_streams import EventStream
from harness import ADMIN, USER, Daemon, Deployment, deployment_with_accounts, running_daemon

BOB = ("bob", "bob-password-1", "bob@example.com")
ADMIN_FIELDS = ["email", "enabled"]


def open_hooks(deployment: Deployment) -> None:
    path = deployment.root / "iostate" / "person.json"
    document = json.loads(path.read_text())
    update = document["IOSTATE"]["VERSION"]["1"]["URI"]["update"]
    update["ROLES"]["HOOK"] = ["ROLE_ADMIN", "ROLE_USER"]
    update["RESPONSE"]["ROLE_ADMIN"] = ADMIN_FIELDS
    path.write_text(json.dumps(document))


@pytest.fixture(scope="module")
def workers() -> int:
    return 2 if len(os.sched_getaffinity(0)) >= 2 else 1


@pytest.fixture(scope="module")
def deployment(tmp_path_factory, workers):
    made = deployment_with_accounts(
        tmp_path_factory.mktemp("events"),
        api={"procCores": workers},
        accounts=((*ADMIN, "ROLE_ADMIN"), (*USER, "ROLE_USER"), (*BOB, "ROLE_USER")),
    )
    open_hooks(made)
    return made


@pytest.fixture(scope="module")
def daemon(deployment):
    with running_daemon(deployment) as running:
        yield running


@pytest.fixture(scope="module")
def tokens(daemon):
    return {name: daemon.login(name, password) for name, password, _ in (ADMIN, USER, BOB)}


@pytest.fixture(scope="module")
def ids(daemon, tokens):
    people = daemon.request("GET", "/v0.1/person/list", token=tokens["admin"]).json
    return {person["username"]: person["id"] for person in people}


def change_email(daemon, tokens, person_id: int, address: str) -> dict:
    shown = daemon.request("GET", f"/v0.1/person/show/{person_id}", token=tokens["admin"]).json
    reply = daemon.request(
        "PUT",
        f"/v0.1/person/update/{person_id}",
        {"email": address, "version": shown["version"]},
        token=tokens["admin"],
    )
    assert reply.status == 200, reply.body
    return reply.json


def test_each_stream_hears_what_its_caller_may_see(daemon, tokens, ids):
    streams = {name: EventStream(daemon.port, token) for name, token in tokens.items()}
    try:
        for stream in streams.values():
            assert stream.status == 200
            assert stream.headers["Content-Type"] == "text/event-stream; charset=utf-8"
            assert stream.headers["Cache-Control"] == "no-store"
        answered = change_email(daemon, tokens, ids["alice"], "alice.events@example.com")

        admins = streams["admin"].next(timeout=2)
        assert admins.event == "person/update"
        message = admins.message
        assert message["type"] == "person/update" and message["id"].startswith("msg_")
        assert message["data"] == {
            "id": ids["alice"],
            "version": answered["version"],
            "email": "alice.events@example.com",
            "enabled": True,
        }
        alices = streams["alice"].next(timeout=2)
        assert (alices.id, alices.event) == (admins.id, "person/update")
        assert alices.message["id"] == message["id"]  # one change, one message id
        assert alices.message["data"] == {"id": ids["alice"], "version": answered["version"]}  # her fields
        assert streams["bob"].quiet_for(1.5) is None  # not his record: nothing at all
    finally:
        for stream in streams.values():
            stream.close()


def test_a_client_back_with_last_event_id_gets_exactly_what_it_missed(daemon, tokens, ids):
    with EventStream(daemon.port, tokens["admin"]) as first:
        change_email(daemon, tokens, ids["bob"], "bob.1@example.com")
        seen = first.next(timeout=2)
    missed = [change_email(daemon, tokens, ids["bob"], f"bob.{n}@example.com")["version"] for n in (2, 3)]
    with EventStream(daemon.port, tokens["admin"], headers={"Last-Event-ID": seen.id}) as back:
        replayed = [back.next(timeout=2), back.next(timeout=2)]
        assert [event.message["data"]["version"] for event in replayed] == missed
        assert [int(event.id) for event in replayed] == sorted(int(event.id) for event in replayed)
        assert int(replayed[0].id) > int(seen.id)
        live = change_email(daemon, tokens, ids["bob"], "bob.4@example.com")["version"]
        assert back.next(timeout=2).message["data"]["version"] == live  # then live, nothing twice
        assert back.quiet_for(0.5) is None


def test_services_narrow_the_stream(daemon, tokens, ids):
    with (
        EventStream(daemon.port, tokens["admin"], "/events?services=team") as teams,
        EventStream(daemon.port, tokens["admin"], "/events?services=person/update") as updates,
    ):
        change_email(daemon, tokens, ids["bob"], "bob.narrow@example.com")
        assert updates.next(timeout=2).event == "person/update"
        assert teams.quiet_for(1) is None


@pytest.mark.parametrize(
    "path, headers, detail",
    [
        ("/events?services=persn", {}, "persn"),
        ("/events?services=person/show", {}, "person/show"),  # a read: never an event
        ("/events?services=", {}, "none"),
        ("/events", {"Last-Event-ID": "twelve"}, "Last-Event-ID"),
        ("/events?lastEventId=-1", {}, "Last-Event-ID"),
        ("/events?lastEventId=%C2%B2", {}, "Last-Event-ID"),  # "²": a digit to str.isdigit, not to int
        ("/events?lastEventId=%D9%A1%D9%A2", {}, "Last-Event-ID"),  # Arabic-Indic digits
        ("/events?lastEventId=99999999999999999999", {}, "Last-Event-ID"),  # past a position's 64 bits
        ("/events?lastEventId=1&lastEventId=2", {}, "more than once"),
        ("/events?services=%FF", {}, "UTF-8"),
    ],
)
def test_what_a_stream_cannot_be_is_a_400(daemon, tokens, path, headers, detail):
    with EventStream(daemon.port, tokens["admin"], path, headers) as refused:
        assert refused.status == 400
        problem = json.loads(refused.body)
        assert problem["status"] == 400 and detail in problem["detail"]


def test_no_token_is_a_401(daemon):
    with EventStream(daemon.port) as refused:
        assert refused.status == 401


def test_a_ticket_opens_one_stream_once(daemon, tokens, ids):
    issued = daemon.request("POST", "/events/ticket", token=tokens["admin"])
    assert issued.status == 201 and issued.json["expiresIn"] == 30
    ticket = issued.json["ticket"]
    with EventStream(daemon.port, path=f"/events?ticket={ticket}") as opened:
        assert opened.status == 200
        change_email(daemon, tokens, ids["bob"], "bob.ticket@example.com")
        assert opened.next(timeout=2).event == "person/update"
    with EventStream(daemon.port, path=f"/events?ticket={ticket}") as again:
        assert again.status == 401  # single use
    with EventStream(daemon.port, path="/events?ticket=made-up") as forged:
        assert forged.status == 401


def test_a_logout_ends_the_stream_within_a_second(daemon, tokens):
    token = daemon.login(*BOB[:2])
    with EventStream(daemon.port, token) as stream:
        assert stream.status == 200
        logged_out = daemon.request("POST", "/logout", token=token)
        assert logged_out.status in (200, 204), logged_out.body
        started = time.monotonic()
        end = stream.next(timeout=3)
        assert end.event == "end"
        assert end.message["status"] == 401 and "revoked" in end.message["detail"]
        assert stream.next(timeout=3) is None  # the stream is over
        assert time.monotonic() - started < 1.5


def test_a_disabled_account_s_stream_ends_within_a_second(daemon, tokens, ids):
    carol = ("carol", "carol-password-1", "carol@example.com")
    made = daemon.request(
        "POST",
        "/v0.1/person/create",
        {"username": carol[0], "password": carol[1], "email": carol[2]},
        token=tokens["admin"],
    )
    assert made.status == 200, made.body
    with EventStream(daemon.port, daemon.login(*carol[:2])) as stream:
        assert stream.status == 200
        disabled = daemon.request(
            "PUT", f"/v0.1/person/update/{made.json['id']}", {"enabled": False, "version": 0}, token=tokens["admin"]
        )
        assert disabled.status == 200, disabled.body
        started = time.monotonic()
        end = stream.next(timeout=3)
        if end.event == "person/update":  # her own record's change, if it went out before the check
            assert end.message["data"]["id"] == made.json["id"]
            end = stream.next(timeout=3)
        assert end.event == "end" and end.message["status"] in (401, 403), end.message
        assert stream.next(timeout=3) is None
        assert time.monotonic() - started < 1.5


@pytest.fixture(scope="module")
def bounded(tmp_path_factory):
    """A daemon of one process whose streams are capped, and whose quiet streams get a
    heartbeat every half second (as often as the standing check runs)."""
    made = deployment_with_accounts(
        tmp_path_factory.mktemp("bounded"),
        server={"events": {"perCaller": 1, "total": 2, "heartbeat": 0.5}},
    )
    with running_daemon(made) as running:
        yield running


def test_streams_past_the_caps_are_refused(bounded):
    admin, alice = bounded.login(*ADMIN[:2]), bounded.login(*USER[:2])
    with EventStream(bounded.port, admin) as first:
        assert first.status == 200
        with EventStream(bounded.port, admin) as second:
            assert second.status == 429
            assert "1 event streams per caller" in json.loads(second.body)["detail"]
        with EventStream(bounded.port, alice) as other:
            assert other.status == 200
            with EventStream(bounded.port, bounded.login(*ADMIN[:2])) as third:
                assert third.status == 429  # the same account, another login
            with EventStream(bounded.port, bounded.login(*USER[:2])) as fourth:
                assert fourth.status == 429
    with EventStream(bounded.port, admin) as again:  # a closed stream frees its place
        assert again.status == 200


def test_a_client_back_after_what_it_missed_is_gone_is_told_to_reset(tmp_path):
    """The log keeps two changes here; it is swept when a daemon starts and once a minute."""
    deployment = deployment_with_accounts(tmp_path, server={"events": {"retentionCount": 2}})
    daemon = Daemon(deployment).start()
    try:
        admin = daemon.login(*ADMIN[:2])
        people = daemon.request("GET", "/v0.1/person/list", token=admin).json
        alice = next(person for person in people if person["username"] == USER[0])
        update = f"/v0.1/person/update/{alice['id']}"
        with EventStream(daemon.port, admin) as first:
            daemon.request("PUT", update, {"email": "a0@example.com", "version": 0}, token=admin)
            seen = first.next(timeout=2)
        for version in range(1, 5):  # four more changes: past what the log keeps
            daemon.request("PUT", update, {"email": f"a{version}@example.com", "version": version}, token=admin)
        daemon.stop()
        daemon = Daemon(deployment).start()  # its sweep at start
        with EventStream(daemon.port, daemon.login(*ADMIN[:2]), headers={"Last-Event-ID": seen.id}) as back:
            reset = back.next(timeout=2)
            assert (reset.event, reset.data) == ("reset", "{}")
            assert back.next(timeout=2) is None
    finally:
        daemon.stop()


def test_streams_end_when_the_daemon_stops(tmp_path):
    deployment = deployment_with_accounts(tmp_path)
    with running_daemon(deployment) as daemon, EventStream(daemon.port, daemon.login(*ADMIN[:2])) as stream:
        assert stream.status == 200
        started = time.monotonic()
        daemon.stop()
        assert stream.next(timeout=5) is None
        assert time.monotonic() - started < 5


def test_a_revoked_api_key_s_stream_ends_within_a_second(daemon, tokens):
    body = {"name": "dashboard", "roles": ["ROLE_ADMIN"], "currentPassword": ADMIN[1]}
    created = daemon.request("POST", "/v0.1/apikey/create", body, token=tokens["admin"])
    assert created.status == 200, created.body
    with EventStream(daemon.port, created.json["key"]) as stream:
        assert stream.status == 200
        revoked = daemon.request("PUT", f"/v0.1/apikey/revoke/{created.json['id']}", token=tokens["admin"])
        assert revoked.status == 200, revoked.body
        started = time.monotonic()
        end = stream.next(timeout=3)
        assert end.event == "end" and end.message["status"] == 401, end.message
        assert stream.next(timeout=3) is None
        assert time.monotonic() - started < 1.5


def test_a_demoted_administrator_s_stream_narrows_within_a_second(daemon, tokens, ids):
    dana = ("dana", "dana-password-1", "dana@example.com")
    made = daemon.request(
        "POST",
        "/v0.1/person/create",
        {"username": dana[0], "password": dana[1], "email": dana[2], "roles": ["ROLE_ADMIN"]},
        token=tokens["admin"],
    )
    assert made.status == 200, made.body
    with EventStream(daemon.port, daemon.login(*dana[:2]), "/events?services=person/update") as stream:
        change_email(daemon, tokens, ids["bob"], "bob.before@example.com")
        assert stream.next(timeout=2).message["data"]["id"] == ids["bob"]  # an administrator hears of bob's record
        demoted = daemon.request(
            "PUT",
            f"/v0.1/person/update/{made.json['id']}",
            {"roles": ["ROLE_USER"], "version": 0},
            token=tokens["admin"],
        )
        assert demoted.status == 200, demoted.body
        time.sleep(1.5)  # the check, and a margin; her own record's change may have gone out before it
        while (told := stream.quiet_for(0.1)) is not None:
            assert told.message["data"]["id"] == made.json["id"]
        change_email(daemon, tokens, ids["bob"], "bob.after@example.com")
        assert stream.quiet_for(1.5) is None  # a user now: bob's record is not hers to hear of
        assert stream.status == 200 and not stream.ended.is_set()  # narrowed, not ended


def test_a_quiet_stream_gets_heartbeats(bounded):
    with EventStream(bounded.port, bounded.login(*ADMIN[:2])) as stream:
        assert stream.status == 200
        time.sleep(3.2)
        assert stream.comments >= 2
        assert stream.quiet_for(0.1) is None  # comments only: no event
