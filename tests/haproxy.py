"""A throwaway HAProxy from Debian's package, in front of daemons started by the test: the
proxy operators put before apid, run for real.

The proxy listens on a free loopback port and balances round-robin over `servers` (each a
`host:port`), with the health check docs/operations.md recommends (`GET /health`). `send`
says how the client travels to apid: `forwardfor` (an `X-Forwarded-For` header and
`X-Forwarded-Proto`), `proxy-v1` or `proxy-v2` (the PROXY protocol, `send-proxy` or
`send-proxy-v2`, health checks included). `extra_server` and `extra_backend` add lines to each
`server` line and to the backend (say `inter 200 fall 1 rise 1`, `retries 3`).

    with running_haproxy(["127.0.0.1:8081", "127.0.0.1:8082"], send="proxy-v2") as proxy:
        http.client.HTTPConnection("127.0.0.1", proxy.port)

`running_shipped_haproxy` runs the repository's own etc/haproxy/apid.cfg as a file instead, the
one docs/operations.md quotes, its addresses given through the environment it reads them from
(`APID_BIND`, `APID_APP1`, `APID_APP2`, `APID_HAPROXY_SOCKET`).
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from harness import end_process, free_port, listening

HAPROXY = "/usr/sbin/haproxy"
SHIPPED = Path(__file__).resolve().parent.parent / "etc" / "haproxy" / "apid.cfg"
SENDS = {
    "forwardfor": ("option forwardfor\n    http-request set-header X-Forwarded-Proto https", ""),
    "proxy-v1": ("", " send-proxy check-send-proxy"),
    "proxy-v2": ("", " send-proxy-v2 check-send-proxy"),
}


def configuration(
    port: int,
    servers: Sequence[str],
    send: str,
    admin: Path,
    extra_server: str = "",
    extra_backend: Sequence[str] = (),
) -> str:
    """The haproxy.cfg of one frontend on 127.0.0.1:`port` and one backend of `servers`, with
    its runtime API on the Unix socket `admin`."""
    backend_option, server_option = SENDS[send]
    backend = "\n    ".join(line for line in (backend_option, *extra_backend) if line)
    server_lines = "\n    ".join(
        f"server apid{index} {address} check{server_option} {extra_server}".rstrip()
        for index, address in enumerate(servers, 1)
    )
    return f"""global
    maxconn 4096
    stats socket {admin} level admin

defaults
    mode http
    timeout connect 2s
    timeout client 30s
    timeout server 30s

frontend api
    bind 127.0.0.1:{port}
    default_backend apid

backend apid
    balance roundrobin
    option httpchk GET /health
    http-check expect status 200
    {backend}
    {server_lines}
"""


class HAProxy:
    def __init__(
        self,
        servers: Sequence[str],
        send: str,
        extra_server: str = "",
        extra_backend: Sequence[str] = (),
        shipped: bool = False,
    ) -> None:
        if send not in SENDS:
            raise ValueError(f"send must be one of {sorted(SENDS)}, not {send!r}")
        self.executable = shutil.which("haproxy") or HAPROXY
        self.servers = list(servers)
        self.send = send
        self.extra_server = extra_server
        self.extra_backend = tuple(extra_backend)
        self.shipped = shipped  # SHIPPED as it is, its servers named app1, app2
        self.folder: Path | None = None
        self.port: int | None = None
        self.process: subprocess.Popen | None = None

    @property
    def log(self) -> str:
        path = self.folder / "haproxy.log" if self.folder else None
        return path.read_text(errors="replace") if path and path.exists() else ""

    @property
    def admin(self) -> Path:
        if self.folder is None:
            raise RuntimeError("haproxy is not started")
        return self.folder / "admin.sock"

    def states(self) -> dict[str, str]:
        """Each server's state as HAProxy sees it now (`UP`, `DOWN`, `UP 1/2`, `MAINT`...), by
        its `host:port`, from the runtime API's `show stat`."""
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(2)
            sock.connect(str(self.admin))
            sock.sendall(b"show stat\n")
            answer = b""
            while chunk := sock.recv(65536):
                answer += chunk
        rows = csv.DictReader(io.StringIO(answer.decode().lstrip("# ")))
        prefix = "app" if self.shipped else "apid"
        names = {f"{prefix}{index}": address for index, address in enumerate(self.servers, 1)}
        return {names[row["svname"]]: row["status"] for row in rows if row["svname"] in names}

    def wait_until(self, state: str, timeout: float = 15) -> dict[str, str]:
        """Wait until every server's state is `state` ("UP", "DOWN"; "UP 1/3" is neither: a server
        failing its checks); the states then."""
        deadline = time.monotonic() + timeout
        while True:
            states = self.states()
            if all(value == state for value in states.values()) or time.monotonic() > deadline:
                return states
            time.sleep(0.05)

    def start(self, timeout: float = 10, attempts: int = 3) -> HAProxy:
        """Start haproxy on a free port, trying another when the one chosen was taken before
        haproxy bound it (another test's process may get it in between)."""
        if not Path(self.executable).exists():
            raise RuntimeError(f"{self.executable} is not installed (Debian package haproxy)")
        for _ in range(attempts - 1):
            try:
                return self._start_once(timeout)
            except RuntimeError:
                continue
        return self._start_once(timeout)

    def _start_once(self, timeout: float) -> HAProxy:
        self.folder = Path(tempfile.mkdtemp(prefix="apid-haproxy-"))
        self.port = free_port()
        environment = dict(os.environ)
        if self.shipped:
            config = SHIPPED
            addresses = dict(zip(("APID_APP1", "APID_APP2"), self.servers, strict=True))
            environment.update(addresses, APID_BIND=f"127.0.0.1:{self.port}", APID_HAPROXY_SOCKET=str(self.admin))
        else:
            config = self.folder / "haproxy.cfg"
            config.write_text(
                configuration(self.port, self.servers, self.send, self.admin, self.extra_server, self.extra_backend)
            )
        with open(self.folder / "haproxy.log", "ab") as log:
            # -db: in the foreground, its warnings and alerts on standard error
            self.process = subprocess.Popen(
                [self.executable, "-db", "-f", str(config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=environment,
            )
        # Ready once its runtime API answers: haproxy opens it with its listeners, and the port
        # alone may be another process's that took it first (haproxy then exits).
        deadline = time.monotonic() + timeout
        while not (listening(self.port) and self._answers()):
            if self.process.poll() is not None or time.monotonic() > deadline:
                log_text = self.log
                self.stop()
                raise RuntimeError(f"haproxy did not start on port {self.port}:\n{log_text}")
            time.sleep(0.02)
        return self

    def _answers(self) -> bool:
        try:
            self.states()
        except OSError:
            return False
        return self.process.poll() is None

    def stop(self, timeout: float = 10) -> None:
        try:
            end_process(self.process, timeout)
        finally:
            if self.folder is not None:
                shutil.rmtree(self.folder, ignore_errors=True)


@contextmanager
def running_haproxy(
    servers: Sequence[str], send: str = "forwardfor", extra_server: str = "", extra_backend: Sequence[str] = ()
) -> Iterator[HAProxy]:
    """A started haproxy, stopped on leaving the block (for a pytest fixture's yield)."""
    proxy = HAProxy(servers, send, extra_server, extra_backend).start()
    try:
        yield proxy
    finally:
        proxy.stop()


@contextmanager
def running_shipped_haproxy(servers: Sequence[str]) -> Iterator[HAProxy]:
    """etc/haproxy/apid.cfg, started as a file in front of the two `servers` (`host:port`)."""
    proxy = HAProxy(servers, "forwardfor", shipped=True).start()
    try:
        yield proxy
    finally:
        proxy.stop()
