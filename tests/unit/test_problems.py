"""Every problem kind is built one way, `Kind(detail, *, extensions)`, so that a plugin raising
one never has to remember which kind puts what first."""

from __future__ import annotations

import inspect

import pytest

from apid import problems
from apid.problems import InvalidFields, MethodNotAllowed, Problem

KINDS = sorted(
    (kind for kind in vars(problems).values() if isinstance(kind, type) and issubclass(kind, Problem)),
    key=lambda kind: kind.__name__,
)


@pytest.mark.parametrize("kind", KINDS, ids=lambda kind: kind.__name__)
def test_a_problem_takes_its_detail_first_and_everything_else_by_keyword(kind: type[Problem]):
    first, *others = inspect.signature(kind).parameters.values()
    assert first.name == "detail" and first.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    assert [p.name for p in others if p.kind not in (p.KEYWORD_ONLY, p.VAR_KEYWORD)] == []


def test_invalid_fields_names_the_fields_in_its_detail_unless_given_one():
    errors = [{"field": "email", "reason": "is required"}, {"field": "max", "reason": "must be 1 to 100"}]
    named = InvalidFields(errors=tuple(errors)).to_dict("/v0.1/person/create")
    assert named == {
        "type": "urn:apid:problem:invalid-fields",
        "title": "Bad Request",
        "status": 400,
        "detail": "invalid request fields: email, max",
        "instance": "/v0.1/person/create",
        "errors": errors,
    }
    assert InvalidFields("the hook cannot be saved", errors=errors).to_dict()["detail"] == "the hook cannot be saved"


def test_method_not_allowed_answers_the_methods_allowed_in_a_header_and_the_body():
    refused = MethodNotAllowed("person/show is called with GET, not POST", allow=["GET", "HEAD"])
    assert refused.headers == {"Allow": "GET, HEAD"}
    assert refused.to_dict()["allow"] == ["GET", "HEAD"]
