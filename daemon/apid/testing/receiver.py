"""A webhook receiver for a plugin's tests: a real HTTP server on loopback, in a thread of the
test, that collects what apid delivers (and what a plugin's action sends to a service it
calls: pointed at the receiver, it stands in for that service).

Each request is kept as a `Delivery` (method, path, headers, body, arrival time), which can
check its Standard Webhooks signature against the hook's secret. A path answers what the
test scripted for it, each `Answer` in turn (the last one repeats), else 200.

Public through `apid.testing`; `apid.testing.pytest_plugin` makes a fixture of it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_SECRET_PREFIX = "whsec_"


@dataclass(frozen=True)
class Answer:
    """What the receiver answers a request: a status, headers (`{"Retry-After": "5"}`) and a
    delay in seconds before answering (a slow service; apid's delivery timeout)."""

    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    delay: float = 0.0


@dataclass(frozen=True)
class Delivery:
    """A request the receiver got: headers with lower-case names, the body as sent."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: bytes
    at: float  # time.time() when it arrived

    @property
    def json(self) -> Any:
        """The body parsed as JSON: a webhook's is `{"id", "type", "timestamp", "data"}`."""
        return json.loads(self.body)

    def verified(self, secret: str) -> bool:
        """Whether one of its `webhook-signature`s is the Standard Webhooks HMAC-SHA256 of
        `{webhook-id}.{webhook-timestamp}.{body}` under `secret` (the hook's `whsec_...`, as
        `hook/create` answered it)."""
        signed = f"{self.headers.get('webhook-id', '')}.{self.headers.get('webhook-timestamp', '')}.".encode()
        key = base64.b64decode(secret.removeprefix(_SECRET_PREFIX))
        expected = "v1," + base64.b64encode(hmac.new(key, signed + self.body, hashlib.sha256).digest()).decode()
        offered = self.headers.get("webhook-signature", "").split()
        return any(hmac.compare_digest(expected, signature) for signature in offered)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the test's output is not the place

    def _answer(self) -> None:
        receiver: _Server = self.server  # type: ignore[assignment]  # the server that made this handler
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = {name.lower(): value for name, value in self.headers.items()}
        answer = receiver.owner.record(Delivery(self.command, self.path, headers, body, time.time()))
        if answer.delay:
            receiver.owner.closing.wait(answer.delay)
        self.send_response(answer.status)
        for name, value in answer.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_POST = do_PUT = do_GET = do_DELETE = do_PATCH = _answer


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, owner: WebhookReceiver) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.owner = owner


class WebhookReceiver:
    """A real HTTP server on 127.0.0.1 and a port of its own, started at once; `close()` (or
    leaving its `with` block) stops it. Give apid `url("/hook")` as a hook's URL."""

    def __init__(self) -> None:
        self.closing = threading.Event()
        self._lock = threading.Condition()
        self._deliveries: list[Delivery] = []
        self._scripts: dict[str, list[Answer]] = {}
        self._server = _Server(self)
        threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def origin(self) -> str:
        """`http://127.0.0.1:<port>`: what `cors.allowedOrigins` must list for the daemon to send here."""
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def url(self, path: str = "/") -> str:
        """The URL of `path` on this receiver."""
        return self.origin + path

    @property
    def deliveries(self) -> list[Delivery]:
        """Every request received, oldest first."""
        with self._lock:
            return list(self._deliveries)

    def script(self, path: str, *answers: Answer | int) -> None:
        """Answer the next requests to `path` with `answers` in turn (a status is an `Answer`
        of it), the last one for every request after."""
        with self._lock:
            self._scripts[path] = [Answer(a) if isinstance(a, int) else a for a in answers] or [Answer()]

    def wait_for(self, count: int = 1, *, path: str | None = None, timeout: float = 10.0) -> list[Delivery]:
        """The deliveries (to `path`, if given) once there are at least `count`; AssertionError
        naming what arrived if they are not there within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while len(found := [d for d in self._deliveries if path is None or d.path == path]) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{len(found)} of {count} deliveries to {path or 'any path'} in {timeout:g} s")
                self._lock.wait(left)
            return found

    def clear(self) -> None:
        """Forget the deliveries and scripts so far."""
        with self._lock:
            self._deliveries.clear()
            self._scripts.clear()

    def record(self, delivery: Delivery) -> Answer:
        """Keep `delivery`; the answer scripted for its path (called by the server's threads)."""
        with self._lock:
            self._deliveries.append(delivery)
            self._lock.notify_all()
            answers = self._scripts.get(delivery.path) or [Answer()]
            seen = sum(1 for d in self._deliveries if d.path == delivery.path)
            return answers[min(seen, len(answers)) - 1]

    def close(self) -> None:
        """Stop serving; calling it again does nothing."""
        if not self.closing.is_set():
            self.closing.set()
            self._server.shutdown()
            self._server.server_close()

    def __enter__(self) -> WebhookReceiver:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
