"""Where the time of a `person/show` request goes (scripts/bench section `profile`, issue 16).

py-spy samples apid's main thread while wrk loads it as the anchors section does; each sample
counts for the layer of its innermost frame in apid or one of its libraries (a call into the
standard library counts for its caller: PyJWT's base64 and JSON are PyJWT's time). The profile
taken before issue 16's work, by the same method, is kept here to show what changed.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench_anchors import PERSON, pin
from harness import ADMIN, Daemon, Deployment

# (layer, the path fragments of its frames), first match wins: twisted.web before the rest of Twisted
LAYERS = (
    ("PyJWT: the token's signature and claims", ("jwt/",)),
    ("Klein and werkzeug: routing", ("klein/", "werkzeug/")),
    ("Deferreds and coroutines", ("twisted/internet/defer.py",)),
    ("twisted.web: HTTP parsing and writing", ("twisted/web/", "twisted/protocols/")),
    ("reactor, sockets and the thread hop", ("twisted/",)),
    ("apid: IO State, pipeline, answer", ("apid/", "apid_person/")),
    ("SQLAlchemy", ("sqlalchemy/",)),
)
OWNED = re.compile(r"\((apid|apid_person|twisted|klein|werkzeug|jwt|sqlalchemy)/")
MAIN_THREAD = "_run_module_as_main"
# Measured 2026-11-27 on a2aeebb (before issue 16's hot-path work), this method, 2,161 requests/s
# under the profiler: the share of the main thread's samples per layer.
BEFORE = {
    "PyJWT: the token's signature and claims": 31.0,
    "apid: IO State, pipeline, answer": 21.8,
    "reactor, sockets and the thread hop": 15.3,
    "Klein and werkzeug: routing": 14.2,
    "twisted.web: HTTP parsing and writing": 11.9,
    "Deferreds and coroutines": 5.9,
}
RATE_HZ = 250


def layer(stack: str) -> str:
    frames = stack.split(";")
    owner = next((frame for frame in reversed(frames) if OWNED.search(frame)), frames[-1])
    return next((name for name, marks in LAYERS if any(f"({mark}" in owner for mark in marks)), "other")


def shares(raw: str) -> dict[str, float]:
    """Percent of the main thread's samples per layer, from py-spy's raw (collapsed) output."""
    counts: Counter[str] = Counter()
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if MAIN_THREAD in stack:
            counts[layer(stack)] += int(count)
    total = sum(counts.values())
    return {name: count * 100 / total for name, count in counts.most_common()}


def py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(found).exists():
        raise SystemExit("the profile section needs py-spy: .venv/bin/pip install -e '.[bench]'")
    return found


def profiled(seconds: int, connections: int) -> dict:
    """The layers of apid's main thread during `seconds` of wrk at `connections`, and the
    requests/s wrk saw meanwhile (lower than unprofiled: py-spy stops the process to sample)."""
    profiler = py_spy()
    root = Path(tempfile.mkdtemp(prefix="apid-bench-profile-"))
    deployment = Deployment(root, server={"accessLog": False}, api={"procCores": 1})
    deployment.write()
    deployment.add_user(*ADMIN, "ROLE_ADMIN")
    daemon = Daemon(deployment).start()
    try:
        pin(daemon.process.pid)
        token = daemon.login(*ADMIN[:2])
        load = subprocess.Popen(
            [
                "taskset",
                "-c",
                "1",
                "wrk",
                "-t1",
                f"-c{connections}",
                f"-d{seconds + 4}s",
                "-H",
                f"Authorization: Bearer {token}",
                f"http://127.0.0.1:{daemon.port}{PERSON}",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        time.sleep(2)
        samples = root / "samples.txt"
        subprocess.run(
            [
                "taskset",
                "-c",
                "1",
                profiler,
                "record",
                "-r",
                str(RATE_HZ),
                "-d",
                str(seconds),
                "-f",
                "raw",
                "-o",
                str(samples),
                "-p",
                str(daemon.process.pid),
            ],
            check=True,
            capture_output=True,
        )
        rps = float(re.search(r"Requests/sec:\s+([\d.]+)", load.communicate()[0]).group(1))
        return {"layers": shares(samples.read_text()), "rps": rps, "seconds": seconds}
    finally:
        daemon.stop()
        shutil.rmtree(root, ignore_errors=True)


def profile_section(result: dict) -> str:
    after = result["layers"]
    names = list(BEFORE) + [name for name in after if name not in BEFORE]
    rows = "\n".join(f"| {name} | {BEFORE.get(name, 0):.1f}% | {after.get(name, 0):.1f}% |" for name in names)
    return f"""## Where a request's time goes (issue 16: the profile before and after)

py-spy ({RATE_HZ} samples a second for {result["seconds"]} s) on apid's main thread while wrk loads
`GET {PERSON}` as above; each sample counts for the layer of its innermost frame in apid or
one of its libraries (a call into the standard library counts for its caller). Before: the same
method on 2026-11-27, before issue 16's work.

| Layer | Before | Now |
|---|---|---|
{rows}

What went: the token's signature and claims are checked once per token (`apid.auth.tokens`
keeps the verified principal, bounded, and checks only its expiry again; revocation and the
account's standing are checked on every request as before); API paths are split by apid's own
grammar (`apid.server.dispatch`) instead of werkzeug's matching and Klein's plumbing, which still
serve every other path. What is left is the HTTP layer of twisted.web, the reactor (with the
hop to the database thread and back) and apid's own steps, none above a few percent alone.
"""
