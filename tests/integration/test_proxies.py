"""apid with two workers behind a real HAProxy (tests/haproxy.py), the client told by headers
(`option forwardfor`) or by the PROXY protocol (v1 and v2): issue 24, item 1.

Several clients on one machine: each connects to HAProxy from its own loopback address
(127.0.0.0/8), and HAProxy reaches apid from 127.0.0.1, its only trusted proxy. Per-client
limits hold per real client (failed logins, reset requests), the access log names the real
client, a client's own X-Forwarded-For changes nothing, and an untrusted peer's forwarding
headers or PROXY header get it nothing. Also `haproxy:systemd:...`: the PROXY protocol on a
socket systemd passes (here systemd-socket-activate), served by two workers.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from assertions import assert_problem
from haproxy import running_haproxy
from harness import (
    ADMIN,
    Deployment,
    Response,
    deployment_with_accounts,
    free_port,
    listening,
    person_fields,
    running_daemon,
    wait_for,
)

pytestmark = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="worker processes need two CPUs")

PROXY = "127.0.0.1"  # where HAProxy reaches apid from: the one trusted proxy
RESETS = 3  # abuseLimits.reset.perAddress here
PAIR_LIMIT = 5  # abuseLimits.login.perAccountAddress, the default
V1_HEADER = b"PROXY TCP4 203.0.113.9 127.0.0.1 51000 8080\r\n"


def proxied_deployment(root: Path) -> Deployment:
    return deployment_with_accounts(
        root,
        api={"procCores": 2, "abuseLimits": {"reset": {"perAddress": RESETS, "perAccount": 5, "window": 900}}},
        server={"trustedProxies": [PROXY], "accessLog": True, "logFormat": "json"},
    )


def proxy_protocol_python(folder: Path) -> str:
    """An interpreter for harness.Daemon whose `apid serve` reads the PROXY protocol: the
    harness listens on `tcp:0:...`, this puts `haproxy:` before it."""
    script = folder / "python-haproxy"
    script.write_text(
        "#!/bin/sh\n"
        'for arg; do shift; case "$arg" in tcp:0:*) arg="haproxy:$arg";; esac; set -- "$@" "$arg"; done\n'
        f'exec {sys.executable} "$@"\n'
    )
    script.chmod(0o755)
    return str(script)


@pytest.fixture(scope="module", params=["forwardfor", "proxy-v1", "proxy-v2"])
def behind(request, tmp_path_factory):
    """apid (two workers) behind HAProxy sending the client as `request.param` says; the
    daemon, with `.proxy` the running HAProxy."""
    root = tmp_path_factory.mktemp(request.param)
    python = sys.executable if request.param == "forwardfor" else proxy_protocol_python(root)
    with (
        running_daemon(proxied_deployment(root / "deployment"), python=python) as daemon,
        running_haproxy([f"127.0.0.1:{daemon.port}"], send=request.param) as proxy,
    ):
        daemon.proxy = proxy
        daemon.send = request.param
        yield daemon


def through(proxy, method: str, path: str, json_body=None, *, source: str, headers: dict | None = None) -> Response:
    """One request to HAProxy on a new connection from the client at `source`."""
    headers = dict(headers or {})
    body = None
    if json_body is not None:
        body = json.dumps(json_body).encode()
        headers["Content-Type"] = "application/json"
    connection = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30, source_address=(source, 0))
    try:
        connection.request(method, path, body=body, headers=headers)
        reply = connection.getresponse()
        return Response(reply.status, reply.headers, reply.read())
    finally:
        connection.close()


def log_in(proxy, username: str, password: str, source: str, **headers: str) -> Response:
    return through(
        proxy, "POST", "/authenticate", {"username": username, "password": password}, source=source, headers=headers
    )


def new_account(proxy) -> dict:
    """A fresh account, registered as any client would (the admin creates it through the proxy)."""
    token = log_in(proxy, ADMIN[0], ADMIN[1], "127.0.0.20").json["token"]
    fields = person_fields("proxied")
    reply = through(
        proxy, "POST", "/v0.1/person/create", fields, source="127.0.0.20", headers={"Authorization": f"Bearer {token}"}
    )
    assert reply.status == 200, reply.body
    return fields


def access_log(read_log, request_id: str) -> dict:
    """The access log event of the request with `request_id` in the JSON log `read_log()`
    returns (waited for: a worker writes it once the answer is sent)."""

    def found() -> list[dict]:
        events = (json.loads(line) for line in read_log().splitlines() if line.startswith("{"))
        return [event for event in events if event["namespace"] == "apid.access" and event["requestId"] == request_id]

    assert wait_for(lambda: bool(found())), f"no access log event for {request_id}"
    (event,) = found()
    return event


# --- through HAProxy ------------------------------------------------------------------------------------


def test_haproxy_finds_every_worker_up_through_its_health_checks(behind):
    """With the PROXY protocol too: each worker wraps the socket it adopts from the parent."""
    assert behind.proxy.wait_until("UP") == {f"127.0.0.1:{behind.port}": "UP"}
    replies = [through(behind.proxy, "GET", "/health", source="127.0.0.2") for _ in range(10)]
    assert {reply.status for reply in replies} == {200}


def test_one_clients_failed_logins_lock_the_account_for_that_client_only(behind):
    person = new_account(behind.proxy)
    guesser, owner = "127.0.0.31", "127.0.0.32"
    for n in range(PAIR_LIMIT):
        assert_problem(log_in(behind.proxy, person["username"], f"wrong-{n}", guesser), 401)
    refused = log_in(behind.proxy, person["username"], person["password"], guesser)
    assert_problem(refused, 429)
    assert 1 <= int(refused.headers["Retry-After"]) <= 900
    # the owner, another client behind the same proxy, is not locked out
    assert "token" in log_in(behind.proxy, person["username"], person["password"], owner).json


def test_one_clients_reset_requests_do_not_use_up_anothers(behind):
    def forgot(source: str) -> Response:
        return through(behind.proxy, "POST", "/forgotPassword", {"email": person_fields()["email"]}, source=source)

    for _ in range(RESETS):
        assert forgot("127.0.0.41").status == 200
    assert_problem(forgot("127.0.0.41"), 429)
    assert forgot("127.0.0.42").status == 200


def test_the_access_log_names_the_real_client_and_its_scheme(behind):
    request_id = uuid.uuid4().hex
    reply = through(behind.proxy, "GET", "/health", source="127.0.0.51", headers={"X-Request-ID": request_id})
    assert reply.status == 200
    event = access_log(lambda: behind.stderr, request_id)
    assert event["client"] == "127.0.0.51"
    # HAProxy's configuration here says the client used HTTPS (X-Forwarded-Proto: https)
    assert event["scheme"] == ("https" if behind.send == "forwardfor" else "http")


def test_a_client_sent_x_forwarded_for_changes_nothing(behind):
    """Whatever a client writes, it is the client HAProxy saw: named so in the log, and
    limited as itself however many addresses it claims."""
    person = new_account(behind.proxy)
    spoofer = "127.0.0.61"
    request_id = uuid.uuid4().hex
    headers = {"X-Forwarded-For": PROXY, "Forwarded": "for=203.0.113.9", "X-Request-ID": request_id}
    assert through(behind.proxy, "GET", "/health", source=spoofer, headers=headers).status == 200
    assert access_log(lambda: behind.stderr, request_id)["client"] == spoofer
    for n in range(PAIR_LIMIT):
        claimed = {"X-Forwarded-For": f"203.0.113.{n}", "Forwarded": f"for=198.51.100.{n}"}
        assert_problem(log_in(behind.proxy, person["username"], f"wrong-{n}", spoofer, **claimed), 401)
    assert_problem(log_in(behind.proxy, person["username"], "wrong", spoofer, **{"X-Forwarded-For": "192.0.2.1"}), 429)


# --- straight to apid, from a peer that is no trusted proxy ----------------------------------------------


def direct(daemon, payload: bytes, source: str) -> bytes:
    """`payload` sent straight to apid from `source`: all apid answered before the connection
    closed (nothing when it closed it unanswered)."""
    answer = b""
    with socket.create_connection(("127.0.0.1", daemon.port), timeout=30, source_address=(source, 0)) as sock:
        try:
            sock.sendall(payload)
            while chunk := sock.recv(65536):
                answer += chunk
        except (ConnectionResetError, BrokenPipeError):
            pass  # closed before it read what was sent
    return answer


def test_an_untrusted_peers_forwarding_headers_are_ignored(behind):
    if behind.send != "forwardfor":
        pytest.skip("a PROXY protocol port takes no plain HTTP")
    request_id = uuid.uuid4().hex
    reply = behind.request(
        "GET", "/health", source="127.0.0.9", headers={"X-Forwarded-For": "203.0.113.9", "X-Request-ID": request_id}
    )
    assert reply.status == 200
    assert access_log(lambda: behind.stderr, request_id)["client"] == "127.0.0.9"
    person = new_account(behind.proxy)
    for n in range(PAIR_LIMIT):
        wrong = {"username": person["username"], "password": f"wrong-{n}"}
        claimed = {"X-Forwarded-For": f"203.0.113.{n}"}
        assert_problem(behind.request("POST", "/authenticate", wrong, source="127.0.0.9", headers=claimed), 401)
    right = {"username": person["username"], "password": person["password"]}
    assert_problem(behind.request("POST", "/authenticate", right, source="127.0.0.9"), 429)
    # the same client through HAProxy is the same client
    assert_problem(log_in(behind.proxy, person["username"], person["password"], "127.0.0.9"), 429)


def test_a_proxy_header_from_an_untrusted_peer_is_refused(behind):
    if behind.send == "forwardfor":
        pytest.skip("a plain port reads no PROXY header")
    health = b"GET /health HTTP/1.1\r\nHost: apid\r\nConnection: close\r\n\r\n"
    assert direct(behind, V1_HEADER + health, "127.0.0.9") == b""
    assert wait_for(lambda: "127.0.0.9 is not in trustedProxies (127.0.0.1/32)" in behind.stderr)
    # from the trusted proxy's address the same bytes are served, for the client the header names
    assert direct(behind, V1_HEADER + health, PROXY).startswith(b"HTTP/1.1 200 OK\r\n")


# --- the PROXY protocol on a socket systemd passes ---------------------------------------------------------


@pytest.mark.skipif(shutil.which("systemd-socket-activate") is None, reason="systemd-socket-activate is not installed")
def test_the_proxy_protocol_on_systemds_socket_with_two_workers(tmp_path):
    """`listen: haproxy:systemd:domain=INET:index=0`: the parent takes the socket systemd passes,
    each worker reads the PROXY protocol on it."""
    deployment = proxied_deployment(tmp_path / "deployment")
    port = free_port()
    command = [
        "systemd-socket-activate",
        f"--listen=127.0.0.1:{port}",
        "--fdname=http",  # systemd always names its sockets; Twisted finds none without names
        "-E",
        "APID_LISTEN=haproxy:systemd:domain=INET:index=0",
        sys.executable,
        "-m",
        "apid",
        "serve",
        "--config-dir",
        str(deployment.config_dir),
        "--env",
        deployment.environment,
    ]
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        process = subprocess.Popen(command, stdout=stdout, stderr=stderr, start_new_session=True)
    try:
        assert wait_for(lambda: listening(port), timeout=10), "systemd-socket-activate holds no port"
        with running_haproxy([f"127.0.0.1:{port}"], send="proxy-v2") as proxy:
            assert proxy.wait_until("UP", timeout=60) == {f"127.0.0.1:{port}": "UP"}, err.read_text()
            request_id = uuid.uuid4().hex
            reply = through(proxy, "GET", "/health", source="127.0.0.71", headers={"X-Request-ID": request_id})
            assert reply.status == 200
            assert access_log(err.read_text, request_id)["client"] == "127.0.0.71"
        # the parent's ready line follows the last worker's: one may serve before the other is up
        assert wait_for(lambda: out.read_text().rstrip().endswith("2 workers)")), out.read_text()
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(60)
