"""One open live event stream: the Server-Sent Events of one subscriber, written as they come,
held while the client does not read, and cut past a bound so that it never slows the others.

The stream is the request's producer (Twisted's push producer): when the socket's buffer is
full the transport pauses it, and the events meanwhile wait here; `buffer` of them waiting
and the stream is cut with one `reset` event, which tells the client to reload what it shows
and open a new stream. A stream ended by apid (its caller no longer stands, the daemon
stops) says why in a last `end` event, whose data is the problem a request would have got.
"""

from __future__ import annotations

from collections import deque

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IPushProducer
from twisted.web.http import Request
from zope.interface import implementer

from apid.events.copies import Subscriber
from apid.http.answers import dumps
from apid.problems import Problem
from apid.telemetry import metrics

RESET = b"event: reset\ndata: {}\n\n"


def frame(position: int, service: str, message: str) -> bytes:
    """One event: its id (the change's position), its name (the service) and its message."""
    return f"id: {position}\nevent: {service}\ndata: {message}\n\n".encode()


@implementer(IPushProducer)
class Stream:
    """A subscriber's open stream. `ended` fires once it is over, whoever ended it."""

    def __init__(self, request: Request, subscriber: Subscriber, position: int, *, buffer: int, now: float) -> None:
        self.request = request
        self.subscriber = subscriber
        self.position = position  # the last change sent, or skipped as not theirs
        self.last_write = now
        self.ended: Deferred[None] = Deferred()
        self._buffer = buffer
        self._held: deque[bytes] = deque()
        self._paused = False
        self._catching_up: list[tuple[int, bytes | None]] | None = []  # live changes met while replaying
        request.registerProducer(self, True)

    @property
    def open(self) -> bool:
        return not self.ended.called

    def start(self, retry_ms: int, now: float) -> None:
        """The headers and the client's reconnection delay, at once: a client knows the stream is open."""
        self.request.setHeader(b"Content-Type", b"text/event-stream; charset=utf-8")
        self.request.setHeader(b"X-Accel-Buffering", b"no")  # nginx: send each event as it comes
        self._write(b"retry: %d\n\n" % retry_ms, now)

    def offer(self, position: int, service: str, message: str | None, now: float, *, live: bool = True) -> None:
        """A change, in order; `message` None when the subscriber may not hear of it (it still
        moves their position: a client back with Last-Event-ID is not sent it again). A live
        change met while the missed ones are replayed waits for them (`replayed`)."""
        if not self.open or position <= self.position:
            return
        if live and self._catching_up is not None:
            self._catching_up.append((position, None if message is None else frame(position, service, message)))
            return
        self.position = position
        if message is not None:
            self._write(frame(position, service, message), now)

    def replayed(self, now: float) -> None:
        """The replay of what the client missed is sent: the live changes met meanwhile follow."""
        waiting, self._catching_up = self._catching_up or [], None
        for position, framed in waiting:
            if position > self.position:
                self.position = position
                if framed is not None:
                    self._write(framed, now)

    def heartbeat(self, now: float) -> None:
        self._write(b":\n\n", now)

    def reset(self, reason: str) -> None:
        """Tell the client to reload and come back, and end the stream (`reason` for the metrics:
        slow, or missed)."""
        metrics.stream_cut(reason)
        self._end(RESET)

    def end(self, problem: Problem) -> None:
        """End the stream, saying why as the problem a request would have been answered."""
        metrics.stream_cut("standing")
        self._end(b"event: end\ndata: " + dumps(problem.to_dict("/events")) + b"\n\n")

    def close(self) -> None:
        """End the stream without a word (the client left, or the daemon stops)."""
        self._end(None)

    def _write(self, data: bytes, now: float) -> None:
        if not self.open:
            return
        if self._paused:
            if len(self._held) >= self._buffer:
                self.reset("slow")
                return
            self._held.append(data)
            return
        self.last_write = now
        self.request.write(data)

    def _end(self, last: bytes | None) -> None:
        if not self.open:
            return
        self._held.clear()
        if last is not None and not self.request.finished and not self.request._disconnected:
            self.request.write(last)
        self.request.unregisterProducer()
        self.ended.callback(None)

    # IPushProducer: the transport's say on whether the client reads

    def pauseProducing(self) -> None:
        self._paused = True

    def resumeProducing(self) -> None:
        self._paused = False
        while self._held and not self._paused and self.open:
            self.request.write(self._held.popleft())

    def stopProducing(self) -> None:
        self.close()
