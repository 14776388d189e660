"""Schemathesis hooks of the fuzz runs (tests/fuzzing.py), loaded by `st run` through
SCHEMATHESIS_HOOKS. They read the run from the environment that `tests/fuzzing.py` sets:

- APID_FUZZ_TOKEN: the access token every case carries (absent: the run is anonymous);
- APID_FUZZ_LEAVER: "name:password" of a disposable account: each `/logout` case logs it in
  afresh and carries that new token, so a logout ends only a session nobody else uses;
- APID_FUZZ_PROTECTED: ids of accounts a case must not change or delete (the fuzzing accounts
  themselves): a person/update or person/delete case naming one, plain, batched or as the
  first link of a chain, names one of APID_FUZZ_VICTIMS instead (disposable accounts); and a
  chain whose later link is person/update or person/delete, which would get its id from the
  link before (a team's leader, say), has person/show in that place instead;
- APID_FUZZ_BASE_URL: where the daemon listens (for the logins).

One failure kind is dropped, and counted as dropped in the run's summary: "schema-valid
request rejected" when the answer is a 400 `invalid-fields` problem. The document cannot say
which fields an action requires, nor a plugin's own rules (docs/api-docs.md: "What the
document cannot say"), so a schema-valid request may break them; any other answer to such a
request still fails the run.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from typing import Any

import requests
import schemathesis

CHANGES_A_PERSON = re.compile(r"^/[vbc][0-9]+\.[0-9]+(?:-[^/]+)?/person/(?:update|delete)(?:/|$)")
CHAIN = re.compile(r"^/c[0-9]+\.[0-9]+")
PERSON_CHANGE_LINK = re.compile(r"^person/(?:update|delete)$")
INVALID_FIELDS = "urn:apid:problem:invalid-fields"


def _ids(name: str) -> list[str]:
    return [part for part in os.environ.get(name, "").split(",") if part]


PROTECTED = frozenset(_ids("APID_FUZZ_PROTECTED"))
VICTIMS = itertools.cycle(_ids("APID_FUZZ_VICTIMS") or ["0"])


def _spared(value: Any) -> Any:
    """A protected account's id swapped for a victim's, in the value's own type."""
    if str(value) not in PROTECTED:
        return value
    victim = next(VICTIMS)
    return int(victim) if isinstance(value, int) and not isinstance(value, bool) else victim


@schemathesis.hook
def before_call(context: schemathesis.HookContext, case: schemathesis.Case, kwargs: dict[str, Any]) -> None:
    if not PROTECTED:
        return
    if CHAIN.match(case.operation.path):
        _no_person_change_after_the_first_link(case.body)
    if not CHANGES_A_PERSON.match(case.operation.path):
        return
    for container in (case.path_parameters, case.query):
        if isinstance(container, dict) and "id" in container:
            container["id"] = _spared(container["id"])
    body = case.body
    if isinstance(body, dict):
        if "id" in body:
            body["id"] = _spared(body["id"])
        for element in body.get("batch") if isinstance(body.get("batch"), list) else ():
            if isinstance(element, dict) and "id" in element:
                element["id"] = _spared(element["id"])


def _no_person_change_after_the_first_link(body: Any) -> None:
    chain = body.get("chain") if isinstance(body, dict) else None
    order = chain.get("order") if isinstance(chain, dict) else None
    if isinstance(order, dict) and any(PERSON_CHANGE_LINK.match(str(name)) for name in order):
        chain["order"] = {
            ("person/show" if PERSON_CHANGE_LINK.match(str(name)) else name): passes for name, passes in order.items()
        }


@schemathesis.auth(refresh_interval=None)
class FuzzToken:
    """The run's token on every case; a fresh login's on each `/logout` case."""

    def get(self, case: schemathesis.Case, context: schemathesis.AuthContext) -> str | None:
        if case.operation.path == "/logout" and os.environ.get("APID_FUZZ_LEAVER"):
            name, _, password = os.environ["APID_FUZZ_LEAVER"].partition(":")
            reply = requests.post(
                f"{os.environ['APID_FUZZ_BASE_URL']}/authenticate",
                json={"username": name, "password": password},
                timeout=30,
            )
            reply.raise_for_status()
            return reply.json()["token"]
        return os.environ.get("APID_FUZZ_TOKEN") or None

    def set(self, case: schemathesis.Case, token: str, context: schemathesis.AuthContext) -> None:
        case.headers = {**(case.headers or {}), "Authorization": f"Bearer {token}"}


@schemathesis.hook
def filter_failure(context: schemathesis.HookContext, failure: Any, case: schemathesis.Case, response: Any) -> bool:
    """False drops the failure: see the module's docstring."""
    if type(failure).__name__ != "RejectedPositiveData" or response.status_code != 400:
        return True
    try:
        problem = json.loads(response.content)
    except ValueError:
        return True
    return not (isinstance(problem, dict) and problem.get("type") == INVALID_FIELDS)
