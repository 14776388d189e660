"""The HTTP edge: reading requests into plain values and writing JSON and problem responses.

One JSON encoder, one problem renderer, one body reader. The `Site` built here refuses a
request body over `maxBodyBytes` as soon as that is known (twisted.web has no limit of its
own), answers requests twisted.web cannot parse with problems too, gives every answer the
same security headers and the request's id, and writes its access log as structured
twisted.logger events.
"""

from __future__ import annotations

import io
import itertools
import os
import re
import time
from collections.abc import Callable
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote_to_bytes

import orjson
from twisted.internet.interfaces import IDelayedCall
from twisted.logger import Logger
from twisted.web.http import HTTPChannel, Request, datetimeToString
from twisted.web.resource import IResource, Resource
from twisted.web.server import Request as SiteRequest, Site

from apid.jsonbody import parse_json_object
from apid.problems import (
    MEDIA_TYPE,
    BadRequest,
    HeadersTooLarge,
    InvalidFields,
    MethodNotAllowed,
    PayloadTooLarge,
    Problem,
    UnsupportedMediaType,
    UriTooLong,
)

access_log = Logger(namespace="apid.access")

SERVER = b"apid"
# How long a connection answered before its request was whole is still read (and the rest of
# the request dropped) before it closes: closing at once, with request bytes unread, would
# reset the connection and could destroy the answer before the client reads it.
LINGER_SECONDS = 2.0
CLIENT_REQUEST_ID = re.compile(rb"[\x21-\x7e]{1,128}")  # 1 to 128 visible ASCII characters
# The ids apid makes: 16 random hex characters drawn once per process, then a counter. Unique
# across processes and restarts as random ids are, without a getrandom call per request;
# an id names a request in the logs and is no secret.
_MADE_IDS = map(f"{os.urandom(8).hex()}{{:016x}}".format, itertools.count())
# What the site reports each answered request to: endpoint, API version, method, status, seconds.
Observer = Callable[[str, str, bytes, int, float], None]


def _default(value: Any) -> Any:
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def dumps(value: Any) -> bytes:
    """The one JSON encoder of the daemon (orjson: about ten times the standard library's
    speed, and a NaN a controller returns becomes null instead of invalid JSON).
    Dates and times are written as ISO 8601, dict keys must be strings."""
    return orjson.dumps(value, default=_default, option=orjson.OPT_PASSTHROUGH_SUBCLASS)


# twisted.web knows no reason phrase for 422, 429 and others
PHRASES = {status.value: status.phrase.encode("ascii") for status in HTTPStatus}


def _status(request: Request, status: int) -> None:
    request.setResponseCode(status, PHRASES[status])


def write_json(request: Request, value: Any, status: int = 200) -> bytes:
    _status(request, status)
    request.setHeader(b"Content-Type", b"application/json")
    return dumps(value)


def write_problem(request: Request, problem: Problem) -> bytes:
    _status(request, problem.status)
    request.setHeader(b"Content-Type", MEDIA_TYPE.encode())
    for name, value in problem.headers.items():
        request.setHeader(name.encode(), value.encode())
    # No instance when the request line could not be parsed: there is no path to name.
    instance = unquote_to_bytes(request.path).decode("utf-8", "replace") or None
    body = problem.to_dict(instance=instance)
    body["requestId"] = request_id(request)
    return dumps(body)


def request_id(request: Request) -> str:
    """The request's id, chosen at first use: the client's X-Request-ID when it is 1 to 128
    visible ASCII characters (a proxy's, so one request is followed through its logs and
    apid's), else 32 hex characters unique to it. Answers, problems and the access log all carry it."""
    chosen = getattr(request, "request_id", None)
    if chosen is None:
        sent = request.getHeader(b"x-request-id")
        usable = sent is not None and CLIENT_REQUEST_ID.fullmatch(sent)
        chosen = request.request_id = sent.decode("ascii") if usable else next(_MADE_IDS)
    return chosen


def too_large(limit: int) -> PayloadTooLarge:
    """The 413 of a body over `maxBodyBytes`, whenever it is found out."""
    return PayloadTooLarge(f"the request body is larger than the limit of {limit} bytes", limit=limit)


def set_answer_headers(request: Request) -> None:
    """The headers every answer carries: no content sniffing, no version in `Server`, the
    request's id, and no caching unless the handler chose its own Cache-Control."""
    headers = request.responseHeaders
    headers.setRawHeaders(b"Server", [SERVER])
    headers.setRawHeaders(b"X-Request-ID", [request_id(request).encode("ascii")])
    headers.setRawHeaders(b"X-Content-Type-Options", [b"nosniff"])
    if not headers.hasHeader(b"Cache-Control"):
        headers.setRawHeaders(b"Cache-Control", [b"no-store"])


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


class InFlight:
    """Counts requests from the moment their headers arrive until their answer is sent, so
    shutdown waits for a request whose body is still arriving too."""

    def __init__(self) -> None:
        self.count = 0

    def track(self, request: Request) -> None:
        self.count += 1
        request.notifyFinish().addBoth(self._done)

    def _done(self, _: Any) -> None:
        self.count -= 1


class ApidRequest(SiteRequest):
    """A request that counts itself in flight, stops its body at the limit, and is answered
    with `early_answer` when its channel could not let it reach the application."""

    early_answer: Problem | None = None
    request_id: str | None = None  # see `request_id`
    # What metrics and the access log name the request by, set by the application once the
    # request reached an endpoint or a route: a bounded set of names, never the path sent.
    endpoint_name = "other"
    api_version = ""
    began = 0.0  # time.monotonic() when the headers were in

    def gotLength(self, length: int | None) -> None:
        self.began = time.monotonic()
        super().gotLength(length)
        self.channel.site.in_flight.track(self)

    def handleContentChunk(self, data: bytes) -> None:
        if self.early_answer is not None:
            return  # the rest of a body answered already: dropped
        super().handleContentChunk(data)
        if self.content.overflowed:
            self.channel.answer_early(too_large(self.content.limit))

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


class ApidChannel(HTTPChannel):
    """An HTTP/1.1 connection that answers, with a problem, a request it must refuse before it
    is whole (a body declared or grown over the limit, headers too long, bytes that are not
    HTTP), then drops the rest of the request and closes."""

    _answered_early = False
    _linger: IDelayedCall | None = None
    _host: Any = None

    def getHost(self) -> Any:
        """The local address, asked of the socket once per connection, not once per request."""
        if self._host is None:
            self._host = super().getHost()
        return self._host

    def allHeadersReceived(self) -> None:
        limit = self.site.max_body_bytes
        if self.length is not None and self.length > limit:
            # Refused before a 100 Continue is sent or a byte of the body is read.
            self.requests[-1].gotLength(self.length)
            self.answer_early(too_large(limit))
        else:
            super().allHeadersReceived()

    def answer_early(self, problem: Problem) -> None:
        """Answer the request being received with `problem` now, then close the connection."""
        if self._answered_early:
            return
        self._answered_early = True
        self.persistent = False
        if not self.requests:
            self.requests.append(self.requestFactory(self, 0))
        request = self.requests[-1]
        request.early_answer = problem
        request.setHeader(b"Connection", b"close")
        if request.content is None:
            request.gotLength(0)
        # A request line that could not be parsed leaves no method or path to answer for.
        request.requestReceived(getattr(self, "_command", b"-"), getattr(self, "_path", b""),
                                getattr(self, "_version", b"HTTP/1.1"))

    def lineReceived(self, line: bytes) -> None:
        if not self._answered_early:
            super().lineReceived(line)

    def rawDataReceived(self, data: bytes) -> None:
        if not self._answered_early:
            super().rawDataReceived(data)

    def allContentReceived(self) -> None:
        if not self._answered_early:
            super().allContentReceived()

    def lineLengthExceeded(self, line: bytes) -> None:
        if self._answered_early:
            return
        if self.requests:
            self.answer_early(HeadersTooLarge(f"a request header is longer than {self.MAX_LENGTH} bytes"))
        else:
            self.answer_early(UriTooLong(f"the request line is longer than {self.MAX_LENGTH} bytes"))

    def _respondToBadRequestAndDisconnect(self) -> None:
        """twisted.web's answer to a request it cannot parse: a bare 400 without headers or body.
        This private hook is the one place it gives it; answer a problem instead."""
        if self._receivedHeaderCount > self.maxHeaders or self._receivedHeaderSize > self.totalHeadersSize:
            self.answer_early(HeadersTooLarge(
                f"the request has more than {self.maxHeaders} headers or {self.totalHeadersSize} bytes of them"))
        else:
            self.answer_early(BadRequest("the request is not valid HTTP/1.1 (its request line, a header "
                                         "or its chunked body)"))

    def loseConnection(self) -> None:
        if not self._answered_early:
            super().loseConnection()
            return
        self._networkProducer.unregisterProducer()
        self.transport.loseWriteConnection()
        self._linger = self.callLater(LINGER_SECONDS, self.transport.loseConnection)

    def connectionLost(self, reason: Any) -> None:
        if self._linger is not None and self._linger.active():
            self._linger.cancel()
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
    """A Site with bounded request bodies, early answers, in-flight counting, a structured
    access log, and each answered request reported to `observe` (the metrics)."""

    displayTracebacks = False
    noisy = False
    protocol = ApidChannel
    requestFactory = ApidRequest

    def __init__(self, resource: IResource, max_body_bytes: int, access_log_enabled: bool = True,
                 observe: Observer | None = None) -> None:
        # A body is JSON or refused (`read_json_body`); parsing form bodies into `args` would
        # only cost time, a MIME parse of every POST's Content-Type (a twentieth of a batch).
        super().__init__(TextPaths(resource), parsePOSTFormSubmission=False)
        self.max_body_bytes = max_body_bytes
        self.access_log_enabled = access_log_enabled
        self.in_flight = InFlight()
        self._observe = observe

    def getContentFile(self, length: int | None) -> BoundedBody:
        return BoundedBody(self.max_body_bytes)

    def log(self, request: ApidRequest) -> None:
        seconds = time.monotonic() - request.began
        if self._observe is not None:
            self._observe(request.endpoint_name, request.api_version, request.method, request.code, seconds)
        if self.access_log_enabled:
            access_log.info(
                '{client} "{method} {uri}" {status} {length} {requestId}',
                client=getattr(request.getClientAddress(), "host", "-"),
                method=request.method.decode("ascii", "replace"),
                uri=request.uri.decode("utf-8", "replace"),
                path=request.path.decode("utf-8", "replace"),
                endpoint=request.endpoint_name,
                status=request.code,
                length=request.sentLength,
                requestId=request_id(request),
                duration=round(seconds, 6),
            )


def header(request: Request, name: str) -> str | None:
    """A request header as text (HTTP headers are Latin-1 on the wire)."""
    value = request.getHeader(name.encode("ascii"))
    return None if value is None else value.decode("latin-1")


def read_json_body(request: Request) -> dict[str, Any]:
    """The request's JSON object body ({} when there is none); 415 or 400 otherwise. (A body
    over `maxBodyBytes` never gets here: `ApidChannel` answers 413 before it is read.)"""
    content = request.content
    content.seek(0)
    raw = content.read()
    if not raw.strip():
        return {}
    media_type = (header(request, "content-type") or "").split(";")[0].strip().lower()
    if media_type != "application/json" and not media_type.endswith("+json"):
        raise UnsupportedMediaType(
            f"the request body must be application/json, not {media_type or 'unlabelled'}"
        )
    return parse_json_object(raw)


def query_fields(request: Request) -> dict[str, list[str]]:
    """The query parameters as text; one that is not UTF-8 or holds a NUL is a 400."""
    try:
        fields = {
            key.decode("utf-8"): [value.decode("utf-8") for value in values]
            for key, values in request.args.items()
        }
    except UnicodeDecodeError:
        raise BadRequest("the query string is not valid UTF-8") from None
    with_nul = [key for key, values in fields.items() if "\x00" in key or any("\x00" in v for v in values)]
    if with_nul:
        raise InvalidFields(errors=[{"field": key, "reason": "holds a NUL character (%00)"} for key in with_nul])
    return fields


def bearer_token(request: Request) -> str | None:
    value = header(request, "authorization")
    if value is None:
        return None
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else ""
