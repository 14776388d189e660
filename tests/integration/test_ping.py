"""pingServers against real local peers that misbehave in every way the issue lists.

The pinging daemon's peers: a real apid daemon (up), a port nothing listens on, a server that
accepts and never answers, one that answers after 6 s, one that answers 500, one that answers
garbage, one that sends its headers and then stalls the body. Each peer has a 1 s timeout; the
slow peer would take 6 s, so an answer within 2.5 s proves the bound without a tight timing.
"""

from __future__ import annotations

import socketserver
import threading
import time

import pytest

from harness import ADMIN, USER, V, deployment_with_accounts, free_port, running_daemon

TIMEOUT = 1.0
SLOW = 6.0


class Misbehaving(socketserver.BaseRequestHandler):
    """What the peer does after accepting, chosen by the server's `behaviour`."""

    def handle(self) -> None:
        self.request.recv(65536)
        behaviour = self.server.behaviour
        if behaviour == "silent":
            self.server.stopping.wait(SLOW * 2)
        elif behaviour == "slow":
            self.server.stopping.wait(SLOW)
            self._answer(200, b'{"status": "pass"}')
        elif behaviour == "error":
            self._answer(500, b'{"status": "fail"}')
        elif behaviour == "garbage":
            self.request.sendall(b"\x00\x01 this is no HTTP \r\n\r\n")
        elif behaviour == "stalled-body":
            self.request.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
            self.server.stopping.wait(SLOW * 2)

    def _answer(self, status: int, body: bytes) -> None:
        self.request.sendall(
            b"HTTP/1.1 %d X\r\nContent-Length: %d\r\nContent-Type: application/json\r\n\r\n%s"
            % (status, len(body), body)
        )


class Peer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, behaviour: str) -> None:
        super().__init__(("127.0.0.1", 0), Misbehaving)
        self.behaviour = behaviour
        self.stopping = threading.Event()
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def stop(self) -> None:
        self.stopping.set()
        self.shutdown()
        self.server_close()


@pytest.fixture(scope="module")
def peers(daemon):
    servers = {name: Peer(name) for name in ("silent", "slow", "error", "garbage", "stalled-body")}
    urls = {name: server.url for name, server in servers.items()}
    urls["up"] = f"http://127.0.0.1:{daemon.port}"
    urls["refused"] = f"http://127.0.0.1:{free_port()}"
    yield urls
    for server in servers.values():
        server.stop()


@pytest.fixture(scope="module")
def pinging(tmp_path_factory, peers):
    servers = [{"url": url, "timeout": TIMEOUT} for url in peers.values()]
    deployment = deployment_with_accounts(tmp_path_factory.mktemp("pinging"), server={"servers": servers})
    with running_daemon(deployment) as daemon:
        yield daemon


def test_ping_reports_every_peer_within_the_largest_timeout(pinging, peers):
    token = pinging.login(*ADMIN[:2])
    started = time.monotonic()
    reply = pinging.request("GET", f"{V}/server/pingServers/", token=token)
    elapsed = time.monotonic() - started
    assert reply.status == 200, reply.body
    assert elapsed < TIMEOUT + 1.5, elapsed  # the slow peer alone would take 6 s
    answer = reply.json
    by_name = {name: next(p for p in answer["peers"] if p["url"] == url) for name, url in peers.items()}
    assert (answer["total"], answer["up"], answer["down"]) == (7, 1, 6)
    assert by_name["up"]["up"] is True and by_name["up"]["status"] == 200 and by_name["up"]["error"] is None
    for name in ("refused", "silent", "slow", "error", "garbage", "stalled-body"):
        assert by_name[name]["up"] is False and by_name[name]["error"], (name, by_name[name])
    assert by_name["error"]["status"] == 500 and "500" in by_name["error"]["error"]
    for name in ("silent", "slow", "stalled-body"):
        assert by_name[name]["error"] == "no answer within 1 s", by_name[name]
        assert by_name[name]["ms"] >= TIMEOUT * 1000 * 0.9
    assert "refused" in by_name["refused"]["error"].lower()
    assert all(isinstance(p["ms"], float) for p in answer["peers"])


def test_ping_without_the_trailing_slash_and_for_admins_only(pinging, daemon):
    token = pinging.login(*ADMIN[:2])
    assert pinging.request("GET", f"{V}/server/pingServers", token=token).status == 200
    user_token = pinging.login(*USER[:2])
    assert pinging.request("GET", f"{V}/server/pingServers", token=user_token).status == 403


def test_a_daemon_with_no_peers_answers_an_empty_list(daemon, admin_token):
    reply = daemon.request("GET", f"{V}/server/pingServers/", token=admin_token)
    assert reply.status == 200
    assert reply.json == {"peers": [], "total": 0, "up": 0, "down": 0}
