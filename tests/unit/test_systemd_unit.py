"""etc/apid.service and etc/apid.socket as systemd reads them: `systemd-analyze verify` finds
nothing to say, and `systemd-analyze security` rates the sandbox OK or better (issue 39).

`systemd-analyze` (Debian's `systemd` package, which scripts/system-deps installs) reads unit
files offline: no systemd needs to run. It is required on CI; elsewhere a missing one skips.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ANALYZE = shutil.which("systemd-analyze")
DEPLOYED_APID = "/opt/apid/.venv/bin/apid"
OK_AT_MOST = 4.9  # `systemd-analyze security`: below 5 is "OK", below 2 "SAFE"

if ANALYZE is None and not os.environ.get("CI"):
    pytest.skip(
        "systemd-analyze is not installed (Debian package systemd; scripts/system-deps installs it)",
        allow_module_level=True,
    )


@pytest.fixture
def units(tmp_path) -> Path:
    """The units and the drop-in as shipped, but for the deployment's apid, which this machine
    does not have: `verify` checks that ExecStart= names an executable, so it names this one."""
    service = (REPO / "etc/apid.service").read_text()
    assert DEPLOYED_APID in service
    (tmp_path / "apid.service").write_text(service.replace(DEPLOYED_APID, str(Path(sys.executable).parent / "apid")))
    shutil.copy(REPO / "etc/apid.socket", tmp_path)
    shutil.copytree(REPO / "etc/apid.service.d", tmp_path / "apid.service.d")
    return tmp_path


def analyze(*args: str) -> subprocess.CompletedProcess:
    assert ANALYZE is not None, "systemd-analyze is required on CI (scripts/system-deps)"
    return subprocess.run([ANALYZE, *args], capture_output=True, text=True, timeout=60)


def test_the_units_and_the_drop_in_verify_without_a_word(units):
    done = analyze("verify", str(units / "apid.service"), str(units / "apid.socket"))
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")


def test_verify_reads_the_drop_in_so_a_mistake_there_is_reported(units):
    with (units / "apid.service.d" / "socket.conf").open("a") as drop_in:
        drop_in.write("WatchdogSecs=30\n")
    done = analyze("verify", str(units / "apid.service"), str(units / "apid.socket"))
    assert "Unknown key 'WatchdogSecs'" in done.stderr


def test_the_sandbox_is_rated_ok_or_better():
    done = analyze("security", "--offline=true", "--no-pager", str(REPO / "etc/apid.service"))
    assert done.returncode == 0, done.stderr
    level = re.search(r"Overall exposure level for apid\.service: (\d+\.\d) (\w+)", done.stdout)
    assert level is not None, done.stdout
    assert float(level[1]) <= OK_AT_MOST and level[2] in ("OK", "SAFE"), level[0]


def test_the_watchdog_and_the_sandbox_are_set_as_documented():
    """The settings the code and docs/operations.md rely on."""
    settings = dict(
        line.split("=", 1) for line in (REPO / "etc/apid.service").read_text().splitlines() if re.match(r"^\w+=", line)
    )
    assert settings["Type"] == "notify" and settings["NotifyAccess"] == "main"
    assert settings["WatchdogSec"] == "30"
    assert settings["ReadWritePaths"] == "/var/lib/apid" and settings["StateDirectory"] == "apid"
    assert settings["UMask"] == "0077"
    assert "AF_UNIX" in settings["RestrictAddressFamilies"]  # the notify socket and the workers' channels
