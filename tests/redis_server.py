"""A throwaway redis-server from Debian's package, for tests that need the real thing.

The server listens on a free loopback port, keeps nothing on disk (no RDB snapshots, no
append-only file) and works in its own temporary folder. `start()` returns once it answers
PING; `stop()` ends that process (and only that one) and removes the folder. `halt()` ends the
process alone and `resume()` starts a new one on the same port: an outage (the counts are lost,
as they would be by a Redis without persistence). `freeze()` stops the process with SIGSTOP and
`thaw()` continues it: the kernel still accepts connections, nothing answers (a long fork for
a snapshot, a stalled VM). `RedisServer(password=...)` requires AUTH (`requirepass`).

    @pytest.fixture(scope="module")
    def redis():
        with running_redis() as server:
            yield server          # server.port, server.url
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from harness import end_process, free_port

REDIS_SERVER = "/usr/bin/redis-server"


def answers_ping(port: int, timeout: float = 0.5, password: str | None = None) -> bool:
    """Whether a Redis server on 127.0.0.1:`port` answers PING with +PONG (after AUTH with
    `password`, given one)."""
    request = (f"AUTH {password}\r\n".encode() if password else b"") + b"PING\r\n"
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(request)
            reply = b""
            while reply.count(b"\r\n") < request.count(b"\r\n"):
                chunk = sock.recv(64)
                if not chunk:
                    break
                reply += chunk
            return reply.endswith(b"+PONG\r\n")
    except OSError:
        return False


class RedisServer:
    def __init__(self, executable: str | None = None, password: str | None = None) -> None:
        self.executable = executable or shutil.which("redis-server") or REDIS_SERVER
        self.password = password
        self.folder: Path | None = None
        self.port: int | None = None
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        secret = f":{self.password}@" if self.password else ""
        return f"redis://{secret}127.0.0.1:{self.port}/0"

    @property
    def log(self) -> str:
        path = self.folder / "redis.log" if self.folder else None
        return path.read_text(errors="replace") if path and path.exists() else ""

    def start(self, timeout: float = 10) -> RedisServer:
        if not Path(self.executable).exists():
            raise RuntimeError(f"{self.executable} is not installed (Debian package redis-server)")
        self.folder = Path(tempfile.mkdtemp(prefix="apid-redis-"))
        self.port = free_port()
        return self._launch(timeout)

    def _launch(self, timeout: float) -> RedisServer:
        with open(self.folder / "redis.log", "ab") as log:  # the server holds its own copy
            self.process = subprocess.Popen(
                [
                    self.executable,
                    "--port",
                    str(self.port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    str(self.folder),
                    *(["--requirepass", self.password] if self.password else []),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + timeout
        while not answers_ping(self.port, password=self.password):
            if self.process.poll() is not None or time.monotonic() > deadline:
                log_text = self.log
                self.stop()
                raise RuntimeError(f"redis-server did not answer PING on port {self.port}:\n{log_text}")
            time.sleep(0.02)
        return self

    def halt(self, timeout: float = 10) -> None:
        """End the server's process, keeping its port and folder for `resume`."""
        end_process(self.process, timeout)

    def resume(self, timeout: float = 10) -> RedisServer:
        """A new server on the halted one's port, once it answers PING."""
        return self._launch(timeout)

    def freeze(self) -> None:
        """SIGSTOP the server: connections are still accepted, nothing is answered."""
        os.kill(self.process.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        """SIGCONT the frozen server: it answers again, its counts kept."""
        os.kill(self.process.pid, signal.SIGCONT)

    def stop(self, timeout: float = 10) -> None:
        try:
            if self.process is not None and self.process.poll() is None:
                self.thaw()  # a frozen process would not end on SIGTERM
            self.halt(timeout)
        finally:
            if self.folder is not None:
                shutil.rmtree(self.folder, ignore_errors=True)


@contextmanager
def running_redis() -> Iterator[RedisServer]:
    """A started redis-server, stopped on leaving the block (for a pytest fixture's yield)."""
    server = RedisServer().start()
    try:
        yield server
    finally:
        server.stop()
