"""The VALUES types of IO State files: JSON values (check) and query-string text (parse)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apid.iostate.types import INT32, INT64, value_type

LONG = value_type("Long")
INTEGER = value_type("Integer")
STRING = value_type("String")
BOOLEAN = value_type("Boolean")
FLOAT = value_type("Float")
DATE = value_type("Date")
EMAIL = value_type("Email")
URL = value_type("URL")
LIST = value_type("List")
MAP = value_type("Map")


def rejects(function, value) -> str:
    """The message of the ValueError `function(value)` raises; a failure if it raises none."""
    try:
        function(value)
    except ValueError as refused:
        return str(refused)
    pytest.fail(f"{value!r} was accepted")


# --- names and aliases ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, canonical",
    [
        ("Long", "Long"),
        ("long", "Long"),
        ("Integer", "Integer"),
        ("int", "Integer"),
        ("Short", "Integer"),
        ("String", "String"),
        ("boolean", "Boolean"),
        ("Boolean", "Boolean"),
        ("Float", "Float"),
        ("Double", "Float"),
        ("BigDecimal", "Float"),
        ("Date", "Date"),
        ("Email", "Email"),
        ("URL", "URL"),
        ("url", "URL"),
        ("List", "List"),
        ("ArrayList", "List"),
        ("Array", "List"),
        ("List<Map>", "List"),
        ("Map", "Map"),
        ("LinkedHashMap", "Map"),
        ("Object", "Map"),
        ("Composite", "Map"),
        (" Long ", "Long"),
    ],
)
def test_type_names_and_aliases(name, canonical):
    assert value_type(name).name == canonical


@pytest.mark.parametrize("name", ["Emial", "Number", "HashSet", ""])
def test_unknown_type_is_a_key_error_listing_the_known_ones(name):
    with pytest.raises(KeyError) as info:
        value_type(name)
    message = info.value.args[0]
    assert f"unknown type {name!r}" in message
    assert "Boolean, Date, Email, Float, Integer, List, Long, Map, String, URL" in message


# --- Long and Integer -----------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, -1, 42, INT64[0], INT64[1]])
def test_long_accepts_whole_numbers_in_range(value):
    assert LONG.check(value) == value


@pytest.mark.parametrize("value", [INT64[1] + 1, INT64[0] - 1])
def test_long_rejects_out_of_range(value):
    assert rejects(LONG.check, value) == "number out of range"


@pytest.mark.parametrize("value", [True, False, 1.5, float("nan"), float("inf"), "1", None, [1]])
def test_long_rejects_what_is_not_a_json_integer(value):
    assert rejects(LONG.check, value) == "expected a whole number"


@pytest.mark.parametrize("value, whole", [(1.0, 1), (-0.0, 0), (42.0, 42)])
def test_a_whole_number_written_with_a_fraction_is_that_number(value, whole):
    """JSON Schema's `integer` admits `1.0`, and so do generated clients' validators."""
    assert type(LONG.check(value)) is int and LONG.check(value) == whole
    assert INTEGER.check(value) == whole


def test_a_float_past_the_range_is_out_of_range_not_a_crash():
    assert rejects(LONG.check, 1e300) == "number out of range"


@pytest.mark.parametrize("value", [INT32[0], 0, INT32[1]])
def test_integer_accepts_32_bit_values(value):
    assert INTEGER.check(value) == value


@pytest.mark.parametrize("value", [INT32[1] + 1, INT32[0] - 1, 2**40])
def test_integer_rejects_values_beyond_32_bits(value):
    assert rejects(INTEGER.check, value) == "number out of range"


def test_integer_rejects_booleans():
    assert rejects(INTEGER.check, True) == "expected a whole number"


@pytest.mark.parametrize("text, value", [("0", 0), ("-17", -17), ("007", 7), ("7.0", 7), ("-3.00", -3)])
def test_integer_parses_decimal_text(text, value):
    """`7.0` as in a JSON body, where it is JSON Schema's integer: the query agrees with the body."""
    assert INTEGER.parse(text) == value
    assert LONG.parse(text) == LONG.check(float(text)) == value


@pytest.mark.parametrize("text", ["", "1.5", "1.", ".0", "1.0.0", "1e3", "+1", " 1", "1 ", "0x10", "١٢", "true", "-"])
def test_integer_text_must_be_plain_decimal(text):
    assert rejects(LONG.parse, text) == "expected a whole number"


def test_integer_text_out_of_range_is_rejected():
    assert rejects(INTEGER.parse, str(INT32[1] + 1)) == "number out of range"
    assert rejects(LONG.parse, str(INT64[1] + 1)) == "number out of range"


@pytest.mark.parametrize("text", ["99999999999999999999999", "-" + "9" * 30, "1" * 5000])
def test_integer_text_of_any_length_past_64_bits_is_out_of_range(text):
    assert rejects(LONG.parse, text) == "number out of range"


@pytest.mark.parametrize("text, value", [("0" * 30 + "42", 42), ("-" + "0" * 5000 + "7", -7), ("0" * 25, 0)])
def test_integer_text_with_leading_zeros_is_its_value(text, value):
    assert LONG.parse(text) == value


@given(st.integers(min_value=INT64[0], max_value=INT64[1]))
def test_any_long_parses_from_its_decimal_text(number):
    assert LONG.parse(str(number)) == number


@given(st.one_of(st.integers(max_value=INT64[0] - 1), st.integers(min_value=INT64[1] + 1)))
def test_no_long_beyond_64_bits_parses(number):
    assert rejects(LONG.parse, str(number)) == "number out of range"


# --- String and Boolean ----------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["", "jdoe", "x" * 10000])
def test_string_accepts_strings(value):
    assert STRING.check(value) == value
    assert STRING.parse(value) == value


@pytest.mark.parametrize("value", [1, True, None, ["a"], {"a": 1}])
def test_string_rejects_other_json_values(value):
    assert rejects(STRING.check, value) == "expected a string"


@pytest.mark.parametrize("value", [True, False])
def test_boolean_accepts_true_and_false(value):
    assert BOOLEAN.check(value) is value


@pytest.mark.parametrize("value", [0, 1, "true", None])
def test_boolean_rejects_numbers_and_strings(value):
    assert rejects(BOOLEAN.check, value) == "expected true or false"


def test_boolean_parses_true_and_false_text():
    assert BOOLEAN.parse("true") is True
    assert BOOLEAN.parse("false") is False


@pytest.mark.parametrize("text", ["True", "1", "yes", ""])
def test_boolean_text_is_only_true_or_false(text):
    assert rejects(BOOLEAN.parse, text) == "expected true or false"


# --- Float -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [0, 1.5, -2.25, INT64[0], INT64[1], 1e300])
def test_float_accepts_json_numbers(value):
    assert FLOAT.check(value) == value


@pytest.mark.parametrize("value", [INT64[1] + 1, INT64[0] - 1, 10**30, -(10**300)])
def test_float_keeps_a_whole_number_past_64_bits_as_the_double_it_stands_for(value):
    checked = FLOAT.check(value)
    assert type(checked) is float
    assert checked == float(value)


@pytest.mark.parametrize("value", [10**400, -(10**400)])
def test_float_rejects_a_whole_number_past_the_doubles(value):
    assert rejects(FLOAT.check, value) == "number out of range"


@pytest.mark.parametrize("value", [True, False, "1.5", None])
def test_float_rejects_booleans_and_strings(value):
    assert rejects(FLOAT.check, value) == "expected a number"


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_float_rejects_non_finite_json_values(value):
    rejects(FLOAT.check, value)


@pytest.mark.parametrize("text, value", [("1.5", 1.5), ("-2", -2.0), ("1e3", 1000.0)])
def test_float_parses_text(text, value):
    assert FLOAT.parse(text) == value


@pytest.mark.parametrize(
    "text, reason",
    [
        ("NaN", "expected a number"),
        ("nan", "expected a number"),
        ("inf", "expected a number"),
        ("-Infinity", "expected a number"),
        ("1e400", "expected a finite number"),
    ],
)
def test_float_text_must_be_finite(text, reason):
    assert rejects(FLOAT.parse, text) == reason


@pytest.mark.parametrize("text, value", [("1.", 1.0), (".5", 0.5), ("-.5e-3", -0.0005), ("1E+2", 100.0)])
def test_float_text_takes_each_decimal_form(text, value):
    assert FLOAT.parse(text) == value


def test_float_text_is_at_most_64_characters():
    assert FLOAT.parse("0." + "0" * 61 + "1") == 1e-62  # 64 characters
    assert rejects(FLOAT.parse, "0." + "0" * 62 + "1") == "expected a number of at most 64 characters"
    assert rejects(FLOAT.parse, "1" * 16_000 + "x") == "expected a number of at most 64 characters"


@pytest.mark.parametrize("text", ["\u00b2", "1\u00b2", "\u0664\u0660\u0664", "\uff11\uff12", "\u09e7"])
def test_numbers_as_text_take_ascii_digits_only(text):
    """Superscripts, Arabic-Indic, full-width and Bengali digits: str.isdigit() admits them all."""
    assert rejects(LONG.parse, text) == "expected a whole number"
    assert rejects(INTEGER.parse, text) == "expected a whole number"
    assert rejects(FLOAT.parse, text) == "expected a number"


@pytest.mark.parametrize("text", ["", "abc", "1,5", "0x10"])
def test_float_text_must_be_a_number(text):
    assert rejects(FLOAT.parse, text) == "expected a number"


@pytest.mark.parametrize("text", ["1_000", " 1.5 ", "١٢"])
def test_float_text_is_as_strict_as_integer_text(text):
    rejects(FLOAT.parse, text)


# --- Date --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["2026-01-01", "2026-01-01T00:00:00+00:00", "2026-02-28T12:30:00"])
def test_date_accepts_iso_dates_and_date_times(value):
    assert DATE.check(value) == value
    assert DATE.parse(value) == value


@pytest.mark.parametrize("value", ["2026-13-01", "2026-02-30", "2026-01-01T25:00", "01/02/2026", "today"])
def test_date_rejects_what_is_not_iso_8601(value):
    assert rejects(DATE.check, value) == "expected an ISO 8601 date or date-time"


@pytest.mark.parametrize("value", [20260101, None, True])
def test_date_rejects_non_strings(value):
    assert rejects(DATE.check, value) == "expected a string"


# --- Email ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["jdoe@example.com", "j.doe+tag@mail.example.org", "a@b-c.io"])
def test_email_accepts_addresses(value):
    assert EMAIL.check(value) == value
    assert EMAIL.parse(value) == value


@pytest.mark.parametrize(
    "value",
    [
        "jdoe",
        "jdoe@",
        "@example.com",
        "jdoe@localhost",
        "jdoe@example..com",
        "jdoe@-example.com",
        "j doe@example.com",
        "jdoe@exa mple.com",
        "a@b@example.com",
        "<jdoe@example.com>",
        "jdoe@example.com\r\nBcc: x@evil.com",
        "jd\noe@example.com",
        "jdoe\r@example.com",
        "x" * 65 + "@example.com",
        "x@" + "a" * 250 + ".com",
    ],
)
def test_email_rejects_malformed_addresses(value):
    assert rejects(EMAIL.check, value) == "expected an email address"


@pytest.mark.parametrize("value", ["jdoe@example.com\n", "a.b@mail.example.org\n"])
def test_email_rejects_a_trailing_newline(value):
    rejects(EMAIL.check, value)


def test_email_rejects_non_strings():
    assert rejects(EMAIL.check, 42) == "expected a string"


# --- URL -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value", ["http://example.com", "https://hooks.example.com:8443/in?x=1", "http://127.0.0.1/hook"]
)
def test_url_accepts_absolute_http_urls(value):
    assert URL.check(value) == value
    assert URL.parse(value) == value


@pytest.mark.parametrize(
    "value",
    [
        "ftp://example.com/f",
        "mailto:a@example.com",
        "javascript:alert(1)",
        "file:///etc/passwd",
        "//example.com/x",
        "example.com",
        "/relative",
    ],
)
def test_url_rejects_other_schemes_and_relative_urls(value):
    assert rejects(URL.check, value) == "expected an absolute http or https URL"


@pytest.mark.parametrize("value", ["http://", "https:///path", "http://:80/"])
def test_url_rejects_a_url_without_host(value):
    assert rejects(URL.check, value) == "expected an absolute http or https URL"


@pytest.mark.parametrize("value", ["http://example.com/\r\nX-Injected: 1", "http://exa\nmple.com/", "http://a b.com/"])
def test_url_rejects_control_characters_and_spaces(value):
    rejects(URL.check, value)


# --- List and Map ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [[], ["ROLE_USER"], [1, {"a": 2}]])
def test_list_accepts_json_arrays(value):
    assert LIST.check(value) == value


@pytest.mark.parametrize("value", ["a,b", {"a": 1}, None, 1])
def test_list_rejects_non_arrays(value):
    assert rejects(LIST.check, value) == "expected a list"


def test_list_parses_comma_separated_text():
    assert LIST.parse("ROLE_ADMIN,ROLE_USER") == ["ROLE_ADMIN", "ROLE_USER"]
    assert LIST.parse("one") == ["one"]
    assert LIST.parse("") == []


@pytest.mark.parametrize("value", [{}, {"a": [1, 2]}, {"a": {"b": [INT64[0], INT64[1], 1e300, True]}}])
def test_map_accepts_json_objects(value):
    assert MAP.check(value) == value


@pytest.mark.parametrize("kind", [LIST, MAP])
@pytest.mark.parametrize("whole", [INT64[1] + 1, INT64[0] - 1, 10**100])
def test_list_and_map_refuse_a_whole_number_past_64_bits_at_any_depth(kind, whole):
    for inside in ([whole], {"a": whole}, [{"a": [1, whole]}], {"a": {"b": [whole]}}):
        value = [inside] if kind is LIST else {"x": inside}
        assert rejects(kind.check, value) == "holds a whole number outside the 64-bit range"


@pytest.mark.parametrize("value", [[], "{}", None])
def test_map_rejects_non_objects(value):
    assert rejects(MAP.check, value) == "expected an object"


def test_map_cannot_come_from_text():
    assert rejects(MAP.parse, "a=1") == "Map values must be sent in the JSON body"
