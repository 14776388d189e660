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
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import quote

from twisted.web.http import Request

from apid.iostate import PATH_ID, ControllerState, Endpoint, RuleSet
from apid.routing import call_path

REQUEST_HEADERS = (b"x-link_relations", b"x-link-relations")
REL_BASE = "urn:apid:rel:"


def wanted(request: Request) -> bool:
    return any(request.getHeader(name) is not None for name in REQUEST_HEADERS)


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


def _actions(state: ControllerState, version: str, app: str, api: str | None, roles: frozenset[str],
             field: str | None, value: Any, skip: str | None = None, only_safe: bool = False) -> Iterator[str]:
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


def link_header(rules: RuleSet, endpoint: Endpoint, data: Any, roles: frozenset[str], app: str,
                api: str | None, self_path: str) -> str:
    """The `Link` header value for the answer `data` of a call of `endpoint`."""
    state = rules.controller(endpoint.controller)
    record = data if isinstance(data, Mapping) else {}
    key = state.primary_key
    links = [_link(self_path, "self", endpoint.method)]
    links += _actions(state, endpoint.api_version, app, api, roles, key, record.get(key) if key else None,
                      skip=endpoint.action)
    for name, spec in state.values.items():
        target = rules.controller(spec.reference) if spec.key == "FKEY" else None
        if target is not None:
            links += _actions(target, target.current_stable, app, None, roles, spec.referenced_field,
                              record.get(name), only_safe=True)
    for referrer, spec in rules.referring(state.name):
        links += _actions(referrer, referrer.current_stable, app, None, roles, spec.name,
                          record.get(spec.referenced_field), only_safe=True)
    return ", ".join(links)
