"""The client behind proxies (apid.http.proxies): who a request is from and over which scheme, read
from a trusted peer's X-Forwarded-For or Forwarded (RFC 7239) and X-Forwarded-Proto, and
ignored from anyone else; `trustedProxies` as read from service_server.yml; the PROXY
protocol wrapped around any socket, refused from untrusted peers; and what the HTTP edge does
with the client (access log, isSecure, connection cap, request ids)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from twisted.internet.address import IPv4Address, IPv6Address, UNIXAddress
from twisted.internet.defer import succeed
from twisted.internet.interfaces import IStreamServerEndpoint
from twisted.internet.task import Clock
from twisted.logger import capturedLogs
from twisted.web.http_headers import Headers
from twisted.web.resource import Resource
from twisted.web.test.requesthelper import DummyRequest
from zope.interface import implementer

from apid.config.files import load_server
from apid.config.networks import TrustedProxies, proxy_network
from apid.config.nodes import ConfigError
from apid.http.answers import request_id, write_json
from apid.http.proxies import (
    UNKNOWN,
    Client,
    client_endpoint,
    forwarded_elements,
    resolve,
    socket_listen,
    speaks_proxy_protocol,
)
from apid.http.site import ApidSite, OpenConnections, TextPaths
from http_in_memory import Transport, parse_answers

PROXY = "10.0.0.1"
TRUSTED = TrustedProxies((proxy_network("10.0.0.0/8"), proxy_network("fd00::/8")))


def client(*headers: tuple[str, str], peer: str = PROXY, secure: bool = False, trusted=TRUSTED) -> Client:
    raw = Headers()
    for name, value in headers:
        raw.addRawHeader(name.encode(), value.encode("latin-1"))
    address = IPv6Address("TCP", peer, 40000) if ":" in peer else IPv4Address("TCP", peer, 40000)
    return resolve(address, secure, raw, trusted)


def xff(value: str) -> tuple[str, str]:
    return ("X-Forwarded-For", value)


def forwarded(value: str) -> tuple[str, str]:
    return ("Forwarded", value)


# --- who may forward -------------------------------------------------------------------------------


def test_nobody_is_trusted_by_default_and_every_forwarding_header_is_ignored():
    headers = (xff("203.0.113.9"), forwarded("for=203.0.113.9;proto=https"), ("X-Forwarded-Proto", "https"))
    assert client(*headers, trusted=TrustedProxies()) == Client(PROXY, False)


def test_from_a_peer_that_is_no_trusted_proxy_the_headers_are_ignored():
    headers = (xff("203.0.113.9"), forwarded("for=203.0.113.9"), ("X-Forwarded-Proto", "https"))
    assert client(*headers, peer="198.51.100.4") == Client("198.51.100.4", False)


def test_a_trusted_proxy_without_forwarding_headers_is_the_client_itself():
    """Its own requests, such as its health checks."""
    assert client() == Client(PROXY, False)
    assert client(secure=True) == Client(PROXY, True)


def test_a_peer_without_an_address_is_unknown():
    assert resolve(UNIXAddress(b"/run/apid.sock"), False, Headers(), TRUSTED) == Client(UNKNOWN, False)
    assert resolve(None, False, Headers(), TRUSTED) == Client(UNKNOWN, False)


def test_an_ipv4_peer_on_a_dual_stack_socket_is_trusted_by_its_ipv4_range():
    assert client(xff("203.0.113.9"), peer="::ffff:10.0.0.1").host == "203.0.113.9"
    assert client(xff("203.0.113.9"), peer="fd00::5").host == "203.0.113.9"
    assert client(xff("203.0.113.9"), peer="2001:db8::5").host == "2001:db8::5"


# --- X-Forwarded-For ----------------------------------------------------------------------------------


def test_the_client_is_the_address_the_trusted_proxy_appended():
    assert client(xff("203.0.113.9")).host == "203.0.113.9"


def test_a_client_sent_x_forwarded_for_cannot_choose_its_address():
    """HAProxy's `option forwardfor` and nginx's `$proxy_add_x_forwarded_for` append the real
    peer to what the client sent: right to left, the first untrusted hop is the real one."""
    assert client(xff("6.6.6.6, 203.0.113.9")).host == "203.0.113.9"
    assert client(xff("10.0.0.7, 203.0.113.9")).host == "203.0.113.9"  # posing as a proxy changes nothing
    assert client(xff("6.6.6.6"), xff("203.0.113.9")).host == "203.0.113.9"  # two header lines, in order


def test_trusted_hops_are_skipped_from_the_right():
    assert client(xff("6.6.6.6, 203.0.113.9, 10.0.0.3, 10.0.0.2")).host == "203.0.113.9"


def test_when_every_hop_is_trusted_the_leftmost_is_the_client():
    assert client(xff("10.1.2.3, 10.0.0.2")).host == "10.1.2.3"


@pytest.mark.parametrize(
    ("written", "host"),
    [
        ("203.0.113.9:4711", "203.0.113.9"),
        ("2001:DB8:0::9", "2001:db8::9"),
        ("[2001:db8::9]", "2001:db8::9"),
        ("[2001:db8::9]:4711", "2001:db8::9"),
        ("::ffff:203.0.113.9", "203.0.113.9"),
        (" 203.0.113.9 ,", "203.0.113.9"),  # blanks and empty elements are no hops
    ],
)
def test_addresses_are_read_as_proxies_write_them_and_counted_in_one_form(written, host):
    assert client(xff(written)).host == host


@pytest.mark.parametrize("written", ["garbage", "203.0.113", "203.0.113.9.1", "[203.0.113.9]x", "999.1.1.1", "_x:y"])
def test_an_unreadable_hop_where_the_client_is_looked_for_leaves_the_peer_as_the_client(written):
    assert client(xff(f"203.0.113.9, {written}")) == Client(PROXY, False)


def test_an_unreadable_hop_left_of_the_client_is_never_read():
    assert client(xff("<script>, 203.0.113.9")).host == "203.0.113.9"


def test_x_forwarded_proto_gives_the_scheme_the_client_used():
    assert client(xff("203.0.113.9"), ("X-Forwarded-Proto", "https")) == Client("203.0.113.9", True)
    assert client(xff("203.0.113.9"), ("X-Forwarded-Proto", "HTTP"), secure=True).secure is False
    assert client(("X-Forwarded-Proto", "https")) == Client(PROXY, True)  # a TLS terminator naming no client
    assert client(xff("203.0.113.9"), ("X-Forwarded-Proto", "http, https")).secure is True  # the nearest proxy's
    assert client(xff("203.0.113.9"), ("X-Forwarded-Proto", "gopher"), secure=True).secure is True


# --- Forwarded (RFC 7239) -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "host"),
    [  # the examples of RFC 7239, section 4
        ('for="_gazonk"', "_gazonk"),
        ('For="[2001:db8:cafe::17]:4711"', "2001:db8:cafe::17"),
        ("for=192.0.2.60;proto=http;by=203.0.113.43", "192.0.2.60"),
        ("for=192.0.2.43, for=198.51.100.17", "198.51.100.17"),
        ("for=unknown", UNKNOWN),
        ('for="_hidden:_port"', "_hidden"),
        ("proto=https", UNKNOWN),  # an element naming no client: the proxy did not say
    ],
)
def test_forwarded_names_the_client(value, host):
    assert client(forwarded(value)).host == host


def test_forwarded_is_walked_right_to_left_over_every_header_line():
    assert client(forwarded("for=6.6.6.6"), forwarded('for=203.0.113.9, for="10.0.0.2"')).host == "203.0.113.9"
    assert client(forwarded("for=10.1.2.3, for=10.0.0.2")).host == "10.1.2.3"


def test_a_hidden_hop_ends_the_walk():
    """Nobody left of a hop the proxy would not name can be believed."""
    assert client(forwarded("for=203.0.113.9, for=_proxy2, for=10.0.0.2")).host == "_proxy2"


def test_the_scheme_is_the_client_elements_proto():
    assert client(forwarded("for=203.0.113.9;proto=https, for=10.0.0.2;proto=http")) == Client("203.0.113.9", True)
    assert client(forwarded("for=203.0.113.9"), ("X-Forwarded-Proto", "https")).secure is True


@pytest.mark.parametrize(
    "value",
    [
        'for="203.0.113.9',  # an unterminated quoted string
        "for=203.0.113.9;for=198.51.100.2",  # a parameter twice in one element
        "for=203.0.113.9 junk",
        "=203.0.113.9",
        "for=not-an-address",
    ],
)
def test_an_unreadable_forwarded_leaves_the_peer_as_the_client(value):
    assert client(forwarded(value), ("X-Forwarded-Proto", "https")) == Client(PROXY, False)


def test_forwarded_values_are_read_as_rfc_7239_writes_them():
    assert forwarded_elements('for="a\\"b;c,d";Proto=HTTPS , ,for=x') == [
        {"for": 'a"b;c,d', "proto": "HTTPS"},
        {"for": "x"},
    ]


def test_x_forwarded_for_wins_over_forwarded():
    """A proxy writing X-Forwarded-For passes a client's own Forwarded on untouched."""
    headers = (forwarded("for=6.6.6.6;proto=https"), xff("203.0.113.9"), ("X-Forwarded-Proto", "http"))
    assert client(*headers) == Client("203.0.113.9", False)


# --- trustedProxies in service_server.yml --------------------------------------------------------------


def server_file(tmp_path: Path, entries: str) -> Path:
    path = tmp_path / "service_server.yml"
    path.write_text(f"test:\n  trustedProxies:\n{entries}", encoding="utf-8")
    return path


def test_trusted_proxies_are_read_per_environment_as_addresses_and_ranges(tmp_path):
    path = server_file(tmp_path, "    - 127.0.0.1\n    - 10.0.0.0/8\n    - '::1'\n    - fd00::/8\n")
    trusted = load_server(path, "test", tmp_path, {}).trusted_proxies
    assert [str(network) for network in trusted.networks] == ["127.0.0.1/32", "10.0.0.0/8", "::1/128", "fd00::/8"]
    assert load_server(path, "development", tmp_path, {}).trusted_proxies == TrustedProxies()


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        (
            "    - 127.0.0.1\n    - proxy.example.com\n",
            ":4: test.trustedProxies[1]: must be an IP address or CIDR range (such as 10.0.0.5, 10.0.0.0/8 or "
            "fd00::/8), got 'proxy.example.com'",
        ),
        (
            "    - 10.0.0.1/8\n",
            ":3: test.trustedProxies[0]: '10.0.0.1/8' has bits set past its prefix length: did you mean 10.0.0.0/8?",
        ),
        ("    127.0.0.1\n", ":2: test.trustedProxies: expected a list of strings, got str '127.0.0.1'"),
    ],
)
def test_a_wrong_entry_is_refused_naming_the_file_line_and_key(tmp_path, entries, message):
    path = server_file(tmp_path, entries)
    with pytest.raises(ConfigError) as info:
        load_server(path, "test", tmp_path, {})
    assert str(info.value) == f"{path}{message}"


# --- the HTTP edge ------------------------------------------------------------------------------------


class Sender(Resource):
    """Answers who sent the request, as the application sees it."""

    isLeaf = True

    def render(self, request) -> bytes:
        return write_json(request, {"host": request.sender().host, "secure": request.isSecure()})


def serving(trusted: TrustedProxies, per_address: int = 2) -> OpenConnections:
    site = ApidSite(resource=TextPaths(Sender()), max_body_bytes=1024, limits=None)
    site.reactor = Clock()
    connections = OpenConnections(site, per_address)
    connections.serve_behind(trusted, relayed=False)
    return connections


def ask(connections: OpenConnections, peer: str, request: bytes) -> tuple[Transport, list]:
    transport = Transport(peerAddress=IPv4Address("TCP", peer, 40000))
    wrapper = connections.buildProtocol(IPv4Address("TCP", peer, 40000))
    wrapper.makeConnection(transport)
    with capturedLogs() as events:
        wrapper.dataReceived(request)
    return transport, [event for event in events if event["log_namespace"] == "apid.access"]


def test_the_application_and_the_access_log_see_the_forwarded_client_and_scheme():
    request = b"GET /x HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 6.6.6.6, 203.0.113.9\r\nX-Forwarded-Proto: https\r\n\r\n"
    transport, logged = ask(serving(TRUSTED), PROXY, request)
    assert parse_answers(transport.value())[0].json == {"host": "203.0.113.9", "secure": True}
    assert [(event["client"], event["scheme"]) for event in logged] == [("203.0.113.9", "https")]


def test_the_edge_ignores_forwarding_headers_from_an_untrusted_peer():
    request = b"GET /x HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 203.0.113.9\r\nX-Forwarded-Proto: https\r\n\r\n"
    transport, logged = ask(serving(TRUSTED), "198.51.100.4", request)
    assert parse_answers(transport.value())[0].json == {"host": "198.51.100.4", "secure": False}
    assert [event["client"] for event in logged] == ["198.51.100.4"]


def test_a_trusted_proxys_connections_are_not_capped_per_address_and_others_are():
    connections = serving(TRUSTED, per_address=2)
    proxied = [connections.buildProtocol(IPv4Address("TCP", PROXY, port)) for port in range(10)]
    assert None not in proxied
    direct = [connections.buildProtocol(IPv4Address("TCP", "198.51.100.4", port)) for port in range(3)]
    assert direct[2] is None


def test_request_ids_apid_makes_are_32_random_hex_characters():
    ids = [request_id(DummyRequest([b""])) for _ in range(3)]
    assert all(re.fullmatch("[0-9a-f]{32}", made) for made in ids)
    # no per-process prefix, no counter: no id tells anything of another
    assert len({made[:8] for made in ids}) == 3 and len({made[-8:] for made in ids}) == 3


# --- listening: the PROXY protocol --------------------------------------------------------------------


@implementer(IStreamServerEndpoint)
class Socket:
    """An endpoint that keeps the factory it is asked to listen with."""

    factory = None

    def listen(self, factory):
        self.factory = factory
        return succeed(None)


def test_the_proxy_protocol_is_decided_by_the_listen_prefix():
    assert speaks_proxy_protocol("haproxy:tcp:8080:interface=127.0.0.1")
    assert speaks_proxy_protocol("haproxy:systemd:domain=INET:index=0")
    assert not speaks_proxy_protocol("tcp:8080:interface=127.0.0.1")
    assert socket_listen("haproxy:systemd:domain=INET:index=0") == "systemd:domain=INET:index=0"
    assert socket_listen("tcp:8080") == "tcp:8080"


def listening(listen: str, trusted: TrustedProxies):
    """The factory the socket gets when `client_endpoint` makes a port of `listen`."""
    socket = Socket()
    client_endpoint(socket, listen, trusted).listen(serving(trusted))
    return socket.factory


def proxied(listen: str | object, trusted: TrustedProxies, peer: str, data: bytes) -> Transport | None:
    """`data` sent on a connection from `peer` to the port `listen` (or the factory of one);
    the connection's transport, or None when it was refused before anything was read."""
    factory = listening(listen, trusted) if isinstance(listen, str) else listen
    wrapper = factory.buildProtocol(IPv4Address("TCP", peer, 40000))
    if wrapper is None:
        return None
    transport = Transport(peerAddress=IPv4Address("TCP", peer, 40000))
    wrapper.makeConnection(transport)
    wrapper.dataReceived(data)
    return transport


V1 = b"PROXY TCP4 203.0.113.9 127.0.0.1 51000 8080\r\n"
V2 = (
    b"\r\n\r\n\x00\r\nQUIT\n"  # signature
    + b"\x21\x11\x00\x0c"  # PROXY, TCP over IPv4, 12 bytes of addresses
    + bytes([203, 0, 113, 9, 127, 0, 0, 1])
    + (51000).to_bytes(2, "big")
    + (8080).to_bytes(2, "big")
)
GET = b"GET /x HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 6.6.6.6\r\n\r\n"


@pytest.mark.parametrize("header", [V1, V2], ids=["v1", "v2"])
def test_a_proxy_protocol_port_takes_the_client_from_the_proxy_header(header):
    transport = proxied("haproxy:tcp:0", TRUSTED, PROXY, header + GET)
    # the client named in the header is no trusted proxy: an X-Forwarded-For changes nothing
    assert parse_answers(transport.value())[0].json == {"host": "203.0.113.9", "secure": False}


def test_a_proxy_protocol_port_takes_the_scheme_from_the_proxys_x_forwarded_proto():
    """The PROXY protocol carries no scheme: a proxy terminating TLS says it in a header."""
    request = b"GET /x HTTP/1.1\r\nHost: a\r\nX-Forwarded-Proto: https\r\n\r\n"
    transport = proxied("haproxy:tcp:0", TRUSTED, PROXY, V1 + request)
    assert parse_answers(transport.value())[0].json == {"host": "203.0.113.9", "secure": True}
    untrusted = proxied("haproxy:tcp:0", TrustedProxies(), PROXY, V1 + request)  # nobody vouches for it
    assert parse_answers(untrusted.value())[0].json == {"host": "203.0.113.9", "secure": False}


def test_a_proxy_protocol_port_refuses_peers_outside_trusted_proxies_before_reading_them():
    port = listening("haproxy:tcp:0", TRUSTED)
    with capturedLogs() as events:
        assert proxied(port, TRUSTED, "198.51.100.4", V1 + GET) is None
        assert proxied(port, TRUSTED, "198.51.100.4", V1 + GET) is None  # logged once per peer
    assert [event["peer"] for event in events if event["log_namespace"] == "apid.proxies"] == ["198.51.100.4"]


def test_without_trusted_proxies_a_proxy_protocol_port_believes_any_peer():
    transport = proxied("haproxy:tcp:0", TrustedProxies(), "198.51.100.4", V1 + GET)
    assert parse_answers(transport.value())[0].json == {"host": "203.0.113.9", "secure": False}


def test_a_connection_without_the_proxy_header_is_closed_unanswered():
    transport = proxied("haproxy:tcp:0", TRUSTED, PROXY, GET)
    assert transport.value() == b""
    assert transport.disconnecting


def test_a_plain_port_serves_the_forwarded_client():
    transport = proxied("tcp:0", TRUSTED, PROXY, b"GET /x HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: 203.0.113.9\r\n\r\n")
    assert parse_answers(transport.value())[0].json == {"host": "203.0.113.9", "secure": False}
