"""Batch bodies and how element outcomes become one answer (200 or 207)."""

from __future__ import annotations

import pytest

from apid.batch import parse_batch, summarise
from apid.problems import BadRequest, NotFound, PayloadTooLarge


def test_a_batch_body_parses_into_elements_and_combine():
    batch = parse_batch({"batch": [{"id": 1}, {"id": 2}], "combine": "true"}, limit=10)
    assert batch.elements == ({"id": 1}, {"id": 2})
    assert batch.combine is True
    assert parse_batch({"batch": [{}]}, limit=10).combine is False


@pytest.mark.parametrize("body", [{}, {"batch": []}, {"batch": {"id": 1}}, {"batch": "x"}, {"batch": [1]},
                                  {"batch": [{}], "combine": "yes"}, {"batch": [{}], "extra": 1}])
def test_a_malformed_batch_is_a_400(body):
    with pytest.raises(BadRequest):
        parse_batch(body, limit=10)


def test_a_batch_over_the_limit_is_a_413():
    with pytest.raises(PayloadTooLarge) as too_large:
        parse_batch({"batch": [{}] * 4}, limit=3)
    assert too_large.value.status == 413 and too_large.value.extensions["limit"] == 3


def test_all_succeeded_answers_200_with_the_last_output_or_all_of_them():
    assert (summarise([{"a": 1}, {"a": 2}], False, "/b").status, summarise([{"a": 1}, {"a": 2}], False, "/b").body) == (200, {"a": 2})
    assert summarise([{"a": 1}, {"a": 2}], True, "/b").body == [{"a": 1}, {"a": 2}]


@pytest.mark.parametrize("combine, data", [(True, [{"a": 1}, None]), (False, None)])
def test_a_failed_element_answers_207_and_is_reported_whatever_combine_says(combine, data):
    outcome = summarise([{"a": 1}, NotFound("no such thing")], combine, "/b0.1/x/y")
    assert outcome.status == 207
    assert outcome.body["data"] == data
    [error] = outcome.body["errors"]
    assert (error["status"], error["index"], error["detail"], error["instance"]) == (404, 1, "no such thing", "/b0.1/x/y")
