"""A webhook receiver for tests: a real HTTP server on loopback, in a thread of the test.

It records every POST (path, headers, body, arrival time) and answers what the test scripts
for the path: a list of answers used in turn (the last one repeats), each a status, extra
headers, a delay before answering, or "hang" (accept, read, never answer). Unscripted paths
answer `default` (200). It speaks HTTP/1.1 with keep-alive unless told otherwise: `protocol`
"HTTP/1.0" answers as Python's http.server does by default (no Connection header, then it
closes), `idle_timeout` closes connections idle that long.

`RawReceiver` is a misbehaving server on a raw socket: one fixed answer, and after a number of
answers on a connection it reads the next request and closes without answering.
"""

from __future__ import annotations

import json
import socket
import socketserver
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Answer:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    hang: bool = False


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    at: float

    @property
    def json(self) -> Any:
        return json.loads(self.body)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # the body leaves at once, not after the client's delayed ACK

    def log_message(self, *_: Any) -> None:
        pass

    def setup(self) -> None:
        server: Receiver = self.server  # type: ignore[assignment]
        self.protocol_version = server.protocol
        self.timeout = server.idle_timeout  # a connection idle (or silent) this long is closed
        with server.lock:
            server.connections += 1
        super().setup()

    def do_POST(self) -> None:
        server: Receiver = self.server  # type: ignore[assignment]
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        answer = server.record(Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body, time.time()))
        if answer.hang:
            server.stopping.wait(60)
            self.close_connection = True
            return
        if answer.delay:
            server.stopping.wait(answer.delay)
        self.send_response(answer.status)
        for name, value in answer.headers.items():
            self.send_header(name, value)
        if answer.status in (204, 304):  # no body, not even an empty one
            self.end_headers()
            return
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")


class Receiver(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128  # bursts open many connections at once to an HTTP/1.0 receiver

    def __init__(
        self, default: Answer = Answer(), protocol: str = "HTTP/1.1", idle_timeout: float | None = None
    ) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.default = default
        self.protocol = protocol
        self.idle_timeout = idle_timeout
        self.connections = 0
        self.scripts: dict[str, list[Answer]] = {}
        self.received: list[Received] = []
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def record(self, received: Received) -> Answer:
        with self.lock:
            self.received.append(received)
            answers = self.scripts.get(received.path) or [self.default]
            seen = sum(1 for r in self.received if r.path == received.path)
            return answers[min(seen, len(answers)) - 1]

    def close(self) -> None:
        self.stopping.set()
        self.shutdown()
        self.server_close()


class _RawHandler(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        server: RawReceiver = self.server  # type: ignore[assignment]
        with server.lock:
            server.connections += 1
        answered = 0
        while True:
            length = self._read_request()
            if length is None:
                return  # the client closed the connection
            self.rfile.read(length)
            with server.lock:
                server.requests += 1
            if server.answers_per_connection is not None and answered == server.answers_per_connection:
                self.connection.shutdown(socket.SHUT_RDWR)  # read, but no answer
                return
            self.wfile.write(server.answer)
            answered += 1

    def _read_request(self) -> int | None:
        """Reads a request's head; its Content-Length, or None at the end of the connection."""
        length = 0
        start = self.rfile.readline()
        if not start:
            return None
        while (line := self.rfile.readline()) not in (b"\r\n", b"\n", b""):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        return length


class RawReceiver(socketserver.ThreadingTCPServer):
    """Answers every request with the bytes of `answer`, as they are (a status line, headers,
    a body), and never closes a connection itself, except that after `answers_per_connection`
    answers on one it reads the next request and closes without answering (0: it never
    answers). Counts connections and requests."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, answer: bytes, answers_per_connection: int | None = None) -> None:
        super().__init__(("127.0.0.1", 0), _RawHandler)
        self.answer = answer
        self.answers_per_connection = answers_per_connection
        self.connections = 0
        self.requests = 0
        self.lock = threading.Lock()
        threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True).start()  # quick to stop

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def close(self) -> None:
        self.shutdown()
        self.server_close()
