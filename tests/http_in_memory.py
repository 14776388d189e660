"""apid's HTTP site in memory, for unit tests of the HTTP edge and what it serves: a `Connection`
to an `ApidSite` is fed bytes, on a `Clock`, and the answers it wrote are parsed back.

By default the site serves `Echo`, which answers what it read of the request.
"""

from __future__ import annotations

import email.parser
import http.client
import json
from dataclasses import dataclass

from twisted.internet.address import IPv4Address
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.web.http import Request
from twisted.web.resource import Resource

from apid.config.server import ConnectionLimits
from apid.http.answers import write_json, write_problem
from apid.http.requests import query_fields, read_json_body
from apid.http.site import ApidSite, TextPaths
from apid.problems import Problem

LIMIT = 1024  # the site's maxBodyBytes


class Echo(Resource):
    """Answers the JSON body and the query it was sent, or the problem reading them raised;
    `/cached` sets its own Cache-Control."""

    isLeaf = True

    def render(self, request: Request) -> bytes:
        if request.path == b"/cached":
            request.setHeader(b"Cache-Control", b"max-age=60")
        try:
            return write_json(request, {"body": read_json_body(request), "query": query_fields(request)})
        except Problem as problem:
            return write_problem(request, problem)


class Transport(StringTransport):
    """A transport that also records a half close."""

    write_closed = False

    def loseWriteConnection(self) -> None:
        self.write_closed = True


@dataclass
class Answer:
    """An answer as the site wrote it; its headers are read as `harness.Response`'s are (any case)."""

    status: int
    headers: http.client.HTTPMessage
    body: bytes

    @property
    def json(self):
        return json.loads(self.body)


_HEADERS = email.parser.Parser(_class=http.client.HTTPMessage)


def parse_answers(data: bytes) -> list[Answer]:
    """The answers written, each framed by its Content-Length (all these answers have one)."""
    answers = []
    while data:
        head, _, data = data.partition(b"\r\n\r\n")
        status_line, _, header_lines = head.decode("latin-1").partition("\r\n")
        headers = _HEADERS.parsestr(header_lines, headersonly=True)
        length = int(headers.get("Content-Length", "0"))
        answers.append(Answer(int(status_line.split()[1]), headers, data[:length]))
        data = data[length:]
    return answers


class Connection:
    def __init__(self, resource: Resource | None = None, limits: ConnectionLimits | None = None) -> None:
        self.clock = Clock()
        self.site = ApidSite(
            resource=TextPaths(resource or Echo()), max_body_bytes=LIMIT, access_log_enabled=False, limits=limits
        )
        self.site.reactor = self.clock
        self.channel = self.site.buildProtocol(IPv4Address("TCP", "127.0.0.1", 40000))
        self.transport = Transport()
        self.channel.makeConnection(self.transport)

    def send(self, *chunks: bytes) -> Connection:
        for chunk in chunks:
            self.channel.dataReceived(chunk)
        return self

    @property
    def answers(self) -> list[Answer]:
        return parse_answers(self.transport.value())

    def only_answer(self) -> Answer:
        (answer,) = self.answers
        return answer

    def deadlines(self) -> list:
        """The request deadlines pending on the clock (the idle timeout is not one)."""
        return [call for call in self.clock.getDelayedCalls() if call.func == self.channel._request_overdue]

    def trickle(self, data: bytes, seconds: float = 1.0) -> Connection:
        """`data` a byte at a time, one every `seconds` (each byte resets the idle timeout)."""
        for byte in data:
            self.send(bytes([byte]))
            self.clock.advance(seconds)
        return self
