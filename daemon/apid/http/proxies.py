"""Who sent a request when apid sits behind reverse proxies: the client's address and scheme.

The TCP peer (or, on a port speaking the PROXY protocol, the source its header names) is the
client, unless it is one of `trustedProxies`. Only then are the forwarding headers read, and
the client is the first hop from the right that is not a trusted proxy (or the leftmost, when
every hop is one): a proxy appends the address it was reached from to what it received, so
everything left of the last untrusted hop may have been written by the client itself.

- `X-Forwarded-For` when the trusted peer sent one, with `X-Forwarded-Proto` (its rightmost
  value, the nearest proxy's) for the scheme;
- else `Forwarded` (RFC 7239: `for=` nodes, quoted values, `[IPv6]:port`, `unknown` and
  obfuscated `_name` nodes, several headers and elements), its client element's `proto=`
  for the scheme, `X-Forwarded-Proto` when that element has none.

X-Forwarded-For wins over Forwarded because the proxies apid documents (HAProxy's
`option forwardfor`, nginx's `$proxy_add_x_forwarded_for`) write X-Forwarded-For and pass a
client's own Forwarded through untouched: preferring Forwarded would let any client choose
its address. A header that cannot be read is ignored, never an error: the client is then the
peer. `ApidRequest.sender` resolves a request's client once (`apid.http.site`).

The PROXY protocol (`listen: haproxy:...`) is decided here too: `client_endpoint` wraps the
socket a daemon binds, or the one a worker adopts from its parent, in Twisted's PROXY protocol
parser, and with `trustedProxies` set closes a connection from any other peer before reading
it, so that nobody else can claim an address in a PROXY header. The client is then the source
the PROXY header names (its own forwarding headers count only if it is a trusted proxy too);
the proxy's X-Forwarded-Proto still gives the scheme, the PROXY protocol carrying none. A
header that cannot be read closes its connection with one log line (`apid.http.proxy_header`).

Per-address limits count an IPv6 client by its /64 (`client_group`, `security.ipv6Prefix`).
"""

from __future__ import annotations

import functools
import ipaddress
import re
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import (
    IAddress,
    IListeningPort,
    ILoggingContext,
    IProtocol,
    IProtocolFactory,
    IStreamServerEndpoint,
)
from twisted.logger import Logger
from twisted.web.http_headers import Headers
from zope.interface import implementer

from apid.config.networks import REMEMBERED, Address, TrustedProxies, ip_address_of

log = Logger(namespace="apid.proxies")

PROXY_PROTOCOL = "haproxy:"  # Twisted's endpoint prefix for a socket speaking the PROXY protocol
UNKNOWN = "unknown"  # the client of a peer without an IP address (a Unix socket), or of a hidden hop
REFUSALS_LOGGED = 1000  # peers whose refused PROXY connections are logged (once each) per process


@functools.lru_cache(maxsize=REMEMBERED)
def client_group(host: str, ipv6_prefix: int) -> str:
    """The client `host` (an address as text) counts as for per-address limits: an IPv6 address
    as its network of `ipv6_prefix` bits (`security.ipv6Prefix`), since one host or customer is
    usually given a whole /64 and may send from any address in it; any other as it is."""
    address = ip_address_of(host)
    if not isinstance(address, ipaddress.IPv6Address) or ipv6_prefix >= 128:
        return host
    return str(ipaddress.IPv6Network((address, ipv6_prefix), strict=False))


@dataclass(frozen=True)
class Client:
    """Who sent a request: `host`, its IP address as text (or `unknown`, or the obfuscated
    name a proxy gave it in Forwarded), and whether it reached the first proxy (or apid)
    over HTTPS."""

    host: str
    secure: bool


class Unreadable(ValueError):
    """A forwarding header the client would have to be read from does not parse."""


# --- nodes: one hop's address as a header writes it ----------------------------------------------

_PORT = r"(?::(?:[0-9]{1,5}|_[A-Za-z0-9._-]+))?"
_BRACKETED = re.compile(rf"\[([0-9A-Fa-f:.]+)\]{_PORT}")
_IPV4 = re.compile(rf"([0-9]{{1,3}}(?:\.[0-9]{{1,3}}){{3}}){_PORT}")
_OBFUSCATED = re.compile(rf"(_[A-Za-z0-9._-]+){_PORT}")


@functools.lru_cache(maxsize=REMEMBERED)
def _node(text: str) -> tuple[str, Address | None]:
    """A hop as X-Forwarded-For or a Forwarded `for=` writes it (`192.0.2.7`, `192.0.2.7:4711`,
    `2001:db8::7`, `[2001:db8::7]:4711`, `unknown`, `_hidden`): its name as apid counts it and
    its address, None for a hop that is hidden."""
    text = text.strip()
    if text.lower() == UNKNOWN:
        return UNKNOWN, None
    obfuscated = _OBFUSCATED.fullmatch(text)
    if obfuscated:
        return obfuscated[1], None
    written = _BRACKETED.fullmatch(text) or _IPV4.fullmatch(text)
    address = ip_address_of(written[1] if written else text)  # else a bare IPv6 address
    if address is None:
        raise Unreadable(f"not an address: {text!r}")
    return str(address), address


def _client_hop(nodes: list[str], trusted: TrustedProxies) -> tuple[int, str]:
    """The client among hops in the order they were appended, by index and name: the first
    from the right that is not a trusted proxy, else the leftmost. Only the hops walked are read."""
    for index in range(len(nodes) - 1, -1, -1):
        name, address = _node(nodes[index])
        if address is None or not trusted.holds(address):
            return index, name
    return 0, name


# --- the headers ------------------------------------------------------------------------------------

# RFC 7239: elements separated by commas, pairs by semicolons, each value a token or a quoted
# string. Unquoted values are read up to the next separator: some proxies write `for=1.2.3.4:80`.
_PAIR = re.compile(r'[ \t]*([A-Za-z0-9!#$%&\'*+.^_`|~-]+)[ \t]*=[ \t]*(?:"((?:[^"\\]|\\.)*)"|([^\s",;]*))[ \t]*')
_SEPARATOR = re.compile(r"[ \t]*([,;]|$)")
_ESCAPED = re.compile(r"\\(.)")


def forwarded_elements(text: str) -> list[dict[str, str]]:
    """The elements of a Forwarded value, each its parameters by lower-case name (empty
    elements dropped); Unreadable for anything RFC 7239 does not allow."""
    elements: list[dict[str, str]] = [{}]
    position = 0
    while True:
        pair = _PAIR.match(text, position)
        if pair:
            name = pair[1].lower()
            if name in elements[-1]:
                raise Unreadable(f"Forwarded: {name} given twice in one element")
            elements[-1][name] = _ESCAPED.sub(r"\1", pair[2]) if pair[2] is not None else pair[3]
            position = pair.end()
        separator = _SEPARATOR.match(text, position)
        if separator is None:
            raise Unreadable(f"Forwarded: cannot read {text[position:]!r}")
        if not separator[1]:
            return [element for element in elements if element]
        if separator[1] == ",":
            elements.append({})
        position = separator.end()


def _values(headers: Headers, name: bytes) -> list[str]:
    """A list header's elements from all its lines, in order (empty ones dropped)."""
    lines = headers.getRawHeaders(name) or []
    return [item.strip() for line in lines for item in line.decode("latin-1").split(",") if item.strip()]


def _scheme(proto: str | None) -> bool | None:
    """Whether a forwarded scheme is https; None when it names neither http nor https."""
    word = (proto or "").strip().lower()
    return {"https": True, "http": False}.get(word)


def _forwarded_proto(headers: Headers) -> bool | None:
    protos = _values(headers, b"x-forwarded-proto")
    return _scheme(protos[-1]) if protos else None


def _from_headers(headers: Headers, trusted: TrustedProxies) -> tuple[str | None, bool | None]:
    """The client's name and scheme as a trusted peer's headers give them (None: not given)."""
    hops = _values(headers, b"x-forwarded-for")
    if hops:
        return _client_hop(hops, trusted)[1], _forwarded_proto(headers)
    lines = headers.getRawHeaders(b"forwarded")
    if not lines:
        return None, _forwarded_proto(headers)
    elements = forwarded_elements(",".join(line.decode("latin-1") for line in lines))
    if not elements:
        return None, _forwarded_proto(headers)
    index, name = _client_hop([each.get("for", UNKNOWN) for each in elements], trusted)
    proto = _scheme(elements[index].get("proto"))
    return name, _forwarded_proto(headers) if proto is None else proto


def resolve(
    peer: IAddress | None, secure: bool, headers: Headers, trusted: TrustedProxies, relayed: bool = False
) -> Client:
    """The client of a request from `peer` (its transport secure or not) with `headers`.
    `relayed`: `peer` is the client a trusted proxy named in a PROXY header, and the headers
    are that proxy's, so its X-Forwarded-Proto counts whoever the client is."""
    host = getattr(peer, "host", None)
    if host is None:
        return Client(UNKNOWN, secure)
    if not trusted.trusts(host):
        forwarded_secure = _forwarded_proto(headers) if relayed else None
        return Client(host, secure if forwarded_secure is None else forwarded_secure)
    try:
        name, forwarded_secure = _from_headers(headers, trusted)
    except Unreadable:
        return Client(host, secure)
    return Client(host if name is None else name, secure if forwarded_secure is None else forwarded_secure)


# --- the listening side: the PROXY protocol and who may speak it --------------------------------------


def speaks_proxy_protocol(listen: str) -> bool:
    """Whether connections to `listen` (an endpoint string) begin with a PROXY protocol header."""
    return listen.startswith(PROXY_PROTOCOL)


def socket_listen(listen: str) -> str:
    """The socket `listen` names, without the PROXY protocol `client_endpoint` adds back."""
    return listen.removeprefix(PROXY_PROTOCOL)


@runtime_checkable
class ServesBehindProxies(Protocol):
    """A factory that tells clients from their proxies (`apid.http.site.OpenConnections`)."""

    def serve_behind(self, trusted: TrustedProxies, relayed: bool) -> None: ...


@implementer(IProtocolFactory, ILoggingContext)
class _ProxiesOnly:
    """`factory`'s connections, from `trusted` peers only: any other is closed before a byte
    of it is read (it would name any client it likes in its PROXY header)."""

    def __init__(self, factory: IProtocolFactory, trusted: TrustedProxies) -> None:
        self._factory = factory
        self._trusted = trusted
        self._logged: set[str] = set()

    def buildProtocol(self, addr: IAddress) -> IProtocol | None:
        host = getattr(addr, "host", None)
        if host is None or self._trusted.trusts(host):
            return self._factory.buildProtocol(addr)
        if host not in self._logged and len(self._logged) < REFUSALS_LOGGED:
            self._logged.add(host)
            log.warn(
                "{peer} is not in trustedProxies ({trusted}): its connections to a port speaking the PROXY "
                "protocol are closed",
                peer=host,
                trusted=str(self._trusted),
            )
        return None

    def logPrefix(self) -> str:
        """What the port's log lines name it by: the factory it serves (`... (PROXY) starting on 8080`)."""
        inner = self._factory
        return inner.logPrefix() if ILoggingContext.providedBy(inner) else type(inner).__name__

    def doStart(self) -> None:
        self._factory.doStart()

    def doStop(self) -> None:
        self._factory.doStop()


@implementer(IStreamServerEndpoint)
class _ProxiesOnlyEndpoint:
    def __init__(self, socket: IStreamServerEndpoint, trusted: TrustedProxies) -> None:
        self._socket = socket
        self._trusted = trusted

    def listen(self, factory: IProtocolFactory) -> Deferred[IListeningPort]:
        return self._socket.listen(_ProxiesOnly(factory, self._trusted))


@implementer(IStreamServerEndpoint)
class ClientEdge:
    """The endpoint apid's clients arrive through; tells the factory it serves which peers are
    proxies when it listens, and whether every connection is relayed by one of them through
    the PROXY protocol."""

    def __init__(self, endpoint: IStreamServerEndpoint, trusted: TrustedProxies, relayed: bool) -> None:
        self._endpoint = endpoint
        self._trusted = trusted
        self._relayed = relayed

    def listen(self, factory: IProtocolFactory) -> Deferred[IListeningPort]:
        if isinstance(factory, ServesBehindProxies):
            factory.serve_behind(self._trusted, self._relayed)
        return self._endpoint.listen(factory)


def client_endpoint(socket: IStreamServerEndpoint, listen: str, trusted: TrustedProxies) -> ClientEdge:
    """`socket` (bound from `socket_listen(listen)`, or the parent's, adopted by a worker, which
    loses the wrappers the parent's endpoint had) serving clients as `listen` says: through
    the PROXY protocol for `haproxy:...`, from `trusted` peers only when any are set."""
    relayed = speaks_proxy_protocol(listen) and bool(trusted)
    if relayed:
        socket = _ProxiesOnlyEndpoint(socket, trusted)
    if speaks_proxy_protocol(listen):
        # here: a daemon not behind the PROXY protocol never loads Twisted's parser of it
        from apid.http.proxy_header import StrictProxyEndpoint

        socket = StrictProxyEndpoint(socket)
    return ClientEdge(socket, trusted, relayed)
