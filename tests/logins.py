"""Logins sent at once, for the tests of the abuse limits (one daemon, workers, several daemons)."""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor

from assertions import assert_problem
from harness import Daemon

GUESSES = 100
PAIR_LIMIT = 5  # logins' default perAccountAddress
WINDOW = 900


def log_in(daemon: Daemon, username: str, password: str, source: str) -> object:
    return daemon.request(
        "POST", "/authenticate", {"username": username, "password": password}, source=source, timeout=60
    )


def guess_at_once(daemons: list[Daemon], username: str, source: str) -> Counter:
    """GUESSES wrong passwords for `username` from `source`, all at once, spread over
    `daemons`: how many answers of each status (every 429 checked to be a problem with
    Retry-After within the window)."""
    with ThreadPoolExecutor(max_workers=GUESSES) as pool:
        replies = list(
            pool.map(
                lambda n: log_in(daemons[n % len(daemons)], username, f"wrong-password-{n}", source), range(GUESSES)
            )
        )
    for reply in replies:
        if reply.status == 429:
            assert_problem(reply, 429)
            assert 1 <= int(reply.headers["Retry-After"]) <= WINDOW
    return Counter(reply.status for reply in replies)
