"""A PROXY protocol header that cannot be read (issue 33, item 7): its connection is closed,
unanswered, with one log line naming the trusted peer, never an `Unhandled Error` traceback;
a good header, one split over two segments and a v2 LOCAL header (a proxy's own health
check) still work. Through the factory `client_endpoint` gives a `haproxy:` port."""

from __future__ import annotations

import pytest
from twisted.internet.address import IPv4Address
from twisted.internet.defer import succeed
from twisted.internet.protocol import Factory, Protocol
from twisted.internet.testing import StringTransport
from twisted.logger import LogLevel, capturedLogs

from apid.config.networks import TrustedProxies, proxy_network
from apid.http.proxies import client_endpoint

PROXY = "10.0.0.1"
TRUSTED = TrustedProxies((proxy_network("10.0.0.0/8"),))
V1 = b"PROXY TCP4 203.0.113.9 127.0.0.1 51000 8080\r\n"
V2_LOCAL = b"\r\n\r\n\x00\r\nQUIT\n\x20\x00\x00\x00"  # LOCAL, no addresses
REQUEST = b"GET /x HTTP/1.1\r\nHost: a\r\n\r\n"
MALFORMED = {
    "port not a number": b"PROXY TCP4 203.0.113.9 127.0.0.1 abc 8080\r\n",
    "port out of range": b"PROXY TCP4 203.0.113.9 127.0.0.1 99999 8080\r\n",
    "source not an address": b"PROXY TCP4 not-an-ip 127.0.0.1 51000 8080\r\n",
    "unknown protocol": b"PROXY TCP5 203.0.113.9 127.0.0.1 51000 8080\r\n",
    "missing fields": b"PROXY TCP4 203.0.113.9\r\n",
    "v2 addresses too short": b"\r\n\r\n\x00\r\nQUIT\n\x21\x11\x00\x05\x01\x02\x03\x04\x05",
    "no header at all": REQUEST,
}


class Socket:
    """An endpoint that keeps the factory it is asked to listen with."""

    factory = None

    def listen(self, factory):
        self.factory = factory
        return succeed(None)


class Served(Protocol):
    """What the application behind the port got: the bytes, and the client it was told of."""

    def connectionMade(self) -> None:
        self.factory.served.append(self)
        self.received = b""

    def dataReceived(self, data: bytes) -> None:
        self.received += data


def connect(*segments: bytes) -> tuple[StringTransport, list[Served]]:
    socket, application = Socket(), Factory.forProtocol(Served)
    application.served = []
    client_endpoint(socket, "haproxy:tcp:0", TRUSTED).listen(application)
    wrapper = socket.factory.buildProtocol(IPv4Address("TCP", PROXY, 40000))
    transport = StringTransport(peerAddress=IPv4Address("TCP", PROXY, 40000))
    wrapper.makeConnection(transport)
    for segment in segments:
        wrapper.dataReceived(segment)
    return transport, application.served


@pytest.mark.parametrize("header", list(MALFORMED.values()), ids=list(MALFORMED))
def test_a_header_that_cannot_be_read_closes_the_connection_with_one_log_line(header):
    with capturedLogs() as events:
        transport, served = connect(header + REQUEST)
    assert transport.value() == b"" and transport.disconnecting
    assert all(each.received == b"" for each in served)
    ours = [event for event in events if event["log_namespace"] == "apid.proxies"]
    assert len(ours) == 1 and ours[0]["peer"] == PROXY and ours[0]["log_level"] == LogLevel.warn, ours
    assert len(events) == 1 and "log_failure" not in events[0], events  # no `Unhandled Error`


@pytest.mark.parametrize("segments", [(V1 + REQUEST,), (V1[:20], V1[20:] + REQUEST)], ids=["whole", "split"])
def test_a_good_header_names_the_client(segments):
    transport, (served,) = connect(*segments)
    assert not transport.disconnecting and served.received == REQUEST
    assert served.transport.getPeer().host == "203.0.113.9"


def test_a_v2_local_header_serves_the_proxy_itself():
    transport, (served,) = connect(V2_LOCAL + REQUEST)
    assert not transport.disconnecting and served.received == REQUEST
    assert served.transport.getPeer().host == PROXY
