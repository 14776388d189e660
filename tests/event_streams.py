"""A live event stream read as a client reads it: `GET /events` on its own connection, its
Server-Sent Events parsed (id, event, data; comments and `retry:` apart) into a queue by a
thread, so that a test can make changes meanwhile and wait for what arrives."""

from __future__ import annotations

import contextlib
import http.client
import json
import queue
import socket
import threading
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Event:
    id: str | None
    event: str
    data: str

    @property
    def message(self) -> Any:
        return json.loads(self.data)


class EventStream:
    """An open `GET /events` (`path` with its query), with `token` or without (a ticket)."""

    def __init__(
        self, port: int, token: str | None = None, path: str = "/events", headers: dict[str, str] | None = None
    ) -> None:
        self.connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        sent = dict(headers or {})
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        self.connection.request("GET", path, headers=sent)
        self._socket = self.connection.sock
        self.response = self.connection.getresponse()
        self.status = self.response.status
        self.headers = self.response.headers
        self.events: queue.Queue[Event | None] = queue.Queue()
        self.comments = 0
        self.ended = threading.Event()
        if self.status == 200:
            threading.Thread(target=self._read, daemon=True).start()
        else:
            self.body = self.response.read()

    def _read(self) -> None:
        fields: dict[str, str] = {}
        try:
            for raw in self.response:
                line = raw.decode("utf-8").rstrip("\n")
                if line == "":
                    if "event" in fields or "data" in fields:
                        self.events.put(Event(fields.get("id"), fields.get("event", "message"), fields.get("data", "")))
                    fields = {}
                elif line.startswith(":"):
                    self.comments += 1
                else:
                    name, _, value = line.partition(":")
                    fields[name] = value.removeprefix(" ")
        except (OSError, http.client.HTTPException, ValueError):
            pass
        finally:
            self.ended.set()
            self.events.put(None)

    def next(self, timeout: float = 5) -> Event | None:
        """The next event, or None once the stream ended; `queue.Empty` after `timeout`."""
        return self.events.get(timeout=timeout)

    def quiet_for(self, seconds: float) -> Event | None:
        """What arrives within `seconds`: None when nothing does (or the stream ends)."""
        try:
            event = self.events.get(timeout=seconds)
        except queue.Empty:
            return None
        if event is None:
            self.events.put(None)
        return event

    def close(self) -> None:
        """Hang up, as a client closing its tab: the reader ends first, then the connection."""
        with contextlib.suppress(OSError):
            self._socket.shutdown(socket.SHUT_RDWR)
        if self.status == 200:
            self.ended.wait(5)
        self.connection.close()

    def __enter__(self) -> EventStream:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
