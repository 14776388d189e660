"""Answers of GET calls on real daemons: ETag and 304 everywhere; actions declaring CACHE answer
from the cache until it expires or a writing call of their controller succeeds, on this daemon
or, through the change counters, on another one sharing the database (SQLite, SQLite with
Redis, PostgreSQL)."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
from sqlalchemy import create_engine, update

from apid.calls.caching import CHECK_SECONDS
from apid.store.tables import person
from harness import (
    ADMIN,
    USER,
    Daemon,
    Deployment,
    V,
    create_team,
    deployment_with_accounts,
    new_person,
    running_daemon,
    wait_for,
)
from redis_server import running_redis

TEAM_FILE = Path(__file__).resolve().parents[1] / "sample_plugin" / "apid_sample" / "iostate" / "team.json"


def declare_cache(deployment: Deployment, source: Path, action: str, cache: dict) -> None:
    """Put CACHE on `action` in the deployment's own copy of the IO State file `source`."""
    document = json.loads(source.read_text())
    rules = document.get("IOSTATE", document)
    rules["VERSION"]["1"]["URI"][action]["CACHE"] = cache
    (deployment.root / "iostate" / source.name).write_text(json.dumps(document))


def caching_deployment(root: Path, server: dict | None = None, api: dict | None = None) -> Deployment:
    deployment = deployment_with_accounts(root, server=server, api=api)
    declare_cache(deployment, TEAM_FILE, "show", {"maxAge": 60})
    declare_cache(deployment, deployment.root / "iostate" / "person.json", "show", {"maxAge": 60})
    return deployment


# --- every GET answer: ETag, 304 ------------------------------------------------------------------


def test_a_get_answer_has_an_etag_and_answers_304_to_a_client_holding_it(daemon, admin_token):
    someone = new_person(daemon, admin_token)
    token = daemon.login(someone["username"], someone["password"])
    path = f"{V}/person/show/{someone['id']}"
    first = daemon.request("GET", path, token=token)
    assert first.status == 200
    tag = first.headers["ETag"]
    assert tag.startswith('"') and tag.endswith('"')
    assert first.headers["Cache-Control"] == "no-store"

    again = daemon.request("GET", path, token=token, headers={"If-None-Match": tag})
    assert (again.status, again.body, again.headers["ETag"]) == (304, b"", tag)
    assert again.headers["Cache-Control"] == "no-store"

    # the administrator sees more fields of the same person: another answer, another tag
    admin = daemon.request("GET", path, token=admin_token, headers={"If-None-Match": tag})
    assert admin.status == 200 and admin.headers["ETag"] != tag and "roles" in admin.json

    changed = daemon.request(
        "PUT",
        f"{V}/person/update/{someone['id']}",
        {"email": "changed@example.com", "version": first.json["version"]},
        token=admin_token,
    )
    assert changed.status == 200, changed.body
    after = daemon.request("GET", path, token=token, headers={"If-None-Match": tag})
    assert after.status == 200 and after.json["email"] == "changed@example.com"
    assert after.headers["ETag"] != tag


def test_an_etag_tells_nothing_of_a_record_the_caller_may_not_read(daemon, admin_token):
    """No oracle: another user holding the owner's tag gets the 403 of any other record, not a 304."""
    owner, other = new_person(daemon, admin_token), new_person(daemon, admin_token)
    path = f"{V}/person/show/{owner['id']}"
    tag = daemon.request("GET", path, token=daemon.login(owner["username"], owner["password"])).headers["ETag"]
    guessing = daemon.request(
        "GET", path, token=daemon.login(other["username"], other["password"]), headers={"If-None-Match": tag}
    )
    assert guessing.status == 403 and "ETag" not in guessing.headers


def test_a_writing_call_and_an_error_are_not_cacheable(daemon, admin_token):
    created = daemon.request(
        "POST",
        f"{V}/person/create",
        {"username": "etagless", "password": "etagless-password-1", "email": "etagless@example.com"},
        token=admin_token,
    )
    assert created.status == 200 and "ETag" not in created.headers
    assert created.headers["Cache-Control"] == "no-store"
    missing = daemon.request("GET", f"{V}/person/show/999999", token=admin_token)
    assert missing.status == 404 and "ETag" not in missing.headers
    assert missing.headers["Cache-Control"] == "no-store"


# --- one daemon: a cached action ------------------------------------------------------------------


def test_a_cached_action_answers_from_the_cache_until_its_controller_changes(tmp_path):
    with running_daemon(caching_deployment(tmp_path)) as daemon:
        admin, user = daemon.login(*ADMIN[:2]), daemon.login(*USER[:2])
        leader = daemon.request("GET", f"{V}/person/list", token=admin).json[0]["id"]
        team = create_team(daemon, admin, "Blue", leader, 10.0)
        path = f"{V}/team/show/{team['id']}"

        def shown() -> int:  # how many times the sample controller's show ran
            return daemon.request("GET", "/teamShows", token=admin).json["shown"]

        first = daemon.request("GET", path, token=user)
        assert first.status == 200 and first.json == {"id": team["id"], "name": "Blue", "leaderId": leader}
        assert first.headers["Cache-Control"] == "private, max-age=60"
        assert shown() == 1
        second = daemon.request("GET", path, token=user)
        assert (second.body, second.headers["ETag"]) == (first.body, first.headers["ETag"])
        assert shown() == 1  # from the cache: the action did not run
        held = daemon.request("GET", path, token=user, headers={"If-None-Match": first.headers["ETag"]})
        assert held.status == 304 and shown() == 1

        # a caller whose roles see other fields never gets that answer
        as_admin = daemon.request("GET", path, token=admin)
        assert as_admin.json["budget"] == 10.0 and shown() == 2
        assert "budget" not in daemon.request("GET", path, token=user).json and shown() == 2

        # a writing call of the controller drops its cached answers
        create_team(daemon, admin, "Green", leader, 5.0)
        assert daemon.request("GET", path, token=user).body == first.body
        assert shown() == 3


def test_after_a_write_is_answered_no_worker_of_the_daemon_serves_the_old_answer(tmp_path):
    """Each read on a connection of its own, which the kernel gives to either worker: both
    hold the record's answer, read their change counters less than a second ago, and still
    none answers the old email once the update has answered."""
    with running_daemon(caching_deployment(tmp_path, api={"procCores": 2})) as daemon:
        assert len(daemon.workers()) == 2
        admin = daemon.login(*ADMIN[:2])
        someone = new_person(daemon, admin)
        token = daemon.login(someone["username"], someone["password"])
        path = f"{V}/person/show/{someone['id']}"
        for round in range(3):
            before = [daemon.request("GET", path, token=token) for _ in range(20)]
            assert {(reply.status, reply.headers["Cache-Control"]) for reply in before} == {
                (200, "private, max-age=60")
            }
            assert len({reply.body for reply in before}) == 1
            email = f"round{round}@example.com"
            updated = daemon.request(
                "PUT",
                f"{V}/person/update/{someone['id']}",
                {"email": email, "version": before[0].json["version"]},
                token=admin,
            )
            assert updated.status == 200, updated.body
            after = [daemon.request("GET", path, token=token).json["email"] for _ in range(20)]
            assert after == [email] * 20


# --- a shared cache only where the action's answer is the same for every caller -------------------


def test_a_shared_cache_on_an_action_that_checks_its_caller_stops_the_daemon_naming_where(tmp_path):
    deployment = deployment_with_accounts(tmp_path, accounts=())
    person_file = deployment.root / "iostate" / "person.json"
    declare_cache(deployment, person_file, "show", {"maxAge": 60, "shared": True})
    daemon = Daemon(deployment)
    with pytest.raises(RuntimeError, match="did not become ready"):
        daemon.start()
    assert (
        f'{person_file}: controller person, version 1, action show, CACHE: "shared": true is refused: '
        "the controller of person (distribution apid) does not declare show caller-independent"
    ) in daemon.stderr


def test_two_users_of_one_role_never_read_each_others_record_through_the_cache(tmp_path):
    """carol's cached record is never bob's answer: person/show (own record only) may cache per
    caller alone, a reload asking to share it is refused, and team/show, declared
    caller-independent by its plugin, shares its answers."""
    deployment = caching_deployment(tmp_path)
    declare_cache(deployment, TEAM_FILE, "show", {"maxAge": 60, "shared": True})
    with running_daemon(deployment) as daemon:
        admin = daemon.login(*ADMIN[:2])
        carol, bob = new_person(daemon, admin), new_person(daemon, admin)
        tokens = {person["id"]: daemon.login(person["username"], person["password"]) for person in (carol, bob)}

        def read(reader: dict, owner: dict):
            return daemon.request("GET", f"{V}/person/show/{owner['id']}", token=tokens[reader["id"]])

        def cross_reads_refused() -> None:
            for reader, owner in ((carol, carol), (bob, carol), (bob, bob), (carol, bob)):
                reply = read(reader, owner)  # the owner's answer is cached first, then the other asks
                if reader is owner:
                    assert reply.status == 200 and reply.json["id"] == owner["id"], reply.body
                    assert reply.headers["Cache-Control"] == "private, max-age=60"
                else:
                    assert reply.status == 403, reply.body
                    assert owner["username"] not in reply.body.decode()

        cross_reads_refused()
        declare_cache(deployment, deployment.root / "iostate" / "person.json", "show", {"maxAge": 60, "shared": True})
        daemon.process.send_signal(signal.SIGHUP)
        assert wait_for(lambda: "IO State reload refused" in daemon.stderr)
        assert 'action show, CACHE: "shared": true is refused' in daemon.stderr
        cross_reads_refused()

        leader = carol["id"]
        team = create_team(daemon, admin, "Shared", leader, 1.0)

        def shown() -> int:
            return daemon.request("GET", "/teamShows", token=admin).json["shown"]

        before = shown()
        as_carol = daemon.request("GET", f"{V}/team/show/{team['id']}", token=tokens[carol["id"]])
        as_bob = daemon.request("GET", f"{V}/team/show/{team['id']}", token=tokens[bob["id"]])
        assert as_carol.status == as_bob.status == 200
        assert as_bob.body == as_carol.body and as_bob.json == {"id": team["id"], "name": "Shared", "leaderId": leader}
        assert shown() == before + 1  # bob's answer came from carol's call


# --- two daemons on one database ------------------------------------------------------------------


def change_around_the_api(url: str, person_id: int, email: str) -> None:
    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            connection.execute(update(person).where(person.c.id == person_id).values(email=email))
    finally:
        engine.dispose()


def a_write_on_one_daemon_drops_the_others_cached_answer(deployment: Deployment, database_url: str) -> None:
    with running_daemon(deployment) as one, running_daemon(deployment) as two:
        admin = one.login(*ADMIN[:2])
        someone = new_person(one, admin)
        token = two.login(someone["username"], someone["password"])
        path = f"{V}/person/show/{someone['id']}"
        before = two.request("GET", path, token=token)
        assert before.status == 200 and before.headers["Cache-Control"] == "private, max-age=60"

        # cached: a change made around the API is not seen by the daemon holding the answer
        change_around_the_api(database_url, someone["id"], "around@example.com")
        assert two.request("GET", path, token=token).json == before.json
        assert one.request("GET", path, token=token).json["email"] == "around@example.com"

        updated = one.request(
            "PUT",
            f"{V}/person/update/{someone['id']}",
            {"email": "updated@example.com", "version": before.json["version"]},
            token=admin,
        )
        assert updated.status == 200, updated.body
        # the other daemon reads the change counters at most CHECK_SECONDS before answering from its cache
        time.sleep(CHECK_SECONDS)
        after = two.request("GET", path, token=token)
        assert after.json["email"] == "updated@example.com"
        assert after.json["version"] == before.json["version"] + 1


def test_two_daemons_on_one_sqlite_file(tmp_path):
    deployment = caching_deployment(tmp_path)
    a_write_on_one_daemon_drops_the_others_cached_answer(deployment, f"sqlite:///{tmp_path / 'var' / 'test.db'}")


def test_two_daemons_on_one_sqlite_file_and_redis(tmp_path):
    with running_redis() as redis:
        deployment = caching_deployment(tmp_path, server={"redis": {"url": redis.url}})
        a_write_on_one_daemon_drops_the_others_cached_answer(deployment, f"sqlite:///{tmp_path / 'var' / 'test.db'}")


@pytest.mark.postgresql
def test_two_daemons_on_one_postgresql(tmp_path, postgres):
    deployment = caching_deployment(tmp_path, server={"database": {"url": postgres.url}})
    a_write_on_one_daemon_drops_the_others_cached_answer(deployment, postgres.url)
