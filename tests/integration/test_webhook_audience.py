"""Every copy of a record passes the action's own per-record check (issue 33, item 5), through
the real daemon and a third-party plugin: room bookings, each with its booker's private note
(tests/bookings_plugin, on the daemon's PYTHONPATH beside the metadata pip would write; the
shared virtualenv stays untouched). Its IO State lets users subscribe to `bookings/create`.

- The plugin declares who may see a booking (`@action(may_see=...)`): bob's hook receives his
  own bookings and never alice's, whose `bookings/show` answers him 403; the administrator's
  hook receives both.
- The same plugin without the declaration (written for an apid that had none) stops the daemon
  at start, naming file, action and role; so does an operator's user role in the HOOK of the
  sample team plugin's `create`, which declares nothing either.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from harness import ADMIN_ACCOUNT, USER_ACCOUNT, Daemon, V, deployment_with_accounts, wait_for
from receiver import Receiver

PLUGIN = Path(__file__).resolve().parents[1] / "bookings_plugin"
BOB = ("bob", "bob-password-1", "bob@example.com")
SETTINGS = {"timeout": 1, "lease": 3, "poll": 0.2, "retryBase": 0.1, "retryFactor": 2, "retryMax": 0.4}


def with_plugin(site: Path, controller: str) -> dict:
    """The daemon's environment with the bookings plugin "installed" as `controller`."""
    info = site / "apid_bookings-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: apid-bookings\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[apid.controllers]\nbookings = apid_bookings:{controller}\n")
    return {"PYTHONPATH": os.pathsep.join(filter(None, [str(site), str(PLUGIN), os.environ.get("PYTHONPATH")]))}


@pytest.fixture(scope="module")
def deployment(tmp_path_factory, receiver):
    return deployment_with_accounts(
        tmp_path_factory.mktemp("audience"),
        server={"webhookActive": True, "webhooks": SETTINGS},
        api={"cors": {"allowedOrigins": [receiver.origin]}},
        accounts=(ADMIN_ACCOUNT, USER_ACCOUNT, (*BOB, "ROLE_USER")),
    )


@pytest.fixture(scope="module")
def daemon_options(tmp_path_factory) -> dict:
    return {"env": with_plugin(tmp_path_factory.mktemp("site"), "Bookings")}


def subscribe(daemon, token: str, url: str) -> int:
    reply = daemon.request("POST", f"{V}/hook/create", {"url": url, "service": "bookings"}, token=token)
    assert reply.status == 200, reply.body
    return reply.json["id"]


def book(daemon, token: str, room: str, note: str) -> dict:
    reply = daemon.request("POST", f"{V}/bookings/create", {"room": room, "note": note}, token=token)
    assert reply.status == 200, reply.body
    return reply.json


def arrived(receiver: Receiver, path: str, count: int) -> list[dict]:
    """The events posted to `path`, once `count` have arrived (or 15 s passed)."""
    wait_for(lambda: len([r for r in receiver.received if r.path == path]) >= count, timeout=15)
    return [r.json for r in receiver.received if r.path == path]


def test_a_users_hook_receives_their_own_bookings_and_never_anothers(
    daemon, admin_token, user_token, receiver, database
):
    bob_token = daemon.login(*BOB[:2])
    bob_hook = subscribe(daemon, bob_token, receiver.origin + "/bob")
    admin_hook = subscribe(daemon, admin_token, receiver.origin + "/admin")

    alices = book(daemon, user_token, "Blue", "alice: the dentist at 3")
    assert daemon.request("GET", f"{V}/bookings/show/{alices['id']}", token=bob_token).status == 403
    bobs = book(daemon, bob_token, "Red", "bob: interview")

    # the events were written before each call answered: what is stored is all there will be
    stored = database.execute("select hook_id, payload from hook_message where type = 'bookings/create'").fetchall()
    assert sorted((hook_id, json.loads(payload)["data"]["id"]) for hook_id, payload in stored) == sorted(
        [(admin_hook, alices["id"]), (admin_hook, bobs["id"]), (bob_hook, bobs["id"])]
    )
    [for_bob] = arrived(receiver, "/bob", 1)
    assert (for_bob["type"], for_bob["data"]) == ("bookings/create", bobs)
    for_admin = arrived(receiver, "/admin", 2)
    assert sorted(event["data"]["note"] for event in for_admin) == [alices["note"], bobs["note"]]
    assert arrived(receiver, "/bob", 2) == [for_bob]  # alice's note never reached bob


def test_the_plugin_without_the_declaration_stops_the_daemon_naming_file_action_and_role(tmp_path):
    deployment = deployment_with_accounts(tmp_path / "deployment", server={"webhookActive": True}, accounts=())
    daemon = Daemon(deployment, env=with_plugin(tmp_path / "site", "UndeclaredBookings"))
    with pytest.raises(RuntimeError, match="apid did not become ready"):
        daemon.start()
    assert (
        "apid_bookings:iostate/bookings.json: controller bookings, version 1, action create, ROLES.HOOK: "
        "role 'ROLE_USER' is refused: the controller of bookings (distribution apid-bookings) declares neither"
    ) in daemon.stderr


def test_a_user_role_in_hook_of_an_action_declaring_nothing_stops_the_daemon(tmp_path):
    """The operator's one-line change, on the sample team plugin: team/create declares nothing."""
    deployment = deployment_with_accounts(tmp_path, accounts=())
    team_file = deployment.root / "iostate" / "team.json"
    team = json.loads((Path(__file__).resolve().parents[1] / "sample_plugin/apid_sample/iostate/team.json").read_text())
    team["VERSION"]["1"]["URI"]["create"]["ROLES"] = {"DEFAULT": ["ROLE_ADMIN", "ROLE_USER"], "HOOK": ["ROLE_USER"]}
    team_file.write_text(json.dumps(team))
    daemon = Daemon(deployment)
    with pytest.raises(RuntimeError, match="apid did not become ready"):
        daemon.start()
    assert f"{team_file}: controller team, version 1, action create, ROLES.HOOK: role 'ROLE_USER' is refused" in (
        daemon.stderr
    )
