"""How `procCores` scales past this machine (scripts/bench section `cores`, issue 37): what two
CPUs can show of each shared part, and the model that carries it to 16 and 64 cores.

Three measurements, each on a daemon of two worker processes, not pinned, the load generator
beside them on both CPUs (as the `workers` section):
- the shared socket's accept balance: every request on a new connection (`Connection: close`),
  the requests each worker answered counted from its access log;
- SQLite's single writer: `POST /v0.1/hook/create` (a row inserted each) with one process and
  with two; and the write lock's own capacity, one process inserting as fast as apid's
  `run_write` can, each insert a write transaction of its own (`BEGIN IMMEDIATE`);
- the parent's channel: `person/show` with `apiThrottle` on and no Redis, every call charged
  through the parent, which answers the workers one charge at a time; the parent's CPU time per
  charge, read from /proc, is the figure its one core divides.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from harness import ADMIN, Daemon, Deployment

PERSON = "/v0.1/person/show/1"
HOOK_CREATE = "/v0.1/hook/create"
HOOK = {"url": "http://127.0.0.1:3000/hook", "service": "person"}  # an origin of the shipped settings
CONNECTIONS = 16
CPUS = "0,1"
TICK = os.sysconf("SC_CLK_TCK")


@contextmanager
def daemon_of(server: dict, api: dict) -> Iterator[tuple[Daemon, str]]:
    """A daemon on its own deployment with these settings, and the admin's token."""
    root = Path(tempfile.mkdtemp(prefix="apid-bench-cores-"))
    deployment = Deployment(root, server={"accessLog": False, **server}, api=api)
    deployment.write()
    deployment.add_user(*ADMIN, "ROLE_ADMIN")
    daemon = Daemon(deployment).start()
    try:
        yield daemon, daemon.login(*ADMIN[:2])
    finally:
        daemon.stop()
        shutil.rmtree(root, ignore_errors=True)


def cpu_seconds(pid: int) -> float:
    """The user and system time `pid` has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def accept_balance(wrk: Callable[..., dict], seconds: int) -> dict:
    """Each worker's share of requests that each came on a new connection."""
    with daemon_of({"accessLog": True, "logFormat": "json"}, {"procCores": 2}) as (daemon, token):
        url = f"http://127.0.0.1:{daemon.port}{PERSON}"
        run = wrk(url, seconds, CONNECTIONS, token, cpus=CPUS, headers={"Connection": "close"})
        served: Counter[int] = Counter()
        for line in daemon.stderr.splitlines():
            event = json.loads(line) if line.startswith("{") else {}
            if event.get("namespace") == "apid.access" and event.get("path") == PERSON:
                served[event["worker"]] += 1
    total = sum(served.values())
    return {"rps": run["rps"], "shares": [served[index] / total for index in sorted(served)]}


def writer_scaling(wrk: Callable[..., dict], seconds: int) -> dict:
    """hook/create requests/s with one process and with two; the writes/s of the lock alone."""
    found: dict = {}
    for cores in (1, 2):
        with daemon_of({}, {"procCores": cores}) as (daemon, token):
            url = f"http://127.0.0.1:{daemon.port}{HOOK_CREATE}"
            wrk(url, 2, CONNECTIONS, token, body=json.dumps(HOOK), cpus=CPUS)
            found[cores] = wrk(url, seconds, CONNECTIONS, token, body=json.dumps(HOOK), cpus=CPUS)["rps"]
            if cores == 1:
                found["lock"] = lock_capacity(daemon.deployment.root / "var" / "test.db")
    return found


def lock_capacity(database: Path, seconds: float = 3.0) -> float:
    """Write transactions per second, each one insert, run back to back by one thread."""
    from sqlalchemy import text

    from apid.store.database import make_engine, run_write

    engine = make_engine(f"sqlite:///{database}", 1)
    insert = text("insert into hook (user_id, url, service) values (1, :url, :service)")
    done, until = 0, time.perf_counter() + seconds
    started = time.perf_counter()
    while time.perf_counter() < until:
        run_write(engine, lambda connection: connection.execute(insert, HOOK))
        done += 1
    engine.dispose()
    return done / (time.perf_counter() - started)


def parent_channel(wrk: Callable[..., dict], seconds: int) -> dict:
    """person/show on two workers with and without rate limiting counted by the parent; the
    parent's CPU time per charged request."""
    found = {}
    for throttle in (False, True):
        limits = {"throttle": {"rateLimit": {"ROLE_ADMIN": 10**9}, "expires": 60}}
        with daemon_of({"apiThrottle": throttle}, {"procCores": 2, **limits}) as (daemon, token):
            url = f"http://127.0.0.1:{daemon.port}{PERSON}"
            wrk(url, 2, CONNECTIONS, token, cpus=CPUS)
            parent = daemon.process.pid
            before = cpu_seconds(parent)
            run = wrk(url, seconds, CONNECTIONS, token, cpus=CPUS)
            used = cpu_seconds(parent) - before
            found["on" if throttle else "off"] = {
                "rps": run["rps"],
                "parent_us": used / run["requests"] * 1e6,
            }
    return found


def cores_measured(wrk: Callable[..., dict], seconds: int) -> dict:
    return {
        "balance": accept_balance(wrk, seconds),
        "writes": writer_scaling(wrk, seconds),
        "channel": parent_channel(wrk, seconds),
    }


def cores_section(result: dict, single_rps: float) -> str:
    """The section of docs/benchmarks.md; `single_rps` is one pinned process's person/show
    rate (the anchors section), the per-core figure the model multiplies."""
    balance, writes, channel = result["balance"], result["writes"], result["channel"]
    shares = " / ".join(f"{share * 100:.0f}%" for share in balance["shares"])
    per_charge = channel["on"]["parent_us"]
    charges = 1e6 / per_charge
    saturates = charges / single_rps
    rows = "\n".join(
        f"| {part} | {measured} |"
        for part, measured in (
            (
                "the listening socket, a new connection per request",
                f"{balance['rps']:.0f} requests/s, split {shares} between the two workers",
            ),
            (
                f"SQLite's one writer, `POST {HOOK_CREATE}`",
                f"{writes[1]:.0f} writes/s with one process, {writes[2]:.0f} with two "
                f"({writes[2] / writes[1]:.2f} times); the write lock alone: {writes['lock']:,.0f} "
                "write transactions/s",
            ),
            (
                "the parent's channel, `apiThrottle` without Redis",
                f"{channel['on']['rps']:.0f} requests/s against {channel['off']['rps']:.0f} without; "
                f"{per_charge:.1f} us of the parent's CPU per charge: its one core counts at most "
                f"{charges:,.0f} charges/s",
            ),
        )
    )
    return f"""## Many cores on paper (issue 37: how `procCores` scales to 16 and 64)

What two CPUs show of each part the workers share (`scripts/bench_cores.py`: two worker
processes, not pinned, wrk beside them on both CPUs, {CONNECTIONS} connections):

| Shared part | Measured here |
|---|---|
{rows}

The model, with one process's rate R = {single_rps:,.0f} requests/s of `person/show` per core (the
anchors section: authenticated, SQLite read, fields filtered):

- **Reads scale with the workers.** Each worker has its own reactor, caches (verified tokens,
  account standings, IO State, compiled statements) and database pool; SQLite in WAL mode lets
  every process read at once. Nothing a read does waits on another worker, so N workers serve
  about N x R, less what the kernel, the load generator and the balancer in front take (two
  workers here: 1.69 times one, wrk taking its share of the same two CPUs, the `workers` section).
- **The shared socket balances.** Every worker waits on the one listening socket and accepts one
  connection per wake-up, so a busy worker leaves new connections to idle ones (the split above).
  Linux wakes every waiting worker for each new connection (Twisted's epoll reactor asks for no
  `EPOLLEXCLUSIVE`): N - 1 wake-ups that find nothing, per connection, a cost that grows with
  the cores for clients that open a connection per request. Keep-alive connections from the
  balancer in front (HAProxy's `http-reuse`, nginx's `keepalive`) take it away.
- **The parent's channel is the first bottleneck, when rate limits count without Redis.**
  `apiThrottle: true` (the shipped `production`) without `redis.url` has the parent count for
  every worker, one charge at a time on its one core: {per_charge:.1f} us per charge, so at most
  about {charges:,.0f} charged requests/s, which {saturates:.1f} workers at R reach. At 16 cores it
  caps the daemon well below 16 x R; at 64, far below. **The setting that moves it: `redis.url`**,
  after which each worker counts in Redis itself, one script (`EVAL`) per charge, and Redis runs
  on cores of its own.
- **SQLite's one writer caps writes, already at one process.** Each process writes through one
  writer thread, and every write transaction of every worker (and of every daemon on the file)
  holds the file's one write lock in turn, a waiting process sleeping in SQLite's busy handler.
  Two workers wrote {writes[2] / writes[1]:.2f} times one process's {writes[1]:,.0f} hooks/s: a
  second process adds no writes/s, and neither will the 16th or the 64th. (One thread alone
  completes {writes["lock"]:,.0f} one-insert transactions/s; a `hook/create` transaction does
  more while it holds the lock, and waits on the disk for its commit and the WAL's checkpoints:
  the next thing to measure for SQLite's writes.) **The setting: `database.url`** on PostgreSQL,
  where writes to different rows proceed at once.
- **PostgreSQL's connections come next.** Each worker holds `database.poolSize` (4) connections:
  16 workers 64 connections, 64 workers 256, past PostgreSQL's default `max_connections` of 100.
  **The setting: `database.poolSize`** (1 or 2 at 64 workers: a worker runs one read at a time
  per thread, and more threads than cores buy nothing), or PgBouncer in front.
- **Per-worker caches cost memory and first reads, not throughput.** Each worker keeps its own
  verified tokens and account standings, so an account's first request in a minute reads its
  standing once per worker, and each worker polls the database for revocations and account
  changes every half second: at 64 workers 128 small queries/s, nothing for PostgreSQL. Memory
  grows by one process per worker (the anchors section: about 64 MiB with `tls: auto`, much of
  it shared libraries counted in each process's RSS but mapped once).

So, for the shipped `production` settings (`apiThrottle: true`, SQLite, no Redis): the first
bottleneck is the parent's channel, at about {saturates:.1f} cores of calls; set `redis.url`. For
writes it is SQLite's writer, from the first core; set `database.url` to PostgreSQL. With both,
reads and writes scale with the cores until PostgreSQL's connections run out at 25 workers of
the default pool (`database.poolSize`), and past that with the cores, less what the balancer
and the kernel take.
"""
