"""Sessions (DESIGN 4.12, issue 3 items 7 and 8): rotating refresh tokens with reuse
detection, and access tokens revoked before expiry by id (logout) and by account (password
reset), kept in memory by `Revocations` and shared through the database. Against a real
SQLite file migrated with Alembic."""

from __future__ import annotations

import hashlib
import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import pytest_twisted
from sqlalchemy import select, update
from twisted.internet import reactor
from twisted.internet.task import deferLater

from apid.auth.sessions import (
    Revocations,
    Rotation,
    deny,
    revoke_person,
    revoke_session,
    revoked_since,
    rotate,
    start_family,
)
from apid.auth.standing import Standings, changed_since, purge_changes
from apid.auth.tokens import Principal
from apid.problems import Unauthorized
from apid.store.database import Database, make_engine, run_read, run_write
from apid.store.tables import account_change, person, refresh_token, revoked_token

LIFETIME = 14 * 86400
GRACE = 10


def aware(moment: datetime | None) -> datetime | None:
    if moment is None or moment.tzinfo is not None:
        return moment
    return moment.replace(tzinfo=UTC)


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def row_of(engine, secret: str):
    return run_read(
        engine, lambda c: c.execute(select(refresh_token).where(refresh_token.c.token_hash == digest(secret))).one()
    )


def family_rows(engine, secret: str) -> list:
    family = row_of(engine, secret).family
    return run_read(
        engine,
        lambda c: c.execute(
            select(refresh_token).where(refresh_token.c.family == family).order_by(refresh_token.c.id)
        ).all(),
    )


def live_hashes(engine, secret: str) -> set[str]:
    """The tokens of the family that are neither rotated nor revoked."""
    return {row.token_hash for row in family_rows(engine, secret) if row.rotated_at is None and row.revoked_at is None}


def set_column(engine, secret: str, **values) -> None:
    run_write(
        engine,
        lambda c: c.execute(update(refresh_token).where(refresh_token.c.token_hash == digest(secret)).values(**values)),
    )


def start(engine, person_id: int) -> str:
    """A new login's first refresh token."""
    secret, _session = run_write(engine, start_family, person_id, LIFETIME)
    return secret


def rotate_now(engine, secret: str, person_id: int, grace: int = GRACE):
    """Rotate as /refreshToken does, with the session of the token's own login."""
    row = run_read(
        engine,
        lambda c: c.execute(select(refresh_token.c.family).where(refresh_token.c.token_hash == digest(secret))).first(),
    )
    return run_write(engine, rotate, secret, person_id, row.family if row else None, LIFETIME, grace)


def ago(**delta) -> datetime:
    return datetime.now(UTC) - timedelta(**delta)


# --- starting and rotating -------------------------------------------------------------------------


def test_start_family_stores_only_a_hash(engine, alice):
    before = datetime.now(UTC)
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
    before = datetime.now(UTC)
    run_write(engine, revoke_person, alice)
    after = datetime.now(UTC)
    for secret in families:
        assert rotate_now(engine, secret, alice).status is Rotation.UNKNOWN
    assert rotate_now(engine, bobs, bob).status is Rotation.ROTATED
    marks = dict(run_read(engine, lambda c: c.execute(select(person.c.id, person.c.tokens_valid_after)).all()))
    assert before <= aware(marks[alice]) <= after
    assert marks[bob] is None
    assert alice in run_read(engine, changed_since, before)


def test_revoke_person_keeping_a_session_ends_only_the_others(engine, alice, bob):
    kept, *others = [start(engine, alice) for _ in range(3)]
    bobs = start(engine, bob)
    before = datetime.now(UTC)
    run_write(engine, revoke_person, alice, row_of(engine, kept).family)
    assert rotate_now(engine, kept, alice).status is Rotation.ROTATED
    for secret in others:
        assert rotate_now(engine, secret, alice).status is Rotation.UNKNOWN
    assert rotate_now(engine, bobs, bob).status is Rotation.ROTATED
    # the kept login's access tokens stay good: no account-wide mark
    assert (
        run_read(engine, lambda c: c.execute(select(person.c.tokens_valid_after).where(person.c.id == alice)).scalar())
        is None
    )
    assert run_read(engine, changed_since, before) == {alice}


def test_revoked_since_lists_denied_ids_ended_logins_and_changed_accounts(engine, alice, bob):
    expires = int(time.time()) + 900
    run_write(engine, deny, "jti-1", expires)
    run_write(engine, deny, "jti-1", expires)  # twice is harmless
    run_write(engine, deny, "jti-2", expires + 60)
    run_write(engine, deny, "jti-old", int(time.time()) - 10)  # expired already: not worth keeping
    ended = row_of(engine, start(engine, alice)).family
    live = row_of(engine, start(engine, alice)).family
    since = datetime.now(UTC)
    run_write(engine, revoke_session, ended, alice)
    run_write(engine, revoke_person, bob)

    revoked = run_read(engine, revoked_since, None, 900)
    assert revoked.tokens == {"jti-1": float(expires), "jti-2": float(expires + 60)}
    assert set(revoked.sessions) == {ended} | {row.family for row in bob_rows(engine, bob)}
    assert live not in revoked.sessions
    assert revoked.sessions[ended] == pytest.approx(time.time() + 900, abs=5)
    assert revoked.accounts == set()  # from the start nothing is cached, so nothing to forget
    assert bob in run_read(engine, revoked_since, since, 900).accounts


def bob_rows(engine, bob: int) -> list:
    return run_read(engine, lambda c: c.execute(select(refresh_token).where(refresh_token.c.person_id == bob)).all())


def test_revoked_since_leaves_out_what_is_older_than_the_overlap(engine, alice, bob):
    expires = int(time.time()) + 900
    run_write(engine, deny, "jti-old", expires)
    old = row_of(engine, start(engine, alice)).family
    run_write(engine, revoke_session, old, alice)
    run_write(engine, lambda c: c.execute(update(revoked_token).values(date_created=ago(minutes=10))))
    run_write(engine, lambda c: c.execute(update(refresh_token).values(revoked_at=ago(minutes=10))))
    run_write(engine, lambda c: c.execute(update(account_change).values(changed_at=ago(minutes=10))))
    run_write(engine, deny, "jti-new", expires)
    new = row_of(engine, start(engine, bob)).family
    run_write(engine, revoke_session, new, bob)
    run_write(engine, revoke_person, bob)
    revoked = run_read(engine, revoked_since, ago(seconds=1), 900)
    assert set(revoked.tokens) == {"jti-new"}
    assert set(revoked.sessions) == {new}
    assert revoked.accounts == {bob}
    # from the start, everything still worth knowing: a login ended longer ago than an
    # access token lives cannot have a valid token left
    everything = run_read(engine, revoked_since, None, 900)
    assert set(everything.tokens) == {"jti-old", "jti-new"}
    assert set(everything.sessions) == {old, new}
    assert set(run_read(engine, revoked_since, None, 300).sessions) == {new}


def test_account_changes_are_purged_after_an_hour(engine, alice, bob):
    run_write(engine, lambda c: c.execute(update(account_change).values(changed_at=ago(hours=2))))
    run_write(engine, revoke_person, bob)
    run_write(engine, purge_changes)
    assert run_read(engine, changed_since, ago(days=1)) == {bob}


# --- Revocations and Standings: in memory, shared through the database ----------------------------------


def principal(
    user_id: int,
    issued_at: float | None = None,
    jti: str | None = None,
    lifetime: int = 900,
    session: str | None = None,
) -> Principal:
    issued = time.time() if issued_at is None else issued_at
    return Principal(
        user_id=user_id,
        username="someone",
        roles=frozenset({"ROLE_USER"}),
        token_id=jti or uuid.uuid4().hex,
        expires=int(issued) + lifetime,
        issued_at=round(issued, 3),
        session=session,
    )


@pytest.fixture
def second_database(url, engine):
    """Another process's handle on the same database file."""
    db = Database(reactor=reactor, engine=make_engine(url), threads=2)
    db.start()
    yield db
    db.stop()


class Gate:
    """What the daemon checks after a token's signature: the revocations, then the standing."""

    def __init__(self, db: Database) -> None:
        self.standings = Standings(reactor=reactor, db=db)
        self.revocations = Revocations(reactor=reactor, db=db, standings=self.standings, access_lifetime=900)

    async def refuses(self, token: Principal) -> bool:
        if self.revocations.refuses(token):
            return True
        try:
            await self.standings.admit(token)
        except Unauthorized:
            return True
        return False


@pytest.fixture
def gates(database):
    made: list[Gate] = []

    def make(db: Database | None = None) -> Gate:
        made.append(Gate(db or database))
        return made[-1]

    yield make
    for each in made:
        each.revocations.stop()


async def issued_then_wait(user_id: int, **claims) -> Principal:
    """A token, then a pause, so that what is revoked next is later than its iat."""
    token = principal(user_id, **claims)
    await deferLater(reactor, 0.01, lambda: None)
    return token


@pytest_twisted.ensureDeferred
async def test_a_denied_token_is_refused(gates, alice):
    mine = gates()
    await mine.revocations.start()
    token, other = principal(alice), principal(alice)
    assert not await mine.refuses(token)
    await mine.revocations.deny_token(token)
    assert await mine.refuses(token)
    assert not await mine.refuses(other)


@pytest_twisted.ensureDeferred
async def test_every_access_token_of_an_ended_login_is_refused(gates, engine, alice):
    mine = gates()
    await mine.revocations.start()
    family = row_of(engine, start(engine, alice)).family
    first, latest = principal(alice, session=family), principal(alice, session=family)
    other = principal(alice, session=row_of(engine, start(engine, alice)).family)
    await mine.revocations.end_session(first)
    assert await mine.refuses(first) and await mine.refuses(latest)
    assert not await mine.refuses(other)
    assert rotate_now(engine, start(engine, alice), alice).status is Rotation.ROTATED


@pytest_twisted.ensureDeferred
async def test_tokens_issued_before_the_mark_are_refused_and_later_ones_not(gates, alice, bob):
    mine = gates()
    await mine.revocations.start()
    earlier = await issued_then_wait(alice)
    bobs = principal(bob)
    assert not await mine.refuses(earlier)  # read and kept: the revocation must evict it
    await mine.revocations.revoke_person(alice)
    later = principal(alice, issued_at=time.time() + 1)
    assert await mine.refuses(earlier)
    assert not await mine.refuses(later)
    assert not await mine.refuses(bobs)


@pytest_twisted.ensureDeferred
async def test_revocations_hold_across_a_restart(gates, alice, bob):
    """What one instance wrote, a new one (a restarted daemon) reads at start."""
    first = gates()
    await first.revocations.start()
    denied = principal(bob)
    earlier = await issued_then_wait(alice)
    await first.revocations.deny_token(denied)
    await first.revocations.revoke_person(alice)
    first.revocations.stop()

    restarted = gates()
    await restarted.revocations.start()
    assert await restarted.refuses(denied)
    assert await restarted.refuses(earlier)
    assert not await restarted.refuses(principal(bob))
    assert not await restarted.refuses(principal(alice, issued_at=time.time() + 1))


@pytest_twisted.ensureDeferred
async def test_a_revocation_by_another_instance_is_seen_after_a_poll(gates, second_database, alice, bob):
    mine = gates()
    theirs = gates(second_database)
    await mine.revocations.start()
    await theirs.revocations.start()
    denied = principal(bob)
    earlier = await issued_then_wait(alice)
    assert not await mine.refuses(denied) and not await mine.refuses(earlier)

    await theirs.revocations.deny_token(denied)
    await theirs.revocations.revoke_person(alice)
    # nothing read yet: the check is memory only
    assert not await mine.refuses(denied)
    assert not await mine.refuses(earlier)

    await mine.revocations._poll()
    assert await mine.refuses(denied)
    assert await mine.refuses(earlier)
    assert not await mine.refuses(principal(alice, issued_at=time.time() + 1))


@pytest_twisted.ensureDeferred
async def test_the_poller_picks_up_another_instances_revocations_by_itself(gates, second_database, alice, bob):
    """The LoopingCall started by start() re-reads the database on its own (every half
    second); the test waits for it with a generous bound, not a timing assertion."""
    mine = gates()
    theirs = gates(second_database)
    await mine.revocations.start()
    await theirs.revocations.start()
    denied = principal(bob)
    earlier = await issued_then_wait(alice)
    assert not await mine.refuses(earlier)
    await theirs.revocations.deny_token(denied)
    await theirs.revocations.revoke_person(alice)

    await deferLater(reactor, 1.2, lambda: None)
    for _ in range(40):  # a loaded machine: up to 10 s more
        if await mine.refuses(denied) and await mine.refuses(earlier):
            break
        await deferLater(reactor, 0.25, lambda: None)
    assert await mine.refuses(denied)
    assert await mine.refuses(earlier)


@pytest_twisted.ensureDeferred
async def test_a_later_reset_elsewhere_moves_the_mark_forward(gates, second_database, alice):
    mine = gates()
    await mine.revocations.start()
    await mine.revocations.revoke_person(alice)
    between = principal(alice, issued_at=time.time() + 0.5)
    assert not await mine.refuses(between)
    # another daemon's later password reset moves the mark forward
    await deferLater(reactor, 1.0, lambda: None)
    await second_database.write(revoke_person, alice)
    await mine.revocations._poll()
    assert await mine.refuses(between)
    # polling again (the overlap re-reads the same changes) changes nothing
    await mine.revocations._poll()
    assert await mine.refuses(between)
    assert not await mine.refuses(principal(alice, issued_at=time.time() + 1))


@pytest_twisted.ensureDeferred
async def test_expired_denials_are_forgotten(gates, alice):
    mine = gates()
    await mine.revocations.start()
    stale = principal(alice, issued_at=time.time() - 3600, lifetime=60)  # expired an hour ago
    await mine.revocations.deny_token(stale)
    await mine.revocations._poll()
    assert not mine.revocations.refuses(stale)  # it expired anyway: the token check refuses it
    fresh = principal(alice)
    await mine.revocations.deny_token(fresh)
    await mine.revocations._poll()
    assert await mine.refuses(fresh)
