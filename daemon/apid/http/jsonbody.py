"""Strict JSON request bodies: the one parser of the JSON objects clients send.

RFC 8259 leaves it to each parser what to do with nesting depth, repeated member names,
numbers beyond any machine type and escapes of lone surrogates; Python's json module accepts
them all, and each turns into a 500 further on (a RecursionError, a member silently lost, an
OverflowError, a UnicodeEncodeError in the database driver). Here they are refused with a
400 that says what and, for a string, where. NUL characters are refused too: PostgreSQL
stores no NUL in text or jsonb.

This is the hot path of every call, so the checks that walk the parsed value run only when
a cheap look at the raw text says they could fail.
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections import Counter
from collections.abc import Iterator
from typing import Any

from apid.problems import BadRequest, InvalidFields

MAX_DEPTH = 64
# The escapes that decode to a surrogate (lone unless it pairs with the next one) or to NUL;
# only a body whose text holds one is walked for bad strings.
_SUSPECT_ESCAPE = re.compile(r"\\u(?:[dD][89a-fA-F][0-9a-fA-F]{2}|0000)")
_SURROGATE_OR_NUL = re.compile("[\ud800-\udfff\x00]")


def parse_json_object(raw: bytes) -> dict[str, Any]:
    """The JSON object `raw` holds; a 400 problem for anything else or anything less strict."""
    text = _utf8(raw)
    try:
        body = _DECODER.decode(text)
    except RecursionError:
        # The decoder recurses in C; what the interpreter cannot nest is deeper than MAX_DEPTH.
        raise _too_deep() from None
    except json.JSONDecodeError as error:
        raise BadRequest(f"the request body is not valid JSON: {error}") from None
    except ValueError:
        # The decoder's only other ValueError: an integer longer than int() converts.
        raise BadRequest(
            f"the request body holds an integer of more than {sys.get_int_max_str_digits()} digits"
        ) from None
    if type(body) is not dict:
        raise BadRequest("the request body must be a JSON object")
    if (raw.count(b"[") + raw.count(b"{") > MAX_DEPTH) and deeper_than(body, MAX_DEPTH):
        raise _too_deep()
    if "\\" in text and _SUSPECT_ESCAPE.search(text):
        errors = list(string_errors(body))
        if errors:
            raise InvalidFields(
                f"the request body holds text that cannot be stored: {', '.join(error['field'] for error in errors)}",
                errors=errors,
            )
    return body


def _utf8(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise BadRequest(f"the request body is not valid UTF-8: {error.reason} at byte {error.start}") from None


def _too_deep() -> BadRequest:
    return BadRequest(f"the request body nests arrays and objects deeper than {MAX_DEPTH} levels", limit=MAX_DEPTH)


def _members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's members; a name given twice is refused instead of keeping the last value."""
    members = dict(pairs)
    if len(members) < len(pairs):
        counts = Counter(name for name, _ in pairs)
        name = _shown(next(name for name, count in counts.items() if count > 1))
        raise InvalidFields(
            f"the request body gives the member {name!r} twice in one object",
            errors=[{"field": name, "reason": "is given more than once in one object"}],
        )
    return members


def _finite(text: str) -> float:
    number = float(text)
    if math.isinf(number):
        raise BadRequest(f"the request body holds a number too large for a double: {text[:40]}")
    return number


def _not_a_number(name: str) -> None:
    raise BadRequest(f"the request body holds {name}, which is not a JSON number")


_DECODER = json.JSONDecoder(object_pairs_hook=_members, parse_float=_finite, parse_constant=_not_a_number)


def deeper_than(value: Any, limit: int) -> bool:
    """Whether arrays and objects nest more than `limit` levels in `value`, found a level at a
    time without recursion."""
    level = [value] if type(value) in (dict, list) else []
    for _ in range(limit):
        level = [
            child
            for node in level
            for child in (node.values() if type(node) is dict else node)
            if type(child) in (dict, list)
        ]
        if not level:
            return False
    return bool(level)


def string_errors(value: Any, path: str = "") -> Iterator[dict[str, str]]:
    """A field error for each string, member names included, holding a lone surrogate or NUL;
    each names its place as a dotted path (`batch.2.username`)."""
    if type(value) is str:
        fault = _string_fault(value)
        if fault:
            yield {"field": path, "reason": fault}
    elif type(value) is dict:
        for name, item in value.items():
            place = f"{path}.{_shown(name)}" if path else _shown(name)
            fault = _string_fault(name)
            if fault:
                yield {"field": place, "reason": f"its name {fault}"}
            yield from string_errors(item, place)
    elif type(value) is list:
        for index, item in enumerate(value):
            yield from string_errors(item, f"{path}.{index}" if path else str(index))


def _string_fault(text: str) -> str | None:
    found = _SURROGATE_OR_NUL.search(text)
    if found is None:
        return None
    if found.group() == "\x00":
        return "holds a NUL character"
    return f"holds a lone surrogate ({_shown(found.group())}), which is not a Unicode character"


def _shown(name: str) -> str:
    """A name as it can be written back in a problem: a lone surrogate as its escape."""
    return name.encode("utf-8", "backslashreplace").decode("utf-8")
