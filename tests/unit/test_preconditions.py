"""If-Match read as RFC 9110 says: a list of entity-tags compared strongly, or `*`; refused on
batches and chains; the record named by the write's key, in its body or its path; the
record's version handed to the write only when the caller may send it and sent none."""

from __future__ import annotations

import pytest

from apid.calls.paths import CallKind
from apid.calls.pipeline import CallRequest
from apid.calls.preconditions import show_call, single_calls_only, unchanged_since, with_version
from apid.http.conditions import entity_tags, held, matches
from apid.problems import BadRequest, PreconditionFailed

TAG = b'"9f86d081884c7d65"'


@pytest.mark.parametrize(
    ("condition", "expected"),
    [
        (b'"a"', [b'"a"']),
        (b'"a", "b",W/"c"', [b'"a"', b'"b"', b'W/"c"']),
        (b"*", [b"*"]),
        (b' "a" , "" ', [b'"a"', b'""']),
        (b"deadbeef", None),
        (b'"a" "b"', None),
        (b'"a", b', None),
        (b'"a,b"', [b'"a,b"']),
        (b'"a", , "b",', [b'"a"', b'"b"']),  # empty elements are ignored
        (b" , ", []),
    ],
)
def test_a_list_of_entity_tags_is_read_strictly(condition, expected):
    assert entity_tags(condition) == expected


@pytest.mark.parametrize(
    ("condition", "holds"),
    [
        (TAG, True),
        (b'"other", ' + TAG, True),
        (b"*", True),
        (b"W/" + TAG, False),  # weak tags never match for If-Match
        (b'"other"', False),
        (TAG[1:-1], False),  # unquoted: not an entity-tag
        (b"", False),
    ],
)
def test_if_match_holds_only_for_the_current_tag_strongly(condition, holds):
    assert matches(condition, TAG) is holds


@pytest.mark.parametrize(
    ("condition", "holds"),
    [
        (TAG, True),
        (b"W/" + TAG, True),  # If-None-Match compares weakly
        (b'"other", W/' + TAG, True),
        (b"*", True),
        (b'"other"', False),
        (TAG[1:-1], False),  # unquoted: not an entity-tag
        (None, False),
    ],
)
def test_if_none_match_names_the_answer_weakly_or_by_star(condition, holds):
    assert held(condition, TAG) is holds


def test_batches_and_chains_refuse_if_match():
    for kind in (CallKind.BATCH, CallKind.CHAIN):
        with pytest.raises(BadRequest):
            single_calls_only(kind, TAG)
        single_calls_only(kind, None)
    single_calls_only(CallKind.CALL, TAG)


def write(body=None, text=None) -> CallRequest:
    return CallRequest(
        controller="person", action="update", api_version=None, method="PUT", body=body or {}, text=text or {}
    )


def test_the_record_is_named_by_its_key_in_the_body_or_the_path():
    from_path = show_call(write(text={"id": ["7"]}), "id", "person", "1")
    assert (from_path.action, from_path.method, from_path.api_version) == ("show", "GET", "1")
    assert (from_path.text, from_path.body) == ({"id": ["7"]}, {})
    from_body = show_call(write(body={"id": 8, "email": "x@example.com"}, text={"id": ["7"]}), "id", "person", "1")
    assert (from_body.body, from_body.text) == ({"id": 8}, {})
    assert show_call(write(body={"code": "acme"}), "code", "company", "1").body == {"code": "acme"}
    assert show_call(write(body={"email": "x@example.com"}), "id", "person", "1") is None


def test_the_version_goes_to_the_write_only_when_it_may_and_none_was_sent():
    record = {"id": 7, "version": 3}
    sendable = frozenset({"id", "version", "email"})
    assert with_version(write(body={"email": "e"}), record, sendable).body == {"email": "e", "version": 3}
    kept = write(body={"version": 2})
    assert with_version(kept, record, sendable) is kept  # the caller's own wins: a stale one is a 409
    in_query = write(text={"version": ["2"]})
    assert with_version(in_query, record, sendable) is in_query
    plain = write(body={"email": "e"})
    assert with_version(plain, record, frozenset({"id", "email"})) is plain  # the role may not send it
    assert with_version(plain, {"id": 7}, sendable) is plain
    assert with_version(plain, [record], sendable) is plain


def test_a_read_answers_412_unless_its_if_match_holds():
    unchanged_since(None, TAG)
    unchanged_since(TAG, TAG)
    unchanged_since(b"*", TAG)
    with pytest.raises(PreconditionFailed):
        unchanged_since(b'"other"', TAG)
