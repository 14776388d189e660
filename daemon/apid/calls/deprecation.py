"""Deprecated API versions at the edge: what every answer of a call to one says, and its end.

A version whose IO State block has `DEPRECATED` is announced from the moment it is loaded,
even before that date (RFC 9745 allows a date in the future: clients get the whole notice
period). Every answer of a `v`, `b` or `c` call to it, success or problem, carries
`Deprecation: @<unix seconds>`, `Sunset: <HTTP-date>` (RFC 8594) when it has a `SUNSET`, and
`Link`s to its successor (`rel="successor-version"`: the same action of the controller's
CURRENTSTABLE version, else that version's default action) and to the docs page
(`rel="deprecation"`). From the sunset on, its calls answer 410 naming the current version.
"""

from __future__ import annotations

from typing import Any

from twisted.web.http import Request, datetimeToString

from apid.calls.links import add_links
from apid.calls.paths import Target, call_path
from apid.http.fixed_paths import DOCS_PATH
from apid.iostate import ApiVersion, ControllerState, RuleSet
from apid.problems import Gone


def http_date(seconds: int) -> str:
    return datetimeToString(seconds).decode("ascii")


def successor(state: ControllerState, version: ApiVersion, target: Target, app: str) -> str | None:
    """The path to call instead in the CURRENTSTABLE version; None for that version itself,
    or when it has neither the action nor a default action."""
    if version.name == state.current_stable:
        return None
    current = state.versions[state.current_stable]
    action = target.action or version.default_action
    if action not in current.endpoints:
        action = current.default_action
    return None if action is None else call_path(target.kind, app, None, state.name, action)


def announce(request: Request, rules: RuleSet, target: Target, app: str, now: float) -> None:
    """Give the answer to a call of a deprecated version its headers; past the version's
    sunset, refuse the call with a 410 (which carries them too)."""
    state = rules.controller(target.controller)
    if state is None:
        return  # not a controller: the pipeline's 404 says so
    version = state.versions.get(target.api_version or state.current_stable)
    if version is None or version.deprecated is None:
        return  # not deprecated, or not a version at all: the pipeline's 404 says which
    deprecation = version.deprecated
    request.setHeader(b"Deprecation", f"@{deprecation.since}".encode("ascii"))
    if deprecation.sunset is not None:
        request.setHeader(b"Sunset", http_date(deprecation.sunset).encode("ascii"))
    path = successor(state, version, target, app)
    links = [f'<{DOCS_PATH}>; rel="deprecation"; type="text/html"']
    if path is not None:
        links.insert(0, f'<{path}>; rel="successor-version"')
    add_links(request, ", ".join(links))
    if deprecation.sunset is not None and deprecation.gone(now):
        instead = f"; call API version {state.current_stable}" + (f" ({path})" if path else "")
        notice = f". {deprecation.message}" if deprecation.message else ""
        extensions: dict[str, Any] = {"successor": path} if path else {}  # Problem's extension members
        raise Gone(
            f"API version {version.name} of {state.name} was retired on "
            f"{http_date(deprecation.sunset)}{instead}{notice}",
            currentApiVersion=state.current_stable,
            **extensions,
        )
