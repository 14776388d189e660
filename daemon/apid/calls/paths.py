"""The URL grammar of API calls: `/{t}{app}[-{api}]/{controller}[/{action}[/{id}]]`.

`t` is `v` (a normal call), `b` (batch) or `c` (chain); `app` is MAJOR.MINOR of the
application; `api` picks a VERSION block of the controller's IO State (CURRENTSTABLE if absent).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from functools import lru_cache

from apid.iostate.model import NAME
from apid.problems import NotFound

PREFIX = re.compile(r"(?P<kind>[vbc])(?P<app>[0-9]+\.[0-9]+)(?:-(?P<api>[A-Za-z0-9_.]+))?")
PREFIX_BYTES = re.compile(PREFIX.pattern.encode("ascii"))  # a path's first segment, undecoded


class CallKind(StrEnum):
    """What a path's first letter asks for: one call, the same endpoint once per element of a
    batch, or a chain of endpoints. Its value is the letter, as paths spell it."""

    CALL = "v"
    BATCH = "b"
    CHAIN = "c"


@dataclass(frozen=True)
class Target:
    kind: CallKind
    api_version: str | None
    controller: str
    action: str | None
    id: str | None


def parse_target(app_version: str, prefix: str, controller: str, action: str | None, id: str | None) -> Target:
    """The call a path names; a wrong prefix, application version or name is a 404 problem."""
    kind, api_version = _prefix(app_version, prefix)
    for name in (controller, action):
        if name is not None and not NAME.fullmatch(name):
            raise NotFound(f"no controller or action named {name!r}")
    return Target(kind=kind, api_version=api_version, controller=controller, action=action, id=id)


@lru_cache(maxsize=256)
def _prefix(app_version: str, prefix: str) -> tuple[CallKind, str | None]:
    """The kind and API version a prefix names, worked out once: a daemon is called with a few
    (a wrong one raises, and is not kept)."""
    match = PREFIX.fullmatch(prefix)
    if match is None:
        raise NotFound(f"no resource at /{prefix}/...")
    if match["app"] != app_version:
        raise NotFound(
            f"application version {match['app']} is not served here; this daemon serves {app_version}",
            servedVersion=app_version,
        )
    return CallKind(match["kind"]), match["api"]


def call_path(kind: str, app_version: str, api_version: str | None, controller: str, action: str) -> str:
    api = f"-{api_version}" if api_version else ""
    return f"/{kind}{app_version}{api}/{controller}/{action}"
