"""An API call's request as the edge read it, once: what the call path gets instead of the raw
request, so that no module below the edge reads a header, the body or the client's address
again (each was read up to four times a request before)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from apid.auth.tokens import Principal
from apid.calls.paths import Target
from apid.http.conditions import Preconditions


@dataclass(slots=True, kw_only=True)  # not frozen: a frozen dataclass's __init__ costs a microsecond a request
class Incoming:
    """Read by the edge, never changed after."""

    target: Target
    principal: Principal
    method: str
    address: str  # the client's, behind any trusted proxies
    preconditions: Preconditions
    body: dict[str, Any]
    text: dict[str, list[str]]  # the query's fields, and the path's id as `id`
    uri: str
    wants_links: bool  # the request asked for the related calls (X-LINK-RELATIONS)
    idempotency_key: bytes | None  # as sent (apid.calls.idempotency checks it), None when not
