"""The HTTP edge: reading requests into plain values and writing JSON and problem responses.

One JSON encoder, one problem renderer, one body reader. The `Site` built here refuses a
request body over `maxBodyBytes` as soon as that is known (twisted.web has no limit of its
own), answers requests twisted.web cannot parse with problems too, cuts a request that does
not arrive whole in time, gives every answer the same security headers and the request's id,
and writes its access log as structured twisted.logger events naming the client behind any
trusted proxies (`ApidRequest.sender`, resolved by `apid.http.proxies`). `OpenConnections` caps the
connections one client address holds open; a trusted proxy's are not capped.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, cast
from urllib.parse import unquote_to_bytes

from twisted.internet.interfaces import IAddress, IDelayedCall
from twisted.internet.protocol import connectionDone
from twisted.logger import Logger
from twisted.protocols.policies import ProtocolWrapper, WrappingFactory
from twisted.python.failure import Failure
from twisted.web.http import Request, datetimeToString
from twisted.web.resource import IResource, Resource
from twisted.web.server import Request as SiteRequest
from twisted.web.server import Site

from apid.config.networks import TrustedProxies
from apid.config.server import ConnectionLimits
from apid.http.answers import request_id, set_answer_headers, too_large, write_problem
from apid.http.proxies import UNKNOWN, Client, client_group, resolve
from apid.private_apis import HTTPChannelHooks
from apid.problems import (
    BadRequest,
    HeadersTooLarge,
    MethodNotAllowed,
    Problem,
    RequestTimeout,
    UriTooLong,
)

access_log = Logger(namespace="apid.access")
log = Logger(namespace="apid.http")

# How long a connection answered before its request was whole is still read (and the rest of
# the request dropped) before it closes: closing at once, with request bytes unread, would
# reset the connection and could destroy the answer before the client reads it.
LINGER_SECONDS = 2.0
# What the site reports each answered request to: endpoint, API version, method, status, seconds.
Observer = Callable[[str, str, bytes, int, float], None]


class BoundedBody(io.BytesIO):
    """A request body buffer that stops storing past `limit` bytes and remembers it did."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit
        self.overflowed = False

    def write(self, data: bytes) -> int:  # type: ignore[override]
        if self.overflowed or self.tell() + len(data) > self.limit:
            self.overflowed = True
            return len(data)
        return super().write(data)


class ApidRequest(SiteRequest):
    """A request that stops its body at the limit, knows its client behind trusted proxies
    (`sender`), and is answered with `early_answer` when its channel could not let it reach
    the application."""

    channel: ApidChannel
    content: BoundedBody | None  # made by ApidSite.getContentFile once the headers are in
    early_answer: Problem | None = None
    request_id: str | None = None  # see `request_id`
    # What metrics and the access log name the request by, set by the application once the
    # request reached an endpoint or a route: a bounded set of names, never the path sent.
    endpoint_name = "other"
    api_version = ""
    began = 0.0  # time.monotonic() when the headers were in
    # Whose forwarding headers count, taken from the site with the headers: the channel is gone
    # once the connection is, and an action may still ask for its client then.
    trusted_proxies = TrustedProxies()
    relayed = False
    _sender: Client | None = None

    def gotLength(self, length: int | None) -> None:
        self.began = time.monotonic()
        site = self.channel.site
        self.trusted_proxies, self.relayed = site.trusted_proxies, site.relayed
        super().gotLength(length)

    def sender(self) -> Client:
        """Who sent this request, through any trusted proxies (apid.http.proxies), resolved once."""
        if self._sender is None:
            self._sender = resolve(
                self.getClientAddress(), super().isSecure(), self.requestHeaders, self.trusted_proxies, self.relayed
            )
        return self._sender

    def isSecure(self) -> bool:
        """Whether the client used HTTPS: to apid, or to the first of the trusted proxies."""
        return self.sender().secure

    def handleContentChunk(self, data: bytes) -> None:
        if self.early_answer is not None:
            return  # the rest of a body answered already: dropped
        super().handleContentChunk(data)
        body = self.content
        if body is not None and body.overflowed:
            self.channel.answer_early(too_large(body.limit))

    def process(self) -> None:
        if self.path == b"*" and self.method != b"OPTIONS":
            self.early_answer = MethodNotAllowed("only OPTIONS may be asked of * (the whole server)", allow=["OPTIONS"])
        if self.early_answer is None:
            super().process()
        else:
            self._answer(self.early_answer)

    def _answer(self, problem: Problem) -> None:
        """Answer `problem` without routing the request: it cannot or must not reach the application."""
        self.site = self.channel.site
        self.setHeader(b"Date", datetimeToString())
        body = write_problem(self, problem)
        self.setHeader(b"Content-Length", b"%d" % len(body))
        self.write(body)
        self.finish()

    def write(self, data: bytes) -> None:
        if not self.startedWriting:
            set_answer_headers(self)
        super().write(data)


class _ConnectionTransport(Protocol):
    """What ApidChannel asks of its transport, a TCP or TLS connection (the cap of connections
    per address wraps it and passes each on). Twisted types a protocol's transport as an
    optional ITransport, which has no half close and no abort, and `disconnecting`, which every
    Twisted transport has, is in no interface."""

    disconnecting: bool

    def loseConnection(self) -> None: ...

    def loseWriteConnection(self) -> None: ...

    def abortConnection(self) -> None: ...


class ApidChannel(HTTPChannelHooks):
    """An HTTP/1.1 connection that answers, with a problem, a request it must refuse before it
    is whole (a body declared or grown over the limit, headers too long, bytes that are not
    HTTP, a request not whole by its deadline), then drops the rest of the request and closes.

    twisted.web's idle timeout, which every chunk of bytes resets, governs a connection between
    requests; it cannot bound a request sent a byte at a time. So a request has deadlines of
    its own (`ConnectionLimits`): its headers from its first byte, then its body for its size.
    One timer per connection does it, started only when a chunk leaves a request unfinished
    (a request arriving whole costs none) and cancelled once the request is whole."""

    site: ApidSite  # set by the site that built it
    _answered_early = False
    _linger: IDelayedCall | None = None
    _host: Any = None
    _secure: bool | None = None
    _deadline: IDelayedCall | None = None  # fires if the request being received is not whole by then
    _credited = 0  # the bytes of a chunked body its deadline already allows time for

    def getHost(self) -> Any:
        """The local address, asked of the socket once per connection, not once per request."""
        if self._host is None:
            self._host = super().getHost()
        return self._host

    def isSecure(self) -> bool:
        """Whether the connection is TLS, asked of the transport once per connection (an
        interface lookup: a twentieth of a request's time), not once per request."""
        if self._secure is None:
            self._secure = super().isSecure()
        return self._secure

    def request_unfinished(self) -> None:
        # A chunk left a request begun and not whole while none is being answered: its clock runs.
        if self._deadline is None and not self._answered_early:
            self._start_deadline()

    def _connection(self) -> _ConnectionTransport:
        # see _ConnectionTransport: a connected channel's transport is one
        return cast(_ConnectionTransport, self.transport)

    def _body_arriving(self) -> BoundedBody | None:
        """The body of the request being received, once its headers are in (twisted.web makes
        the body's buffer when they are)."""
        return self.requests[-1].content if self.requests else None

    def _time_allowed(self) -> float:
        """Seconds from now the request being received has: its headers' time until they are
        in, then its body's for the size it declares (a chunked body: the base time, and more
        as its bytes arrive, see `_request_overdue`)."""
        limits = self.site.limits
        if self._body_arriving() is None:
            return limits.header_timeout
        return limits.body_seconds(self.length or 0)

    def _start_deadline(self) -> None:
        self._deadline = self.callLater(self._time_allowed(), self._request_overdue)

    def _stop_deadline(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _request_overdue(self) -> None:
        """The request being received is not whole by its deadline. A chunked body gets the time
        the bytes that arrived since the last look earn; anything else is answered 408 and the
        connection closed, or just closed when the client reads nothing (a 408 would wait
        behind what it has not read) or the connection is closing already."""
        self._deadline = None
        limits = self.site.limits
        body = self._body_arriving()
        received = 0 if body is None else body.tell()
        if self.length is None and received > self._credited:  # chunked, and more of it arrived
            self._deadline = self.callLater((received - self._credited) / limits.body_rate, self._request_overdue)
            self._credited = received
            return
        connection = self._connection()
        if self.writes_paused() or connection.disconnecting:
            connection.abortConnection()
        elif body is None:
            self.answer_early(
                RequestTimeout(
                    f"the request's headers did not arrive within {limits.header_timeout:g} s of its first byte"
                )
            )
        else:
            self.answer_early(
                RequestTimeout(
                    f"the request body arrived too slowly: {limits.body_timeout:g} s and one more for "
                    f"every {limits.body_rate} bytes of it are allowed"
                )
            )

    def allHeadersReceived(self) -> None:
        limit = self.site.max_body_bytes
        if self.length is not None and self.length > limit:
            # Refused before a 100 Continue is sent or a byte of the body is read.
            self.requests[-1].gotLength(self.length)
            self.answer_early(too_large(limit))
        else:
            super().allHeadersReceived()
            if self.length != 0:
                self._body_follows()

    def _body_follows(self) -> None:
        """The headers are in and a body follows: from now on its own time runs, not what is
        left of the headers'."""
        self._credited = 0
        if self._deadline is not None:
            self._stop_deadline()
            self._start_deadline()

    def answer_early(self, problem: Problem) -> None:
        """Answer the request being received with `problem` now, then close the connection."""
        if self._answered_early:
            return
        self._answered_early = True
        self._stop_deadline()
        self.persistent = False
        if not self.requests:
            self.requests.append(self.requestFactory(self, 0))
        request = self.requests[-1]
        request.early_answer = problem
        request.setHeader(b"Connection", b"close")
        if request.content is None:
            request.gotLength(0)
        # A request line that could not be parsed leaves no method or path to answer for.
        method, path, version = self.request_line() or (b"-", b"", b"HTTP/1.1")
        request.requestReceived(method, path, version)

    def lineReceived(self, line: bytes) -> None:
        if not self._answered_early:
            super().lineReceived(line)

    def rawDataReceived(self, data: bytes) -> None:
        if not self._answered_early:
            super().rawDataReceived(data)

    def allContentReceived(self) -> None:
        if not self._answered_early:
            self._stop_deadline()
            super().allContentReceived()

    def lineLengthExceeded(self, line: bytes) -> None:
        if self._answered_early:
            return
        if self.requests:
            self.answer_early(HeadersTooLarge(f"a request header is longer than {self.MAX_LENGTH} bytes"))
        else:
            self.answer_early(UriTooLong(f"the request line is longer than {self.MAX_LENGTH} bytes"))

    def unparseable_request(self, headers_over_limits: bool) -> None:
        """Answer a problem where twisted.web would answer a bare 400 without headers or body."""
        if headers_over_limits:
            self.answer_early(
                HeadersTooLarge(
                    f"the request has more than {self.maxHeaders} headers or {self.totalHeadersSize} bytes of them"
                )
            )
        else:
            self.answer_early(
                BadRequest("the request is not valid HTTP/1.1 (its request line, a header or its chunked body)")
            )

    def loseConnection(self) -> None:
        if not self._answered_early:
            super().loseConnection()
            return
        self.unregister_from_transport()
        connection = self._connection()
        connection.loseWriteConnection()
        self._linger = self.callLater(LINGER_SECONDS, connection.loseConnection)

    def connectionLost(self, reason: Failure = connectionDone) -> None:
        if self._linger is not None and self._linger.active():
            self._linger.cancel()
        self._stop_deadline()
        super().connectionLost(reason)


class TextPaths(Resource):
    """Answers a path that is not text (not UTF-8, or holding a NUL) with a problem; Klein
    would answer an HTML page or pass the NUL on."""

    isLeaf = True

    def __init__(self, inner: IResource) -> None:
        super().__init__()
        self._inner = inner

    def render(self, request: Request) -> bytes:
        path = unquote_to_bytes(request.path)
        try:
            path.decode("utf-8")
        except UnicodeDecodeError:
            return write_problem(request, BadRequest("the request path is not valid UTF-8"))
        if b"\x00" in path:
            return write_problem(request, BadRequest("the request path holds a NUL character (%00)"))
        return self._inner.render(request)


class ApidSite(Site):
    """A Site with bounded request bodies, deadlines for requests (`limits`), early answers,
    a structured access log, and each answered request reported to
    `observe` (the metrics). `trusted_proxies` are the peers whose forwarding headers name the
    client, `relayed` says every connection comes from one through the PROXY protocol
    (`OpenConnections.serve_behind` sets both when the port listens)."""

    displayTracebacks = False
    noisy = False
    # Twisted types a site's `protocol` as the factory of its HTTP/2-negotiating wrapper; Site
    # builds and sets up whatever HTTPChannel it is given
    protocol = ApidChannel  # type: ignore[assignment]
    requestFactory = ApidRequest
    trusted_proxies = TrustedProxies()
    relayed = False

    def __init__(
        self,
        *,
        resource: IResource,
        max_body_bytes: int,
        access_log_enabled: bool = True,
        observe: Observer | None = None,
        limits: ConnectionLimits | None = None,
    ) -> None:
        # A body is JSON or refused (`read_json_body`); parsing form bodies into `args` would
        # only cost time, a MIME parse of every POST's Content-Type (a twentieth of a batch).
        super().__init__(resource, parsePOSTFormSubmission=False)
        self.max_body_bytes = max_body_bytes
        self.limits = limits or ConnectionLimits()
        self.access_log_enabled = access_log_enabled
        self._observe = observe

    def getContentFile(self, length: int | None) -> BoundedBody:
        return BoundedBody(self.max_body_bytes)

    # Twisted's Site is not typed by the requests its `requestFactory` makes: ApidRequests here
    def log(self, request: ApidRequest) -> None:  # type: ignore[override]
        seconds = time.monotonic() - request.began
        if self._observe is not None:
            self._observe(request.endpoint_name, request.api_version, request.method, request.code, seconds)
        if self.access_log_enabled:
            client = request.sender()
            access_log.info(
                '{client} "{method} {uri}" {status} {length} {requestId}',
                client=client.host,
                scheme="https" if client.secure else "http",
                method=request.method.decode("ascii", "replace"),
                uri=request.uri.decode("utf-8", "replace"),
                path=request.path.decode("utf-8", "replace"),
                endpoint=request.endpoint_name,
                status=request.code,
                length=request.sentLength,
                requestId=request_id(request),
                duration=round(seconds, 6),
            )


def connection_client(peer: IAddress | None, trusted: TrustedProxies, ipv6_prefix: int = 64) -> str | None:
    """The client a connection from `peer` counts against: the TCP peer's address (an IPv6
    one as its network of `ipv6_prefix` bits, `client_group`); None, not counted, for a trusted
    proxy (its connections carry many clients') and for a peer without an address (a Unix
    socket's). A connection is counted before a byte of it is read, so against its peer, never
    against a client its headers or PROXY header name."""
    host: str | None = getattr(peer, "host", None)
    return None if host is None or trusted.trusts(host) else client_group(host, ipv6_prefix)


def request_sender(request: Request) -> Client:
    """Who sent `request`: an ApidRequest's client behind trusted proxies; for any other (the
    metrics port's, a test's double), its peer."""
    if isinstance(request, ApidRequest):
        return request.sender()
    return Client(getattr(request.getClientAddress(), "host", UNKNOWN), request.isSecure())


class CountedConnection(ProtocolWrapper):
    """A connection and the client it counts against (None: not counted)."""

    counted_as: str | None = None


# Twisted's factories are generic from 26.4 on; before, WrappingFactory[...] fails at run time
if TYPE_CHECKING:
    _CountingFactory = WrappingFactory[CountedConnection]
else:
    _CountingFactory = WrappingFactory


class OpenConnections(_CountingFactory):
    """The site's open connections, for shutdown to close, and at most `per_address` of them
    from one client (`connection_client`) in this process. One more is closed as soon as it is
    accepted, before a byte of it is read: answering it (a 503) would hold the very socket the
    cap is there to free, and a client holding this many is an attacker or a proxy to configure
    for, not a user (a browser opens six)."""

    noisy = False
    protocol = CountedConnection

    def __init__(self, site: ApidSite, per_address: int, ipv6_prefix: int = 64) -> None:
        super().__init__(site)
        self._site = site
        self.per_address = per_address
        self._ipv6_prefix = ipv6_prefix
        self._open: dict[str, int] = {}
        self._refused: set[str] = set()  # clients at the cap whose refusal was logged

    def serve_behind(self, trusted: TrustedProxies, relayed: bool) -> None:
        """Serve clients through `trusted` proxies, as the port this listens on says
        (`apid.http.proxies.ClientEdge`): their headers name the client, their connections are not
        capped; `relayed`, each connection comes from one through the PROXY protocol."""
        self._site.trusted_proxies, self._site.relayed = trusted, relayed

    def buildProtocol(self, addr: IAddress | None) -> CountedConnection | None:  # type: ignore[override]
        client = connection_client(addr, self._site.trusted_proxies, self._ipv6_prefix)
        if client is not None and self._open.get(client, 0) >= self.per_address:
            if client not in self._refused:  # once until its connections are all closed: no flood
                self._refused.add(client)
                log.warn(
                    "{client} holds {limit} connections, the most connections.perAddress allows in this "
                    "process: further ones are closed at once",
                    client=client,
                    limit=self.per_address,
                )
            return None
        wrapper = super().buildProtocol(addr)
        wrapper.counted_as = client
        if client is not None:
            self._open[client] = self._open.get(client, 0) + 1
        return wrapper

    def unregisterProtocol(self, p: CountedConnection) -> None:
        super().unregisterProtocol(p)
        client = p.counted_as
        if client is None:
            return
        left = self._open[client] - 1
        if left:
            self._open[client] = left
        else:
            del self._open[client]
            self._refused.discard(client)
