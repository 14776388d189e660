"""The versions of the code a worker compares with its parent's (apid.server.workers.versions)."""

from __future__ import annotations

from apid.server.workers.versions import code_changes, installed_versions


def test_a_worker_compares_its_code_with_its_parents():
    started = installed_versions()
    assert "apid" in started and "apid-sample-plugin" in started
    assert code_changes(started, dict(started)) == []
    now = {**started, "apid": "9.9", "apid-ghost": "1.0"}
    del now["apid-sample-plugin"]
    assert code_changes(started, now) == [
        f"apid {started['apid']} -> 9.9",
        "apid-ghost 1.0 installed",
        f"apid-sample-plugin {started['apid-sample-plugin']} removed",
    ]
