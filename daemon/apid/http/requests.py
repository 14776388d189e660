"""Reading requests into plain values: a header, the JSON body, the query's fields, the bearer
token."""

from __future__ import annotations

from typing import Any

from twisted.web.http import Request

from apid.http.jsonbody import parse_json_object
from apid.http.site import request_sender
from apid.problems import (
    BadRequest,
    InvalidFields,
    UnsupportedMediaType,
)


def header(request: Request, name: str) -> str | None:
    """A request header as text (HTTP headers are Latin-1 on the wire)."""
    value = request.getHeader(name.encode("ascii"))
    return None if value is None else value.decode("latin-1")


def read_json_body(request: Request) -> dict[str, Any]:
    """The request's JSON object body ({} when there is none); 415 or 400 otherwise. (A body
    over `maxBodyBytes` never gets here: `ApidChannel` answers 413 before it is read.)"""
    content = request.content
    if content is None:  # twisted.web makes it before the request reaches a resource
        return {}
    content.seek(0)
    raw = content.read()
    if not raw.strip():
        return {}
    media_type = (header(request, "content-type") or "").split(";")[0].strip().lower()
    if media_type != "application/json" and not media_type.endswith("+json"):
        raise UnsupportedMediaType(f"the request body must be application/json, not {media_type or 'unlabelled'}")
    return parse_json_object(raw)


def query_fields(request: Request) -> dict[str, list[str]]:
    """The query parameters as text; one that is not UTF-8 or holds a NUL is a 400."""
    try:
        fields = {
            key.decode("utf-8"): [value.decode("utf-8") for value in values] for key, values in request.args.items()
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


LINK_REQUEST_HEADERS = (b"x-link_relations", b"x-link-relations")


def asks_for_links(request: Request) -> bool:
    """Whether the request asked for the calls related to its answer (apid.calls.links)."""
    return any(request.getHeader(name) is not None for name in LINK_REQUEST_HEADERS)


def client_address(request: Request) -> str:
    """The client's address, as every per-address limit counts it: behind `trustedProxies`,
    the one they forward (apid.http.proxies), else the peer's."""
    return request_sender(request).host
