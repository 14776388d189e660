"""Writing answers: the one JSON encoder, JSON and problem bodies with their status, the headers
every answer carries, and the request's id."""

from __future__ import annotations

import os
import re
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote_to_bytes

import orjson
from twisted.web.http import Request

from apid.problems import (
    MEDIA_TYPE,
    PayloadTooLarge,
    Problem,
)

SERVER = b"apid"
CLIENT_REQUEST_ID = re.compile(rb"[\x21-\x7e]{1,128}")  # 1 to 128 visible ASCII characters
# The ids apid makes are 16 random bytes in hex, drawn for each request (half a microsecond): a
# counter would tell whoever reads two ids how many requests the process answered in between.
ID_BYTES = 16


def _default(value: Any) -> Any:
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def dumps(value: Any) -> bytes:
    """The one JSON encoder of the daemon (orjson: about ten times the standard library's
    speed, and a NaN a controller returns becomes null instead of invalid JSON).
    Dates and times are written as ISO 8601, a date-time always with its offset: one without
    (SQLite's DateTime columns read back naive) is UTC, as apid stores them, and is written
    `+00:00`, so that it is the RFC 3339 date-time the API documents promise. Dict keys must be
    strings."""
    return orjson.dumps(value, default=_default, option=_OPTIONS)


_OPTIONS = orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_NAIVE_UTC


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
    apid's), else 32 random hex characters. Answers, problems and the access log all carry it."""
    chosen: str | None = getattr(request, "request_id", None)
    if chosen is None:
        sent = request.getHeader(b"x-request-id")
        chosen = (
            sent.decode("ascii")
            if sent is not None and CLIENT_REQUEST_ID.fullmatch(sent)
            else os.urandom(ID_BYTES).hex()
        )
        # An ApidRequest declares the attribute; twisted.web's Request, which the metrics port
        # answers with, does not and takes it as any instance does
        request.request_id = chosen  # type: ignore[attr-defined]
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
