"""The HTTP edge in memory: the site's channel fed bytes, its answers read back from a transport.

Early answers (a body over the limit, headers too long, bytes that are not HTTP, a request not
whole by its deadline) are problems with the same headers as every other answer; they close
the connection in stages and keep the in-flight count right. The clock is a `Clock`; the cap
of connections per client address is its factory's, fed addresses.
"""

from __future__ import annotations

import json

import pytest
from twisted.internet.address import IPv4Address, UNIXAddress
from twisted.internet.error import ConnectionDone
from twisted.internet.task import Clock
from twisted.logger import capturedLogs
from twisted.python.failure import Failure
from twisted.web.http import Request
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET

from apid.config.server import ConnectionLimits
from apid.http.site import LINGER_SECONDS, ApidSite, OpenConnections, TextPaths
from assertions import assert_problem
from http_in_memory import LIMIT, Answer, Connection, Echo, Transport

AUTH = b"Host: x\r\nContent-Type: application/json\r\n"


@pytest.fixture
def connection() -> Connection:
    return Connection()


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
    assert not connection.channel.requests


def test_a_handler_keeps_its_own_cache_control(connection):
    assert_answer_headers(connection.send(b"GET /cached HTTP/1.1\r\nHost: x\r\n\r\n").only_answer(), "max-age=60")


def test_a_body_within_the_limit_is_read_after_100_continue(connection):
    body = json.dumps({"pad": "x" * (LIMIT - 20)}).encode()
    assert len(body) <= LIMIT
    connection.send(
        b"POST /echo HTTP/1.1\r\n" + AUTH + b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body)
    )
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
    assert not connection.channel.requests
    assert_closed_in_stages(connection)


def test_a_chunked_body_is_cut_off_at_the_limit_with_413(connection):
    connection.send(b"POST /echo HTTP/1.1\r\n" + AUTH + b"Transfer-Encoding: chunked\r\n\r\n")
    chunk = b"200\r\n" + b" " * 0x200 + b"\r\n"
    connection.send(chunk, chunk)
    assert connection.transport.value() == b""
    connection.send(chunk + chunk + b"0\r\n\r\n")
    assert_problem(connection.only_answer(), 413)
    assert not connection.channel.requests
    assert_closed_in_stages(connection)


def test_a_body_of_exactly_the_limit_is_read(connection):
    body = b'{"pad": "' + b"x" * (LIMIT - 11) + b'"}'
    assert len(body) == LIMIT
    answer = connection.send(
        b"POST /echo HTTP/1.1\r\n" + AUTH + b"Content-Length: %d\r\n\r\n" % LIMIT + body
    ).only_answer()
    assert answer.status == 200


# --- requests twisted.web cannot parse -----------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        b"GARBAGE\r\n\r\n",
        b"G\xffT / HTTP/1.1\r\n\r\n",
        b"GET / HTTP/1.1\r\nX Bad: y\r\n\r\n",
        b"GET / HTTP/1.1\r\nX-Nul: a\x00b\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n{}",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    ],
)
def test_a_request_twisted_cannot_parse_is_a_400_problem(connection, raw):
    answer = connection.send(raw).only_answer()
    assert_problem(answer, 400, instance=None)  # a path only where Twisted read the request line
    assert_answer_headers(answer)
    assert not connection.channel.requests
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
    assert_problem(answer, 414, instance=False)
    assert not connection.channel.requests


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


# --- slow clients: a request's deadlines -------------------------------------------------------------

SLOW = ConnectionLimits(header_timeout=10.0, body_timeout=10.0, body_rate=256, per_address=3)
CHUNK = b"100\r\n" + b" " * 0x100 + b"\r\n"  # 256 bytes of a chunked body: one second more at SLOW's rate


@pytest.fixture
def slow() -> Connection:
    return Connection(limits=SLOW)


class Held(Resource):
    """Answers a request only when the test finishes it."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.waiting: list[Request] = []

    def render(self, request: Request) -> object:
        self.waiting.append(request)
        return NOT_DONE_YET


def test_headers_trickled_a_byte_a_second_are_cut_with_408_at_their_deadline(slow):
    slow.send(b"GET /thing HTTP/1.1\r\n").trickle(b"X-Slow:")  # every byte resets the idle timeout
    slow.clock.advance(2.5)
    assert slow.transport.value() == b""
    slow.clock.advance(0.5)  # 10 s after the request's first byte
    answer = slow.only_answer()
    body = assert_problem(answer, 408)
    assert body["instance"] == "/thing"
    assert body["detail"] == "the request's headers did not arrive within 10 s of its first byte"
    assert answer.headers["Connection"] == "close"
    assert_answer_headers(answer)
    assert not slow.channel.requests and not slow.deadlines()
    assert_closed_in_stages(slow)


def test_a_request_line_never_finished_is_cut_with_408_too(slow):
    slow.send(b"GET /never-ending")
    slow.clock.advance(10)
    assert_problem(slow.only_answer(), 408, instance=False)
    assert not slow.channel.requests


def test_time_between_requests_is_the_idle_timeouts_and_a_whole_request_starts_no_timer(slow):
    slow.clock.advance(50)  # connected, nothing sent: not a request yet
    slow.send(b"GET /one HTTP/1.1\r\nHost: x\r\n\r\n")
    assert not slow.deadlines()
    slow.clock.advance(50)
    slow.send(b"GET /two HTTP/1.1\r\nHost: x\r\n\r\n")
    assert [answer.status for answer in slow.answers] == [200, 200]
    assert not slow.transport.disconnecting
    slow.clock.advance(60)  # twisted.web's idle timeout closes a connection that sends nothing
    assert slow.transport.disconnecting and len(slow.answers) == 2


def test_a_body_has_its_own_time_for_its_declared_size_whatever_its_headers_took(slow):
    slow.send(b"POST /echo HTTP/1.1\r\n").trickle(AUTH, seconds=0.2)  # 8.2 s of the headers' 10
    slow.send(b"Content-Length: 1024\r\n\r\n", b"{")  # 10 s + 1024 / 256 s from here
    slow.clock.advance(13.9)
    assert slow.transport.value() == b""
    slow.clock.advance(0.2)
    body = assert_problem(slow.only_answer(), 408)
    assert body["instance"] == "/echo"
    assert body["detail"] == (
        "the request body arrived too slowly: 10 s and one more for every 256 bytes of it are allowed"
    )
    assert not slow.channel.requests and not slow.deadlines()
    assert_closed_in_stages(slow)


def test_a_body_arriving_in_time_is_read_and_leaves_no_timer(slow):
    body = json.dumps({"pad": "x" * 900}).encode()
    slow.send(b"POST /echo HTTP/1.1\r\n" + AUTH + b"Content-Length: %d\r\n\r\n" % len(body), body[:500])
    assert len(slow.deadlines()) == 1
    slow.clock.advance(13)  # within 10 s + 911 / 256 s
    assert slow.send(body[500:]).only_answer().status == 200
    assert not slow.deadlines() and not slow.transport.disconnecting


def test_a_chunked_body_earns_a_second_for_each_rate_of_bytes_that_arrives(slow):
    slow.send(b"POST /echo HTTP/1.1\r\n" + AUTH + b"Transfer-Encoding: chunked\r\n\r\n", CHUNK, CHUNK)
    slow.clock.advance(10)  # the base time: the 512 bytes in by then earn 2 s more
    slow.clock.advance(1.9)
    assert slow.transport.value() == b""
    slow.clock.advance(0.2)
    assert_problem(slow.only_answer(), 408)
    assert not slow.deadlines()


def test_a_chunked_body_arriving_at_the_rate_allowed_is_read_whole(slow):
    slow.send(b"POST /echo HTTP/1.1\r\n" + AUTH + b"Transfer-Encoding: chunked\r\n\r\n")
    for _ in range(4):  # 1024 bytes in the base 10 s: 4 s more
        slow.send(CHUNK)
        slow.clock.advance(2.5)
    slow.clock.advance(3.9)
    assert slow.send(b"0\r\n\r\n").only_answer().status == 200
    assert not slow.deadlines()


def test_no_deadline_runs_while_a_request_is_answered_and_the_next_one_gets_its_own():
    held = Held()
    connection = Connection(held, SLOW)
    connection.send(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\nGET /next HTTP/1.1\r\nHo")  # the next pipelined
    assert not connection.deadlines()
    connection.clock.advance(100)  # an answer takes what it takes
    assert connection.transport.value() == b"" and not connection.transport.disconnecting
    answering = held.waiting.pop()
    answering.setHeader(b"Content-Length", b"4")
    answering.write(b"done")
    answering.finish()
    assert len(connection.deadlines()) == 1  # the next request's clock starts once it is read
    connection.clock.advance(10)
    done, cut = connection.answers
    assert (done.status, done.body) == (200, b"done")
    assert assert_problem(cut, 408)["instance"] == "/next"


def test_a_client_that_reads_nothing_is_cut_without_an_answer(slow):
    slow.send(b"GET /thing HTTP/1.1\r\nHo")
    slow.channel.pauseProducing()  # what its transport says when the client reads nothing it is sent
    slow.clock.advance(10)
    assert slow.transport.value() == b"" and slow.transport.disconnected


def test_an_early_answer_or_a_lost_connection_leaves_no_deadline(slow):
    slow.send(b"POST /echo HTTP/1.1\r\n")
    assert len(slow.deadlines()) == 1
    assert_problem(slow.send(AUTH + b"Content-Length: 52428800\r\n\r\n").only_answer(), 413)
    assert not slow.deadlines()
    lost = Connection(limits=SLOW).send(b"GET /thing HTTP/1.1\r\n")
    lost.channel.connectionLost(Failure(ConnectionDone()))
    assert not lost.deadlines()


# --- slow clients: connections per client address --------------------------------------------------


def open_connections() -> OpenConnections:
    site = ApidSite(resource=TextPaths(Echo()), max_body_bytes=LIMIT, access_log_enabled=False, limits=SLOW)
    site.reactor = Clock()
    return OpenConnections(site, SLOW.per_address)


def opened(connections: OpenConnections, peer: IPv4Address | UNIXAddress):
    """A connection from `peer`, as the listening port makes it: None when it is refused."""
    wrapper = connections.buildProtocol(peer)
    if wrapper is not None:
        wrapper.makeConnection(Transport())
    return wrapper


def peer(host: str) -> IPv4Address:
    return IPv4Address("TCP", host, 40000)


def test_a_client_address_holds_at_most_per_address_connections_and_one_more_is_refused():
    connections = open_connections()
    mine = [opened(connections, peer("192.0.2.1")) for _ in range(3)]
    assert None not in mine
    assert opened(connections, peer("192.0.2.1")) is None  # closed by the port at once: nothing read
    assert opened(connections, peer("192.0.2.2")) is not None  # another address is not held up
    mine[0].connectionLost(Failure(ConnectionDone()))
    assert opened(connections, peer("192.0.2.1")) is not None
    assert opened(connections, peer("192.0.2.1")) is None
    assert len(connections.protocols) == 4  # what shutdown closes


def test_connections_without_a_client_address_are_not_counted():
    connections = open_connections()
    assert all(opened(connections, UNIXAddress(None)) is not None for _ in range(10))


def test_a_client_at_the_cap_is_logged_once_until_its_connections_are_all_closed():
    connections = open_connections()

    def refusals() -> list[str]:
        return [event["client"] for event in events if event["log_namespace"] == "apid.http"]

    with capturedLogs() as events:
        mine = [opened(connections, peer("192.0.2.1")) for _ in range(3)]
        for _ in range(5):
            opened(connections, peer("192.0.2.1"))
        assert refusals() == ["192.0.2.1"]
        for wrapper in mine:
            wrapper.connectionLost(Failure(ConnectionDone()))
        for _ in range(4):
            opened(connections, peer("192.0.2.1"))
    assert refusals() == ["192.0.2.1"] * 2
