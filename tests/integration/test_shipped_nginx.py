"""The nginx configuration apid ships (etc/nginx/apid.conf), run by Debian's nginx in front of two
daemons, its addresses substituted by the test (issue 39, item 2; lighter than the HAProxy one):
the request id passes through; with one daemon frozen then killed while requests wait on it, its
GETs are answered by the other daemon and its POSTs get a 502 problem (never replayed); with no
daemon left, clients get a problem, not nginx's HTML.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import (
    ADMIN,
    Daemon,
    Deployment,
    V,
    deployment_with_accounts,
    end_process,
    free_port,
    listening,
    person_fields,
    running_daemons,
)

SHIPPED = Path(__file__).resolve().parents[2] / "etc" / "nginx" / "apid.conf"
NGINX = "/usr/sbin/nginx"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"

pytestmark = pytest.mark.skipif(not Path(NGINX).exists(), reason="Debian's nginx is not installed")


@pytest.fixture(scope="module")
def deployment(tmp_path_factory) -> Deployment:
    return deployment_with_accounts(tmp_path_factory.mktemp("shipped-nginx"))


@pytest.fixture(scope="module")
def daemons(deployment) -> Iterator[list[Daemon]]:
    with running_daemons(deployment) as started:
        yield started


@pytest.fixture(scope="module")
def front(deployment, daemons) -> Iterator[Daemon]:
    """nginx running the shipped file (addresses and log path replaced), as harness.Daemon's
    client pointed at it: every call below goes through nginx."""
    folder = Path(tempfile.mkdtemp(prefix="apid-nginx-"))
    port = free_port()
    site = (
        SHIPPED.read_text()
        .replace("10.0.0.1:8080", f"127.0.0.1:{daemons[0].port}")
        .replace("10.0.0.2:8080", f"127.0.0.1:{daemons[1].port}")
        .replace("listen 10.0.0.5:80;", f"listen 127.0.0.1:{port};")
        .replace("/var/log/nginx/apid.log", str(folder / "access.log"))
    )
    (folder / "apid.conf").write_text(site)
    (folder / "nginx.conf").write_text(
        f"pid {folder}/nginx.pid;\nerror_log {folder}/error.log;\nevents {{}}\n"
        f"http {{\n    include {folder}/apid.conf;\n}}\n"
    )
    process = subprocess.Popen(
        [NGINX, "-p", str(folder), "-c", str(folder / "nginx.conf"), "-g", "daemon off;"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 10
        while not listening(port):
            assert process.poll() is None and time.monotonic() < deadline, (folder / "error.log").read_text()
            time.sleep(0.02)
        client = Daemon(deployment)
        client.port = port
        client.access_log = folder / "access.log"  # type: ignore[attr-defined]
        yield client
    finally:
        end_process(process)
        shutil.rmtree(folder, ignore_errors=True)


def test_the_documentation_links_the_shipped_file():
    assert "etc/nginx/apid.conf" in DOCS.read_text()


def test_the_request_id_passes_through_and_is_logged(front):
    reply = front.request("GET", "/health", headers={"X-Request-ID": "nginx-test-1"})
    assert reply.status == 200 and reply.headers["X-Request-ID"] == "nginx-test-1"
    made = front.request("GET", "/health")
    assert made.status == 200 and len(made.headers["X-Request-ID"]) == 32  # nginx's $request_id
    time.sleep(0.2)
    log = front.access_log.read_text()
    assert "nginx-test-1" in log and made.headers["X-Request-ID"] in log


def test_a_killed_daemon_s_gets_go_to_the_other_and_its_posts_are_not_replayed(front, daemons):
    token = front.login(ADMIN[0], ADMIN[1])
    victim = daemons[0]
    os.kill(victim.process.pid, signal.SIGSTOP)
    answers: dict[str, list] = {"GET": [], "POST": []}

    def call(method: str) -> None:
        if method == "GET":
            reply = front.request("GET", f"{V}/person/show/1", token=token, timeout=30)
        else:
            reply = front.request("POST", f"{V}/person/create", person_fields("cut"), token=token, timeout=30)
        answers[method].append(reply)

    # round robin: two of each method in a row, so that each reaches both daemons
    threads = [threading.Thread(target=call, args=(method,)) for method in ("GET", "GET", "POST", "POST") * 2]
    try:
        for thread in threads:
            thread.start()
            time.sleep(0.02)
        time.sleep(0.5)
    finally:
        victim.process.kill()
        victim.process.wait()
    for thread in threads:
        thread.join(40)

    assert [reply.status for reply in answers["GET"]] == [200] * 4
    cut = [reply for reply in answers["POST"] if reply.status == 502]
    assert cut, [reply.status for reply in answers["POST"]]
    assert all(reply.content_type == "application/problem+json" and reply.json["status"] == 502 for reply in cut)
    assert {reply.status for reply in answers["POST"]} <= {200, 201, 502}


def test_with_no_daemon_left_the_client_gets_a_problem(front, daemons):
    for daemon in daemons:
        if daemon.process.poll() is None:
            daemon.stop()
    reply = front.request("GET", "/health")
    assert reply.status == 502 and reply.content_type == "application/problem+json"
    assert reply.json["status"] == 502 and reply.headers["X-Request-ID"]
