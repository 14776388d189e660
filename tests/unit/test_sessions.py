"""Sessions (DESIGN 4.12, issue 3 items 7 and 8): rotating refresh tokens with reuse
detection, and access tokens revoked before expiry by id (logout) and by account (password
reset), kept in memory by `Revocations` and shared through the database. Against a real
SQLite file migrated with Alembic."""

from __future__ import annotations

import hashlib
import time
import uuid
from datetime import datetime, timedelta, timezone

import pytest
import pytest_twisted
from sqlalchemy import select, update
from twisted.internet import reactor
from twisted.internet.task import deferLater

from apid.auth.sessions import (
    Revocations,
    Rotation,
    deny,
    revoke_session,
    revoke_person,
    revoked_since,
    rotate,
    start_family,
)
from apid.auth.tokens import Principal
from apid.store.database import Database, make_engine, run_read, run_write
from apid.store.tables import person, refresh_token, revoked_token

LIFETIME = 14 * 86400
GRACE = 10


def aware(moment: datetime | None) -> datetime | None:
    if moment is None or moment.tzinfo is not None:
        return moment
    return moment.replace(tzinfo=timezone.utc)


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def row_of(engine, secret: str):
    return run_read(engine, lambda c: c.execute(
        select(refresh_token).where(refresh_token.c.token_hash == digest(secret))).one())


def family_rows(engine, secret: str) -> list:
    family = row_of(engine, secret).family
    return run_read(engine, lambda c: c.execute(
        select(refresh_token).where(refresh_token.c.family == family).order_by(refresh_token.c.id)).all())


def live_hashes(engine, secret: str) -> set[str]:
    """The tokens of the family that are neither rotated nor revoked."""
    return {row.token_hash for row in family_rows(engine, secret)
            if row.rotated_at is None and row.revoked_at is None}


def set_column(engine, secret: str, **values) -> None:
    run_write(engine, lambda c: c.execute(
        update(refresh_token).where(refresh_token.c.token_hash == digest(secret)).values(**values)))


def start(engine, person_id: int) -> str:
    """A new login's first refresh token."""
    secret, _session = run_write(engine, start_family, person_id, LIFETIME)
    return secret


def rotate_now(engine, secret: str, person_id: int, grace: int = GRACE):
    """Rotate as /refreshToken does, with the session of the token's own login."""
    row = run_read(engine, lambda c: c.execute(
        select(refresh_token.c.family).where(refresh_token.c.token_hash == digest(secret))).first())
    return run_write(engine, rotate, secret, person_id, row.family if row else None, LIFETIME, grace)


def ago(**delta) -> datetime:
    return datetime.now(timezone.utc) - timedelta(**delta)


# --- starting and rotating -------------------------------------------------------------------------


def test_start_family_stores_only_a_hash(engine, alice):
    before = datetime.now(timezone.utc)
    secret = start(engine, alice)
    assert len(secret) * 6 >= 128
    row = row_of(engine, secret)
    for column, value in row._mapping.items():
        assert secret not in str(value), f"the secret is stored in {column}"
    assert row.person_id == alice
    assert row.rotated_at is None and row.revoked_at is None
    assert aware(row.expires_at) - aware(row.date_created) == timedelta(seconds=LIFETIME)
    assert aware(row.date_created) >= before - timedelta(seconds=1)


def test_each_login_starts_its_own_family(engine, alice):
    first = start(engine, alice)
    second = start(engine, alice)
    assert row_of(engine, first).family != row_of(engine, second).family


def test_rotation_returns_a_new_secret_and_marks_the_old_rotated(engine, alice):
    old = start(engine, alice)
    outcome = rotate_now(engine, old, alice)
    assert outcome.status is Rotation.ROTATED
    assert outcome.secret and outcome.secret != old
    old_row, new_row = row_of(engine, old), row_of(engine, outcome.secret)
    assert old_row.rotated_at is not None and old_row.revoked_at is None
    assert new_row.rotated_at is None and new_row.revoked_at is None
    assert new_row.family == old_row.family
    assert live_hashes(engine, old) == {digest(outcome.secret)}


def test_a_chain_of_rotations(engine, alice):
    secret = start(engine, alice)
    seen = {secret}
    for _ in range(5):
        outcome = rotate_now(engine, secret, alice)
        assert outcome.status is Rotation.ROTATED
        assert outcome.secret not in seen
        seen.add(outcome.secret)
        secret = outcome.secret
    assert live_hashes(engine, secret) == {digest(secret)}
    assert len(family_rows(engine, secret)) == 6


def test_reuse_within_grace_gives_a_fresh_token_and_only_the_newest_stays_live(engine, alice):
    first = start(engine, alice)
    second = rotate_now(engine, first, alice).secret
    # the client lost the answer and presents the first token again, within the grace window
    again = rotate_now(engine, first, alice)
    assert again.status is Rotation.ROTATED
    assert again.secret not in (first, second)
    assert live_hashes(engine, first) == {digest(again.secret)}
    assert row_of(engine, second).rotated_at is not None
    assert all(row.revoked_at is None for row in family_rows(engine, first))
    # the newest carries on
    assert rotate_now(engine, again.secret, alice).status is Rotation.ROTATED


def test_reuse_after_grace_revokes_the_whole_family(engine, alice):
    first = start(engine, alice)
    second = rotate_now(engine, first, alice).secret
    third = rotate_now(engine, second, alice).secret
    set_column(engine, first, rotated_at=ago(seconds=GRACE + 5))
    assert rotate_now(engine, first, alice).status is Rotation.REUSED
    assert all(row.revoked_at is not None for row in family_rows(engine, first))
    # the thief's or the owner's newest token: both dead
    assert rotate_now(engine, third, alice).status is Rotation.UNKNOWN
    assert rotate_now(engine, second, alice).status is Rotation.UNKNOWN
    assert rotate_now(engine, first, alice).status is Rotation.UNKNOWN


def test_reuse_with_no_grace_revokes_at_once(engine, alice):
    first = start(engine, alice)
    newest = rotate_now(engine, first, alice, grace=0).secret
    outcome = rotate_now(engine, first, alice, grace=0)
    assert outcome.status is Rotation.REUSED and outcome.secret is None
    assert rotate_now(engine, newest, alice, grace=0).status is Rotation.UNKNOWN
    assert live_hashes(engine, first) == set()


def test_reuse_of_a_token_rotated_within_grace_is_detected_after_grace(engine, alice):
    """A token that was live and got rotated by a within-grace reuse of its parent, presented
    later, is reuse too."""
    first = start(engine, alice)
    second = rotate_now(engine, first, alice).secret
    newest = rotate_now(engine, first, alice).secret
    set_column(engine, second, rotated_at=ago(minutes=5))
    assert rotate_now(engine, second, alice).status is Rotation.REUSED
    assert rotate_now(engine, newest, alice).status is Rotation.UNKNOWN


def test_reuse_revokes_only_its_own_family(engine, alice):
    stolen = start(engine, alice)
    other_device = start(engine, alice)
    rotate_now(engine, stolen, alice)
    set_column(engine, stolen, rotated_at=ago(minutes=1))
    assert rotate_now(engine, stolen, alice).status is Rotation.REUSED
    assert rotate_now(engine, other_device, alice).status is Rotation.ROTATED


# --- refused tokens --------------------------------------------------------------------------------


def test_a_token_of_another_person_is_unknown_and_left_alone(engine, alice, bob):
    secret = start(engine, alice)
    assert rotate_now(engine, secret, bob).status is Rotation.UNKNOWN
    row = row_of(engine, secret)
    assert row.rotated_at is None and row.revoked_at is None
    assert rotate_now(engine, secret, alice).status is Rotation.ROTATED


def test_an_unknown_token_is_unknown(engine, alice):
    start(engine, alice)
    for secret in ("", "nope", "x" * 43):
        outcome = rotate_now(engine, secret, alice)
        assert outcome.status is Rotation.UNKNOWN and outcome.secret is None


def test_the_stored_hash_is_no_token(engine, alice):
    secret = start(engine, alice)
    assert rotate_now(engine, digest(secret), alice).status is Rotation.UNKNOWN


def test_an_expired_token_is_unknown(engine, alice):
    secret = start(engine, alice)
    set_column(engine, secret, expires_at=ago(seconds=1))
    assert rotate_now(engine, secret, alice).status is Rotation.UNKNOWN
    assert row_of(engine, secret).rotated_at is None


def test_an_expired_rotated_token_presented_again_is_unknown_not_reuse(engine, alice):
    first = start(engine, alice)
    newest = rotate_now(engine, first, alice).secret
    set_column(engine, first, rotated_at=ago(days=20), expires_at=ago(days=6))
    assert rotate_now(engine, first, alice).status is Rotation.UNKNOWN
    assert rotate_now(engine, newest, alice).status is Rotation.ROTATED


# --- revoking --------------------------------------------------------------------------------------


def test_revoke_session_ends_the_family(engine, alice):
    first = start(engine, alice)
    newest = rotate_now(engine, first, alice).secret
    other = start(engine, alice)
    run_write(engine, revoke_session, row_of(engine, first).family, alice)
    assert rotate_now(engine, newest, alice).status is Rotation.UNKNOWN
    assert all(row.revoked_at is not None for row in family_rows(engine, first))
    assert rotate_now(engine, other, alice).status is Rotation.ROTATED


def test_revoke_session_of_another_person_does_nothing(engine, alice, bob):
    secret = start(engine, alice)
    run_write(engine, revoke_session, row_of(engine, secret).family, bob)
    assert rotate_now(engine, secret, alice).status is Rotation.ROTATED


def test_a_cookie_of_another_login_of_the_same_person_is_unknown(engine, alice):
    """An access token names its login (`sid`); only that login's cookie refreshes it."""
    first, second = start(engine, alice), start(engine, alice)
    outcome = run_write(engine, rotate, first, alice, row_of(engine, second).family, LIFETIME, GRACE)
    assert outcome.status is Rotation.UNKNOWN
    assert row_of(engine, first).rotated_at is None


def test_revoke_person_ends_every_family_and_sets_the_mark(engine, alice, bob):
    families = [start(engine, alice) for _ in range(3)]
    bobs = start(engine, bob)
    before = datetime.now(timezone.utc)
    moment = run_write(engine, revoke_person, alice)
    after = datetime.now(timezone.utc)
    assert before <= moment <= after
    for secret in families:
        assert rotate_now(engine, secret, alice).status is Rotation.UNKNOWN
    assert rotate_now(engine, bobs, bob).status is Rotation.ROTATED
    marks = dict(run_read(engine, lambda c: c.execute(select(person.c.id, person.c.tokens_valid_after)).all()))
    assert aware(marks[alice]) == moment
    assert marks[bob] is None


def test_revoked_since_lists_denied_ids_and_marks(engine, alice, bob):
    expires = int(time.time()) + 900
    run_write(engine, deny, "jti-1", expires)
    run_write(engine, deny, "jti-1", expires)  # twice is harmless
    run_write(engine, deny, "jti-2", expires + 60)
    run_write(engine, deny, "jti-old", int(time.time()) - 10)  # expired already: not worth keeping
    moment = run_write(engine, revoke_person, bob)
    denied, marks = run_read(engine, revoked_since, None)
    assert denied == {"jti-1": float(expires), "jti-2": float(expires + 60)}
    assert marks == {bob: pytest.approx(moment.timestamp(), abs=1e-6)}
    assert alice not in marks


def test_revoked_since_leaves_out_what_is_older_than_the_overlap(engine, alice, bob):
    expires = int(time.time()) + 900
    run_write(engine, deny, "jti-old", expires)
    run_write(engine, revoke_person, alice)
    run_write(engine, lambda c: c.execute(update(revoked_token).values(date_created=ago(minutes=10))))
    run_write(engine, lambda c: c.execute(update(person).values(tokens_valid_after=ago(minutes=10))))
    run_write(engine, deny, "jti-new", expires)
    moment = run_write(engine, revoke_person, bob)
    denied, marks = run_read(engine, revoked_since, ago(seconds=1))
    assert denied == {"jti-new": float(expires)}
    assert set(marks) == {bob}
    assert marks[bob] == pytest.approx(moment.timestamp(), abs=1e-6)
    # from the start, everything
    denied, marks = run_read(engine, revoked_since, None)
    assert set(denied) == {"jti-old", "jti-new"}
    assert set(marks) == {alice, bob}


# --- Revocations: in memory, shared through the database ----------------------------------------------


def principal(user_id: int, issued_at: float | None = None, jti: str | None = None,
              lifetime: int = 900) -> Principal:
    issued = time.time() if issued_at is None else issued_at
    return Principal(user_id=user_id, username="someone", roles=frozenset({"ROLE_USER"}),
                     token_id=jti or uuid.uuid4().hex, expires=int(issued) + lifetime,
                     issued_at=round(issued, 3))


@pytest.fixture
def database(engine):
    db = Database(reactor, engine, 2)
    db.start()
    yield db
    db.stop()


@pytest.fixture
def second_database(url, engine):
    """Another process's handle on the same database file."""
    db = Database(reactor, make_engine(url), 2)
    db.start()
    yield db
    db.stop()


@pytest.fixture
def revocations(database):
    made: list[Revocations] = []

    def make(db: Database | None = None) -> Revocations:
        made.append(Revocations(reactor, db or database))
        return made[-1]

    yield make
    for each in made:
        each.stop()


@pytest_twisted.ensureDeferred
async def test_a_denied_token_is_refused(revocations, alice):
    mine = revocations()
    await mine.start()
    token, other = principal(alice), principal(alice)
    assert not mine.refuses(token)
    await mine.deny_token(token)
    assert mine.refuses(token)
    assert not mine.refuses(other)


@pytest_twisted.ensureDeferred
async def test_tokens_issued_before_the_mark_are_refused_and_later_ones_not(revocations, alice, bob):
    mine = revocations()
    await mine.start()
    earlier = principal(alice, issued_at=time.time() - 60)
    bobs = principal(bob, issued_at=time.time() - 60)
    await mine.revoke_person(alice)
    later = principal(alice, issued_at=time.time() + 1)
    assert mine.refuses(earlier)
    assert not mine.refuses(later)
    assert not mine.refuses(bobs)


@pytest_twisted.ensureDeferred
async def test_revocations_hold_across_a_restart(revocations, database, alice, bob):
    """What one instance wrote, a new one (a restarted daemon) reads at start."""
    first = revocations()
    await first.start()
    denied = principal(bob)
    earlier = principal(alice, issued_at=time.time() - 60)
    await first.deny_token(denied)
    await first.revoke_person(alice)
    first.stop()

    restarted = revocations()
    await restarted.start()
    assert restarted.refuses(denied)
    assert restarted.refuses(earlier)
    assert not restarted.refuses(principal(bob))
    assert not restarted.refuses(principal(alice, issued_at=time.time() + 1))


@pytest_twisted.ensureDeferred
async def test_a_revocation_by_another_instance_is_seen_after_a_poll(revocations, second_database, alice, bob):
    mine = revocations()
    theirs = revocations(second_database)
    await mine.start()
    await theirs.start()
    denied = principal(bob)
    earlier = principal(alice, issued_at=time.time() - 60)
    assert not mine.refuses(denied) and not mine.refuses(earlier)

    await theirs.deny_token(denied)
    await theirs.revoke_person(alice)
    # nothing read yet: the check is memory only
    assert not mine.refuses(denied)

    await mine._poll()
    assert mine.refuses(denied)
    assert mine.refuses(earlier)
    assert not mine.refuses(principal(alice, issued_at=time.time() + 1))


@pytest_twisted.ensureDeferred
async def test_the_poller_picks_up_another_instances_revocations_by_itself(
        revocations, second_database, alice, bob):
    """The LoopingCall started by start() re-reads the database on its own (every half
    second); the test waits for it with a generous bound, not a timing assertion."""
    mine = revocations()
    theirs = revocations(second_database)
    await mine.start()
    await theirs.start()
    denied = principal(bob)
    earlier = principal(alice, issued_at=time.time() - 60)
    await theirs.deny_token(denied)
    await theirs.revoke_person(alice)

    await deferLater(reactor, 1.2, lambda: None)
    for _ in range(40):  # a loaded machine: up to 10 s more
        if mine.refuses(denied) and mine.refuses(earlier):
            break
        await deferLater(reactor, 0.25, lambda: None)
    assert mine.refuses(denied)
    assert mine.refuses(earlier)


@pytest_twisted.ensureDeferred
async def test_a_later_reset_elsewhere_moves_the_mark_forward(revocations, second_database, alice):
    mine = revocations()
    await mine.start()
    await mine.revoke_person(alice)
    between = principal(alice, issued_at=time.time() + 0.5)
    assert not mine.refuses(between)
    # another daemon's later password reset moves the mark forward
    await deferLater(reactor, 1.0, lambda: None)
    await second_database.write(revoke_person, alice)
    await mine._poll()
    assert mine.refuses(between)
    # polling again (the overlap re-reads the same marks) changes nothing
    await mine._poll()
    assert mine.refuses(between)
    assert not mine.refuses(principal(alice, issued_at=time.time() + 1))


@pytest_twisted.ensureDeferred
async def test_expired_denials_are_forgotten(revocations, alice):
    mine = revocations()
    await mine.start()
    stale = principal(alice, issued_at=time.time() - 3600, lifetime=60)  # expired an hour ago
    await mine.deny_token(stale)
    await mine._poll()
    assert not mine.refuses(stale)  # it expired anyway: the token check refuses it, not this list
    fresh = principal(alice)
    await mine.deny_token(fresh)
    await mine._poll()
    assert mine.refuses(fresh)
