"""The code a worker compares with its parent's (apid.server.workers.versions), as installed here."""

from __future__ import annotations

from dataclasses import replace

from apid.server.workers.versions import Code, code_changes, installed_code


def test_a_worker_compares_its_code_with_its_parents():
    started = installed_code()
    assert "apid" in started and "apid-sample-plugin" in started
    assert code_changes(started, installed_code()) == []
    now = {**started, "apid": replace(started["apid"], version="9.9"), "apid-ghost": Code("1.0", "")}
    del now["apid-sample-plugin"]
    assert code_changes(started, now) == [
        f"apid {started['apid'].version} -> 9.9",
        "apid-ghost 1.0 installed",
        f"apid-sample-plugin {started['apid-sample-plugin'].version} removed",
    ]
