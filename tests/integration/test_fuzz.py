"""A short fuzz run from the OpenAPI documents (tests/fuzzing.py): Schemathesis, with every
check, against the real daemon, as a caller without a token, a user and an administrator, each
from the document `/openapi.json` answers them. Nothing may be found: no 5xx, no status,
content type, header or body the document does not describe. Then the calling accounts must
be as they were, with working tokens, and the daemon's log must hold no traceback.

A fixed seed and few examples keep it short (well under a minute) and repeatable: the examples
of each document and random fuzzing, and for the public document the coverage phase too (the
coverage of a token holder's document is thousands of requests, half a minute each: that is
for `scripts/fuzz`, the long run, with every phase and a random seed). On a failure, the
assertion shows Schemathesis's report, with a curl command reproducing each failure.
"""

from __future__ import annotations

import pytest

from fuzzing import ROLES, FuzzWorld, fuzz_deployment, intact, log_alarms, prepare, run
from harness import V, running_daemon

SEED = 20261123
EXAMPLES = 3  # per operation in the fuzzing phase; the examples and coverage phases add theirs
PHASES = {
    "anonymous": "examples,coverage,fuzzing",
    "user": "examples,fuzzing,stateful",
    "admin": "examples,fuzzing,stateful",
}
MINIMUM = {"anonymous": 200, "user": 300, "admin": 400}  # requests each run generates at least


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> FuzzWorld:
    root = tmp_path_factory.mktemp("apid-fuzz")
    with running_daemon(fuzz_deployment(root)) as daemon:
        yield prepare(daemon, root / "fuzz")


@pytest.mark.parametrize("role", ROLES)
def test_fuzzing_the_callers_document_finds_nothing(world, role):
    outcome = run(world, role, max_examples=EXAMPLES, seed=SEED, phases=PHASES[role], timeout=300)
    assert outcome.passed, f"st run exited {outcome.returncode}:\n{outcome.output[-30000:]}"
    assert outcome.generated >= MINIMUM[role], outcome.output[-3000:]
    print(f"{role}: {outcome.generated} requests generated")


def test_the_calling_accounts_come_through_the_runs_intact(world):
    assert intact(world) == []


def test_the_log_holds_no_traceback_after_the_runs(world):
    alarms = log_alarms(world.daemon)
    assert not alarms, "\n---\n".join(alarms)


@pytest.fixture(scope="module")
def unspared(tmp_path_factory) -> FuzzWorld:
    root = tmp_path_factory.mktemp("apid-fuzz-unspared")
    with running_daemon(fuzz_deployment(root)) as daemon:
        yield prepare(daemon, root / "fuzz")


def test_an_unspared_run_cannot_lock_the_administrator_out(unspared):
    """The stateful phase too, and no case pointed away from the calling administrator: the
    daemon itself refuses an administrator's demotion, disabling, locking, expiry or deletion
    of their own account, and a change of their password or address without the current one."""
    outcome = run(
        unspared, "admin", max_examples=EXAMPLES, seed=SEED, phases="fuzzing,stateful", timeout=300, spare=False
    )
    assert outcome.passed, f"st run exited {outcome.returncode}:\n{outcome.output[-30000:]}"
    assert outcome.generated >= MINIMUM["admin"], outcome.output[-3000:]
    admin = unspared.accounts["admin"]
    reply = unspared.daemon.request("GET", f"{V}/person/show/{admin['id']}", token=unspared.tokens["admin"])
    assert reply.status == 200, reply.body
    assert (reply.json["roles"], reply.json["enabled"], reply.json["accountLocked"]) == (["ROLE_ADMIN"], True, False)
