"""Batch calls: one request, the same endpoint called once per element of `batch`.

The endpoint is resolved and the caller's roles checked against its BATCH list once, before any
element runs (the answer is the same for every element: one caller, one endpoint); then each
element goes through the rest of the single-call pipeline on its own: its fields are admitted
and typed for the caller's roles, the action runs, its output is filtered. Elements of a non-
safe endpoint run strictly one after another, in order; elements of a safe (GET) endpoint
cannot affect each other and run together, which lets the storage serve them with fewer round
trips. Either way the outputs keep the order of the elements, and every failed element is
reported.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from twisted.internet.defer import Deferred
from twisted.python.failure import Failure

from apid.auth.tokens import Principal
from apid.calls.paths import Target
from apid.calls.pipeline import CallRequest, CallResult, Pipeline, Purpose
from apid.iostate import Endpoint
from apid.problems import BadRequest, MethodNotAllowed, PayloadTooLarge, Problem
from apid.telemetry import metrics

MULTI_STATUS = 207


@dataclass(frozen=True)
class BatchRequest:
    elements: tuple[Mapping[str, Any], ...]
    combine: bool


def parse_combine(value: Any, name: str = "combine") -> bool:
    """A boolean, or the strings "true"/"false" (BeAPI's samples send strings)."""
    if value is None:
        return False
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise BadRequest(f"{name} must be true or false", errors=[{"field": name, "reason": "must be true or false"}])


def parse_batch(body: Mapping[str, Any], limit: int) -> BatchRequest:
    unknown = sorted(set(body) - {"batch", "combine"})
    if unknown:
        raise BadRequest(
            f"a batch body holds only batch and combine, not {', '.join(unknown)}",
            errors=[{"field": name, "reason": "is not a member of a batch body"} for name in unknown],
        )
    elements = body.get("batch")
    if not isinstance(elements, list) or not elements:
        raise BadRequest(
            "batch must be a non-empty array of objects",
            errors=[{"field": "batch", "reason": "must be a non-empty array"}],
        )
    if len(elements) > limit:
        raise PayloadTooLarge(f"a batch holds at most {limit} elements, this one {len(elements)}", limit=limit)
    for index, element in enumerate(elements):
        if not isinstance(element, dict):
            raise BadRequest(f"batch element {index} is not an object", index=index)
    return BatchRequest(elements=tuple(elements), combine=parse_combine(body.get("combine")))


@dataclass(frozen=True)
class BatchOutcome:
    status: int
    body: Any


class BatchRunner:
    def __init__(self, pipeline: Pipeline, limit: int) -> None:
        self._pipeline = pipeline
        self._limit = limit

    def parse(self, target: Target, method: str, body: Mapping[str, Any]) -> BatchRequest:
        """The batch a request asks for, read before it is charged to the caller's rate limit,
        so that one refused for its method (405), shape (400) or size (413) costs nothing."""
        if method != "POST" or target.action is None or target.id is not None:
            raise MethodNotAllowed("a batch is POSTed to /b{version}/{controller}/{action}", allow=["POST"])
        return parse_batch(body, self._limit)

    async def run(
        self, principal: Principal, target: Target, batch: BatchRequest, instance: str, address: str = ""
    ) -> tuple[BatchOutcome, Endpoint]:
        """The batch's outcome, and the endpoint it called (whose links the answer carries)."""
        metrics.batch_run(len(batch.elements))
        calls = [
            CallRequest(
                controller=target.controller,
                action=target.action,
                api_version=target.api_version,
                method=None,
                body=element,
            )
            for element in batch.elements
        ]
        admitted = self._pipeline.admit(principal, calls[0], Purpose.BATCH, address)
        if admitted.endpoint.is_safe:
            # All start now and run together, and the batch goes on once all have finished.
            outcomes = await _settled(
                [self._pipeline.execute(admitted, call).addCallbacks(_data, _problem) for call in calls]
            )
        else:
            outcomes = [await self._pipeline.execute(admitted, call).addCallbacks(_data, _problem) for call in calls]
        return summarise(outcomes, batch.combine, instance), admitted.endpoint


def _settled(running: list[Deferred[Any]]) -> Deferred[list[Any]]:
    """The outcomes of `running`, in order, once each has one: the batch wakes up once, not
    once per element. A failure that is not an element's problem fails the batch; cancelling
    it (the client went away) stops every element still running."""
    outcomes: list[Any] = [None] * len(running)
    left = len(running)

    def cancel(_: Deferred[list[Any]]) -> None:
        for element in running:
            element.cancel()

    settled: Deferred[list[Any]] = Deferred(cancel)

    def settle(outcome: Any, index: int) -> None:
        nonlocal left
        outcomes[index], left = outcome, left - 1
        if left == 0 and not settled.called:
            failed = next((outcome for outcome in outcomes if isinstance(outcome, Failure)), None)
            if failed is None:
                settled.callback(outcomes)
            else:
                settled.errback(failed)

    for index, element in enumerate(running):
        element.addBoth(settle, index)
    return settled


def _data(result: CallResult) -> Any:
    return result.data


def _problem(failure: Failure) -> Problem:
    """The problem that stopped an element, as its outcome; any other failure stops the batch."""
    problem = failure.value
    if not isinstance(problem, Problem):
        return failure.raiseException()
    return problem


def element_error(problem: Problem, index: int, instance: str) -> dict[str, Any]:
    """A failed element's problem, with its `index`; and `retryAfter`, the seconds its call alone
    would have sent in Retry-After (a 503, a 429), which an element has no header to carry."""
    error = {**problem.to_dict(instance=instance), "index": index}
    retry_after = problem.headers.get("Retry-After", "")
    if retry_after.isascii() and retry_after.isdigit():  # isdigit alone admits "²", which int() refuses
        error["retryAfter"] = int(retry_after)
    return error


def summarise(outcomes: list[Any], combine: bool, instance: str) -> BatchOutcome:
    """200 with the outputs when every element succeeded, else 207 with data and errors."""
    data = [None if isinstance(o, Problem) else o for o in outcomes]
    chosen = data if combine else data[-1]
    errors = [
        element_error(outcome, index, instance)
        for index, outcome in enumerate(outcomes)
        if isinstance(outcome, Problem)
    ]
    if not errors:
        return BatchOutcome(status=200, body=chosen)
    return BatchOutcome(status=MULTI_STATUS, body={"data": chosen, "errors": errors})
