"""CORS for browser clients: only the origins in `cors.allowedOrigins` get CORS headers.

Wraps the whole site, so a preflight (OPTIONS with Access-Control-Request-Method) is
answered here and never reaches authentication, and every answer to an allowed origin
carries the headers a browser needs to read it, credentials (the refresh cookie) included:
the fields apid answers beyond the CORS-safelisted ones are exposed (`ETag` for revalidation
and If-Match, the rate limit's, the deprecation's, `Link`, `X-Request-ID`), and the request
headers apid reads are allowed (conditional requests, link relations, the request id).

Whether an answer carries these depends on the request's Origin, so with any origin allowed
every answer says `Vary: Origin`, one to a request without Origin too: else a cache could keep
an answer without them and hand it to a page of an allowed origin (Fetch, "CORS protocol and
HTTP caches").
"""

from __future__ import annotations

from collections.abc import Iterable

from twisted.web.http import Request
from twisted.web.resource import IResource, Resource

from apid.http.methods import ENDPOINT_METHODS

ALLOWED_METHODS = ", ".join(ENDPOINT_METHODS).encode("ascii")
ALLOWED_HEADERS = (
    b"Authorization, Content-Type, Idempotency-Key, If-Match, If-None-Match, X-LINK_RELATIONS, X-LINK-RELATIONS, "
    b"X-Request-ID"
)
EXPOSED_HEADERS = (
    b"Deprecation, ETag, Idempotent-Replayed, Link, Next-Offset, RateLimit, RateLimit-Policy, Retry-After, Sunset, "
    b"X-Request-ID"
)
PREFLIGHT_MAX_AGE = b"600"


class Cors(Resource):
    isLeaf = True

    def __init__(self, inner: IResource, allowed_origins: Iterable[str]) -> None:
        super().__init__()
        self._inner = inner
        self._allowed = frozenset(origin.encode("ascii") for origin in allowed_origins)

    def render(self, request: Request) -> bytes:
        if self._allowed:
            request.setHeader(b"Vary", b"Origin")
        origin = request.getHeader(b"origin")
        if origin is None:
            return self._inner.render(request)
        allowed = origin in self._allowed
        preflight = request.method == b"OPTIONS" and request.getHeader(b"access-control-request-method")
        if allowed:
            request.setHeader(b"Access-Control-Allow-Origin", origin)
            request.setHeader(b"Access-Control-Allow-Credentials", b"true")
        if preflight:
            if allowed:
                request.setHeader(b"Access-Control-Allow-Methods", ALLOWED_METHODS)
                request.setHeader(b"Access-Control-Allow-Headers", ALLOWED_HEADERS)
                request.setHeader(b"Access-Control-Max-Age", PREFLIGHT_MAX_AGE)
            request.setResponseCode(204)
            return b""
        if allowed:
            request.setHeader(b"Access-Control-Expose-Headers", EXPOSED_HEADERS)
        return self._inner.render(request)
