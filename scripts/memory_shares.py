#!/usr/bin/env python3
"""Each library's share of the daemon's resident memory (issue 37, item 2): what `apid serve`
imports on the embedded default, and what each import adds.

The daemon is started once with `PYTHONPROFILEIMPORTTIME` (Python's `-X importtime`), which
names every module it imports, in order; its resident memory is read once it is ready. A
fresh interpreter then imports the same top-level packages in the same order and reads its
own resident memory after each: a package's share is what its import added, the modules it
shares with an earlier one counted there (cryptography, imported by Twisted's TLS, is not
counted again for PyJWT).

    .venv/bin/python scripts/memory_shares.py [--least 0.5]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from apid.config.files import load
from apid.runtime.tls import LEFT_OUT, uses

REPO = Path(__file__).resolve().parent.parent
# `-X importtime` names each module once its import is done, indented by depth: dependencies
# before what needs them
IMPORTED = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|( +)(\S+)$")
# What the forked migration child imports (apid.server.migration_child): it writes its lines to
# the same standard error, and none of it stays in the daemon
CHILD_ONLY = frozenset({"apid.store.migrate", "apid.plugin_host.migrations"})
MEASURE = """
import importlib, json, sys
for name in json.loads(sys.argv[2]):
    sys.modules[name] = None  # left out by the daemon (tls: auto): refused here too
def rss():
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0])
shares, last = [], rss()
for name in json.loads(sys.argv[1]):
    try:
        importlib.import_module(name)
    except Exception:
        continue
    now = rss()
    shares.append((name, now - last))
    last = now
print(json.dumps({"start": shares[0][1] if shares else 0, "shares": shares, "total": last}))
"""


def rss_kib(pid: int) -> int:
    return int(Path(f"/proc/{pid}/status").read_text().split("VmRSS:")[1].split()[0])


def daemon_imports() -> tuple[list[str], list[str], int]:
    """The top-level packages `apid serve` imports, in order, those its settings leave out
    (`tls: auto`: `-X importtime` names the imports refused too), and its resident KiB once ready."""
    sys.path[:0] = [str(REPO / "tests")]
    from harness import Daemon, Deployment

    deployment = Deployment(Path(tempfile.mkdtemp(prefix="apid-memory-")))
    deployment.write()
    migrated = deployment.cli("migrate")
    if migrated.returncode != 0:
        raise SystemExit(migrated.stderr)
    daemon = Daemon(deployment, env={"PYTHONPROFILEIMPORTTIME": "1"}).start()
    try:
        resident = rss_kib(daemon.process.pid)
    finally:
        daemon.stop()
    config = load(deployment.config_dir, deployment.environment, {})
    refused = list(LEFT_OUT) if config.server.tls == "auto" and not uses(config) else []
    return [name for name in daemon_packages(daemon.stderr) if name not in refused], refused, resident


def daemon_packages(importtime: str) -> list[str]:
    """The top-level packages in `-X importtime` lines, in order, but for those the migration
    child's imports brought in (each line's root: the import its nesting ends in)."""
    imported = [(len(found[1]), found[2]) for line in importtime.splitlines() if (found := IMPORTED.match(line))]
    roots: list[str] = []
    stack: list[tuple[int, str]] = []
    for depth, name in reversed(imported):
        while stack and stack[-1][0] >= depth:
            stack.pop()
        roots.append(stack[-1][1] if stack else name)
        stack.append((depth, roots[-1]))
    packages: list[str] = []
    for (_, name), root in zip(imported, reversed(roots), strict=True):
        top = name.split(".")[0]
        if root not in CHILD_ONLY and top not in packages:
            packages.append(top)
    return packages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--least", type=float, default=0.5, help="MiB: smaller shares are summed as 'the rest'")
    args = parser.parse_args()
    packages, left_out, resident = daemon_imports()

    measured = json.loads(
        subprocess.run(
            [sys.executable, "-c", MEASURE, json.dumps(packages), json.dumps(left_out)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    shares = sorted(measured["shares"], key=lambda share: -share[1])
    least = args.least * 1024
    print(f"apid serve, ready and idle: {resident / 1024:.1f} MiB resident ({len(packages)} top-level packages)")
    print(f"the same imports in a fresh interpreter: {measured['total'] / 1024:.1f} MiB\n")
    print("| Package | MiB |\n|---|---|")
    for name, kib in shares:
        if kib >= least:
            print(f"| {name} | {kib / 1024:.1f} |")
    rest = sum(kib for _, kib in shares if kib < least)
    print(f"| the rest ({sum(1 for _, kib in shares if kib < least)} packages) | {rest / 1024:.1f} |")


if __name__ == "__main__":
    main()
