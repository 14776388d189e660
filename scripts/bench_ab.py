#!/usr/bin/env python3
"""A/B of the request path: an authenticated `GET /v0.1/person/show/1` per core, the working
tree against a git revision (default HEAD), both daemons up together, each on a deployment of
its own code, pinned to CPU 0, wrk on CPU 1, rounds alternated so that a noisy neighbour weighs
on both; the median run of each.

    .venv/bin/python scripts/bench_ab.py [REV] [--rounds 7] [--seconds 5]

The revision is exported with `git archive` and served from its own daemon/, plugins/ and
sample plugin (PYTHONPATH), with its own etc/ and iostate/, by this virtualenv's libraries.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parent.parent
PATH = "/v0.1/person/show/1"
ADMIN = ("admin", "admin-password-1", "admin@example.com")


def load(name: str, path: Path) -> ModuleType:
    """A module from a file, under a name of its own: two trees' harnesses side by side."""
    loader = importlib.machinery.SourceFileLoader(name, str(path))
    spec = importlib.util.spec_from_loader(name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module


def started(harness: ModuleType, pin, env: dict[str, str]) -> tuple[object, str]:
    """A daemon of `harness`'s tree on a new deployment with an administrator, and its token."""
    deployment = harness.Deployment(Path(tempfile.mkdtemp(prefix="apid-ab-")), server={"accessLog": False})
    deployment.write()
    name, password, email = ADMIN
    migrated = deployment.cli("migrate", env=env)  # `user add` refuses a database behind the code
    if migrated.returncode != 0:
        raise SystemExit(migrated.stderr)
    done = deployment.cli(
        "user",
        "add",
        name,
        "--email",
        email,
        "--role",
        "ROLE_ADMIN",
        "--password-stdin",
        input=password + "\n",
        env=env,
    )
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    daemon = harness.Daemon(deployment, env=env).start()
    pin(daemon.process.pid)
    return daemon, daemon.login(name, password)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("rev", nargs="?", default="HEAD")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seconds", type=int, default=5)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="apid-ab-base-"))
    archive = subprocess.run(["git", "-C", str(REPO), "archive", args.rev], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(base)], input=archive.stdout, check=True)
    sys.path[:0] = [str(REPO / "tests"), str(REPO / "scripts")]
    bench = load("bench", REPO / "scripts" / "bench")
    pin = load("bench_anchors", REPO / "scripts" / "bench_anchors.py").pin
    daemons = {
        args.rev: started(
            load("base_harness", base / "tests" / "harness.py"),
            pin,
            # its own sample plugin too: the working tree's may use what the revision lacks
            {"PYTHONPATH": f"{base / 'daemon'}:{base / 'plugins'}:{base / 'tests' / 'sample_plugin'}"},
        ),
        "working tree": started(load("new_harness", REPO / "tests" / "harness.py"), pin, {}),
    }
    try:
        runs: dict[str, list[dict]] = {name: [] for name in daemons}
        for daemon, token in daemons.values():
            bench.wrk(f"http://127.0.0.1:{daemon.port}{PATH}", 2, 16, token)  # warm-up
        for _ in range(args.rounds):
            for name, (daemon, token) in daemons.items():
                runs[name].append(bench.wrk(f"http://127.0.0.1:{daemon.port}{PATH}", args.seconds, 50, token))
        medians = {name: statistics.median(run["rps"] for run in found) for name, found in runs.items()}
        for name, found in runs.items():
            rates = ", ".join(f"{run['rps']:.0f}" for run in found)
            p99s = ", ".join(run["p99"] for run in found)
            print(f"{name}: median {medians[name]:.0f} requests/s (runs {rates}; p99 {p99s})")
        print(f"working tree / {args.rev}: {medians['working tree'] / medians[args.rev]:.3f}")
    finally:
        for daemon, _ in daemons.values():
            daemon.stop()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
