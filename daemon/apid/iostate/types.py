"""The VALUES types an IO State file may name, each able to check a request value.

A value arrives either as JSON (the body: it must already have the right JSON type) or as
text (the path id and query parameters: it is parsed from the string). Whatever a type
admits, the database and the daemon's JSON encoder can hold: whole numbers within 64 bits
(SQLite's INTEGER, orjson), finite doubles. Each type also declares the JSON Schema of its
values, with which the API documents (`apid.openapi`) type a field of it, and how an answer
carries a value of it (`answer`): what a plugin stores comes back as the type says, whatever
the database or the code made of it (a `Float` column's `1` as `1.0`, a NUMERIC's Decimal).
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from typing import Any
from urllib.parse import urlsplit

INT32 = (-(2**31), 2**31 - 1)
INT64 = (-(2**63), 2**63 - 1)
EMAIL_LENGTH = 254  # characters: the longest address SMTP carries (RFC 5321's 256-octet path, less <>)
LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
HOSTNAME = re.compile(rf"{LABEL}(?:\.{LABEL})*")
EMAIL = re.compile(rf"[^@\s\x00-\x1f\x7f<>(),;:\"\[\]\\]{{1,64}}@{LABEL}(?:\.{LABEL})+")
# Numbers as text take ASCII digits only ([0-9], never \d: Unicode digits are not numbers here),
# in patterns with one way to match each character, so a refused one costs its length, not its square.
WHOLE_TEXT = re.compile(r"-?[0-9]+(?:\.0+)?")  # `7.0` too: a whole number, as in a JSON body
FLOAT_TEXT = re.compile(r"-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
FLOAT_TEXT_LIMIT = 64  # characters: a double's shortest form needs 24; more is a mistake or an attack
CONTROL_OR_SPACE = re.compile(r"[\x00-\x20\x7f]")

Conversion = Callable[[Any], Any]
"""How an answer carries a value of a type: the same value in the type's JSON form."""


@dataclass(frozen=True)
class ValueType:
    """One VALUES type: `check` takes a JSON value, `parse` takes text; both raise ValueError.
    `json_schema` is the JSON Schema of the values `check` admits (null aside). `answer`, when
    the type has one, gives an answered value in the type's form; it never raises, and leaves
    a value that is not one of the type's as it is, so a plugin's mistake stays visible."""

    name: str
    check: Callable[[Any], Any]
    parse: Callable[[str], Any]
    json_schema: Mapping[str, Any] = field(compare=False)
    answer: Conversion | None = field(default=None, compare=False)


def _integer(bounds: tuple[int, int]) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # `1.0` is a whole number: JSON Schema's integer, and JSON's
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError("expected a whole number")
        if not bounds[0] <= value <= bounds[1]:
            raise ValueError("number out of range")
        return value

    return check


def _parse_integer(check: Callable[[Any], int]) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if not WHOLE_TEXT.fullmatch(text):
            raise ValueError("expected a whole number")
        significant = text.partition(".")[0].lstrip("-").lstrip("0")
        if len(significant) > 19:  # past 64 bits, however long (int() would refuse 4300 digits)
            raise ValueError("number out of range")
        value = int(significant or "0")
        return check(-value if text.startswith("-") else value)

    return parse


def _string(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError("expected a string")
    return value


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError("expected true or false")
    return value


def _parse_boolean(text: str) -> bool:
    if text in ("true", "false"):
        return text == "true"
    raise ValueError("expected true or false")


def _float(value: Any) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("expected a number")
    if isinstance(value, int):
        return value if INT64[0] <= value <= INT64[1] else _double(value)
    if not math.isfinite(value):
        raise ValueError("expected a finite number")
    return value


def _double(whole: int) -> float:
    """A whole number past 64 bits as the double it stands for (as a JavaScript client meant
    it: 1e21 is written 1000000000000000000000)."""
    try:
        return float(whole)
    except OverflowError:
        raise ValueError("number out of range") from None


def _parse_float(text: str) -> float:
    if len(text) > FLOAT_TEXT_LIMIT:
        raise ValueError(f"expected a number of at most {FLOAT_TEXT_LIMIT} characters")
    if not FLOAT_TEXT.fullmatch(text):
        raise ValueError("expected a number")
    return _float(float(text))


def _date(value: Any) -> str:
    text = _string(value)
    try:
        (datetime if "T" in text else date).fromisoformat(text)
    except ValueError:
        raise ValueError("expected an ISO 8601 date or date-time") from None
    return text


def _email(value: Any) -> str:
    text = _string(value)
    if len(text) > EMAIL_LENGTH or not EMAIL.fullmatch(text):
        raise ValueError("expected an email address")
    return text


def _url(value: Any) -> str:
    text = _string(value)
    if CONTROL_OR_SPACE.search(text):
        raise ValueError("expected a URL without spaces or control characters")
    parts = urlsplit(text)
    host = parts.hostname or ""
    if parts.scheme not in ("http", "https") or not (HOSTNAME.fullmatch(host) or _is_ip(host)):
        raise ValueError("expected an absolute http or https URL")
    return text


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _list(value: Any) -> list:
    if not isinstance(value, list):
        raise ValueError("expected a list")
    _check_whole_numbers(value)
    return value


def _map(value: Any) -> dict:
    if not isinstance(value, dict):
        raise ValueError("expected an object")
    _check_whole_numbers(value)
    return value


def _check_whole_numbers(value: Any) -> None:
    """Refuse a whole number past 64 bits anywhere inside a list or object (the body parser
    bounds the nesting, so the recursion is shallow)."""
    items = value.values() if isinstance(value, dict) else value
    for item in items:
        if isinstance(item, (dict, list)):
            _check_whole_numbers(item)
        elif isinstance(item, int) and not isinstance(item, bool) and not INT64[0] <= item <= INT64[1]:
            raise ValueError("holds a whole number outside the 64-bit range")


def _answer_whole(value: Any) -> Any:
    """A whole number held as a Decimal or a float (a NUMERIC column, a computed value) as an int."""
    if isinstance(value, (Decimal, float)) and _is_whole(value):
        whole = int(value)
        return whole if INT64[0] <= whole <= INT64[1] else value
    return value


def _is_whole(value: Decimal | float) -> bool:
    if isinstance(value, Decimal):
        return value.is_finite() and value == value.to_integral_value()
    return value.is_integer()


def _answer_float(value: Any) -> Any:
    """A number as a double: `1` answers `1.0`, as the database gives it back once stored."""
    if isinstance(value, (int, Decimal)) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:  # past a double's range: left to the encoder, as the plugin gave it
            return value
    return value


def _answer_boolean(value: Any) -> Any:
    """0 and 1 (a SQL column without a boolean type) as false and true."""
    if type(value) is int and value in (0, 1):
        return bool(value)
    return value


def _text_only_in_body(kind: str) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        raise ValueError(f"{kind} values must be sent in the JSON body")

    return parse


_LONG = _integer(INT64)
_INTEGER = _integer(INT32)

TYPES: dict[str, ValueType] = {
    "long": ValueType(
        "Long",
        _LONG,
        _parse_integer(_LONG),
        json_schema={"type": "integer", "format": "int64", "minimum": INT64[0], "maximum": INT64[1]},
        answer=_answer_whole,
    ),
    "integer": ValueType(
        "Integer",
        _INTEGER,
        _parse_integer(_INTEGER),
        json_schema={"type": "integer", "format": "int32", "minimum": INT32[0], "maximum": INT32[1]},
        answer=_answer_whole,
    ),
    "string": ValueType("String", _string, _string, json_schema={"type": "string"}),
    "boolean": ValueType("Boolean", _boolean, _parse_boolean, json_schema={"type": "boolean"}, answer=_answer_boolean),
    "float": ValueType(
        "Float", _float, _parse_float, json_schema={"type": "number", "format": "double"}, answer=_answer_float
    ),
    "date": ValueType("Date", _date, _date, json_schema={"type": "string", "format": "date-time"}),
    "email": ValueType(
        "Email", _email, _email, json_schema={"type": "string", "format": "email", "maxLength": EMAIL_LENGTH}
    ),
    # The scheme only: JSON Schema's "uri" format does not say which hosts _url admits.
    "url": ValueType(
        "URL", _url, _url, json_schema={"type": "string", "format": "uri", "pattern": "^[hH][tT][tT][pP][sS]?://"}
    ),
    "list": ValueType(
        "List", _list, lambda text: text.split(",") if text else [], json_schema={"type": "array", "items": {}}
    ),
    "map": ValueType("Map", _map, _text_only_in_body("Map"), json_schema={"type": "object"}),
}

ALIASES = {
    "int": "integer",
    "short": "integer",
    "double": "float",
    "bigdecimal": "float",
    "array": "list",
    "arraylist": "list",
    "list<map>": "list",
    "composite": "map",
    "linkedhashmap": "map",
    "object": "map",
}


def value_type(name: str) -> ValueType:
    """The type called `name` (case-insensitive, with the Java-ish aliases BeAPI files use)."""
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key not in TYPES:
        known = ", ".join(sorted(t.name for t in TYPES.values()))
        raise KeyError(f"unknown type {name!r}; known types: {known}")
    return TYPES[key]
