"""Argon2id password hashing, always off the reactor thread (each hash takes ~150 ms of CPU at the
default costs)."""

from __future__ import annotations

from base64 import b64encode

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from argon2.low_level import ARGON2_VERSION
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorThreads
from twisted.internet.threads import deferToThreadPool
from twisted.python.threadpool import ThreadPool

from apid.config.server import PasswordsConfig


def hasher(config: PasswordsConfig) -> PasswordHasher:
    """Argon2id with the settings' costs (`passwords`); argon2-cffi's lengths of salt and hash."""
    return PasswordHasher(time_cost=config.time_cost, memory_cost=config.memory_cost, parallelism=config.parallelism)


def _unmatchable(hasher: PasswordHasher) -> str:
    """A well-formed hash of `hasher`'s parameters (zero salt, zero digest) that no password
    matches: verifying against it costs what verifying a real one does, and making it costs
    nothing, where hashing a password took a tenth of a second of every start."""

    def zeros(length: int) -> str:
        return b64encode(bytes(length)).decode("ascii").rstrip("=")

    return (
        f"$argon2{hasher.type.name.lower()}$v={ARGON2_VERSION}$m={hasher.memory_cost},t={hasher.time_cost},"
        f"p={hasher.parallelism}${zeros(hasher.salt_len)}${zeros(hasher.hash_len)}"
    )


class Hashing:
    """Hashes with one set of costs, and verifies any stored hash (its own costs are in it)."""

    def __init__(self, hasher: PasswordHasher) -> None:
        self._hasher = hasher
        # Verified against when no account matches, so a wrong name costs as long as a wrong password.
        self._dummy = _unmatchable(hasher)

    def hash(self, password: str) -> str:
        return self._hasher.hash(password)

    def verify(self, stored: str | None, password: str) -> bool:
        """True when `password` matches `stored`; a missing hash still costs one verification."""
        try:
            return self._hasher.verify(stored or self._dummy, password) and stored is not None
        except (VerificationError, InvalidHashError):
            return False


class Passwords:
    """Hashes and verifies in a small thread pool of its own (argon2 releases the GIL), or in
    `pool` when given (the testing kit's, which runs each at once)."""

    def __init__(
        self, reactor: IReactorThreads, hashing: Hashing, *, threads: int, pool: ThreadPool | None = None
    ) -> None:
        self._reactor = reactor
        self._hashing = hashing
        self._pool = ThreadPool(minthreads=0, maxthreads=threads, name="apid-passwords") if pool is None else pool

    def start(self) -> None:
        self._pool.start()

    def stop(self) -> None:
        """Stop the threads; again does nothing (see `Database.stop`)."""
        if self._pool.started:
            self._pool.stop()

    def hash(self, password: str) -> Deferred[str]:
        return deferToThreadPool(self._reactor, self._pool, self._hashing.hash, password)

    def verify(self, stored: str | None, password: str) -> Deferred[bool]:
        return deferToThreadPool(self._reactor, self._pool, self._hashing.verify, stored, password)
