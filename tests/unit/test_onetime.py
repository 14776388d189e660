"""One-time ids for emailed links (DESIGN 4.12, issue 3 item 3): at least 128 random bits,
stored only as a SHA-256, one purpose each, single use, expiring; a new id of a purpose
replaces the earlier one. Against a real SQLite file migrated with Alembic."""

from __future__ import annotations

import hashlib
import re
import threading
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import select, update

from apid.auth.onetime import EMAIL_CONFIRM, RESET, LiveId, consume, find_live, issue
from apid.store.database import run_read, run_write
from apid.store.tables import account_token

HOUR = 3600
URLSAFE = re.compile(r"[A-Za-z0-9_-]+")


def rows(engine) -> list:
    return run_read(engine, lambda c: c.execute(select(account_token).order_by(account_token.c.id)).all())


def expire(engine, secret: str, ago: timedelta = timedelta(minutes=1)) -> None:
    def work(connection):
        done = connection.execute(
            update(account_token)
            .where(account_token.c.token_hash == hashlib.sha256(secret.encode()).hexdigest())
            .values(expires_at=datetime.now(UTC) - ago)
        )
        assert done.rowcount == 1

    run_write(engine, work)


# --- issuing ---------------------------------------------------------------------------------


def test_a_secret_has_at_least_128_bits(engine, alice):
    secrets = {run_write(engine, issue, alice, EMAIL_CONFIRM, HOUR) for _ in range(50)}
    assert len(secrets) == 50
    for secret in secrets:
        assert URLSAFE.fullmatch(secret), secret
        # base64url: 6 bits a character
        assert len(secret) * 6 >= 128
        # a link can carry it unescaped
        assert secret == secret.strip() and "=" not in secret


def test_only_the_sha256_of_the_secret_is_stored(engine, alice):
    before = datetime.now(UTC)
    secret = run_write(engine, issue, alice, EMAIL_CONFIRM, HOUR)
    (row,) = rows(engine)
    assert row.token_hash == hashlib.sha256(secret.encode("utf-8")).hexdigest()
    for column, value in row._mapping.items():
        assert secret not in str(value), f"the secret is stored in {column}"
    assert row.person_id == alice
    assert row.purpose == EMAIL_CONFIRM
    assert row.used_at is None
    created = row.date_created.replace(tzinfo=UTC) if row.date_created.tzinfo is None else row.date_created
    expires = row.expires_at.replace(tzinfo=UTC) if row.expires_at.tzinfo is None else row.expires_at
    assert before - timedelta(seconds=1) <= created <= datetime.now(UTC) + timedelta(seconds=1)
    assert expires - created == timedelta(seconds=HOUR)


def test_find_live_tells_owner_purpose_and_expiry(engine, alice, bob):
    before = datetime.now(UTC)
    validation = run_write(engine, issue, alice, EMAIL_CONFIRM, 24 * HOUR)
    reset = run_write(engine, issue, bob, RESET, HOUR)
    after = datetime.now(UTC)

    live = run_read(engine, find_live, validation)
    assert isinstance(live, LiveId)
    assert (live.person_id, live.purpose) == (alice, EMAIL_CONFIRM)
    assert live.expires_at.tzinfo is not None
    assert before + timedelta(hours=24) <= live.expires_at <= after + timedelta(hours=24)

    live = run_read(engine, find_live, reset)
    assert (live.person_id, live.purpose) == (bob, RESET)
    assert before + timedelta(hours=1) <= live.expires_at <= after + timedelta(hours=1)


def test_find_live_consumes_nothing(engine, alice):
    secret = run_write(engine, issue, alice, RESET, HOUR)
    for _ in range(3):
        assert run_read(engine, find_live, secret) is not None
    assert run_write(engine, consume, secret, RESET) is not None


@pytest.mark.parametrize("secret", ["", "nope", "A" * 43, "x" * 5000])
def test_an_unknown_id_is_not_live(engine, alice, secret):
    run_write(engine, issue, alice, EMAIL_CONFIRM, HOUR)
    assert run_read(engine, find_live, secret) is None
    assert run_write(engine, consume, secret, EMAIL_CONFIRM) is None


def test_the_hash_itself_is_no_id(engine, alice):
    """A copy of the database opens nothing: the stored hash is not accepted as the id."""
    run_write(engine, issue, alice, EMAIL_CONFIRM, HOUR)
    (row,) = rows(engine)
    assert run_read(engine, find_live, row.token_hash) is None
    assert run_write(engine, consume, row.token_hash, EMAIL_CONFIRM) is None


# --- consuming -------------------------------------------------------------------------------


def test_consume_works_once(engine, alice):
    secret = run_write(engine, issue, alice, EMAIL_CONFIRM, HOUR)
    used = run_write(engine, consume, secret, EMAIL_CONFIRM)
    assert used is not None and (used.person_id, used.purpose) == (alice, EMAIL_CONFIRM)
    assert run_write(engine, consume, secret, EMAIL_CONFIRM) is None
    assert run_read(engine, find_live, secret) is None
    (row,) = rows(engine)
    assert row.used_at is not None


@pytest.mark.parametrize(("issued", "presented"), [(EMAIL_CONFIRM, RESET), (RESET, EMAIL_CONFIRM), (RESET, "other")])
def test_consume_only_for_its_purpose(engine, alice, issued, presented):
    secret = run_write(engine, issue, alice, issued, HOUR)
    assert run_write(engine, consume, secret, presented) is None
    # the wrong purpose used nothing up
    assert run_read(engine, find_live, secret).purpose == issued
    assert run_write(engine, consume, secret, issued) is not None


def test_a_new_id_replaces_the_earlier_one_of_that_purpose(engine, alice):
    first = run_write(engine, issue, alice, RESET, HOUR)
    second = run_write(engine, issue, alice, RESET, HOUR)
    assert first != second
    assert run_read(engine, find_live, first) is None
    assert run_write(engine, consume, first, RESET) is None
    assert run_write(engine, consume, second, RESET).person_id == alice


def test_a_new_id_leaves_other_purposes_and_other_people_alone(engine, alice, bob):
    validation = run_write(engine, issue, alice, EMAIL_CONFIRM, HOUR)
    bobs = run_write(engine, issue, bob, RESET, HOUR)
    run_write(engine, issue, alice, RESET, HOUR)
    run_write(engine, issue, alice, RESET, HOUR)
    assert run_read(engine, find_live, validation).purpose == EMAIL_CONFIRM
    assert run_read(engine, find_live, bobs).person_id == bob
    assert run_write(engine, consume, validation, EMAIL_CONFIRM) is not None
    assert run_write(engine, consume, bobs, RESET) is not None


def test_a_used_id_is_not_revived_by_a_new_one(engine, alice):
    first = run_write(engine, issue, alice, EMAIL_CONFIRM, HOUR)
    assert run_write(engine, consume, first, EMAIL_CONFIRM) is not None
    run_write(engine, issue, alice, EMAIL_CONFIRM, HOUR)
    assert run_write(engine, consume, first, EMAIL_CONFIRM) is None


# --- expiry ----------------------------------------------------------------------------------


def test_an_expired_id_is_neither_live_nor_consumable(engine, alice):
    secret = run_write(engine, issue, alice, EMAIL_CONFIRM, HOUR)
    expire(engine, secret)
    assert run_read(engine, find_live, secret) is None
    assert run_write(engine, consume, secret, EMAIL_CONFIRM) is None
    (row,) = rows(engine)
    assert row.used_at is None  # refused, not used up


def test_an_id_expiring_this_instant_is_not_live(engine, alice):
    secret = run_write(engine, issue, alice, RESET, HOUR)
    expire(engine, secret, ago=timedelta(0))
    assert run_read(engine, find_live, secret) is None


def test_an_id_about_to_expire_is_still_live(engine, alice):
    secret = run_write(engine, issue, alice, RESET, HOUR)
    expire(engine, secret, ago=-timedelta(minutes=1))
    assert run_write(engine, consume, secret, RESET) is not None


# --- concurrency -----------------------------------------------------------------------------


def test_of_two_concurrent_consumes_only_one_succeeds(engine, alice):
    """Two database threads, each with its own connection of the pool, consume the same id
    at the same moment (released together by a barrier); over many rounds never both win.

    On SQLite the write transactions (BEGIN IMMEDIATE) queue, so the later one finds the id
    used; the `used_at IS NULL` guard on the UPDATE is what keeps PostgreSQL (READ
    COMMITTED, no write lock up front) safe as well."""

    def contender(secret: str, barrier: threading.Barrier, results: list, errors: list) -> None:
        try:
            barrier.wait(timeout=10)
            results.append(run_write(engine, consume, secret, EMAIL_CONFIRM))
        except BaseException as error:  # reported below
            errors.append(error)

    for _ in range(20):
        secret = run_write(engine, issue, alice, EMAIL_CONFIRM, HOUR)
        barrier = threading.Barrier(2)
        results: list[LiveId | None] = []
        errors: list[BaseException] = []
        threads = [threading.Thread(target=contender, args=(secret, barrier, results, errors)) for _ in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert not errors, errors
        assert len(results) == 2
        winners = [result for result in results if result is not None]
        assert len(winners) == 1, results
        assert winners[0].person_id == alice
