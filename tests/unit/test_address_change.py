"""The units of work behind the links of an owner's address change (issue 25, item 1), on a
real SQLite file migrated with Alembic: what each link sets, that it works once, and what a
revert does when another account took the old address meanwhile."""

from __future__ import annotations

import pytest
from sqlalchemy import select, update

from apid.auth import onetime
from apid.auth.accounts import email_key, get_account
from apid.auth.address_change import confirm_address, revert_address, revert_id
from apid.problems import Conflict
from apid.store.database import run_read, run_write
from apid.store.tables import person

DAY = 86400


def address(engine, person_id: int) -> str:
    return run_read(engine, lambda c: get_account(c, person_id).email)


def set_address(engine, person_id: int, value: str) -> None:
    run_write(
        engine,
        lambda c: c.execute(
            update(person).where(person.c.id == person_id).values(email=value, email_key=email_key(value))
        ),
    )


def test_a_confirmation_sets_the_address_once_and_issues_the_way_back(engine, alice):
    old = address(engine, alice)
    secret = run_write(engine, onetime.issue, alice, onetime.EMAIL_CONFIRM, DAY, "alice@new.example")
    account, was, revert = run_write(engine, confirm_address, secret, DAY, None)
    assert (account.email, was, address(engine, alice)) == ("alice@new.example", old, "alice@new.example")
    live = run_read(engine, onetime.find_live, revert)
    assert (live.purpose, live.address) == (onetime.EMAIL_REVERT, old)
    assert run_write(engine, confirm_address, secret, DAY, None) is None


def test_a_confirmation_of_an_address_taken_meanwhile_is_a_conflict_and_changes_nothing(engine, alice, bob):
    before = address(engine, alice)
    secret = run_write(engine, onetime.issue, alice, onetime.EMAIL_CONFIRM, DAY, "shared@example.org")
    set_address(engine, bob, "SHARED@example.org")
    with pytest.raises(Conflict):
        run_write(engine, confirm_address, secret, DAY, None)
    assert address(engine, alice) == before
    # the transaction rolled back: the id is still unused
    assert run_read(engine, onetime.find_live, secret) is not None


def test_a_revert_puts_the_address_back_ends_the_sessions_and_issues_a_reset(engine, alice):
    old = address(engine, alice)
    set_address(engine, alice, "thief@example.test")
    secret = run_write(engine, onetime.issue, alice, onetime.EMAIL_REVERT, DAY, old)
    pending = run_write(engine, onetime.issue, alice, onetime.EMAIL_CONFIRM, DAY, "next@example.test")
    reverted = run_write(engine, revert_address, secret, 3600, None)
    assert reverted.person_id == alice and address(engine, alice) == old
    assert (
        run_read(engine, lambda c: c.execute(select(person.c.tokens_valid_after).where(person.c.id == alice)).scalar())
        is not None
    )
    assert run_read(engine, onetime.find_live, reverted.reset_secret).purpose == onetime.RESET
    assert run_read(engine, onetime.find_live, pending) is None  # a pending confirmation dies with it
    assert run_write(engine, revert_address, secret, 3600, None) is None


def test_a_revert_to_an_address_another_account_took_still_ends_the_sessions(engine, alice, bob):
    old = address(engine, alice)
    set_address(engine, alice, "thief@example.test")
    set_address(engine, bob, old.upper())
    secret = run_write(engine, onetime.issue, alice, onetime.EMAIL_REVERT, DAY, old)
    reverted = run_write(engine, revert_address, secret, 3600, None)
    assert address(engine, alice) == "thief@example.test"
    assert (
        run_read(engine, lambda c: c.execute(select(person.c.tokens_valid_after).where(person.c.id == alice)).scalar())
        is not None
    )
    assert run_read(engine, onetime.find_live, reverted.reset_secret) is not None


def test_the_reset_page_link_keeps_the_pages_own_query():
    assert onetime.page("https://app.test/reset", "s3cr3t") == "https://app.test/reset?id=s3cr3t"
    assert onetime.page("https://app.test/reset?from=mail", "a b") == "https://app.test/reset?from=mail&id=a+b"


def test_a_second_change_and_its_revert_cannot_take_the_first_addresss_way_back(engine, alice):
    """Someone holding the password moves alice@ to b@, then b@ to c@, then opens the link
    mailed to b@ (their own): alice@'s link must still work, and undo everything after it."""
    original = address(engine, alice)
    set_address(engine, alice, "b@attacker.test")
    first = run_write(engine, revert_id, alice, DAY, original)  # mailed to alice@
    set_address(engine, alice, "c@attacker.test")
    second = run_write(engine, revert_id, alice, DAY, "b@attacker.test")  # mailed to b@
    assert run_read(engine, onetime.find_live, first) is not None  # the later change kept it

    run_write(engine, revert_address, second, 3600, None)
    assert address(engine, alice) == "b@attacker.test"
    assert run_read(engine, onetime.find_live, first) is not None  # an earlier link survives a later one's use

    run_write(engine, revert_address, first, 3600, None)
    assert address(engine, alice) == original


def test_reverting_a_change_withdraws_the_links_of_the_changes_after_it(engine, alice):
    original = address(engine, alice)
    first = run_write(engine, revert_id, alice, DAY, original)
    later = run_write(engine, revert_id, alice, DAY, "b@attacker.test")
    run_write(engine, revert_address, first, 3600, None)
    assert address(engine, alice) == original
    assert run_read(engine, onetime.find_live, later) is None
    assert run_write(engine, revert_address, later, 3600, None) is None
