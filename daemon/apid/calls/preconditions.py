"""If-Match on writes (RFC 9110 section 13.1.1): a change made only to the record as the client
last saw it.

A non-safe `v` call carrying If-Match names its record by the controller's PKEY (`id` unless
IO State says otherwise). The record's current ETag is the one a GET of the controller's `show`
action with that key answers the same caller (`apid.calls.caching.entity_tag` of the same JSON), so
it is worked out by running that action through the pipeline, as the caller. The condition
holds when one listed tag equals it, compared strongly (a weak tag never matches), or when it
is `*` and the record exists; otherwise the write answers 412 and nothing is changed.

When it holds and the record, as the caller sees it, has a `version` that the caller's role
may send to the write, that version goes to the write: the optimistic lock (`update_row`)
then makes the check and the change one atomic step. A `version` sent as well wins, and a
stale one answers 409 as it always does. Without a version the check and the write are two
steps, and a change landing between them is not seen.

What the write would answer without its condition, before running, comes first (RFC 9110
section 13.2.1): a write its fields refuse is the 400 it would be anyway. What the GET would
answer instead of the record, the write would answer too, before its condition counts: a
missing record is the show's 404, a record the caller may not reach its 403. A write that
names no record, or whose controller has no show action the caller may call, has no current
ETag to compare: If-Match on it answers 412.
Batches and chains refuse If-Match (400): one header cannot name the records of many calls.
A GET's If-Match is compared with the ETag of its own answer (`unchanged_since`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from apid.auth.tokens import Principal
from apid.calls.caching import entity_tag
from apid.calls.paths import CallKind
from apid.calls.pipeline import Admission, CallRequest, Pipeline, admit_fields
from apid.http.answers import dumps
from apid.http.conditions import matches
from apid.problems import BadRequest, PreconditionFailed, Problem

SHOW = "show"
VERSION = "version"


def unchanged_since(condition: bytes | None, current: bytes) -> None:
    """A GET's If-Match, against the tag of the answer it would get: a 412 when it does not hold."""
    if condition is not None and not matches(condition, current):
        raise PreconditionFailed("the answer changed since the ETag you sent")


def single_calls_only(kind: CallKind, condition: bytes | None) -> None:
    """A batch or chain sent with If-Match is refused before anything runs."""
    if kind is not CallKind.CALL and condition is not None:
        raise BadRequest(
            "If-Match applies to a single call (/v): send each record's version in a batch element "
            "or a chain's body instead"
        )


async def checked_write(
    pipeline: Pipeline,
    principal: Principal,
    admitted: Admission,
    call: CallRequest,
    condition: bytes,
    address: str = "",
) -> CallRequest:
    """The write `call` once If-Match `condition` holds for its record (a 412 when not), with the
    record's `version` added when that makes the change conditional on the same state."""
    endpoint = admitted.endpoint
    # A write its fields refuse answers that 400 whatever its condition (RFC 9110 section 13.2.1)
    admit_fields(admitted.state, endpoint, admitted.granted, call, admitted.action_rules)
    key = admitted.state.primary_key or "id"
    show = show_call(call, key, endpoint.controller, endpoint.api_version)
    if show is None:
        raise PreconditionFailed(f"If-Match needs the record's {key}, which this call does not name")
    try:
        shown = pipeline.admit(principal, show, address=address)
    except Problem:
        raise PreconditionFailed(
            f"If-Match is compared with the ETag of {endpoint.controller}/{SHOW}, which your roles may not call"
        ) from None
    record = (await pipeline.execute(shown, show)).data
    if not matches(condition, entity_tag(dumps(record))):
        raise PreconditionFailed(
            f"the {endpoint.controller} record changed since the ETag you sent: GET it again, and retry with its ETag"
        )
    return with_version(call, record, endpoint.request_fields(admitted.granted))


def show_call(call: CallRequest, key: str, controller: str, api_version: str) -> CallRequest | None:
    """The GET of the record the write names by `key`, in the body or in the path or query
    (the body wins, as for the write's own fields)."""
    if call.body.get(key) is not None:
        fields: dict[str, Any] = {"body": {key: call.body[key]}}
    elif call.text.get(key):
        fields = {"text": {key: call.text[key]}}
    else:
        return None
    return CallRequest(controller=controller, action=SHOW, api_version=api_version, method="GET", **fields)


def with_version(call: CallRequest, record: Any, sendable: frozenset[str]) -> CallRequest:
    """`call` with the record's `version`, when it has one, the role may send it (`sendable`)
    and the caller sent none."""
    if (
        not isinstance(record, Mapping)
        or record.get(VERSION) is None
        or VERSION not in sendable
        or VERSION in call.body
        or VERSION in call.text
    ):
        return call
    return replace(call, body={**call.body, VERSION: record[VERSION]})
