#!/usr/bin/env python3
"""The live event stream under load (scripts/bench section `events`, issue 38).

One daemon process pinned to CPU 0, on a deployment of 1,000 users whose person/update HOOK
includes ROLE_USER: each user's stream hears of changes to their own record only, so every
change is checked against all 1,000 streams (the per-record rule at scale) and sent on one.
The client, pinned to CPU 1, is this script run as `client`: asyncio holding the streams,
and one writer changing random users' records at a fixed rate through the admin's token.

- memory per stream: the daemon's resident memory with every stream open, less before;
- lag: from a change's record (the event's `timestamp`) to its receipt on its stream, p50 and
  p99, at `RATE` changes a second;
- the cost to plain requests: wrk's `person/show` with the streams open and idle, against
  none open;
- the cost to writes of the log the streams read (`write_cost`): two writes of endpoints with
  HOOK roles with `events.enabled` on and off, two daemons pinned to CPU 0, rounds alternated.

    .venv/bin/python scripts/bench --only events
"""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

STREAMS = 1000
RATE = 500  # changes a second
WRITERS = 8  # keep-alive connections the writer spreads its changes over
PERSON = "/v0.1/person/show/1"
TEAM_CREATE = "/v0.1/team/create"


def _user(n: int) -> tuple[str, str, str]:
    return f"user{n:04d}", f"user{n:04d}-password", f"user{n:04d}@example.com"


# --- the client (CPU 1) ----------------------------------------------------------------------


async def _stream(port: int, token: str, lags: list[float], opened: asyncio.Event, counted: list[int]) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET /events HTTP/1.1\r\nHost: apid\r\nAuthorization: Bearer {token}\r\n\r\n".encode())
    await writer.drain()
    status = await reader.readline()
    if b" 200 " not in status:
        raise SystemExit(f"a stream was refused: {status!r}")
    counted[0] += 1
    if counted[0] == STREAMS:
        opened.set()
    while line := await reader.readline():
        if line.startswith(b"data: {"):
            received = time.time()
            stamp = json.loads(line[6:])["timestamp"]
            lags.append(received - datetime.fromisoformat(stamp).timestamp())


async def _writer(port: int, admin: str, ids: list[int], rate: float, seconds: float) -> int:
    """Change random users' e-mail addresses at `rate` a second for `seconds`; how many."""
    versions = dict.fromkeys(ids, 0)
    busy: set[int] = set()  # a person has one change in flight at most: its version is known
    connections = [await asyncio.open_connection("127.0.0.1", port) for _ in range(WRITERS)]
    started = time.monotonic()
    made = 0

    async def change(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, person: int) -> None:
        body = json.dumps({"email": f"p{person}.{versions[person]}@example.com", "version": versions[person]}).encode()
        writer.write(
            f"PUT /v0.1/person/update/{person} HTTP/1.1\r\nHost: apid\r\nAuthorization: Bearer {admin}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        status = await reader.readline()
        length = 0
        while (header := await reader.readline()) != b"\r\n":
            if header.lower().startswith(b"content-length:"):
                length = int(header.split(b":")[1])
        await reader.readexactly(length)
        if b" 200 " not in status:
            raise SystemExit(f"a change was refused: {status!r}")
        versions[person] += 1
        busy.discard(person)

    free = asyncio.Queue()
    for connection in connections:
        free.put_nowait(connection)
    pending = set()
    while (elapsed := time.monotonic() - started) < seconds:
        due = int(elapsed * rate) - made
        for _ in range(due):
            reader, writer = await free.get()
            person = random.choice(ids)
            while person in busy:
                person = random.choice(ids)
            busy.add(person)
            task = asyncio.ensure_future(change(reader, writer, person))
            task.add_done_callback(lambda _, pair=(reader, writer): free.put_nowait(pair))
            pending.add(task)
            task.add_done_callback(pending.discard)
            made += 1
        await asyncio.sleep(0.002)
    await asyncio.gather(*pending)
    return made


async def _client(port: int, tokens: list[str], admin: str, ids: list[int], rate: float, seconds: float) -> dict:
    lags: list[float] = []
    opened = asyncio.Event()
    counted = [0]
    streams = [asyncio.ensure_future(_stream(port, token, lags, opened, counted)) for token in tokens]
    await asyncio.wait_for(opened.wait(), 60)
    print(json.dumps({"opened": len(tokens)}), flush=True)
    sys.stdin.readline()  # the parent read the memory with every stream open, and ran its plain load
    made = await _writer(port, admin, ids, rate, seconds) if rate else 0
    await asyncio.sleep(1)
    for stream in streams:
        stream.cancel()
    return {"changes": made, "lags": lags}


def client_main(args: list[str]) -> None:
    setup = json.loads(Path(args[0]).read_text())
    result = asyncio.run(
        _client(setup["port"], setup["tokens"], setup["admin"], setup["ids"], setup["rate"], setup["seconds"])
    )
    print(json.dumps(result), flush=True)


# --- the bench (the parent) ------------------------------------------------------------------


def _deployment(root: Path):
    from apid.auth.passwords import Hashing, hasher
    from apid.config.files import load
    from apid.testing.template import add_accounts
    from harness import ADMIN, Deployment

    deployment = Deployment(
        root,
        server={
            "accessLog": False,
            "events": {"perCaller": 2, "total": STREAMS + 10},
            "connections": {"perAddress": STREAMS + 100},  # every stream comes from loopback
        },
        api={"procCores": 1},
    )
    deployment.write()
    deployment.add_user(*ADMIN, "ROLE_ADMIN")
    path = root / "iostate" / "person.json"
    document = json.loads(path.read_text())
    document["IOSTATE"]["VERSION"]["1"]["URI"]["update"]["ROLES"]["HOOK"] = ["ROLE_ADMIN", "ROLE_USER"]
    path.write_text(json.dumps(document))
    config = load(deployment.config_dir, deployment.environment, {})
    ids = add_accounts(
        root / "var" / "test.db",
        [(name, email, password, ["ROLE_USER"]) for name, password, email in map(_user, range(STREAMS))],
        Hashing(hasher(config.server.passwords)),
    )
    return deployment, ids


def write_cost(wrk: Callable[..., dict], seconds: int, rounds: int = 5) -> dict[str, dict[bool, float]]:
    """Median requests/s of two writes of endpoints with HOOK roles, with the change log on
    (True) and off (False): `person/update`, whose change the database holds (the log is one
    more row in its transaction), and the sample plugin's `team/create`, which keeps its teams
    in memory (the log is a transaction of its own)."""
    from bench_anchors import pin
    from harness import ADMIN, Daemon, Deployment, new_person

    roots, daemons = [], {}
    try:
        for enabled in (True, False):
            root = Path(tempfile.mkdtemp(prefix="apid-bench-events-writes-"))
            roots.append(root)
            deployment = Deployment(root, server={"accessLog": False, "events": {"enabled": enabled}})
            deployment.write()
            deployment.add_user(*ADMIN, "ROLE_ADMIN")
            daemon = daemons[enabled] = Daemon(deployment).start()
            pin(daemon.process.pid)
        tokens = {enabled: daemon.login(*ADMIN[:2]) for enabled, daemon in daemons.items()}
        people = {enabled: new_person(daemon, tokens[enabled])["id"] for enabled, daemon in daemons.items()}
        writes = {
            "person/update": (
                "PUT",
                lambda enabled: f"/v0.1/person/update/{people[enabled]}",
                {"email": "b@example.com"},
            ),
            "team/create": ("POST", lambda enabled: TEAM_CREATE, {"name": "Bench", "leaderId": 1}),
        }
        medians: dict[str, dict[bool, float]] = {}
        for name, (method, path, body) in writes.items():
            runs: dict[bool, list[float]] = {True: [], False: []}
            for round_ in range(rounds + 1):  # the first a warm-up
                for enabled, daemon in daemons.items():
                    url = f"http://127.0.0.1:{daemon.port}{path(enabled)}"
                    made = wrk(
                        url, 2 if not round_ else seconds, 16, tokens[enabled], body=json.dumps(body), method=method
                    )
                    if round_:
                        runs[enabled].append(made["rps"])
            medians[name] = {enabled: statistics.median(rates) for enabled, rates in runs.items()}
        return medians
    finally:
        for daemon in daemons.values():
            daemon.stop()
        for root in roots:
            shutil.rmtree(root, ignore_errors=True)


def events_measured(wrk: Callable[..., dict], seconds: int) -> dict:
    from bench_anchors import pin, rss_mib
    from harness import ADMIN, Daemon

    root = Path(tempfile.mkdtemp(prefix="apid-bench-events-"))
    try:
        deployment, ids = _deployment(root)
        daemon = Daemon(deployment).start()
        try:
            pin(daemon.process.pid)
            admin = daemon.login(*ADMIN[:2])
            tokens = [daemon.login(*_user(n)[:2]) for n in range(STREAMS)]
            show = f"http://127.0.0.1:{daemon.port}{PERSON}"
            wrk(show, 2, 50, admin)
            time.sleep(1)
            before = rss_mib(daemon.process.pid)
            plain = [wrk(show, seconds, 50, admin)]
            setup = root / "client.json"
            setup.write_text(
                json.dumps(
                    {
                        "port": daemon.port,
                        "tokens": tokens,
                        "admin": admin,
                        "ids": ids,
                        "rate": RATE,
                        "seconds": seconds,
                    }
                )
            )
            client = subprocess.Popen(
                ["taskset", "-c", "1", sys.executable, __file__, "client", str(setup)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            assert json.loads(client.stdout.readline())["opened"] == STREAMS
            time.sleep(1)
            pin(daemon.process.pid)  # threads started since
            opened = rss_mib(daemon.process.pid)
            with_streams = wrk(show, seconds, 50, admin)
            client.stdin.write("\n")
            client.stdin.flush()
            result = json.loads(client.stdout.readline())
            client.wait(30)
            plain.append(wrk(show, seconds, 50, admin))  # the streams closed again
        finally:
            daemon.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    lags = sorted(result["lags"])
    writes = write_cost(wrk, seconds)
    return {
        "writes": writes,
        "streams": STREAMS,
        "rate": RATE,
        "changes": result["changes"],
        "received": len(lags),
        "seconds": seconds,
        "rss_before": before,
        "rss_open": opened,
        "per_stream_kib": (opened - before) * 1024 / STREAMS,
        "lag_p50_ms": statistics.median(lags) * 1000 if lags else float("nan"),
        "lag_p99_ms": lags[int(len(lags) * 0.99)] * 1000 if lags else float("nan"),
        "plain_rps": statistics.mean(run["rps"] for run in plain),
        "streams_rps": with_streams["rps"],
    }


def events_section(result: dict) -> str:
    """The section of docs/benchmarks.md."""
    cost = 1 - result["streams_rps"] / result["plain_rps"]
    streams = f"{result['streams']:,}"
    rows = "\n".join(
        f"| {what} | {measured} |"
        for what, measured in (
            (
                f"resident memory, before the streams / with {streams} open",
                f"{result['rss_before']:.1f} / {result['rss_open']:.1f} MiB",
            ),
            ("memory per open stream", f"{result['per_stream_kib']:.1f} KiB"),
            ("changes made / events received", f"{result['changes']:,} / {result['received']:,}"),
            (
                "lag from a change's record to its receipt, p50 / p99",
                f"{result['lag_p50_ms']:.1f} / {result['lag_p99_ms']:.1f} ms",
            ),
            (
                f"`person/show` requests/s, no stream open / {streams} open and idle",
                f"{result['plain_rps']:,.0f} / {result['streams_rps']:,.0f} ({cost * 100:.1f}% less)",
            ),
            *(
                (
                    f"`{name}` requests/s, `events.enabled` off / on",
                    f"{rates[False]:,.0f} / {rates[True]:,.0f} ({(1 - rates[True] / rates[False]) * 100:.1f}% less)",
                )
                for name, rates in result["writes"].items()
            ),
        )
    )
    return f"""## The live event stream (issue 38: 1,000 streams on one process)

One daemon process pinned to CPU 0, {result["streams"]:,} users each holding their own stream
(`scripts/bench_events.py`: the client, asyncio on CPU 1). Their person/update HOOK includes
ROLE_USER, so each change is checked against every stream (the per-record rule: a user hears
of their own record only) and sent on one. The writer changes random users' records at
{result["rate"]} a second for {result["seconds"]} s through the admin's token.

| What | Measured |
|---|---|
{rows}
"""


if __name__ == "__main__" and sys.argv[1:2] == ["client"]:
    client_main(sys.argv[2:])
