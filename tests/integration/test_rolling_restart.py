"""A rolling restart with zero failures (issue 24, item 4), as docs/operations.md tells it:
two daemons of two workers on one PostgreSQL behind a real HAProxy checking `/health`
(`inter 200 fall 1 rise 1`, `retries 3`, `option redispatch`), under load from clients
calling through the proxy on kept-alive connections, reads and writes. Each daemon in turn gets
SIGTERM: its /health fails while it still serves, the proxy routes away, then the port closes
and what was in flight finishes; it is started again on the same port, and once the proxy
sees it up, the other goes the same way. Not one request fails, and not one needed the
proxy's retries: none met a connection refused or cut.
"""

from __future__ import annotations

import csv
import http.client
import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

from haproxy import HAProxy, running_haproxy
from harness import ADMIN, ADMIN_ACCOUNT, READY, Daemon, Deployment, V, deployment_with_accounts, free_port

pytestmark = [
    pytest.mark.postgresql,
    pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="worker processes need two CPUs"),
]

CLIENTS = 4
HEALTH_DRAIN = 1.0  # five times what the proxy takes to see a server down (one check every 200 ms)


def serve_on(deployment: Deployment, port: int, name: str) -> Daemon:
    """`apid serve` on a fixed loopback port (a restart comes back where the proxy expects it)."""
    daemon = Daemon(deployment)
    daemon.stderr_path = deployment.root / f"{name}.stderr"
    command = [sys.executable, "-m", "apid", "serve", "--config-dir", str(deployment.config_dir), "--env", "test"]
    with open(daemon.stderr_path, "ab") as stderr:
        daemon.process = subprocess.Popen(
            [*command, "--listen", f"tcp:{port}:interface=127.0.0.1"],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            start_new_session=True,
        )
    line = daemon._read_line(60)
    if not READY.search(line or ""):
        daemon.process.kill()
        raise RuntimeError(f"{name} did not become ready: {line!r}\n{daemon.stderr}")
    daemon.port = port
    return daemon


def retried(proxy: HAProxy) -> dict[str, int]:
    """How often the proxy had to try a request again (`wretr`) or on another server (`wredis`):
    a connection refused or cut. `retries` and `redispatch` hide such failures from the clients,
    not from these counts."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(str(proxy.admin))
        sock.sendall(b"show stat\n")
        answer = b"".join(iter(lambda: sock.recv(65536), b""))
    rows = csv.DictReader(io.StringIO(answer.decode().lstrip("# ")))
    backend = next(row for row in rows if row["svname"] == "BACKEND")
    return {key: int(backend[key] or 0) for key in ("wretr", "wredis")}


class Load:
    """Clients calling through the proxy until stopped, each on one kept-alive connection:
    four reads for each write. Every answer that is not the expected 2xx, and every error, fails."""

    def __init__(self, port: int, token: str) -> None:
        self._port = port
        self._headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self._stop = threading.Event()
        self.answers: Counter[str] = Counter()
        self.failures: list[str] = []
        self._threads = [threading.Thread(target=self._client, args=(n,)) for n in range(CLIENTS)]

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)

    def _client(self, number: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", self._port, timeout=30)
        calls = 0
        while not self._stop.is_set():
            calls += 1
            write = calls % 5 == 0
            method, path, body = (
                ("POST", f"{V}/team/create", json.dumps({"name": f"team {number}-{calls}", "leaderId": 1}))
                if write
                else ("GET", f"{V}/person/show/1", None)
            )
            began = time.monotonic()
            try:
                connection.request(method, path, body=body, headers=self._headers)
                reply = connection.getresponse()
                reply.read()
            except (OSError, http.client.HTTPException) as exc:
                self.failures.append(f"{method} {path}: {type(exc).__name__}: {exc}")
                connection.close()
                continue
            waited = time.monotonic() - began
            self.answers[f"{method} {reply.status}"] += 1
            if reply.status != 200:
                self.failures.append(f"{method} {path}: {reply.status}")
            if waited > 1.0:
                self.failures.append(f"{method} {path}: answered after {waited:.1f} s")
        connection.close()


def test_restarting_two_daemons_in_turn_under_load_through_haproxy_fails_no_request(tmp_path, postgres):
    deployment = deployment_with_accounts(
        tmp_path,
        server={"database": {"url": postgres.new_database("rolling")}, "shutdown": {"healthDrain": HEALTH_DRAIN}},
        api={"procCores": 2},
        accounts=(ADMIN_ACCOUNT,),
    )
    ports = [free_port(), free_port()]
    daemons = [serve_on(deployment, port, f"daemon{n}") for n, port in enumerate(ports, 1)]
    try:
        with running_haproxy(
            [f"127.0.0.1:{port}" for port in ports],
            send="forwardfor",
            extra_server="inter 200 fall 1 rise 1",
            extra_backend=["retries 3", "option redispatch"],
        ) as proxy:
            assert set(proxy.wait_until("UP").values()) == {"UP"}
            with Load(proxy.port, daemons[0].login(ADMIN[0], ADMIN[1])) as load:
                time.sleep(1.0)
                for n, port in enumerate(ports):
                    daemons[n].process.send_signal(signal.SIGTERM)
                    assert daemons[n].process.wait(30) == 0
                    daemons[n] = serve_on(deployment, port, f"daemon{n + 1}")
                    assert set(proxy.wait_until("UP").values()) == {"UP"}, proxy.states()
                    time.sleep(1.0)  # both serve again: traffic reaches the new one
            print(f"\nrolling restart: {dict(load.answers)}, failures {load.failures}, {retried(proxy)}")
            assert load.failures == []
            assert retried(proxy) == {"wretr": 0, "wredis": 0}  # nothing was refused
            assert load.answers["GET 200"] > 100 and load.answers["POST 200"] > 25, load.answers
    finally:
        for daemon in daemons:
            daemon.stop()
    for log in (Path(deployment.root / name) for name in ("daemon1.stderr", "daemon2.stderr")):
        assert "Traceback" not in log.read_text(), log.read_text()
