"""Account standing (issue 10, item 1): a token is good only while its account may use it,
and only for the roles the account still holds. Against a real SQLite file migrated with
Alembic, through the same units of work the daemon uses."""

from __future__ import annotations

import dataclasses
import time
import uuid
from datetime import UTC, datetime

import pytest
import pytest_twisted
from sqlalchemy import delete, insert, select, update
from twisted.internet import reactor
from twisted.internet.defer import ensureDeferred
from twisted.internet.task import deferLater

from apid.auth.accounts import delete_account, insert_account, update_account
from apid.auth.standing import REFUSED, Standings, changed_since, standings_of
from apid.auth.tokens import Principal
from apid.problems import Unauthorized
from apid.store.database import run_read, run_write
from apid.store.tables import account_change, external_identity, person, person_role

ISSUER = "https://id.example.test"


def token(user_id: int, roles=("ROLE_USER",), issued_at: float | None = None, name: str = "alice") -> Principal:
    issued = time.time() if issued_at is None else issued_at
    return Principal(
        user_id=user_id,
        username=name,
        roles=frozenset(roles),
        token_id=uuid.uuid4().hex,
        expires=int(issued) + 900,
        issued_at=round(issued, 3),
    )


@pytest.fixture
def standings(database):
    return Standings(reactor=reactor, db=database)


async def refused(standings: Standings, principal: Principal) -> str:
    with pytest.raises(Unauthorized) as caught:
        await standings.admit(principal)
    return caught.value.detail


@pytest_twisted.ensureDeferred
async def test_a_token_of_an_account_in_good_standing_is_admitted_as_it_is(standings, alice):
    mine = token(alice)
    assert await standings.admit(mine) is mine


@pytest_twisted.ensureDeferred
async def test_roles_are_those_both_in_the_token_and_held_now(engine, standings, alice):
    run_write(engine, update_account, alice, {}, None, None, ["ROLE_USER", "ROLE_AUDITOR"])
    admin_token = token(alice, roles=("ROLE_USER", "ROLE_ADMIN"))
    admitted = await standings.admit(admin_token)
    # demoted: the admin role is gone; promoted: the auditor role waits for the next token
    assert admitted.roles == frozenset({"ROLE_USER"})
    assert admitted.token_id == admin_token.token_id


@pytest_twisted.ensureDeferred
async def test_the_name_is_the_accounts_current_one(engine, standings, alice):
    run_write(engine, update_account, alice, {"username": "alicia"}, None, None, None)
    assert (await standings.admit(token(alice, name="alice"))).username == "alicia"


@pytest.mark.parametrize("column", ["enabled", "account_locked", "account_expired"])
@pytest_twisted.ensureDeferred
async def test_a_disabled_locked_or_expired_account_is_refused(engine, standings, alice, column):
    run_write(engine, lambda c: c.execute(update(person).values({column: column != "enabled"})))
    assert await refused(standings, token(alice)) == REFUSED


@pytest_twisted.ensureDeferred
async def test_a_deleted_or_unknown_account_is_refused(engine, standings, alice, bob):
    run_write(engine, delete_account, bob)
    await refused(standings, token(bob))
    await refused(standings, token(bob + 1000))


@pytest_twisted.ensureDeferred
async def test_a_token_issued_before_the_account_existed_is_refused(engine, standings, alice):
    """SQLite may give a deleted account's id to the next account: the old token must not
    act as the new account."""
    old = token(alice, issued_at=time.time() - 60)
    run_write(engine, delete_account, alice)
    reborn = run_write(engine, insert_account, "mallory", "m@example.com", "not-a-hash", ["ROLE_USER"]).id
    await refused(standings, token(reborn, issued_at=old.issued_at))
    assert (await standings.admit(token(reborn))).user_id == reborn


def test_a_deleted_accounts_id_is_never_given_again(engine, alice, bob):
    """SQLite AUTOINCREMENT (migration 0012): the next account gets a new id, even after the
    newest account was deleted."""
    run_write(engine, delete_account, bob)
    assert run_write(engine, insert_account, "mallory", "m@example.com", "not-a-hash", ["ROLE_USER"]).id > bob


def provider_token(user_id: int, subject: str, issued_at: float | None = None) -> Principal:
    return dataclasses.replace(token(user_id, issued_at=issued_at), issuer=ISSUER, subject=subject)


def tie(engine, person_id: int, subject: str) -> None:
    run_write(
        engine,
        lambda c: c.execute(
            insert(external_identity).values(
                issuer=ISSUER, subject=subject, person_id=person_id, date_created=datetime.now(UTC)
            )
        ),
    )


@pytest_twisted.ensureDeferred
async def test_a_provider_token_is_taken_only_by_the_account_tied_to_its_issuer_and_subject(
    engine, standings, alice, bob
):
    """Made before its account, a provider token may predate it; what it may never do is act
    as another account, whatever the id it carries."""
    tie(engine, alice, "subject-a")
    earlier = time.time() - 60
    assert (await standings.admit(provider_token(alice, "subject-a", earlier))).user_id == alice
    await refused(standings, provider_token(alice, "subject-b"))  # another subject of the issuer
    await refused(standings, provider_token(bob, "subject-a"))  # bob is tied to nobody
    await refused(standings, dataclasses.replace(provider_token(alice, "subject-a"), issuer="https://other.test"))


@pytest_twisted.ensureDeferred
async def test_a_pending_account_is_refused_even_when_enabled_by_hand(engine, standings, alice):
    """A sign-up never validated takes no token, whatever `enabled` says (apid.auth.lifecycle)."""
    run_write(engine, lambda c: c.execute(update(person).values(validated_at=None)))
    assert await refused(standings, token(alice)) == REFUSED


@pytest_twisted.ensureDeferred
async def test_a_standing_is_kept_until_forgotten(engine, standings, alice):
    admin_token = token(alice, roles=("ROLE_USER",))
    await standings.admit(admin_token)
    # a change written behind the daemon's back (no account_change row) is not seen...
    run_write(engine, lambda c: c.execute(update(person).values(enabled=False)))
    assert await standings.admit(admin_token) is admin_token
    # ...until the account is forgotten (a local change, or another daemon's, seen by the poll)
    standings.forget([alice])
    await refused(standings, admin_token)


@pytest_twisted.ensureDeferred
async def test_a_standing_expires_after_its_time_to_live(database, engine, alice):
    standings = Standings(reactor=reactor, db=database, ttl=0.05)
    mine = token(alice)
    await standings.admit(mine)
    run_write(engine, lambda c: c.execute(update(person).values(account_locked=True)))
    await deferLater(reactor, 0.1, lambda: None)
    await refused(standings, mine)


@pytest_twisted.ensureDeferred
async def test_a_read_begun_before_a_forget_is_not_kept(engine, standings, alice):
    reading = ensureDeferred(standings.admit(token(alice)))
    standings.forget([alice])  # the account changed while its standing was being read
    await reading
    run_write(engine, lambda c: c.execute(update(person).values(enabled=False)))
    await refused(standings, token(alice))


@pytest_twisted.ensureDeferred
async def test_concurrent_checks_of_several_accounts_each_get_their_own(standings, engine, alice, bob):
    checks = [ensureDeferred(standings.admit(token(user))) for user in (alice, bob, alice)]
    admitted = [await each for each in checks]
    assert [p.user_id for p in admitted] == [alice, bob, alice]


def test_every_change_through_apid_is_noted_for_the_other_daemons(engine, alice, bob):
    run_write(engine, lambda c: c.execute(delete(account_change)))
    since = run_read(engine, lambda c: c.execute(select(person.c.date_created)).scalars().first())
    run_write(engine, update_account, alice, {"enabled": False}, None, None, None)
    run_write(engine, delete_account, bob)
    assert run_read(engine, changed_since, since) == {alice, bob}


def test_standings_of_reads_roles_and_flags_in_one_query(engine, alice, bob):
    run_write(engine, lambda c: c.execute(delete(person_role).where(person_role.c.person_id == bob)))
    found = run_read(engine, standings_of, [alice, bob, bob + 1000])
    assert found[alice].roles == frozenset({"ROLE_USER"}) and found[alice].may_log_in
    assert found[bob].roles == frozenset()
    assert bob + 1000 not in found
