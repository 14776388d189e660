"""Argon2id password hashing, always off the reactor thread (each hash takes ~150 ms of CPU)."""

from __future__ import annotations

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorThreads
from twisted.internet.threads import deferToThreadPool
from twisted.python.threadpool import ThreadPool

_hasher = PasswordHasher()

# Verified against when no account matches, so a wrong name costs as long as a wrong password.
_DUMMY_HASH = _hasher.hash("apid: no such account")


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
        self._pool.stop()

    def hash(self, password: str) -> Deferred[str]:
        return deferToThreadPool(self._reactor, self._pool, hash_password, password)

    def verify(self, stored: str | None, password: str) -> Deferred[bool]:
        return deferToThreadPool(self._reactor, self._pool, verify_password, stored, password)
