"""Password hashing (apid.auth.passwords): new hashes take the settings' Argon2id costs
(`passwords`), a hash made with other costs still verifies, and a login for no account costs
one verification at the same costs."""

from __future__ import annotations

from argon2 import extract_parameters

from apid.auth.passwords import Hashing, hasher
from apid.config.server import PasswordsConfig

CHEAP = PasswordsConfig(time_cost=1, memory_cost=1024, parallelism=1)


def costs(stored: str) -> tuple[int, int, int]:
    made = extract_parameters(stored)
    return made.time_cost, made.memory_cost, made.parallelism


def test_new_hashes_take_the_settings_costs():
    hashing = Hashing(hasher(CHEAP))
    stored = hashing.hash("correct horse")
    assert costs(stored) == (1, 1024, 1)
    assert hashing.verify(stored, "correct horse")
    assert not hashing.verify(stored, "wrong horse")


def test_a_hash_made_with_other_costs_still_verifies():
    """Changing the costs locks nobody out: a stored hash carries its own."""
    stored = Hashing(hasher(PasswordsConfig(time_cost=2, memory_cost=2048, parallelism=2))).hash("s3cret-enough")
    cheap = Hashing(hasher(CHEAP))
    assert cheap.verify(stored, "s3cret-enough")
    assert not cheap.verify(stored, "s3cret-enougH")


def test_no_stored_hash_is_never_a_match():
    hashing = Hashing(hasher(CHEAP))
    assert not hashing.verify(None, "")
    assert not hashing.verify(None, "anything")
    assert not hashing.verify("not a hash", "anything")


def test_the_stand_in_for_no_account_has_the_settings_costs():
    """A name with no account must cost what a wrong password does: the hash verified in its
    place is made with the same costs."""
    hashing = Hashing(hasher(CHEAP))
    assert costs(hashing._dummy) == (1, 1024, 1)
    assert costs(Hashing(hasher(PasswordsConfig()))._dummy) == (3, 65536, 4)
