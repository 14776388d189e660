"""Drain first (issue 24, item 4): on SIGTERM `/health` answers 503 ("draining") for
`shutdown.healthDrain` seconds while every other call is still served, on new connections and
kept-alive ones; then the port closes, idle keep-alive connections are closed, and a request
still in flight is answered with `Connection: close`. With worker processes the parent keeps
the socket open while every worker fails its /health.
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import time

import pytest

from harness import ADMIN, ADMIN_ACCOUNT, Daemon, V, deployment_with_accounts, listening

HEALTH_DRAIN = 2.0


def draining_daemon(root, **api) -> Daemon:
    deployment = deployment_with_accounts(
        root, server={"shutdown": {"healthDrain": HEALTH_DRAIN}}, api=api, accounts=(ADMIN_ACCOUNT,)
    )
    daemon = Daemon(deployment).start()
    daemon.token = daemon.login(ADMIN[0], ADMIN[1])
    return daemon


def unfinished_request(port: int, token: str) -> tuple[socket.socket, bytes]:
    """A request whose headers are in and whose body is not: in flight. The rest of its body is returned."""
    body = json.dumps({"id": 1}).encode()
    head = (
        f"GET {V}/person/show HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(head + body[:3])
    return sock, body[3:]


@pytest.mark.parametrize("workers", [1, 2])
def test_health_fails_first_while_everything_else_is_served_then_the_port_closes(tmp_path, workers):
    if workers > len(os.sched_getaffinity(0)):
        pytest.skip("worker processes need two CPUs")
    daemon = draining_daemon(tmp_path, procCores=workers)
    try:
        kept = http.client.HTTPConnection("127.0.0.1", daemon.port, timeout=30)  # a balancer's pooled connection
        kept.request("GET", "/health")
        assert kept.getresponse().read() == b'{"status":"pass","version":"0.1"}'
        busy, rest = unfinished_request(daemon.port, daemon.token)
        time.sleep(1.0)  # the headers are read: in flight, even on a loaded machine
        signalled = time.monotonic()
        daemon.process.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        healths = [daemon.request("GET", "/health") for _ in range(6)]  # every worker's
        assert {reply.status for reply in healths} == {503}, [reply.body for reply in healths]
        assert healths[0].json["checks"]["draining"][0]["status"] == "fail"
        shown = daemon.request("GET", f"{V}/person/show/1", token=daemon.token)
        assert shown.status == 200 and shown.json["username"] == ADMIN[0]
        kept.request("GET", f"{V}/person/show/1", headers={"Authorization": f"Bearer {daemon.token}"})
        answer = kept.getresponse()
        assert (answer.status, json.loads(answer.read())["username"]) == (200, ADMIN[0])
        assert time.monotonic() - signalled < HEALTH_DRAIN  # all of that while /health drained

        time.sleep(max(0.0, HEALTH_DRAIN + 0.7 - (time.monotonic() - signalled)))
        assert not listening(daemon.port)  # refused, not left waiting
        assert kept.sock.recv(1) == b""  # the idle kept-alive connection was closed
        busy.sendall(rest)
        reply = http.client.HTTPResponse(busy)
        reply.begin()
        assert (reply.status, reply.getheader("Connection")) == (200, "close")
        assert json.loads(reply.read())["username"] == ADMIN[0]
        busy.close()
        assert daemon.process.wait(30) == 0
    finally:
        daemon.stop()
