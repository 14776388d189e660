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

One failure kind is dropped, and counted as dropped in the run's summary, in the documented
cases only (`DOCUMENTED_REFUSALS`, docs/api-docs.md#fuzzing): "schema-valid request rejected"
answered by a 400 `invalid-fields` problem every error of which is a rule the document cannot
state. Any other refusal of such a request fails the run.
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
# (path, field, reason) of the field errors a schema-valid request may get, each documented
# (docs/api-docs.md#fuzzing), with why the document cannot say it:
DOCUMENTED_REFUSALS = tuple(
    (re.compile(path), field, re.compile(reason))
    for path, field, reason in (
        # a List or Map holding a whole number past 64 bits: JSON Schema cannot tell one written
        # 100000000000000000000 (refused) from 1e20, a double, which is taken (IO State's types);
        # or a NUL in a member's name deep inside one, which only a recursive schema could say,
        # and the client generators tried (docs/api-docs.md#generated-clients) cannot read one
        (r"", "", r"holds a whole number outside the 64-bit range"),
        (r"", "", r"^its name holds a NUL character$"),
        # the person plugin's account policy, its own `validate`, which no document reads
        (r"/person/(create|update)", "username", r"^must be 3 to 64 "),
        (r"/person/(create|update)", "password", r"^must be 8 to 128 "),
        (r"/person/(create|update)", "password", r"^must not be the username$"),
        # an API key's own rules (apid.auth.apikeys): scopes naming endpoints, an expiry in the
        # future, role names for roles; IO State's List and Date types cannot say them (its
        # name's length and its roles' count are `Limits` the document states)
        (r"/apikey/create", "roles", r"^must list at least one role"),
        (r"/apikey/create", "scopes", r"^must list controllers or controller/action endpoints"),
        (r"/apikey/create", "expiresAt", r"^must be in the future"),
        # a key's name holds no control or format character (Unicode Cc, Cf), and the caller of a
        # password account gives their own password: neither is a schema's to say
        (r"/apikey/create", "name", r"^must not hold control or format characters$"),
        (r"/apikey/create", "currentPassword", r"^is required "),
        # the roles given to an account are roles the deployment configures
        # (security.allRoles): a deployment's setting, not IO State's List type
        (r"/person/(create|update)", "roles", r"^unknown roles: "),
        # asked only of a user changing their own password or e-mail address
        (r"/person/update", "currentPassword", r"^is required "),
        # a hook's URL must be in cors.allowedOrigins, a deployment's setting
        (r"/hook/(create|update)", "url", r"is not in cors\.allowedOrigins$"),
        # a hook's service must be one whose changes the caller's roles may receive (HOOK roles)
        (r"/hook/(create|update)", "service", r"is no controller or controller/action whose changes"),
    )
)


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
    for link in order if isinstance(order, list) else ():  # the array form: [{"link": ..., "key": ...}]
        if isinstance(link, dict) and PERSON_CHANGE_LINK.match(str(link.get("link"))):
            link["link"] = "person/show"


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
    if not isinstance(problem, dict) or problem.get("type") != INVALID_FIELDS or not problem.get("errors"):
        return True
    return not all(_documented(case.operation.path, error) for error in problem["errors"])


def _documented(path: str, error: dict[str, str]) -> bool:
    return any(
        where.search(path) and (not field or error.get("field") == field) and why.search(error.get("reason", ""))
        for where, field, why in DOCUMENTED_REFUSALS
    )
