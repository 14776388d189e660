"""The private names of Twisted and CPython apid relies on (apid.private_apis): each still there
and still doing what apid relies on, exercised for real, not looked up.

Run against the lowest and the highest Twisted the pin allows by `scripts/twisted-range`.
The server side runs in memory (a channel fed bytes, its answers read from a transport), the
client side on in-memory connections, the TCP port on real loopback sockets.
"""

from __future__ import annotations

import asyncio
import socket

import pytest
import pytest_twisted
from twisted.internet import reactor, tcp
from twisted.internet.address import IPv4Address
from twisted.internet.defer import Deferred, succeed
from twisted.internet.interfaces import IStreamClientEndpoint
from twisted.internet.protocol import ServerFactory
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.logger import globalLogPublisher
from twisted.python import context
from twisted.web.http import Request
from twisted.web.http_headers import Headers
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Site
from zope.interface import implementer

from apid.private_apis import (
    HTTPChannelHooks,
    OneAcceptPerRead,
    adopt_listening_port,
    asyncio_without_loop_messages,
    running_loop,
)
from apid.private_apis.client import ClientConnectionFactory, ClientProtocolHooks, ClientRequest, ConnectionPoolHooks
from apid.private_apis.reactor import EPollWithoutLogContext

# twisted.web's server side


class Answers(Resource):
    """Answers /now at once and leaves /later unanswered (a request being answered)."""

    isLeaf = True

    def render(self, request: Request) -> bytes | int:
        return NOT_DONE_YET if request.path == b"/later" else b"ok"


class Recording(HTTPChannelHooks):
    """A channel recording its hooks; `refuse_itself` replaces Twisted's bare 400."""

    refuse_itself = True

    def __init__(self) -> None:
        super().__init__()
        self.unfinished = 0
        self.unparseable: list[bool] = []

    def request_unfinished(self) -> None:
        self.unfinished += 1

    def unparseable_request(self, headers_over_limits: bool) -> None:
        self.unparseable.append(headers_over_limits)
        if not self.refuse_itself:
            super().unparseable_request(headers_over_limits)


def connected(channel_class: type[HTTPChannelHooks] = Recording) -> tuple[HTTPChannelHooks, StringTransport]:
    site = Site(Answers())
    site.reactor = Clock()
    site.protocol = channel_class  # type: ignore[assignment]
    channel = site.buildProtocol(IPv4Address("TCP", "127.0.0.1", 40000))
    transport = StringTransport()
    channel.makeConnection(transport)
    return channel, transport


def test_a_chunk_ending_inside_a_request_line_or_its_headers_leaves_it_unfinished():
    channel, transport = connected()
    channel.dataReceived(b"GET /now HT")  # a partial line: LineReceiver's `_buffer`
    assert channel.unfinished == 1
    channel.dataReceived(b"TP/1.1\r\nHost: x\r\n")  # whole lines, headers not ended: `requests`
    assert channel.unfinished == 2
    channel.dataReceived(b"\r\n")  # whole and answered at once
    assert channel.unfinished == 2
    assert transport.value().startswith(b"HTTP/1.1 200 OK")


def test_a_body_still_arriving_leaves_its_request_unfinished():
    channel, _ = connected()
    channel.dataReceived(b"POST /now HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nab")
    assert channel.unfinished == 1
    channel.dataReceived(b"cd")
    assert channel.unfinished == 1


def test_bytes_arriving_while_a_request_is_answered_leave_nothing_unfinished():
    channel, _ = connected()
    channel.dataReceived(b"GET /later HTTP/1.1\r\nHost: x\r\n\r\nGET /now HT")  # `_handlingRequest`
    channel.dataReceived(b"TP/1.1\r\n")
    assert channel.unfinished == 0


def test_a_request_answered_whole_leaves_nothing_unfinished():
    channel, transport = connected()
    channel.dataReceived(b"GET /now HTTP/1.1\r\nHost: x\r\n\r\nGET /now HTTP/1.1\r\nHost: x\r\n\r\n")
    assert channel.unfinished == 0
    assert transport.value().count(b"HTTP/1.1 200 OK") == 2


@pytest.mark.parametrize(
    "sent",
    [
        b"NOT HTTP\r\n",  # a request line that is not one
        b"GET / HTTP/1.1\r\nno colon\r\n\r\n",  # a header that is not one
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: x\r\n\r\n",
        b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",  # a chunk size that is not one
    ],
)
def test_what_twisted_cannot_parse_goes_to_the_hook_instead_of_its_bare_400(sent):
    channel, transport = connected()
    channel.dataReceived(sent)
    assert channel.unparseable == [False]
    assert transport.value() == b""  # the hook answers, not Twisted


def test_headers_over_maxheaders_or_totalheaderssize_are_over_limits():
    channel, _ = connected()
    channel.maxHeaders = 2
    channel.dataReceived(b"GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n")
    assert channel.unparseable == [True]

    channel, _ = connected()
    channel.totalHeadersSize = 64
    channel.dataReceived(b"GET / HTTP/1.1\r\nA: " + b"a" * 40 + b"\r\nB: " + b"b" * 40 + b"\r\n")
    assert channel.unparseable == [True]


def test_by_default_the_hook_is_twisteds_bare_400_and_close():
    channel, transport = connected()
    channel.refuse_itself = False
    channel.dataReceived(b"NOT HTTP\r\n")
    assert transport.value() == b"HTTP/1.1 400 Bad Request\r\n\r\n"
    assert transport.disconnecting


def test_writes_are_paused_while_the_transport_pauses_the_channel():
    channel, transport = connected()
    assert transport.producer is channel  # the channel registered itself as the transport's producer
    assert not channel.writes_paused()
    transport.producer.pauseProducing()  # what a transport whose write buffer is full calls
    assert channel.writes_paused()
    transport.producer.resumeProducing()
    assert not channel.writes_paused()


def test_unregistering_from_the_transport_leaves_it_open():
    channel, transport = connected()
    channel.unregister_from_transport()
    assert transport.producer is None
    assert not transport.disconnecting


def test_the_request_line_is_known_from_its_parse_until_the_request_is_whole():
    channel, _ = connected()
    assert channel.request_line() is None
    channel.dataReceived(b"POST /a?b=c HTTP/1.0\r\nContent-Length: 2\r\n\r\n")
    assert channel.request_line() == (b"POST", b"/a?b=c", b"HTTP/1.0")
    channel.dataReceived(b"{}")
    assert channel.request_line() is None

    channel, _ = connected()
    channel.dataReceived(b"NOT HTTP\r\n")
    assert channel.request_line() is None


# twisted.web's client side


class Asking(ClientProtocolHooks):
    """A client connection recording what it is asked, and answering `keep`."""

    keep = True

    def __init__(self, quiescent=lambda connection: None) -> None:
        super().__init__(quiescent)
        self.asked: list[tuple[tuple[bytes, int, int], list[bytes]]] = []

    def answer_keeps_connection(self, version, connection) -> bool:
        self.asked.append((version, list(connection)))
        return self.keep


class Unfinished:
    """A request body that never finishes being written."""

    length = 2

    def startProducing(self, consumer) -> Deferred[None]:
        consumer.write(b"{")
        return Deferred()

    def stopProducing(self) -> None:
        pass

    def pauseProducing(self) -> None:
        pass

    def resumeProducing(self) -> None:
        pass


def exchange(connection: ClientProtocolHooks, answer: bytes, body=None) -> StringTransport:
    transport = StringTransport()
    connection.makeConnection(transport)
    request = ClientRequest(b"POST", b"/", Headers({b"host": [b"x"]}), body, persistent=True)
    responses = []
    connection.request(request).addBoth(responses.append)
    connection.dataReceived(answer)
    assert responses and responses[0].code == 200
    return transport


OK_11 = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


@pytest.mark.parametrize(
    "answer, asked",
    [
        (OK_11, ((b"HTTP", 1, 1), [])),
        (b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0\r\n\r\n", ((b"HTTP", 1, 0), [b"keep-alive"])),
    ],
)
@pytest.mark.parametrize("keep", [True, False])
def test_the_hook_decides_whether_the_connection_outlives_the_answer(answer, asked, keep):
    idle = []
    connection = Asking(idle.append)
    connection.keep = keep
    transport = exchange(connection, answer)
    assert connection.asked == [asked]
    assert idle == ([connection] if keep else [])  # back to the pool, or closed
    assert transport.disconnecting is not keep


def test_an_answer_before_the_request_was_all_sent_is_asked_about_too():
    connection = Asking()
    connection.keep = False
    exchange(connection, OK_11, Unfinished())
    assert connection.asked == [((b"HTTP", 1, 1), [])]


def test_by_default_twisteds_own_rule_decides():
    idle: list = []
    transport = exchange(ClientProtocolHooks(idle.append), b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n")
    assert len(idle) == 1 and not transport.disconnecting  # HTTP/1.0 without keep-alive, kept all the same
    idle.clear()
    transport = exchange(
        ClientProtocolHooks(idle.append), b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
    )
    assert idle == [] and transport.disconnecting


@implementer(IStreamClientEndpoint)
class MemoryEndpoint:
    """Connects each protocol the factory builds to a transport in memory."""

    def __init__(self) -> None:
        self.connected: list[tuple[object, StringTransport]] = []

    def connect(self, factory):
        protocol = factory.buildProtocol(None)
        transport = StringTransport()
        protocol.makeConnection(transport)
        self.connected.append((protocol, transport))
        return succeed(protocol)


class AskingFactory(ClientConnectionFactory):
    client_protocol = Asking


class Pool(ConnectionPoolHooks):
    connection_factory = AskingFactory
    retryAutomatically = False  # the pooled connection itself, not Twisted's retrying wrapper


def result_of(deferred: Deferred):
    results: list = []
    deferred.addBoth(results.append)
    return results[0]


def test_the_pool_connects_with_its_factory_and_takes_connections_back_when_idle():
    pool, endpoint = Pool(Clock()), MemoryEndpoint()
    connection = result_of(pool.getConnection("k", endpoint))
    assert type(connection) is Asking
    exchange(connection, OK_11)  # the factory passed on the pool's callback for an idle connection
    assert result_of(pool.getConnection("k", endpoint)) is connection
    assert len(endpoint.connected) == 1


def test_a_new_connection_is_made_past_the_idle_ones():
    pool, endpoint = Pool(Clock()), MemoryEndpoint()
    connection = result_of(pool.getConnection("k", endpoint))
    exchange(connection, OK_11)
    fresh = result_of(pool.new_connection("k", endpoint))
    assert type(fresh) is Asking and fresh is not connection
    assert len(endpoint.connected) == 2
    assert result_of(pool.getConnection("k", endpoint)) is connection  # still idle in the pool


# twisted.internet's TCP ports


class Counting(ServerFactory):
    """Counts the connections accepted, and closes each at once."""

    built = 0

    def buildProtocol(self, addr):
        self.built += 1
        return None


@pytest.fixture
def listening():
    server = socket.create_server(("127.0.0.1", 0))
    server.setblocking(False)
    clients: list[socket.socket] = []
    yield server, clients
    for client in clients:
        client.close()
    server.close()


@pytest.mark.parametrize("port_class, first_read", [(OneAcceptPerRead, 1), (tcp.Port, 3)])
@pytest_twisted.ensureDeferred
async def test_an_adopted_listening_socket_serves_as_the_port_class_given(listening, port_class, first_read):
    server, clients = listening
    factory = Counting()
    port = adopt_listening_port(port_class, reactor, server.fileno(), socket.AF_INET, factory)
    assert type(port) is port_class
    port.startListening()
    port.stopReading()  # the test reads it, not the reactor
    try:
        assert port.getHost().port == server.getsockname()[1]
        clients.extend(socket.create_connection(server.getsockname()) for _ in range(3))
        port.doRead()
        assert factory.built == first_read  # tcp.Port accepts all it can a read, OneAcceptPerRead one
        port.doRead()
        port.doRead()
        assert factory.built == 3
    finally:
        await port.stopListening()


# twisted.internet's epoll reactor


class Readable:
    """A selectable on one end of a socket pair: counts its reads; `broken` ones fail their
    read and then their disconnection, which escapes the reactor's own handling of a read."""

    def __init__(self, sock: socket.socket, broken: bool = False) -> None:
        self.sock, self.broken, self.reads = sock, broken, 0
        self.system: object = "not read"

    def fileno(self) -> int:
        return self.sock.fileno()

    def logPrefix(self) -> str:
        return "Readable"

    def doRead(self) -> None:
        self.reads += 1
        self.system = context.get("system")  # what twisted.python.log.msg would name
        self.sock.recv(100)
        if self.broken:
            raise RuntimeError("a broken read")

    def connectionLost(self, reason) -> None:
        if self.broken:
            raise RuntimeError("a broken disconnection")


@pytest.fixture
def epoll_reactor():
    made = EPollWithoutLogContext()
    yield made
    made.removeAll()
    made.waker.connectionLost(None)
    made._poller.close()


def test_the_epoll_reactor_reads_each_ready_socket_and_logs_what_escapes_one(epoll_reactor):
    pairs = [socket.socketpair() for _ in range(2)]
    broken, working = Readable(pairs[0][0], broken=True), Readable(pairs[1][0])
    logged: list[dict] = []
    globalLogPublisher.addObserver(logged.append)
    try:
        for selectable in (broken, working):
            epoll_reactor.addReader(selectable)
        for _, other in pairs:
            other.send(b"x")
        epoll_reactor.doPoll(1)
    finally:
        globalLogPublisher.removeObserver(logged.append)
        epoll_reactor.removeAll()
        for pair in pairs:
            for end in pair:
                end.close()
    assert (broken.reads, working.reads) == (1, 1)
    failures = [event for event in logged if event.get("log_namespace") == "apid.reactor"]
    assert len(failures) == 1 and "a broken disconnection" in str(failures[0]["log_failure"].value)
    assert working.system is None  # no legacy log context around the read


# CPython's asyncio


def test_running_loop_is_the_loop_running_in_this_thread_or_none():
    assert running_loop() is None
    loop = asyncio.new_event_loop()

    async def inside():
        return running_loop(), asyncio.get_running_loop()

    try:
        assert loop.run_until_complete(inside()) == (loop, loop)
    finally:
        loop.close()
    assert running_loop() is None


def twisted_driven_error(coroutine) -> BaseException:
    """What a coroutine raised, stepped by Twisted's driver with no asyncio loop running."""
    failures: list = []
    Deferred.fromCoroutine(coroutine).addErrback(failures.append)
    return failures[0].value


async def sleeping():
    await asyncio.sleep(0.01)


async def awaiting_a_future():
    other = asyncio.new_event_loop()
    try:
        await other.create_future()
    finally:
        other.close()


def test_what_awaiting_asyncio_without_a_loop_raises_is_learned_from_cpython():
    messages = asyncio_without_loop_messages()
    assert len(messages) == 2
    for coroutine in (sleeping(), awaiting_a_future()):
        error = twisted_driven_error(coroutine)
        assert type(error) is RuntimeError and str(error) in messages


def test_the_messages_are_not_learned_under_a_running_loop():
    loop = asyncio.new_event_loop()

    async def inside():
        asyncio_without_loop_messages.__wrapped__()  # past the cache

    try:
        with pytest.raises(RuntimeError, match="where no asyncio loop runs"):
            loop.run_until_complete(inside())
    finally:
        loop.close()
