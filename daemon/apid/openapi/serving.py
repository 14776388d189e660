"""How `/openapi.json` is answered: with an ETag, revalidated on every use (`private, no-cache`:
the document is the caller's own, and changes with a reload), and 304 for a client holding it."""

from __future__ import annotations

from twisted.web.http import Request

from apid.calls.caching import entity_tag
from apid.http.conditions import held

DOCUMENT_CACHING = b"private, no-cache"


def revalidated(request: Request, body: bytes) -> bytes:
    """`body` with its ETag, or 304 and nothing when If-None-Match names it (or is `*`)."""
    tag = entity_tag(body)
    request.setHeader(b"ETag", tag)
    request.setHeader(b"Cache-Control", DOCUMENT_CACHING)
    if held(request.getHeader(b"If-None-Match"), tag):
        request.setResponseCode(304)
        return b""
    return body
