"""Gzip for the answers worth it: JSON and text answers of at least `MIN_BYTES`, for clients
whose Accept-Encoding takes gzip.

Answers are built whole in memory, so the body arriving in one write is compressed in one go
and its Content-Length set to the compressed size; a route that streams (no Content-Length)
is compressed as it writes. Below `MIN_BYTES` gzip's header and checksum eat most of the
gain for the time it costs. Compressing holds the reactor, so answers over `FAST_ABOVE` are
compressed at level 1 (a third of level 6's time, two thirds of its gain) and answers over
`MAX_BYTES` go as they are. A client that does not ask for gzip (the benchmark's) costs a
header lookup: no encoder is made for it, and its answer carries no `Vary: Accept-Encoding`
(the answers this compresses are `no-store` or `private`, so no shared cache keeps them, and
a browser's own cache always asks for gzip; the docs page's public files say it themselves).

An answer that sets a cookie (a login, a token refresh) is never compressed: it carries a
token beside what the request sent, the shape BREACH reads secrets from by their compressed
size, and it is small anyway.

A compressed answer is another representation (RFC 9110 section 8.8.3), so its strong ETag is
the plain one with `-gzip` inside the quotes, as the docs page's files have. Requests are read
the other way round: an If-None-Match or If-Match naming `"<tag>-gzip"` is taken as naming
`"<tag>"` before any handler sees it, so that `apid.calls.caching` and `apid.calls.preconditions` compare
one tag per answer, and a 304 says the tag the client holds.
"""

from __future__ import annotations

import re
import zlib
from typing import Protocol

from twisted.web.http import NO_BODY_CODES, Request
from twisted.web.resource import EncodingResourceWrapper, IResource

MIN_BYTES = 1024
LEVEL = 6  # zlib's default: a list of 20 people, 5.5 KB, to 0.6 KB in about 25 us
# Above FAST_ABOVE, level 1: /openapi.json (350 KB) to 29 KB in 1.3 ms instead of 19 KB in 3 ms
FAST_ABOVE = 64 * 1024
FAST_LEVEL = 1
MAX_BYTES = 1 << 20  # about 4 ms at FAST_LEVEL
SUFFIX = b"-gzip"
HELD_COMPRESSED = re.compile(rb'"([^"]*)-gzip"')  # a tag of a compressed answer, as a client sends it back
CONDITIONS = (b"if-none-match", b"if-match")


def accepts_gzip(request: Request) -> bool:
    """Whether the request's Accept-Encoding names gzip with a weight above 0."""
    for coding in (request.getHeader(b"accept-encoding") or b"").decode("latin-1").lower().split(","):
        name, *params = (part.strip() for part in coding.split(";"))
        if name == "gzip":
            weight = next((param[2:] for param in params if param.startswith("q=")), "1")
            try:
                return float(weight) > 0
            except ValueError:
                return False
    return False


def compressing(resource: IResource) -> IResource:
    """`resource` with its answers compressed for the clients that ask, as the module says."""
    return EncodingResourceWrapper(resource, [GzipAnswers()])


class GzipAnswers:
    """Twisted's encoder factory (`EncodingResourceWrapper`): one `WholeBodyGzip` per request
    that accepts gzip."""

    def encoderForRequest(self, request: Request) -> WholeBodyGzip | None:
        held = plain_conditions(request)
        if request.getHeader(b"accept-encoding") is None or not accepts_gzip(request):
            return None
        return WholeBodyGzip(request, held)


def plain_conditions(request: Request) -> frozenset[bytes]:
    """Rewrite the request's If-None-Match and If-Match to name plain tags; the plain tags of
    If-None-Match that the client held in their compressed form."""
    held: set[bytes] = set()
    headers = request.requestHeaders
    for name in CONDITIONS:
        values = headers.getRawHeaders(name)
        if values is None or not any(SUFFIX in value for value in values):
            continue
        if name == b"if-none-match":
            held.update(b'"%s"' % tag for value in values for tag in HELD_COMPRESSED.findall(value))
        headers.setRawHeaders(name, [HELD_COMPRESSED.sub(rb'"\1"', value) for value in values])
    return frozenset(held)


def compressible(content_type: bytes | None) -> bool:
    """JSON (`application/json`, `application/problem+json`, any `+json`) and text, but for
    the live event stream's `text/event-stream`: gzip holds what it is given until it has a
    block's worth, and each event must leave as it comes."""
    if content_type is None:
        return False
    media = content_type.partition(b";")[0].strip().lower()
    if media == b"text/event-stream":
        return False
    return media.startswith(b"text/") or media == b"application/json" or media.endswith(b"+json")


def gzip_tag(tag: bytes) -> bytes:
    """The ETag of the compressed form of the answer tagged `tag`; a weak tag stays as it is
    (the compressed form means the same)."""
    if not tag.startswith(b'"'):
        return tag
    return tag[:-1] + SUFFIX + b'"'


def window_bits(size: int) -> int:
    """The smallest deflate window that holds `size` bytes (9 to 15): zlib allocates and clears
    the window and its hash for every stream, which for a small answer costs more than the
    compressing (10 us instead of 40 for 1 KB)."""
    return max(9, min(15, (size - 1).bit_length()))


class Compressor(Protocol):
    """What `zlib.compressobj` makes (typeshed names its class privately)."""

    def compress(self, data: bytes, /) -> bytes: ...

    def flush(self) -> bytes: ...


class WholeBodyGzip:
    """Compresses one answer when it is worth it, decided at its first write: Twisted calls
    `encode` for every write before the headers go out, and `finish` at the end."""

    def __init__(self, request: Request, held: frozenset[bytes]) -> None:
        self._request = request
        self._held = held
        self._decided = False
        self._compressor: Compressor | None = None

    def encode(self, data: bytes) -> bytes:
        if self._decided:
            return data if self._compressor is None else self._compressor.compress(data)
        self._decided = True
        request = self._request
        headers = request.responseHeaders
        if request.code == 304:
            self._not_modified()
            return data
        if (
            request.code in NO_BODY_CODES
            or not MIN_BYTES <= len(data) <= MAX_BYTES
            or headers.hasHeader(b"content-encoding")
            or request.cookies
            or not compressible(_content_type(request))
        ):
            return data
        self._mark_compressed()
        whole = headers.getRawHeaders(b"content-length") == [b"%d" % len(data)]
        level = LEVEL if len(data) <= FAST_ABOVE else FAST_LEVEL
        compressor = zlib.compressobj(level, zlib.DEFLATED, 16 + (window_bits(len(data)) if whole else 15))
        if whole:
            body = compressor.compress(data) + compressor.flush()
            headers.setRawHeaders(b"content-length", [b"%d" % len(body)])
            return body
        headers.removeHeader(b"content-length")
        if request.method == b"HEAD":
            return data  # none of it is sent
        self._compressor = compressor
        return compressor.compress(data)

    def finish(self) -> bytes:
        return b"" if self._compressor is None else self._compressor.flush()

    def _mark_compressed(self) -> None:
        headers = self._request.responseHeaders
        headers.setRawHeaders(b"content-encoding", [b"gzip"])
        add_vary(self._request)
        tag = headers.getRawHeaders(b"etag")
        if tag:
            headers.setRawHeaders(b"etag", [gzip_tag(tag[0])])

    def _not_modified(self) -> None:
        """A 304 names the tag the client holds: the compressed form's when it sent that one
        (the same bytes are over MIN_BYTES again)."""
        headers = self._request.responseHeaders
        tag = headers.getRawHeaders(b"etag")
        if tag and tag[0] in self._held:
            headers.setRawHeaders(b"etag", [gzip_tag(tag[0])])
            add_vary(self._request)


def _content_type(request: Request) -> bytes | None:
    values = request.responseHeaders.getRawHeaders(b"content-type")
    return values[0] if values else None


def add_vary(request: Request) -> None:
    """Say that the answer depends on Accept-Encoding, once."""
    headers = request.responseHeaders
    vary = headers.getRawHeaders(b"vary") or []
    if not any(b"accept-encoding" in value.lower() for value in vary):
        headers.addRawHeader(b"vary", b"Accept-Encoding")
