"""What a plugin's tests call apid with, in memory (`apid.testing.InMemoryApid`) or through a
real daemon (`apid.testing.ApidDaemon`): one vocabulary for both, so a test reads the same
whichever runs it, and the answers (`Reply`) and logins (`Login`) they hand back.

Public through `apid.testing`; this module holds them so that both runners share them.
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

_LINK = re.compile(r'<(?P<href>[^>]*)>(?P<params>(?:\s*;\s*[^;,=\s]+\s*=\s*(?:"[^"]*"|[^;,\s]*))*)')
_LINK_PARAM = re.compile(r';\s*([^;,=\s]+)\s*=\s*(?:"([^"]*)"|([^;,\s]*))')


@dataclass(frozen=True)
class Login:
    """An account made by `caller()`, and the access token it calls with."""

    id: int
    username: str
    password: str
    roles: frozenset[str]
    token: str


@dataclass(frozen=True)
class Reply:
    """An answer: its status, its headers (lower-case names, repeated ones joined by ", ")
    and its body as text, with the JSON, problem and link views of it."""

    status: int
    headers: Mapping[str, str]
    text: str

    @property
    def media_type(self) -> str:
        """The Content-Type without its parameters, in lower case (`application/json`)."""
        return self.headers.get("content-type", "").split(";")[0].strip().lower()

    @property
    def json(self) -> Any:
        """The body parsed, when its media type is JSON (`application/json`, `...+json`); else None."""
        if self.media_type == "application/json" or self.media_type.endswith("+json"):
            return json.loads(self.text)
        return None

    @property
    def problem(self) -> dict[str, Any] | None:
        """The RFC 9457 problem, when the answer is one (`application/problem+json`); else None."""
        return self.json if self.media_type == "application/problem+json" else None

    @property
    def links(self) -> list[dict[str, str]]:
        """The `Link` header (sent when the call asked with `links=True`), one dict per link:
        `{"href": ..., "rel": ..., "method": ...}`; empty without the header."""
        found = []
        for link in _LINK.finditer(self.headers.get("link", "")):
            params = {name: quoted or bare for name, quoted, bare in _LINK_PARAM.findall(link["params"])}
            found.append({"href": link["href"], **params})
        return found


def request_headers(caller: Login | None, links: bool, headers: Mapping[str, str] | None) -> dict[str, str]:
    """The headers of a call: `headers`, the caller's token, and the ask for link relations."""
    sent = dict(headers or {})
    if caller is not None:
        sent["Authorization"] = f"Bearer {caller.token}"
    if links:
        sent["X-LINK_RELATIONS"] = "true"
    return sent


def query_fields(fields: Mapping[str, Any]) -> dict[str, list[str]]:
    """Query fields as text: strings as they are, other values as JSON (`true`, `3`); a list or
    tuple gives a field several times."""
    return {
        name: [
            value if isinstance(value, str) else json.dumps(value)
            for value in (values if isinstance(values, (list, tuple)) else [values])
        ]
        for name, values in fields.items()
    }


class ApiCalls(ABC):
    """The calls of a test: `request` is the runner's; the others are written with it."""

    version: str
    """The application version of every path (`"0.1"` in `/v0.1/team/show`)."""

    @abstractmethod
    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        query: Mapping[str, Any] | None = None,
        caller: Login | None = None,
        headers: Mapping[str, str] | None = None,
        links: bool = False,
    ) -> Reply:
        """Call `path` (`/v0.1/team/show/1`) with `method`: `body` sent as JSON, `query` as the
        query string (a list gives a field several times), with the `caller`'s token, and
        asking for link relations when `links` is true."""

    def get(
        self, path: str, query: Mapping[str, Any] | None = None, *, caller: Login | None = None, links: bool = False
    ) -> Reply:
        """A GET of `path`, the fields in the query string (see `request`)."""
        return self.request("GET", path, query=query, caller=caller, links=links)

    def post(self, path: str, body: Any = None, *, caller: Login | None = None, links: bool = False) -> Reply:
        """A POST of `body` as JSON to `path` (see `request`)."""
        return self.request("POST", path, body, caller=caller, links=links)

    def put(self, path: str, body: Any = None, *, caller: Login | None = None, links: bool = False) -> Reply:
        """A PUT of `body` as JSON to `path` (see `request`)."""
        return self.request("PUT", path, body, caller=caller, links=links)

    def delete(self, path: str, body: Any = None, *, caller: Login | None = None, links: bool = False) -> Reply:
        """A DELETE of `path`, with `body` as JSON if given (see `request`)."""
        return self.request("DELETE", path, body, caller=caller, links=links)

    def batch(
        self, target: str, elements: Iterable[Mapping[str, Any]], *, caller: Login | None = None, combine: bool = False
    ) -> Reply:
        """`POST /b{version}/{target}` (`target` as `team/create`): one call per element,
        every output answered when `combine` is true, else the last one."""
        body: dict[str, Any] = {"batch": list(elements)}
        if combine:
            body["combine"] = True
        return self.request("POST", f"/b{self.version}/{target}", body, caller=caller)

    def chain(
        self,
        method: str,
        target: str,
        chain: Mapping[str, Any],
        fields: Mapping[str, Any] | None = None,
        *,
        caller: Login | None = None,
    ) -> Reply:
        """`/c{version}/{target}` (`target` as `team/show/1`, the first link) called with
        `method`: `chain` is the body's `chain` object (`key`, `order`, `type`, `combine`),
        `fields` the request fields of the chain's non-safe call."""
        return self.request(
            method, f"/c{self.version}/{target}", {**(fields or {}), "chain": dict(chain)}, caller=caller
        )
