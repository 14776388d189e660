"""Password hashing (apid.auth.passwords): new hashes take the settings' Argon2id costs
(`passwords`), a hash made with other costs still verifies, and a login for no account costs
one verification at the same costs."""

from __future__ import annotations

import pytest
from argon2 import extract_parameters

from apid.auth.passwords import Hashing, hasher
from apid.config.files import load_server
from apid.config.kinds import SERVER_FILE
from apid.config.server import PasswordsConfig

from .test_config import NO_ENV, config_dir, repo_yaml, server_error, write  # noqa: F401 (a fixture)

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


def test_the_defaults_are_argon2_cffi_s(config_dir):  # noqa: F811 (the fixture)
    """RFC 9106's second recommendation, as argon2-cffi's own `PasswordHasher()`."""
    data = repo_yaml(SERVER_FILE)
    path = write(config_dir, SERVER_FILE, data)
    assert load_server(path, "production", config_dir.parent, NO_ENV).passwords == PasswordsConfig(
        time_cost=3, memory_cost=65536, parallelism=4
    )
    assert load_server(path, "test", config_dir.parent, NO_ENV).passwords == CHEAP


@pytest.mark.parametrize(
    "passwords, key, reason",
    [
        ({"memoryCost": 16, "parallelism": 4}, "passwords.memoryCost", "at least 8 × parallelism (32 KiB)"),
        ({"memoryCost": 4}, "passwords.memoryCost", "at least 8"),
        ({"timeCost": 0}, "passwords.timeCost", "at least 1"),
        ({"parallelism": 0}, "passwords.parallelism", "at least 1"),
        ({"timeCost": "slow"}, "passwords.timeCost", "expected a whole number"),
        ({"rounds": 3}, "passwords.rounds", "unknown key"),
    ],
)
def test_costs_argon2_refuses_are_refused_at_start(config_dir, passwords, key, reason):  # noqa: F811
    data = repo_yaml(SERVER_FILE)
    data["production"]["passwords"] = passwords
    message = server_error(config_dir, data)
    assert f"production.{key}" in message and reason in message, message
