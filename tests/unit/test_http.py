"""The HTTP edge in memory: the site's channel fed bytes, its answers read back from a transport.

Early answers (a body over the limit, headers too long, bytes that are not HTTP) are problems
with the same headers as every other answer; they close the connection in stages and keep
the in-flight count right.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from twisted.internet.address import IPv4Address
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.web.http import Request
from twisted.web.resource import Resource

from apid.http import LINGER_SECONDS, ApidSite, query_fields, read_json_body, write_json, write_problem
from apid.problems import Problem

LIMIT = 1024
AUTH = b"Host: x\r\nContent-Type: application/json\r\n"


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
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def json(self):
        return json.loads(self.body)


def parse_answers(data: bytes) -> list[Answer]:
    """The answers written, each framed by its Content-Length (all these answers have one)."""
    answers = []
    while data:
        head, _, data = data.partition(b"\r\n\r\n")
        status_line, *lines = head.decode("latin-1").split("\r\n")
        headers = dict(line.split(": ", 1) for line in lines)
        length = int(headers.get("Content-Length", "0"))
        answers.append(Answer(int(status_line.split()[1]), headers, data[:length]))
        data = data[length:]
    return answers


class Connection:
    def __init__(self, resource: Resource | None = None) -> None:
        self.clock = Clock()
        self.site = ApidSite(resource or Echo(), LIMIT, access_log_enabled=False)
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


@pytest.fixture
def connection() -> Connection:
    return Connection()


def assert_problem(answer: Answer, status: int) -> dict:
    assert answer.status == status, answer
    assert answer.headers["Content-Type"] == "application/problem+json"
    body = answer.json
    assert body["status"] == status and body["type"].startswith("urn:apid:problem:") and body["detail"]
    assert body["requestId"] == answer.headers["X-Request-Id"]  # as Twisted capitalises the name
    return body


def assert_answer_headers(answer: Answer, cache_control: str = "no-store") -> None:
    assert answer.headers["Server"] == "apid"
    assert answer.headers["X-Content-Type-Options"] == "nosniff"
    assert answer.headers["Cache-Control"] == cache_control


def assert_closed_in_stages(connection: Connection) -> None:
    """Half closed at once, the rest of the request read and dropped, closed after the linger."""
    assert connection.transport.write_closed
    assert not connection.transport.disconnecting
    connection.send(b"more of the body that nobody reads" * 100, b"\r\n\r\nGET / HTTP/1.1\r\n\r\n")
    assert len(connection.answers) == 1
    connection.clock.advance(LINGER_SECONDS)
    assert connection.transport.disconnecting


# --- ordinary answers ------------------------------------------------------------------------------


def test_an_answer_carries_the_security_headers_and_no_twisted_version(connection):
    answer = connection.send(b"GET /thing?a=1 HTTP/1.1\r\nHost: x\r\n\r\n").only_answer()
    assert answer.status == 200
    assert answer.json == {"body": {}, "query": {"a": ["1"]}}
    assert_answer_headers(answer)
    assert connection.site.in_flight.count == 0


def test_a_handler_keeps_its_own_cache_control(connection):
    assert_answer_headers(connection.send(b"GET /cached HTTP/1.1\r\nHost: x\r\n\r\n").only_answer(), "max-age=60")


def test_a_body_within_the_limit_is_read_after_100_continue(connection):
    body = json.dumps({"pad": "x" * (LIMIT - 20)}).encode()
    assert len(body) <= LIMIT
    connection.send(b"POST /echo HTTP/1.1\r\n" + AUTH + b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body))
    assert connection.transport.value() == b"HTTP/1.1 100 Continue\r\n\r\n"
    connection.transport.clear()
    answer = connection.send(body).only_answer()
    assert answer.status == 200 and answer.json["body"]["pad"] == "x" * (LIMIT - 20)


def test_the_connection_stays_open_for_the_next_request(connection):
    connection.send(b"GET /one HTTP/1.1\r\nHost: x\r\n\r\nGET /two HTTP/1.1\r\nHost: x\r\n\r\n")
    assert [answer.status for answer in connection.answers] == [200, 200]
    assert not connection.transport.disconnecting and not connection.transport.write_closed


# --- a body over the limit -------------------------------------------------------------------------


@pytest.mark.parametrize("expect", [b"", b"Expect: 100-continue\r\n"])
def test_a_declared_length_over_the_limit_is_413_before_the_body(connection, expect):
    connection.send(b"POST /echo HTTP/1.1\r\n" + AUTH + expect + b"Content-Length: 52428800\r\n\r\n")
    assert b"100 Continue" not in connection.transport.value()
    answer = connection.only_answer()
    body = assert_problem(answer, 413)
    assert body["limit"] == LIMIT and body["instance"] == "/echo"
    assert answer.headers["Connection"] == "close"
    assert_answer_headers(answer)
    assert connection.site.in_flight.count == 0
    assert_closed_in_stages(connection)


def test_a_chunked_body_is_cut_off_at_the_limit_with_413(connection):
    connection.send(b"POST /echo HTTP/1.1\r\n" + AUTH + b"Transfer-Encoding: chunked\r\n\r\n")
    chunk = b"200\r\n" + b" " * 0x200 + b"\r\n"
    connection.send(chunk, chunk)
    assert connection.transport.value() == b""
    connection.send(chunk + chunk + b"0\r\n\r\n")
    assert_problem(connection.only_answer(), 413)
    assert connection.site.in_flight.count == 0
    assert_closed_in_stages(connection)


def test_a_body_of_exactly_the_limit_is_read(connection):
    body = b'{"pad": "' + b"x" * (LIMIT - 11) + b'"}'
    assert len(body) == LIMIT
    answer = connection.send(b"POST /echo HTTP/1.1\r\n" + AUTH + b"Content-Length: %d\r\n\r\n" % LIMIT + body).only_answer()
    assert answer.status == 200


# --- requests twisted.web cannot parse -----------------------------------------------------------------


@pytest.mark.parametrize("raw", [
    b"GARBAGE\r\n\r\n",
    b"G\xffT / HTTP/1.1\r\n\r\n",
    b"GET / HTTP/1.1\r\nX Bad: y\r\n\r\n",
    b"GET / HTTP/1.1\r\nX-Nul: a\x00b\r\n\r\n",
    b"POST / HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
    b"POST / HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n{}",
    b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
])
def test_a_request_twisted_cannot_parse_is_a_400_problem(connection, raw):
    answer = connection.send(raw).only_answer()
    assert_problem(answer, 400)
    assert_answer_headers(answer)
    assert connection.site.in_flight.count == 0
    assert_closed_in_stages(connection)


def test_a_header_line_over_the_line_limit_is_431(connection):
    answer = connection.send(b"GET /thing HTTP/1.1\r\nX-Big: " + b"a" * 20_000 + b"\r\n\r\n").only_answer()
    assert assert_problem(answer, 431)["instance"] == "/thing"
    assert_closed_in_stages(connection)


def test_too_many_headers_are_431(connection):
    headers = b"".join(b"X-%d: a\r\n" % n for n in range(connection.channel.maxHeaders + 1))
    assert_problem(connection.send(b"GET / HTTP/1.1\r\n" + headers + b"\r\n").only_answer(), 431)


def test_a_request_line_over_the_line_limit_is_414(connection):
    answer = connection.send(b"GET /" + b"a" * 20_000 + b" HTTP/1.1\r\n\r\n").only_answer()
    assert "instance" not in assert_problem(answer, 414)
    assert connection.site.in_flight.count == 0


# --- paths and queries ------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [b"/a%00b", b"/%ff", b"/v0.1/person/show/1%00"])
def test_a_path_that_is_not_text_is_400(connection, path):
    assert_problem(connection.send(b"GET " + path + b" HTTP/1.1\r\nHost: x\r\n\r\n").only_answer(), 400)


def test_a_query_value_with_a_nul_is_400_naming_it(connection):
    body = assert_problem(connection.send(b"GET /thing?ok=1&id=1%00 HTTP/1.1\r\nHost: x\r\n\r\n").only_answer(), 400)
    assert body["errors"] == [{"field": "id", "reason": "holds a NUL character (%00)"}]


def test_asterisk_is_for_options_only(connection):
    connection.send(b"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\nGET * HTTP/1.1\r\nHost: x\r\n\r\n")
    options, get = connection.answers
    assert options.status == 200
    assert_answer_headers(options)
    assert assert_problem(get, 405)["allow"] == ["OPTIONS"]
    assert get.headers["Allow"] == "OPTIONS"
