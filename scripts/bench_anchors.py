"""The anchors of scripts/bench (section `anchors`, issue 16): apid up beside the hand-written
servers of scripts/anchors/ on one deployment, every one pinned to CPU 0; apid's idle memory
and start-up time; the issue's targets, and the section of docs/benchmarks.md that reports them.
scripts/bench runs the load (wrk) on the servers lined up here.
"""

from __future__ import annotations

import http.client
import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from harness import ADMIN, Daemon, Deployment, free_port, running_anchor  # noqa: E402

PERSON = "/v0.1/person/show/1"
# server -> its row in the table (the order)
LABELS = {
    "static": "bare twisted.web, static answer (the stack's ceiling)",
    "apid": f"apid `GET {PERSON}`",
    "klein": "Klein + PyJWT + SQLite through the thread pool",
    "fastapi": "FastAPI + PyJWT + SQLite (uvicorn, uvloop, httptools)",
    "floor": "twisted.web + PyJWT + SQLite through the thread pool, nothing else (the floor)",
    "inline": "the same, reading SQLite on the reactor thread (apid never does)",
}
# server -> its script in scripts/anchors/ and its arguments
SCRIPTS = {
    "static": ("twisted_static", ()),
    "klein": ("klein_server", ()),
    "fastapi": ("fastapi_server", ()),
    "floor": ("twisted_floor", ()),
    "inline": ("twisted_floor", ("--inline",)),
}
FLOORS = ("floor", "inline")  # what the same work costs at least here, not servers users would run
BENCH_EXTRA = ("fastapi", "uvicorn", "httptools", "uvloop")
VERSIONS = ("twisted", "klein", "pyjwt", "fastapi", "uvicorn", "uvloop", "httptools")
STARTUP_S = 1.0
SERVED = 100_000  # requests each server has answered when its memory is read again (issue 37)


def require_bench_extra() -> None:
    """Stops the run, saying what to install, when the anchors' packages are missing."""
    missing = [name for name in BENCH_EXTRA if importlib.util.find_spec(name) is None]
    if missing:
        raise SystemExit(f"the anchors section needs {', '.join(missing)}: .venv/bin/pip install -e '.[bench]'")


def pin(pid: int) -> None:
    """Every thread of `pid` to CPU 0: sched_setaffinity of a pid moves its main thread only,
    and apid has started others by the time it is ready. Later threads inherit it."""
    for task in os.listdir(f"/proc/{pid}/task"):
        os.sched_setaffinity(int(task), {0})


def rss_mib(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) / 1024


def _healthy(port: int) -> bool:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        connection.request("GET", "/health")
        return connection.getresponse().status == 200
    except OSError:
        return False
    finally:
        connection.close()


def startup_seconds(deployment: Deployment, starts: int = 3) -> float:
    """The best of `starts` times from starting `apid serve` to its first served /health."""
    best = float("inf")
    for _ in range(starts):
        port = free_port()
        started = time.perf_counter()
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "apid",
                "serve",
                "--config-dir",
                str(deployment.config_dir),
                "--env",
                deployment.environment,
                "--listen",
                f"tcp:{port}:interface=127.0.0.1",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            while not _healthy(port):
                if process.poll() is not None:
                    raise SystemExit(f"apid serve exited with status {process.returncode} before serving /health")
                time.sleep(0.005)
            best = min(best, time.perf_counter() - started)
        finally:
            process.terminate()
            process.wait(30)
    return best


@dataclass(frozen=True)
class Lineup:
    """The servers of the section, up together, each pinned to CPU 0."""

    urls: dict[str, str]  # server -> the URL loaded, in LABELS' order
    token: str  # an admin's access token, good on each of them
    idle_mib: dict[str, float]  # server -> its resident memory once ready, before any request
    pids: dict[str, int]  # server -> its process, to read its memory again after the load


@contextmanager
def lined_up(deployment: Deployment) -> Iterator[Lineup]:
    """apid and the anchors on `deployment` (its admin, SQLite file and JWT secret)."""
    with ExitStack() as stack:
        daemon = Daemon(deployment).start()
        stack.callback(daemon.stop)
        urls = {"apid": f"http://127.0.0.1:{daemon.port}{PERSON}"}
        pids = {"apid": daemon.process.pid}
        for name, (script, args) in SCRIPTS.items():
            process, port = stack.enter_context(running_anchor(script, None if name == "static" else deployment, args))
            urls[name] = f"http://127.0.0.1:{port}{'/' if name == 'static' else PERSON}"
            pids[name] = process.pid
        for pid in pids.values():
            pin(pid)
        time.sleep(1)  # each past its start-up, as a server waiting for its first request
        idle = {name: rss_mib(pid) for name, pid in pids.items()}
        token = daemon.login(*ADMIN[:2])
        yield Lineup({name: urls[name] for name in LABELS}, token, idle, {name: pids[name] for name in LABELS})


def milliseconds(figure: str) -> float:
    """wrk's latency figure ('812.00us', '26.12ms', '1.02s') in milliseconds."""
    value, unit = re.fullmatch(r"([\d.]+)(us|ms|s|m)", figure).groups()
    return float(value) * {"us": 0.001, "ms": 1, "s": 1000, "m": 60_000}[unit]


def targets(result: dict) -> list[tuple[str, str, str, bool]]:
    """Issues 16 and 37's targets: (what, measured, wanted, met)."""
    runs, idle, after, startup = result["runs"], result["idle_mib"], result["after_mib"], result["startup_s"]
    static = runs["apid"]["rps"] / runs["static"]["rps"]
    klein = runs["apid"]["rps"] / runs["klein"]["rps"]
    fastapi = runs["apid"]["rps"] / runs["fastapi"]["rps"]
    p99 = milliseconds(runs["apid"]["p99"]) / milliseconds(runs["klein"]["p99"])
    return [
        ("requests/s, apid / bare twisted.web", f"{static:.2f}", "at least 0.7", static >= 0.7),
        ("requests/s, apid / Klein", f"{klein:.2f}", "at least 1.5", klein >= 1.5),
        ("requests/s, apid / FastAPI", f"{fastapi:.2f}", "at least 2.5", fastapi >= 2.5),
        ("p99, apid / Klein", f"{p99:.2f}", "at most 0.5", p99 <= 0.5),
        (
            "idle RSS, apid / FastAPI",
            f"{idle['apid']:.1f} / {idle['fastapi']:.1f} MiB",
            "at most 1",
            idle["apid"] <= idle["fastapi"],
        ),
        (
            f"RSS after {SERVED:,} requests each, apid / FastAPI",
            f"{after['apid']:.1f} / {after['fastapi']:.1f} MiB",
            "at most 1",
            after["apid"] <= after["fastapi"],
        ),
        ("apid's start-up to a served `/health`", f"{startup:.2f} s", f"under {STARTUP_S:.0f} s", startup < STARTUP_S),
    ]


def versions() -> str:
    return ", ".join(f"{name} {importlib.metadata.version(name)}" for name in VERSIONS)


def anchors_section(result: dict) -> str:
    """The section of docs/benchmarks.md, printed alone by `scripts/bench --only anchors`."""
    runs = result["runs"]
    servers = "\n".join(
        f"| {label} | {runs[name]['rps']:,.0f} | {runs[name]['p99']} |" for name, label in LABELS.items()
    )
    memory = "\n".join(
        f"| {LABELS[name]} | {result['idle_mib'][name]:.1f} MiB | {result['after_mib'][name]:.1f} MiB |"
        for name in LABELS
        if name not in FLOORS
    )
    floor, inline = (runs[name]["rps"] / runs["static"]["rps"] for name in FLOORS)
    verdicts = "\n".join(
        f"| {what} | {measured} | {wanted} | {'met' if met else '**not met**'} |"
        for what, measured, wanted, met in targets(result)
    )
    return f"""## apid against hand-written servers (issues 16 and 37: per core, the same work)

The same authenticated call on each: verify the HS256 bearer token (PyJWT), read one person row
by id from the same SQLite file, answer the fields of the token's roles (an admin's here). apid
(`procCores: 1`, access log off) and the hand-written servers of `scripts/anchors/` (their
packages: the `bench` extra) up together on one deployment, every thread of each pinned to CPU 0,
wrk on CPU 1 with {result["connections"]} connections; a warm-up, then {result["rounds"]} alternating runs of
{result["seconds"]} s, the median run of each.

| Server | Requests/s | p99 |
|---|---|---|
{servers}

The last two rows are the floor of this work on twisted.web (`scripts/anchors/twisted_floor.py`):
the token verified once and kept, one read, the fields answered, and no other feature. Through
the thread pool, as apid reads, it reaches {floor:.2f} of bare twisted.web; apid, with every feature
on, {runs["apid"]["rps"] / runs["floor"]["rps"]:.2f} of that floor. Reading on the reactor thread, which apid refuses (a
read waiting on the disk or a lock would stall every request), it reaches {inline:.2f}. 0.7 of bare
twisted.web is {"out of" if floor < 0.7 else "within"} reach of a server on this stack that reads its database off the
reactor thread, even with no feature at all.

| Target | Measured | Wanted | |
|---|---|---|---|
{verdicts}

Memory: VmRSS of each server's process once it is ready, before any request, and again once
it has answered at least {SERVED:,} requests (the runs above, then more of the same load):

| Server | Idle | After {SERVED:,} requests |
|---|---|---|
{memory}

Start-up: from starting `apid serve` to its first served `/health`, best of 3. apid runs on the
repository's `test` settings (`tls: auto`, so without pyOpenSSL and cryptography: its
configuration uses no TLS); the anchors load what their packages import, PyJWT's cryptography
included. Each library's share of apid's memory: the next section.

Versions: {versions()}.
"""
