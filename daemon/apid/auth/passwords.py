"""Argon2id password hashing, always off the reactor thread (each hash takes ~150 ms of CPU)."""

from __future__ import annotations

from base64 import b64encode

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from argon2.low_level import ARGON2_VERSION
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorThreads
from twisted.internet.threads import deferToThreadPool
from twisted.python.threadpool import ThreadPool

_hasher = PasswordHasher()


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


# Verified against when no account matches, so a wrong name costs as long as a wrong password.
_DUMMY_HASH = _unmatchable(_hasher)


def hash_password(password: str) -> str:
    return _hasher.hash(password)


def verify_password(stored: str | None, password: str) -> bool:
    """True when `password` matches `stored`; a missing hash still costs one verification."""
    try:
        return _hasher.verify(stored or _DUMMY_HASH, password) and stored is not None
    except (VerificationError, InvalidHashError):
        return False


class Passwords:
    """Hashes and verifies in a small thread pool of its own (argon2 releases the GIL), or in
    `pool` when given (the testing kit's, which runs each at once)."""

    def __init__(self, reactor: IReactorThreads, threads: int, pool: ThreadPool | None = None) -> None:
        self._reactor = reactor
        self._pool = ThreadPool(minthreads=0, maxthreads=threads, name="apid-passwords") if pool is None else pool

    def start(self) -> None:
        self._pool.start()

    def stop(self) -> None:
        """Stop the threads; again does nothing (see `Database.stop`)."""
        if self._pool.started:
            self._pool.stop()

    def hash(self, password: str) -> Deferred[str]:
        return deferToThreadPool(self._reactor, self._pool, hash_password, password)

    def verify(self, stored: str | None, password: str) -> Deferred[bool]:
        return deferToThreadPool(self._reactor, self._pool, verify_password, stored, password)
