"""Idempotency-Key's rule (apid.calls.idempotency) against real SQLite and PostgreSQL: a key
claimed once per caller, its answer kept and replayed for the same request only, released
for a retry when the answer did not settle the request, swept after 24 hours, and taken over
when its claim died with its process."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import event, insert, select
from twisted.internet.defer import succeed

from apid.auth.tokens import Principal
from apid.calls.idempotency import Idempotency, Kept, claim, fingerprint, settle, settles, valid_key
from apid.calls.incoming import Incoming
from apid.calls.paths import parse_target
from apid.http.conditions import Preconditions
from apid.problems import BadRequest
from apid.store.tables import idempotency_key

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


@pytest.fixture
def engine(engine_of_each_database):
    return engine_of_each_database


ANSWER = Kept(200, (("Content-Type", "application/json"), ("ETag", '"abc"')), b'{"id": 7, "version": 0}')


USER = Principal(user_id=1, username="jdoe", roles=frozenset({"ROLE_USER"}), token_id="t", expires=0, issued_at=0.0)


def incoming(method: str = "POST", uri: str = "/v0.1/person/create", principal: Principal = USER, **body) -> Incoming:
    return Incoming(
        target=parse_target("0.1", "v0.1", "person", "create", None),
        principal=principal,
        method=method,
        address="127.0.0.1",
        preconditions=Preconditions(),
        body=body,
        text={},
        uri=uri,
        wants_links=False,
        idempotency_key=b"k",
    )


def claimed(engine, person: int, key: str, print_: str, now: datetime = NOW):
    with engine.begin() as connection:
        return claim(connection, person, key, print_, now)


def settled(engine, person: int, key: str, kept: Kept | None) -> None:
    with engine.begin() as connection:
        settle(connection, person, key, kept)


def test_a_key_is_claimed_once_then_its_answer_is_replayed_for_the_same_request_only(engine, alice, bob):
    assert claimed(engine, alice, "k1", "p") == "claimed"
    assert claimed(engine, alice, "k1", "p") == "running"  # the first still runs
    assert claimed(engine, bob, "k1", "p") == "claimed"  # per caller: bob's k1 is another key
    settled(engine, alice, "k1", ANSWER)
    assert claimed(engine, alice, "k1", "p") == ANSWER
    assert claimed(engine, alice, "k1", "another request") == "other"


def test_a_released_key_runs_again(engine, alice):
    assert claimed(engine, alice, "k", "p") == "claimed"
    settled(engine, alice, "k", None)
    assert claimed(engine, alice, "k", "p") == "claimed"


def test_keys_past_24_hours_are_swept_and_an_abandoned_claim_is_taken_over(engine, alice, bob):
    assert claimed(engine, alice, "old", "p", NOW - timedelta(hours=24, seconds=1)) == "claimed"
    settled(engine, alice, "old", ANSWER)
    assert claimed(engine, bob, "other", "p") == "claimed"  # anyone's claim sweeps
    with engine.connect() as connection:
        assert connection.execute(select(idempotency_key.c.key)).scalars().all() == ["other"]
    assert claimed(engine, alice, "old", "another request") == "claimed"  # a new key now
    # a claim still running 5 minutes on died with its process; one of 4 minutes still runs
    assert claimed(engine, bob, "stuck", "p", NOW - timedelta(minutes=4)) == "claimed"
    assert claimed(engine, bob, "stuck", "p") == "running"
    assert claimed(engine, bob, "stuck", "p", NOW + timedelta(minutes=2)) == "claimed"


def test_the_same_request_is_the_same_whatever_the_bodys_order_or_spacing():
    same = fingerprint(incoming(username="jdoe", email="j@example.com"))
    assert fingerprint(incoming(email="j@example.com", username="jdoe")) == same
    assert fingerprint(incoming(username="jdoe", email="k@example.com")) != same
    assert fingerprint(incoming("PUT", username="jdoe", email="j@example.com")) != same
    assert fingerprint(incoming(uri="/v0.1/person/create?x=1", username="jdoe", email="j@example.com")) != same


@pytest.mark.parametrize(
    "who",
    [
        replace(USER, key_id=7, key_scopes=frozenset({"hook"})),  # an API key of the same account
        replace(USER, roles=frozenset()),  # the account, demoted since
        replace(USER, issuer="https://id.example.com", subject="jdoe"),  # its OpenID provider's token
    ],
)
def test_another_credential_or_other_roles_of_the_same_account_make_another_request(who):
    """A kept answer is replayed before the call is admitted: never to a credential that may
    not make the call, even with the key guessed."""
    assert fingerprint(incoming(principal=who, username="jdoe")) != fingerprint(incoming(username="jdoe"))


def test_a_caller_without_a_token_is_refused_the_header_before_anything_is_claimed():
    claims = []

    class Database:
        def write(self, work, *args):
            claims.append(work)
            return succeed(None)

    anonymous = replace(USER, anonymous=True)
    run = Idempotency(Database()).once(None, incoming(principal=anonymous), b"k", lambda: succeed(b""))
    with pytest.raises(BadRequest, match="needs a caller with a token"):
        run.send(None)
    assert claims == []


@pytest.mark.parametrize("sent", [b"", b"a b", b"x" * 256, "é".encode(), b"tab\there"])
def test_a_key_is_1_to_255_visible_ascii_characters(sent):
    with pytest.raises(BadRequest, match="1 to 255 visible ASCII"):
        valid_key(sent)
    assert valid_key(b"3f2a-9c0d_~!") == "3f2a-9c0d_~!" and len(valid_key(b"x" * 255)) == 255


@pytest.mark.parametrize("status, kept", [(200, True), (400, True), (404, True), (409, True), (412, True), (422, True),
                                          (401, False), (429, False), (500, False), (503, False)])  # fmt: skip
def test_answers_that_settle_the_request_are_kept_and_the_others_released(status, kept):
    assert settles(status) is kept


def test_a_claim_lost_to_another_process_in_between_is_running_and_leaves_the_transaction_whole(engine, alice):
    """Two daemons claim one key at once on PostgreSQL: neither sees the other's row, one insert
    wins and the other's hits the key (its savepoint rolled back, its transaction usable)."""
    if engine.dialect.name == "sqlite":
        pytest.skip("SQLite's writers take turns: the sweep's DELETE already holds the lock")

    raced = []

    def another_process_claims(connection, cursor, statement, *_):
        if statement.startswith("INSERT INTO idempotency_key") and not raced:
            raced.append(statement)
            with engine.begin() as other:
                other.execute(
                    insert(idempotency_key).values(
                        person_id=alice, key="race", fingerprint="p", state="running", claimed_at=NOW
                    )
                )

    event.listen(engine, "before_cursor_execute", another_process_claims)
    try:
        with engine.begin() as connection:
            assert claim(connection, alice, "race", "p", NOW) == "running"
            assert connection.execute(select(idempotency_key.c.key)).scalars().all() == ["race"]  # still usable
    finally:
        event.remove(engine, "before_cursor_execute", another_process_claims)
    assert raced
