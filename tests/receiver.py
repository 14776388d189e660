"""A webhook receiver for tests: a real HTTP server on loopback, in a thread of the test.

It records every POST (path, headers, body, arrival time) and answers what the test scripts
for the path: a list of answers used in turn (the last one repeats), each a status, extra
headers, a delay before answering, or "hang" (accept, read, never answer). Unscripted paths
answer 200.
"""

from __future__ import annotations

import json
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
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")


class Receiver(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.scripts: dict[str, list[Answer]] = {}
        self.received: list[Received] = []
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def record(self, received: Received) -> Answer:
        with self._lock:
            self.received.append(received)
            answers = self.scripts.get(received.path) or [Answer()]
            seen = sum(1 for r in self.received if r.path == received.path)
            return answers[min(seen, len(answers)) - 1]

    def close(self) -> None:
        self.stopping.set()
        self.shutdown()
        self.server_close()
