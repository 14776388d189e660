"""`logFormat: json` from the first line to the last (issue 24, items 3 and 5): start-up
failures, stop lines and worker processes' events are JSON lines like every other event (the
ready line stays on standard output), and every event of a worker carries `worker`.
"""

from __future__ import annotations

import json
import os

import pytest

from harness import ADMIN, ADMIN_ACCOUNT, Daemon, Deployment, deployment_with_accounts

JSON = {"logFormat": "json"}


def json_lines(stderr: str) -> list[dict]:
    """Every line of `stderr`, each of which must be one JSON object."""
    lines = stderr.splitlines()
    assert lines, "nothing logged"
    return [json.loads(line) for line in lines]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_start_up_failure_is_a_json_line(tmp_path, workers):
    if workers > len(os.sched_getaffinity(0)):
        pytest.skip("worker processes need two CPUs")
    deployment = Deployment(tmp_path, server=JSON, api={"procCores": workers})
    deployment.write()
    (deployment.root / "iostate" / "person.json").write_text("{not json")
    done = deployment.cli("serve")
    assert done.returncode == 1
    events = json_lines(done.stderr)
    failures = [event for event in events if event["message"].startswith("apid: cannot start:")]
    assert {event["level"] for event in failures} == {"critical"}
    if workers == 1:
        (failure,) = failures
        assert "person.json" in failure["error"] and "worker" not in failure
        return
    (parent,) = [event for event in failures if "worker" not in event]
    assert "before it served" in parent["error"]
    refusals = [event for event in failures if "worker" in event]  # each worker that got that far
    assert refusals and all("person.json" in event["error"] for event in refusals)
    assert {event["worker"] for event in refusals} <= {0, 1}


def test_a_listen_apid_cannot_use_is_a_json_line(tmp_path):
    deployment = Deployment(tmp_path, server=JSON)
    deployment.write()
    done = deployment.cli("serve", "--listen", "tcp:notaport")
    assert done.returncode == 2
    (event,) = json_lines(done.stderr)
    assert event["message"].startswith("apid: configuration error: listen 'tcp:notaport'")


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="worker processes need two CPUs")
def test_every_event_of_a_worker_carries_its_index(tmp_path):
    deployment = deployment_with_accounts(
        tmp_path, server={**JSON, "accessLog": True}, api={"procCores": 2}, accounts=(ADMIN_ACCOUNT,)
    )
    daemon = Daemon(deployment).start()
    try:
        token = daemon.login(ADMIN[0], ADMIN[1])
        for _ in range(10):
            assert daemon.request("GET", "/v0.1/person/show/1", token=token).status == 200
    finally:
        assert daemon.stop() == 0
    events = json_lines(daemon.stderr)
    access = [event for event in events if event["namespace"] == "apid.access"]
    assert len(access) == 11 and {event["worker"] for event in access} <= {0, 1}
    stopped = [event for event in events if event["message"].startswith("apid stopped")]
    assert sorted(str(event.get("worker", "parent")) for event in stopped) == ["0", "1", "parent"]
    assert all("worker" in event for event in events if event["namespace"] == "apid.daemon")


def test_a_plugins_standard_library_logging_is_a_json_line_of_the_daemons_log(tmp_path):
    """The sample plugin's `started()` says it is ready through `logging.getLogger(__name__)`, at
    info: an event of the daemon's log in its format, not a plain line (nor nothing, which is
    what `logging`'s defaults would make of an info record)."""
    deployment = deployment_with_accounts(tmp_path, server=JSON, accounts=(ADMIN_ACCOUNT,))
    daemon = Daemon(deployment).start()
    assert daemon.stop() == 0
    events = json_lines(daemon.stderr)
    (ready,) = [event for event in events if "told through the standard library" in event["message"]]
    assert ready["namespace"] == "apid_sample" and ready["level"] == "info"
