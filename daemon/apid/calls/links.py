"""Link relations (RFC 8288): the calls related to an answer, in a `Link` header, on request.

Asked for with the request header `X-LINK_RELATIONS` (or `X-LINK-RELATIONS`, since proxies
such as nginx drop headers with underscores). The links are worked out from the IO State for
the caller's roles only, so they never show an endpoint the caller cannot call:
- `self`: the call itself;
- the controller's other actions, with the record's PKEY where the action takes it;
- for each FKEY field in the answer, the referenced controller's GET actions that take the
  field it references, with the FKEY's value;
- for each FKEY of any controller pointing to this one (a reverse relation), that
  controller's GET actions that take the FKEY, with the referenced field's value.
A value only ever goes under a field that means the same record: in the path when the field
is `id` (the field a path's last segment fills), in the query otherwise. Relation types other
than `self` are extension URIs, `urn:apid:rel:<controller>/<action>`, and every link carries
its HTTP method as the `method` parameter.

A list answer (an array from an action that paged with `Call.page`, for roles that may send
`offset` and `max`) also gets `next`, `prev` and `first` (`page_links`), with or without the
request header: they follow from the page alone, and a client pages by them without knowing
the header. The daemon cannot know the total, so `next` comes when the page came back full,
`prev` and `first` when it did not start at 0. A batch's or chain's `self` is the batch or
chain call itself, with its method.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode

from twisted.web.http import Request

from apid.calls.paths import call_path
from apid.iostate import PATH_ID, ControllerState, Endpoint, RuleSet

REL_BASE = "urn:apid:rel:"
PAGE_FIELDS = ("offset", "max")


def _link(path: str, rel: str, method: str) -> str:
    return f'<{path}>; rel="{rel}"; method="{method}"'


def _takes(endpoint: Endpoint, field: str, roles: frozenset[str]) -> bool:
    granted = endpoint.granted(roles)
    return bool(granted) and field in endpoint.request_fields(granted)


def _with_key(path: str, field: str, value: Any) -> str:
    """The path with `value` where the endpoint reads `field`: the path's last segment for
    `id`, the query for any other field."""
    text = quote(str(value), safe="")
    return f"{path}/{text}" if field == PATH_ID else f"{path}?{quote(field, safe='')}={text}"


def _actions(
    state: ControllerState,
    version: str,
    app: str,
    api: str | None,
    roles: frozenset[str],
    field: str | None,
    value: Any,
    skip: str | None = None,
    only_safe: bool = False,
) -> Iterator[str]:
    """Links to the actions of one controller version that the roles may call, with `value`
    under `field` in those that take it; with `only_safe`, only the GET actions that take it."""
    for action, endpoint in state.versions[version].endpoints.items():
        if action == skip or not endpoint.granted(roles) or (only_safe and not endpoint.is_safe):
            continue
        path = call_path("v", app, api, state.name, action)
        if field is not None and value is not None and _takes(endpoint, field, roles):
            path = _with_key(path, field, value)
        elif only_safe:
            continue
        yield _link(path, f"{REL_BASE}{state.name}/{action}", endpoint.method)


def next_offset(data: Any, page: tuple[int, int] | None) -> int | None:
    """Where the next page of a list answer starts, for a client that pages without parsing
    `Link` (the `Next-Offset` header); None after a page that was not full: the last one."""
    if page is None or not isinstance(data, list):
        return None
    offset, size = page
    return offset + size if len(data) >= size else None


def page_links(
    endpoint: Endpoint, granted: frozenset[str], data: Any, page: tuple[int, int] | None, uri: str
) -> list[str]:
    """`next`, `prev` and `first` of a list answer: `page` is the (offset, limit) the action
    paged by (`Call.page`), the call's other query fields are kept. None when the action did
    not page, the answer is not an array, or the roles may not send both page fields."""
    if page is None or not isinstance(data, list) or not set(PAGE_FIELDS) <= endpoint.request_fields(granted):
        return []
    offset, size = page
    path, _, query = uri.partition("?")
    kept = [(name, value) for name, value in parse_qsl(query, keep_blank_values=True) if name not in PAGE_FIELDS]

    def at(start: int, rel: str) -> str:
        fields = urlencode([*kept, ("offset", start), ("max", size)], quote_via=quote)
        return _link(f"{path}?{fields}", rel, endpoint.method)

    following = next_offset(data, page)
    links = [] if following is None else [at(following, "next")]
    if offset > 0:
        links += [at(max(0, offset - size), "prev"), at(0, "first")]
    return links


def link_header(
    rules: RuleSet,
    endpoint: Endpoint,
    data: Any,
    roles: frozenset[str],
    app: str,
    api: str | None,
    self_path: str,
    self_method: str | None = None,
    paging: Sequence[str] = (),
) -> str:
    """The `Link` header value for the answer `data` of a call of `endpoint`: `self` (called
    with `self_method`, by default the endpoint's), the `paging` links, then the related calls."""
    state = rules.controllers[endpoint.controller]
    record = data if isinstance(data, Mapping) else {}
    key = state.primary_key
    links = [_link(self_path, "self", self_method or endpoint.method), *paging]
    links += _actions(
        state, endpoint.api_version, app, api, roles, key, record.get(key) if key else None, skip=endpoint.action
    )
    for name, spec in state.values.items():
        target = rules.controller(spec.reference) if spec.key == "FKEY" and spec.reference is not None else None
        if target is not None:
            links += _actions(
                target, target.current_stable, app, None, roles, spec.referenced_field, record.get(name), only_safe=True
            )
    for referrer, spec in rules.referring(state.name):
        links += _actions(
            referrer,
            referrer.current_stable,
            app,
            None,
            roles,
            spec.name,
            record.get(spec.referenced_field),
            only_safe=True,
        )
    return ", ".join(links)


def add_links(request: Request, value: str) -> None:
    """Add links to the answer's one `Link` header, after those already set: a deprecated
    version's successor and the related calls go in the same header, neither replacing the other."""
    present = request.responseHeaders.getRawHeaders(b"Link") or []
    request.responseHeaders.setRawHeaders(b"Link", [b", ".join([*present, value.encode("utf-8")])])
