"""Batch bodies, how element outcomes become one answer (200 or 207), and how the elements of
a safe batch run together."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from twisted.internet.defer import CancelledError, Deferred

from apid.auth.tokens import anonymous_caller
from apid.calls.batch import BatchRunner, element_error, parse_batch, summarise
from apid.calls.paths import Target
from apid.problems import BadRequest, MethodNotAllowed, NotFound, PayloadTooLarge, ServiceUnavailable


def test_a_batch_body_parses_into_elements_and_combine():
    batch = parse_batch({"batch": [{"id": 1}, {"id": 2}], "combine": "true"}, limit=10)
    assert batch.elements == ({"id": 1}, {"id": 2})
    assert batch.combine is True
    assert parse_batch({"batch": [{}]}, limit=10).combine is False


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"batch": []},
        {"batch": {"id": 1}},
        {"batch": "x"},
        {"batch": [1]},
        {"batch": [{}], "combine": "yes"},
        {"batch": [{}], "extra": 1},
    ],
)
def test_a_malformed_batch_is_a_400(body):
    with pytest.raises(BadRequest):
        parse_batch(body, limit=10)


def test_a_batch_over_the_limit_is_a_413():
    with pytest.raises(PayloadTooLarge) as too_large:
        parse_batch({"batch": [{}] * 4}, limit=3)
    assert too_large.value.status == 413 and too_large.value.extensions["limit"] == 3


@pytest.mark.parametrize(
    "method, target",
    [
        ("GET", Target(kind="b", api_version=None, controller="person", action="show", id=None)),
        ("POST", Target(kind="b", api_version=None, controller="person", action=None, id=None)),
        ("POST", Target(kind="b", api_version=None, controller="person", action="show", id="1")),
    ],
)
def test_a_batch_is_posted_to_an_action_without_id_or_405_before_its_body_is_read(method, target):
    with pytest.raises(MethodNotAllowed) as refused:
        BatchRunner(None, 3).parse(target, method, {"batch": [{}] * 4})  # over the limit too: 405 first
    assert refused.value.extensions["allow"] == ["POST"]


def test_all_succeeded_answers_200_with_the_last_output_or_all_of_them():
    assert (summarise([{"a": 1}, {"a": 2}], False, "/b").status, summarise([{"a": 1}, {"a": 2}], False, "/b").body) == (
        200,
        {"a": 2},
    )
    assert summarise([{"a": 1}, {"a": 2}], True, "/b").body == [{"a": 1}, {"a": 2}]


@pytest.mark.parametrize("combine, data", [(True, [{"a": 1}, None]), (False, None)])
def test_a_failed_element_answers_207_and_is_reported_whatever_combine_says(combine, data):
    outcome = summarise([{"a": 1}, NotFound("no such thing")], combine, "/b0.1/x/y")
    assert outcome.status == 207
    assert outcome.body["data"] == data
    [error] = outcome.body["errors"]
    assert (error["status"], error["index"], error["detail"], error["instance"]) == (
        404,
        1,
        "no such thing",
        "/b0.1/x/y",
    )


class StepPipeline:
    """A pipeline whose every element waits until the test settles it."""

    def __init__(self) -> None:
        self.running: list[Deferred] = []

    def admit(self, principal, call, purpose, address=""):
        return SimpleNamespace(endpoint=SimpleNamespace(is_safe=True))

    def execute(self, admitted, call) -> Deferred:
        self.running.append(Deferred())
        return self.running[-1]


def started_batch(count: int) -> tuple[StepPipeline, Deferred]:
    pipeline = StepPipeline()
    target = Target(kind="b", api_version=None, controller="person", action="show", id=None)
    runner = BatchRunner(pipeline, 100)
    batch = runner.parse(target, "POST", {"batch": [{"id": index} for index in range(count)], "combine": True})
    return pipeline, Deferred.fromCoroutine(runner.run(anonymous_caller("ROLE_X"), target, batch, "/b"))


def test_elements_finishing_out_of_order_answer_in_order_once_all_have():
    pipeline, batch = started_batch(3)
    for index in (2, 0):
        pipeline.running[index].callback(SimpleNamespace(data={"id": index}))
    assert not batch.called
    pipeline.running[1].errback(NotFound("no person 1"))
    outcome, _ = batch.result
    assert outcome.status == 207
    assert outcome.body["data"] == [{"id": 0}, None, {"id": 2}]
    assert [error["index"] for error in outcome.body["errors"]] == [1]


def test_an_error_that_is_no_problem_fails_the_batch():
    pipeline, batch = started_batch(2)
    pipeline.running[0].callback(SimpleNamespace(data={}))
    pipeline.running[1].errback(RuntimeError("broken"))
    assert batch.result.check(RuntimeError)
    batch.addErrback(lambda _: None)


def test_cancelling_the_batch_cancels_every_element_still_running():
    pipeline, batch = started_batch(3)
    pipeline.running[0].callback(SimpleNamespace(data={}))
    batch.cancel()
    assert batch.result.check(CancelledError)
    batch.addErrback(lambda _: None)
    assert all(element.called for element in pipeline.running)


@pytest.mark.parametrize(
    "headers, retry_after",
    [
        ({"Retry-After": "7"}, 7),
        ({}, None),
        ({"Retry-After": "Wed, 21 Oct 2026 07:28:00 GMT"}, None),
        ({"Retry-After": "²"}, None),
    ],
)
def test_a_failed_elements_problem_says_when_to_retry_only_in_seconds_it_can_read(headers, retry_after):
    """An element has no headers: the seconds its call would have sent in Retry-After become
    `retryAfter`; an HTTP date or digits that are not ASCII stay out, never a 500."""
    error = element_error(ServiceUnavailable("down", headers=headers), 3, "/b0.1/team/relay")
    assert error["index"] == 3 and error["status"] == 503
    assert error.get("retryAfter") == retry_after
