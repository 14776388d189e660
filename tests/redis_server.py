"""A throwaway redis-server from Debian's package, for tests that need the real thing.

The server listens on a free loopback port, keeps nothing on disk (no RDB snapshots, no
append-only file) and works in its own temporary folder. `start()` returns once it answers
PING; `stop()` ends that process (and only that one) and removes the folder. `halt()` ends the
process alone and `resume()` starts a new one on the same port: an outage (the counts are lost,
as they would be by a Redis without persistence).

    @pytest.fixture(scope="module")
    def redis():
        with running_redis() as server:
            yield server          # server.port, server.url
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from harness import end_process, free_port

REDIS_SERVER = "/usr/bin/redis-server"


def answers_ping(port: int, timeout: float = 0.5) -> bool:
    """Whether a Redis server on 127.0.0.1:`port` answers PING with +PONG."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(b"PING\r\n")
            reply = b""
            while b"\r\n" not in reply:
                chunk = sock.recv(64)
                if not chunk:
                    break
                reply += chunk
            return reply.startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    def __init__(self, executable: str | None = None) -> None:
        self.executable = executable or shutil.which("redis-server") or REDIS_SERVER
        self.folder: Path | None = None
        self.port: int | None = None
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

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
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + timeout
        while not answers_ping(self.port):
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

    def stop(self, timeout: float = 10) -> None:
        try:
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
