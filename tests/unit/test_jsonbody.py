"""Strict JSON request bodies: what Python's json module accepts and apid refuses with a 400."""

from __future__ import annotations

import json
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apid.http.jsonbody import MAX_DEPTH, deeper_than, parse_json_object
from apid.problems import BadRequest, InvalidFields


def refused(raw: bytes) -> BadRequest:
    with pytest.raises(BadRequest) as caught:
        parse_json_object(raw)
    assert caught.value.status == 400
    return caught.value


def field_errors(raw: bytes) -> list[dict[str, str]]:
    with pytest.raises(InvalidFields) as caught:
        parse_json_object(raw)
    return caught.value.extensions["errors"]


def nested(depth: int, inner: str = "1") -> str:
    """`depth` levels of arrays and objects, alternating, around `inner`."""
    text = inner
    for level in range(depth):
        text = f"[{text}]" if level % 2 else f'{{"k": {text}}}'
    return text


# --- what passes ---------------------------------------------------------------------------------

TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=20)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=20,
)


@given(body=st.dictionaries(TEXT, JSON, max_size=6), ensure_ascii=st.booleans())
def test_an_ordinary_object_reads_as_the_json_module_reads_it(body, ensure_ascii):
    raw = json.dumps(body, ensure_ascii=ensure_ascii).encode()
    assert parse_json_object(raw) == json.loads(raw)


def test_paired_surrogate_escapes_are_one_character():
    assert parse_json_object(b'{"smile": "\\ud83d\\ude00"}') == {"smile": "\U0001f600"}


def test_an_escaped_backslash_before_u_is_not_an_escape():
    assert parse_json_object(b'{"path": "C:\\\\ud800\\\\u0000"}') == {"path": "C:\\ud800\\u0000"}


def test_the_same_name_in_two_objects_is_no_repeat():
    assert parse_json_object(b'{"a": {"id": 1}, "b": [{"id": 2}, {"id": 3}]}')["b"][1] == {"id": 3}


def test_the_largest_finite_double_passes():
    assert parse_json_object(b'{"x": 1.7976931348623157e308, "y": -1e308}')["x"] == sys.float_info.max


# --- depth ------------------------------------------------------------------------------------------


def test_nesting_of_exactly_the_limit_passes():
    body = parse_json_object(('{"a": ' + nested(MAX_DEPTH - 1) + "}").encode())
    assert deeper_than(body, MAX_DEPTH - 1) and not deeper_than(body, MAX_DEPTH)


@pytest.mark.parametrize("depth", [MAX_DEPTH, MAX_DEPTH + 10, 900, 10_000, 200_000])
def test_nesting_past_the_limit_is_400_saying_so_whatever_the_depth(depth):
    problem = refused(('{"a": ' + nested(depth) + "}").encode())
    assert "deeper than 64 levels" in problem.detail
    assert problem.extensions["limit"] == MAX_DEPTH


@pytest.mark.parametrize("opener, closer", [("[", "]"), ('{"k":', "}")])
def test_an_unclosed_deep_nest_is_400_not_a_recursion_error(opener, closer):
    refused(b'{"a": ' + opener.encode() * 100_000)
    refused(b'{"a": ' + opener.encode() * 100_000 + closer.encode() * 99_999)


def test_brackets_inside_strings_are_not_nesting():
    brackets = "[" * 200 + "]" * 300 + "{" * 100
    assert parse_json_object(json.dumps({"a": brackets}).encode()) == {"a": brackets}


def test_closing_brackets_inside_strings_do_not_hide_deep_nesting():
    raw = ('{"a": "' + "]" * 200 + '", "b": ' + nested(MAX_DEPTH + 1) + "}").encode()
    assert "deeper than" in refused(raw).detail


@given(depth=st.integers(min_value=0, max_value=3 * MAX_DEPTH), limit=st.integers(min_value=1, max_value=2 * MAX_DEPTH))
def test_deeper_than_counts_levels_of_arrays_and_objects(depth, limit):
    value = json.loads(nested(depth))
    assert deeper_than(value, limit) is (depth > limit)


# --- strings --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, field",
    [
        (b'{"username": "\\ud800"}', "username"),
        (b'{"username": "ab\\udfffcd"}', "username"),
        (b'{"username": "\\ude00\\ud83d"}', "username"),
        (b'{"batch": [{"id": 1}, {"name": "x\\ud83d"}]}', "batch.1.name"),
        (b'{"map": {"deep": ["ok", "\\uDBFF"]}}', "map.deep.1"),
    ],
)
def test_a_lone_surrogate_in_a_value_is_400_naming_its_place(raw, field):
    errors = field_errors(raw)
    assert [error["field"] for error in errors] == [field]
    assert "lone surrogate" in errors[0]["reason"]


def test_a_lone_surrogate_in_a_name_is_400_naming_it_escaped():
    errors = field_errors(b'{"ok": 1, "nested": {"\\ud800x": 2}}')
    assert errors == [
        {
            "field": "nested.\\ud800x",
            "reason": "its name holds a lone surrogate (\\ud800), which is not a Unicode character",
        }
    ]


@pytest.mark.parametrize(
    "raw, field",
    [
        (b'{"username": "a\\u0000b"}', "username"),
        (b'{"batch": [{"name": "\\u0000"}]}', "batch.0.name"),
    ],
)
def test_a_nul_character_is_400_naming_its_place(raw, field):
    assert field_errors(raw) == [{"field": field, "reason": "holds a NUL character"}]


def test_every_bad_string_is_listed():
    errors = field_errors(b'{"a": "\\ud800", "b": "\\u0000", "c": "fine"}')
    assert [error["field"] for error in errors] == ["a", "b"]


@pytest.mark.parametrize("raw", [b'{"a": "\xed\xa0\x80"}', b'{"a": "\xff"}', b"\xef\xbb\xbf{}", b"\xff\xfe{\x00}\x00"])
def test_bytes_that_are_not_utf8_are_400(raw):
    refused(raw)


# --- members and numbers -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, name",
    [
        (b'{"email": "a@example.com", "email": "b@example.com"}', "email"),
        (b'{"batch": [{"id": 1, "id": 2}]}', "id"),
        (b'{"a": {"x": 1, "y": 2, "x": 3}}', "x"),
    ],
)
def test_a_member_given_twice_in_one_object_is_400_naming_it(raw, name):
    errors = field_errors(raw)
    assert errors == [{"field": name, "reason": "is given more than once in one object"}]


@pytest.mark.parametrize("number", [b"1e999", b"-1e999", b"1.8e308", b"9" * 400 + b".0"])
def test_a_number_past_the_doubles_is_400(number):
    assert "too large for a double" in refused(b'{"x": ' + number + b"}").detail


def test_an_integer_too_long_to_convert_is_400():
    digits = sys.get_int_max_str_digits()
    assert f"more than {digits} digits" in refused(b'{"x": ' + b"7" * (digits + 1) + b"}").detail


@pytest.mark.parametrize("constant", [b"NaN", b"Infinity", b"-Infinity"])
def test_nan_and_infinity_are_400(constant):
    assert "not a JSON number" in refused(b'{"x": ' + constant + b"}").detail


# --- documents ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("raw", [b'{"a": 1', b'{"a": 1} {"b": 2}', b'{"a": 1}x', b'{"a": }', b"{'a': 1}"])
def test_truncated_trailing_or_malformed_json_is_400(raw):
    assert "not valid JSON" in refused(raw).detail


@pytest.mark.parametrize("raw", [b"[]", b'"text"', b"42", b"null", b"[{}]"])
def test_a_body_that_is_not_an_object_is_400(raw):
    assert refused(raw).detail == "the request body must be a JSON object"
