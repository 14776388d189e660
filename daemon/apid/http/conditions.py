"""Conditional requests (RFC 9110 section 13): the one reader of If-Match and If-None-Match.

If-None-Match is compared weakly (`W/"x"` names `"x"`) and answers whether the client holds
the answer already (a 304); If-Match is compared strongly and decides whether a write or a
GET may go on (a 412 when not). `*` names any current answer in both.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from twisted.web.http import Request

# One element of a list of entity-tags: `*`, an entity-tag, weak or strong (RFC 9110 section
# 8.8.3), or nothing (empty elements are allowed and ignored, section 5.6.1.2).
MEMBER = re.compile(rb'\s*(\*|(?:W/)?"[\x21\x23-\x7e\x80-\xff]*")?\s*(?:,|$)')


def entity_tags(value: bytes) -> list[bytes] | None:
    """The members of a list of entity-tags, `*` as itself; None when it is not such a list (a
    tag without quotes, say), which then names nothing."""
    members: list[bytes] = []
    position = 0
    while position < len(value):
        match = MEMBER.match(value, position)
        if match is None or match.end() == position:
            return None
        if match.group(1) is not None:
            members.append(match.group(1))
        position = match.end()
    return members


def held(if_none_match: bytes | None, tag: bytes) -> bool:
    """Whether If-None-Match names `tag`, compared weakly, or is `*`: the client holds the answer."""
    if if_none_match is None:
        return False
    members = entity_tags(if_none_match) or ()
    return any(member == b"*" or member.removeprefix(b"W/") == tag for member in members)


def matches(if_match: bytes, current: bytes) -> bool:
    """Whether If-Match holds for something tagged `current`: strong comparison, `*` for any."""
    members = entity_tags(if_match)
    return members is not None and any(member in (b"*", current) for member in members)


@dataclass(slots=True)  # read once a request: not frozen, whose __init__ costs more
class Preconditions:
    """A request's If-Match and If-None-Match, read once at the edge (None: not sent)."""

    if_match: bytes | None = None
    if_none_match: bytes | None = None

    @classmethod
    def of(cls, request: Request) -> Preconditions:
        return cls(request.getHeader(b"if-match"), request.getHeader(b"if-none-match"))
