"""Webhook delivery benchmarks, used by scripts/bench (section `webhooks`) or alone:

    .venv/bin/python scripts/bench_webhooks.py [--messages 5000] [--rate 200] [--seconds 10]

- rate:    a backlog of pending messages (as after a receiver's outage: written while the
           daemon was down) delivered by one daemon pinned to CPU 0 to a local receiver on
           loopback; messages per second from the first arrival to the last.
- latency: events at a steady rate (team/create calls from 4 keep-alive connections, one
           subscribed hook), the time from each call's response to its message's arrival.
"""

from __future__ import annotations

import argparse
import http.client
import json
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from bench_anchors import pin  # noqa: E402
from harness import ADMIN, Daemon, Deployment  # noqa: E402
from receiver import Receiver  # noqa: E402

HOOKS = 10
SENDERS = 4  # calls in flight at once, so that the rate holds even when one call is slow
SETTINGS = {"accessLog": False, "webhookActive": True}


def _deployment(receiver: Receiver) -> tuple[Deployment, sqlite3.Connection]:
    root = Path(tempfile.mkdtemp(prefix="apid-bench-hooks-"))
    deployment = Deployment(root, server=SETTINGS, api={"cors": {"allowedOrigins": [receiver.origin]}})
    deployment.write()
    deployment.add_user(*ADMIN, "ROLE_ADMIN")
    database = sqlite3.connect(root / "var" / "test.db", isolation_level=None)
    return deployment, database


def _add_hooks(database: sqlite3.Connection, receiver: Receiver, count: int) -> list[int]:
    return [
        database.execute(
            "insert into hook (attempts, date_created, format, last_modified, user_id, is_enabled, url, service) "
            "values (0, CURRENT_TIMESTAMP, 'JSON', CURRENT_TIMESTAMP, 1, true, ?, 'team')",
            (f"{receiver.origin}/hook-{n}",),
        ).lastrowid
        for n in range(count)
    ]


def _started(deployment: Deployment) -> Daemon:
    daemon = Daemon(deployment).start()
    pin(daemon.process.pid)
    return daemon


def delivery_rate(messages: int) -> dict:
    """Deliver a backlog of `messages` pending messages spread over HOOKS hooks."""
    receiver = Receiver()
    deployment, database = _deployment(receiver)
    try:
        hooks = _add_hooks(database, receiver, HOOKS)
        now = time.time()
        database.execute("begin")
        for n in range(messages):
            mid = f"msg_bench{n:08d}"
            body = json.dumps(
                {
                    "id": mid,
                    "type": "team/create",
                    "timestamp": "2026-11-22T00:00:00.000+00:00",
                    "data": {"id": n, "name": f"team {n}", "leaderId": 1, "budget": 1000.5},
                }
            )
            database.execute(
                "insert into hook_message (id, hook_id, type, payload, state, tries, created_at) "
                "values (?, ?, 'team/create', ?, 'pending', 0, ?)",
                (mid, hooks[n % HOOKS], body, now + n * 1e-6),
            )
        database.execute("commit")
        daemon = _started(deployment)
        try:
            received = receiver_wait(receiver, messages, timeout=120)
        finally:
            daemon.stop()
        first, last = received[0].at, received[-1].at
        distinct = len({r.headers["webhook-id"] for r in received})
        return {
            "messages": messages,
            "distinct": distinct,
            "seconds": last - first,
            "rate": (len(received) - 1) / (last - first),
        }
    finally:
        receiver.close()
        database.close()
        shutil.rmtree(deployment.root, ignore_errors=True)


def receiver_wait(receiver: Receiver, count: int, timeout: float) -> list:
    deadline = time.monotonic() + timeout
    while len(receiver.received) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    return sorted(receiver.received, key=lambda r: r.at)


def _send(port: int, token: str, numbers: range, rate: int, start: float, answered: dict[str, float]) -> None:
    """Call team/create for each of `numbers`, call n at `start + n / rate`."""
    connection = http.client.HTTPConnection("127.0.0.1", port)
    for n in numbers:
        pause = start + n / rate - time.monotonic()
        if pause > 0:
            time.sleep(pause)
        name = f"event {n}"
        connection.request(
            "POST",
            "/v0.1/team/create",
            json.dumps({"name": name, "leaderId": 1}),
            {"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        reply = connection.getresponse()
        reply.read()
        answered[name] = time.time()
        assert reply.status == 200, reply.status


def delivery_latency(rate: int, seconds: int) -> dict:
    """Calls at `rate` per second for `seconds`; response-to-arrival time of each event."""
    receiver = Receiver()
    deployment, database = _deployment(receiver)
    try:
        _add_hooks(database, receiver, 1)
        daemon = _started(deployment)
        try:
            token = daemon.login(*ADMIN[:2])
            answered: dict[str, float] = {}
            count = rate * seconds
            start = time.monotonic()
            senders = [
                threading.Thread(
                    target=_send, args=(daemon.port, token, range(k, count, SENDERS), rate, start, answered)
                )
                for k in range(SENDERS)
            ]
            for sender in senders:
                sender.start()
            for sender in senders:
                sender.join()
            elapsed = time.monotonic() - start
            received = receiver_wait(receiver, count, timeout=60)
        finally:
            daemon.stop()
        latencies = sorted((r.at - answered[r.json["data"]["name"]]) * 1000 for r in received)
        return {
            "events": count,
            "received": len(received),
            "achieved_rate": count / elapsed,
            "p50_ms": statistics.median(latencies),
            "p99_ms": latencies[int(len(latencies) * 0.99) - 1],
            "max_ms": latencies[-1],
        }
    finally:
        receiver.close()
        database.close()
        shutil.rmtree(deployment.root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--rate", type=int, default=200)
    parser.add_argument("--seconds", type=int, default=10)
    args = parser.parse_args()
    print(delivery_rate(args.messages))
    print(delivery_latency(args.rate, args.seconds))


if __name__ == "__main__":
    main()
