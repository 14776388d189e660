"""Mail follows its change (issue 33 item 4), against the real daemon.

The reproduction: a client that resets the connection while its own e-mail change runs. The
change committed in the database's thread pool; the notice to the old address, sent after the
`await`, never was (2 silent changes in 50 tries). Now every mail is written in the change's
transaction and sent from the durable outbox, so whatever the moment of the hang-up, each
committed change has its notice; and a daemon SIGKILLed with mail still waiting sends it once
it is back.
"""

from __future__ import annotations

import json
import re
import socket
import sqlite3
import struct
import time
import uuid

import pytest

from harness import Daemon, V, deployment_with_accounts, free_port, running_daemon, wait_for
from outbox import Outbox, link_at

BASE_URL = "https://api.example.test"
LOOSE_LOGINS = {"perAccountAddress": 1000, "perAccount": 1000, "perAddress": 1000, "window": 900}
TRIES = 30
CHANGED = re.compile(r"was changed from this address to (\S+)\.")


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    # a hang-up during the password check leaves its guess counted: the limits must not end the test
    return deployment_with_accounts(
        tmp_path_factory.mktemp("mail-outbox"),
        server={"baseUrl": BASE_URL},
        api={"abuseLimits": {"login": LOOSE_LOGINS}},
    )


def hang_up_during(daemon: Daemon, method: str, path: str, fields: dict, token: str, after: float) -> None:
    """Send the request, wait `after` seconds, and reset the connection (RST, not FIN)."""
    body = json.dumps(fields).encode()
    head = (
        f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    client = socket.create_connection(("127.0.0.1", daemon.port))
    client.sendall(head + body)
    time.sleep(after)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.close()


def address_of(daemon: Daemon, admin_token: str, person_id: int) -> str:
    reply = daemon.request("GET", f"{V}/person/show/{person_id}", token=admin_token)
    assert reply.status == 200, reply.body
    return reply.json["email"]


def settled(read, quiet: float = 1.0):
    """What `read` answers once it stopped changing for `quiet` seconds: the writes of the
    requests hung up on may still be running in the daemon."""
    last = read()
    while True:
        time.sleep(quiet)
        now = read()
        if now == last:
            return now
        last = now


def revert_ids(deployment, person_id: int) -> int:
    """The revert ids issued for the account: one per committed change of its address, written
    in the change's own transaction."""
    with sqlite3.connect(deployment.root / "var" / "test.db") as database:
        (count,) = database.execute(
            "select count(*) from account_token where person_id = ? and purpose = 'email-revert'", (person_id,)
        ).fetchone()
    return count


def new_owner(daemon: Daemon, admin_token: str) -> tuple[int, str, str, str]:
    """A fresh account: its id, password, address and a token of its own."""
    name, password = f"hang-{uuid.uuid4().hex[:8]}", f"pw-{uuid.uuid4().hex}"
    address = f"{name}@example.org"
    created = daemon.request(
        "POST", f"{V}/person/create", {"username": name, "password": password, "email": address}, token=admin_token
    )
    assert created.status == 200, created.body
    return created.json["id"], password, address, daemon.login(name, password)


def test_a_hang_up_while_the_change_is_being_written_still_mails_the_old_address(daemon, deployment, admin_token):
    """The reproduction, made certain: the test holds SQLite's write lock, so the change waits
    in the database thread; the client resets the connection there; the lock goes, the change
    commits. The old address is told all the same."""
    person_id, password, old, token = new_owner(daemon, admin_token)
    outbox = Outbox(deployment)
    new = f"moved-{old}"
    locker = sqlite3.connect(deployment.root / "var" / "test.db", isolation_level=None)
    try:
        locker.execute("BEGIN IMMEDIATE")
        fields = {"email": new, "currentPassword": password}
        hang_up_during(daemon, "PUT", f"{V}/person/update/{person_id}", fields, token, after=3.0)
        time.sleep(0.5)  # the daemon reads the reset and cancels the call, its write still waiting
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    assert wait_for(lambda: address_of(daemon, admin_token, person_id) == new), "the change did not commit"
    (notice,) = outbox.wait(old)
    assert CHANGED.findall(notice.get_content()) == [new]
    link_at(notice, BASE_URL)
    assert outbox.to(new) == []


def test_a_client_hanging_up_during_its_own_email_change_never_loses_the_notice(daemon, deployment, admin_token):
    """The same, 30 times at moments spread over the change's run: every change that
    commits has its notice."""
    person_id, password, original, token = new_owner(daemon, admin_token)
    path = f"{V}/person/update/{person_id}"
    outbox = Outbox(deployment)
    # how long a change takes here, so that the hang-ups fall before, during and after its write
    started = time.monotonic()
    whole = daemon.request("PUT", path, {"email": f"timed-{original}", "currentPassword": password}, token=token)
    assert whole.status == 200, whole.body
    took = time.monotonic() - started

    for attempt in range(TRIES):
        after = took * (0.4 + 1.6 * attempt / TRIES)  # load moves the moment: spread past the whole
        fields = {"email": f"h{attempt}-{original}", "currentPassword": password}
        hang_up_during(daemon, "PUT", path, fields, token, after)

    # every change that committed (one revert id each) has its notice, and they chain from the
    # first address to the one the account has now
    final = settled(lambda: address_of(daemon, admin_token, person_id))
    committed = revert_ids(deployment, person_id)
    assert committed >= 2, "no hang-up came after a change committed: the test proved nothing"
    assert wait_for(lambda: len(outbox.new()) >= committed, timeout=30), (committed, len(outbox.new()))
    moves = {}
    for notice in outbox.new():
        (new,) = CHANGED.findall(notice.get_content())
        moves[str(notice["To"])] = new
        link_at(notice, BASE_URL)  # each carries its way back
    assert len(moves) == committed == len(outbox.new())
    here = original
    while here in moves:
        here = moves[here]
    assert here == final, (moves, final)


def test_mail_queued_by_a_daemon_killed_with_sigkill_is_sent_after_the_restart(tmp_path):
    """The first daemon's SMTP server is down: the validation mail waits in the outbox table
    when the daemon is killed. Restarted (mailing to files now), the daemon sends it."""
    deployment = deployment_with_accounts(
        tmp_path,
        server={"baseUrl": BASE_URL, "mail": {"backend": "smtp", "smtp": {"host": "127.0.0.1", "port": free_port()}}},
    )
    first = Daemon(deployment).start()
    try:
        reply = first.request(
            "POST", "/register", {"username": "kim", "password": "kim-password", "email": "kim@x.test"}
        )
        assert reply.status == 200, reply.body
        assert wait_for(lambda: "sending mail ('apid: confirm your account') failed, attempt 1" in first.stderr, 20)
    finally:
        first.process.kill()
        first.process.wait()
    with sqlite3.connect(deployment.root / "var" / "test.db") as database:
        assert database.execute("select recipient from mail_outbox").fetchall() == [("kim@x.test",)]

    deployment.server["mail"] = {"backend": "file"}
    deployment.write()
    outbox = Outbox(deployment)
    with running_daemon(deployment) as second:
        (validation,) = outbox.wait("kim@x.test", timeout=30)
        assert second.request("GET", link_at(validation, BASE_URL)).status == 302
        assert second.login("kim", "kim-password")
        assert wait_for(lambda: _waiting(deployment) == 0)
    assert "Traceback" not in second.stderr, second.stderr


def _waiting(deployment) -> int:
    with sqlite3.connect(deployment.root / "var" / "test.db") as database:
        return database.execute("select count(*) from mail_outbox").fetchone()[0]
