"""Abuse limits on the public account endpoints: failed logins, registrations, reset requests.

Each kind is counted per client address and per account name (a username or an email) in
fixed windows; past either limit the answer is 429 with Retry-After, and it says nothing of
whether the account exists. Time comes from the reactor, so tests drive it with task.Clock.
Counts are kept in this process: with several daemons each counts its own share.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from twisted.internet.interfaces import IReactorTime

from apid.config import AbuseLimit
from apid.problems import TooManyRequests


class AbuseLimiter:
    def __init__(self, clock: IReactorTime, limits: Mapping[str, AbuseLimit]) -> None:
        self._clock = clock
        self._limits = limits
        self._longest = max(limit.window for limit in limits.values())
        self._windows: dict[tuple[str, str, str], tuple[float, int]] = {}

    def _keys(self, kind: str, address: str, account: str | None) -> list[tuple[tuple[str, str, str], int]]:
        limit = self._limits[kind]
        keys = [((kind, "address", address), limit.per_address)]
        if account:
            keys.append(((kind, "account", account.casefold()), limit.per_account))
        return keys

    def _count(self, key: tuple[str, str, str], window: int) -> tuple[float, int]:
        """The window `key` is in and its count; a new window starts now."""
        moment = self._clock.seconds()
        entry = self._windows.get(key)
        if entry is None or moment - entry[0] >= window:
            return moment, 0
        return entry

    def check(self, kind: str, address: str, account: str | None) -> None:
        """Refuse with 429 when the address or the account name has used up its window."""
        window = self._limits[kind].window
        waits = []
        for key, most in self._keys(kind, address, account):
            started, count = self._count(key, window)
            if count >= most:
                waits.append(started + window - self._clock.seconds())
        if waits:
            wait = max(1, math.ceil(max(waits)))
            raise TooManyRequests(
                "too many attempts; try again later",
                headers={"Retry-After": str(wait)},
            )

    def record(self, kind: str, address: str, account: str | None) -> None:
        window = self._limits[kind].window
        for key, _ in self._keys(kind, address, account):
            started, count = self._count(key, window)
            self._windows[key] = (started, count + 1)
        if len(self._windows) > 10000:
            moment = self._clock.seconds()
            self._windows = {k: v for k, v in self._windows.items() if moment - v[0] < self._longest}
