"""The HTTP edge: reading requests into plain values and writing JSON and problem responses.

One JSON encoder, one problem renderer, one body reader. The `Site` built here keeps
request bodies in a bounded buffer (twisted.web has no limit of its own) and writes its
access log as structured twisted.logger events.
"""

from __future__ import annotations

import io
import json
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote_to_bytes

import orjson
from twisted.logger import Logger
from twisted.web.http import Request
from twisted.web.resource import IResource, Resource
from twisted.web.server import Request as SiteRequest, Site

from apid.problems import MEDIA_TYPE, BadRequest, PayloadTooLarge, Problem, UnsupportedMediaType

access_log = Logger(namespace="apid.access")


def _default(value: Any) -> Any:
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def dumps(value: Any) -> bytes:
    """The one JSON encoder of the daemon (orjson: about ten times the standard library's
    speed, and a NaN a controller returns becomes null instead of invalid JSON).
    Dates and times are written as ISO 8601, dict keys must be strings."""
    return orjson.dumps(value, default=_default, option=orjson.OPT_PASSTHROUGH_SUBCLASS)


def _status(request: Request, status: int) -> None:
    """Set the status with its reason phrase (twisted.web knows none for 422, 429 and others)."""
    request.setResponseCode(status, HTTPStatus(status).phrase.encode("ascii"))


def write_json(request: Request, value: Any, status: int = 200) -> bytes:
    _status(request, status)
    request.setHeader(b"Content-Type", b"application/json")
    return dumps(value)


def write_problem(request: Request, problem: Problem) -> bytes:
    _status(request, problem.status)
    request.setHeader(b"Content-Type", MEDIA_TYPE.encode())
    for name, value in problem.headers.items():
        request.setHeader(name.encode(), value.encode())
    return dumps(problem.to_dict(instance=unquote_to_bytes(request.path).decode("utf-8", "replace")))


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
    def gotLength(self, length: int | None) -> None:
        super().gotLength(length)
        self.channel.site.in_flight.track(self)


class Utf8Paths(Resource):
    """Answers a path that is not UTF-8 with a problem (Klein would answer an HTML page)."""

    isLeaf = True

    def __init__(self, inner: IResource) -> None:
        super().__init__()
        self._inner = inner

    def render(self, request: Request) -> bytes:
        try:
            unquote_to_bytes(request.path).decode("utf-8")
        except UnicodeDecodeError:
            return write_problem(request, BadRequest("the request path is not valid UTF-8"))
        return self._inner.render(request)


class ApidSite(Site):
    """A Site with bounded request bodies, in-flight counting and a structured access log."""

    displayTracebacks = False
    noisy = False
    requestFactory = ApidRequest

    def __init__(self, resource: IResource, max_body_bytes: int, access_log_enabled: bool = True) -> None:
        # A body is JSON or refused (`read_json_body`); parsing form bodies into `args` would
        # only cost time, a MIME parse of every POST's Content-Type (a twentieth of a batch).
        super().__init__(Utf8Paths(resource), parsePOSTFormSubmission=False)
        self.max_body_bytes = max_body_bytes
        self.access_log_enabled = access_log_enabled
        self.in_flight = InFlight()

    def getContentFile(self, length: int | None) -> BoundedBody:
        body = BoundedBody(self.max_body_bytes)
        if length is not None and length > self.max_body_bytes:
            body.overflowed = True
        return body

    def log(self, request: Request) -> None:
        if self.access_log_enabled:
            access_log.info(
                '{client} "{method} {uri}" {code} {length}',
                client=getattr(request.getClientAddress(), "host", "-"),
                method=request.method.decode("ascii", "replace"),
                uri=request.uri.decode("utf-8", "replace"),
                code=request.code,
                length=request.sentLength,
            )


def header(request: Request, name: str) -> str | None:
    """A request header as text (HTTP headers are Latin-1 on the wire)."""
    value = request.getHeader(name.encode("ascii"))
    return None if value is None else value.decode("latin-1")


def _refuse_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def read_json_body(request: Request) -> dict[str, Any]:
    """The request's JSON object body ({} when there is none); 413, 415 or 400 otherwise."""
    content = request.content
    if getattr(content, "overflowed", False):
        limit = getattr(content, "limit", 0)
        raise PayloadTooLarge(f"the request body is larger than the limit of {limit} bytes", limit=limit)
    content.seek(0)
    raw = content.read()
    if not raw.strip():
        return {}
    media_type = (header(request, "content-type") or "").split(";")[0].strip().lower()
    if media_type != "application/json" and not media_type.endswith("+json"):
        raise UnsupportedMediaType(
            f"the request body must be application/json, not {media_type or 'unlabelled'}"
        )
    try:
        body = json.loads(raw, parse_constant=_refuse_constant)
    except (UnicodeDecodeError, json.JSONDecodeError, ValueError) as exc:
        raise BadRequest(f"the request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    return body


def query_fields(request: Request) -> dict[str, list[str]]:
    try:
        return {
            key.decode("utf-8"): [value.decode("utf-8") for value in values]
            for key, values in request.args.items()
        }
    except UnicodeDecodeError:
        raise BadRequest("the query string is not valid UTF-8") from None


def bearer_token(request: Request) -> str | None:
    value = header(request, "authorization")
    if value is None:
        return None
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else ""
