"""Two rules of the one standing decision (issue 33, item 2): with `security.localLogins`
false a password account takes no credential (its access tokens and keys alike); and an API
key of a provider's account is taken only while the provider vouches for its subject (a token
of it admitted within the issuer's `keysLifetime`, `external_identity.vouched_at`), which
`ExternalIdentities` writes at most once a minute, off the answer path. Against a real SQLite
file migrated with Alembic, through the units of work the daemon uses."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import pytest_twisted
from sqlalchemy import insert, select, update
from twisted.internet import reactor
from twisted.internet.task import deferLater

from apid.auth.identities import VOUCH_INTERVAL, ExternalIdentities, vouch
from apid.auth.standing import NO_LOCAL_LOGINS, Standings
from apid.auth.tokens import Principal
from apid.problems import Unauthorized
from apid.store.database import run_read, run_write
from apid.store.tables import external_identity

ISSUER = "https://id.example.test"
LIFETIME = 3600.0


def credential(
    user_id: int, key_id: int | None = None, issuer: str | None = None, subject: str | None = None, name: str = "alice"
) -> Principal:
    """An access token (or, with `key_id`, an API key; with `issuer`, a provider's token) of
    the account, issued now."""
    now = time.time()
    return Principal(
        user_id=user_id,
        username=name,
        roles=frozenset({"ROLE_USER"}),
        token_id=uuid.uuid4().hex,
        expires=int(now) + 900,
        issued_at=round(now, 3),
        key_id=key_id,
        issuer=issuer,
        subject=subject,
    )


def tie(engine, person_id: int, subject: str, vouched_at: datetime | None) -> None:
    run_write(
        engine,
        lambda c: c.execute(
            insert(external_identity).values(
                issuer=ISSUER,
                subject=subject,
                person_id=person_id,
                date_created=datetime.now(UTC) - timedelta(days=1),
                vouched_at=vouched_at,
            )
        ),
    )


async def refused(standings: Standings, principal: Principal) -> str:
    with pytest.raises(Unauthorized) as caught:
        await standings.admit(principal)
    return caught.value.detail


@pytest_twisted.ensureDeferred
async def test_with_local_logins_off_a_password_accounts_tokens_and_keys_are_refused(engine, database, alice, bob):
    tie(engine, bob, "subject-b", datetime.now(UTC))
    off = Standings(reactor=reactor, db=database, local_logins=False, vouched_for={ISSUER: LIFETIME})
    assert await refused(off, credential(alice)) == NO_LOCAL_LOGINS
    assert await refused(off, credential(alice, key_id=7)) == NO_LOCAL_LOGINS
    provider = credential(bob, issuer=ISSUER, subject="subject-b", name="bob")
    assert await off.admit(provider) is provider  # a provider's account is untouched
    bobs_key = credential(bob, key_id=8, name="bob")
    assert await off.admit(bobs_key) is bobs_key
    on = Standings(reactor=reactor, db=database, vouched_for={ISSUER: LIFETIME})
    mine = credential(alice, key_id=7)
    assert await on.admit(mine) is mine


@pytest_twisted.ensureDeferred
async def test_a_provider_accounts_key_is_refused_once_the_provider_has_not_vouched_within_keys_lifetime(
    engine, database, alice
):
    tie(engine, alice, "subject-a", datetime.now(UTC) - timedelta(seconds=LIFETIME + 5))
    standings = Standings(reactor=reactor, db=database, vouched_for={ISSUER: LIFETIME})
    key = credential(alice, key_id=3)
    assert "no token of its identity provider for 3600 seconds" in await refused(standings, key)
    token = credential(alice, issuer=ISSUER, subject="subject-a")
    assert await standings.admit(token) is token  # the provider's own token vouches for itself
    run_write(engine, vouch, ISSUER, "subject-a", datetime.now(UTC))
    standings.forget([alice])  # the cache's ttl, shortened
    assert await standings.admit(key) is key
    unknown = Standings(reactor=reactor, db=database)  # the issuer is no longer configured: it vouches for nobody
    await refused(unknown, key)


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


class NoRevocations:
    """What `ExternalIdentities` tells when it made or changed an account: nothing to tell here."""

    async def account_changed(self, person_id: int, sessions_ended: bool = False) -> None:
        return None


def vouched_at(engine, subject: str) -> datetime:
    moment = run_read(
        engine,
        lambda c: c.execute(select(external_identity.c.vouched_at).where(external_identity.c.subject == subject)),
    ).scalar_one()
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


@pytest_twisted.ensureDeferred
async def test_admitted_tokens_vouch_for_their_subject_at_most_once_a_minute(engine, database):
    clock = Clock()
    identities = ExternalIdentities(db=database, revocations=NoRevocations(), events=None, clock=clock)  # type: ignore[arg-type]
    await identities.account(ISSUER, "subject-c", frozenset({"ROLE_USER"}))
    made = vouched_at(engine, "subject-c")  # set when the account is made
    assert abs((made - datetime.now(UTC)).total_seconds()) < 5
    old = datetime.now(UTC) - timedelta(hours=2)
    run_write(engine, lambda c: c.execute(update(external_identity).values(vouched_at=old)))
    clock.now += VOUCH_INTERVAL / 2
    await identities.account(ISSUER, "subject-c", frozenset({"ROLE_USER"}))
    assert vouched_at(engine, "subject-c") == old  # within the minute: no write started
    clock.now += VOUCH_INTERVAL
    await identities.account(ISSUER, "subject-c", frozenset({"ROLE_USER"}))
    for _ in range(200):  # started, not awaited: written soon after
        if vouched_at(engine, "subject-c") != old:
            break
        await deferLater(reactor, 0.01, lambda: None)
    assert abs((vouched_at(engine, "subject-c") - datetime.fromtimestamp(clock.now, UTC)).total_seconds()) < 0.01
