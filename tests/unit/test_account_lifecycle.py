"""The one rule of apid.auth.lifecycle, driven by Hypothesis through an account's whole life
(register, validate, administrator disable/enable/lock, delete, password reset, logout,
sign-up again), against the real database functions on a SQLite file migrated with Alembic:
every credential the account was given (access token, refresh, API key, validation and reset
ids) is accepted iff the account is in the state the credential needs (active; a validation
id: pending) and the credential was issued after the account's last revocation."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule
from sqlalchemy import select

from apid.auth import onetime
from apid.auth.accounts import delete_account, update_account
from apid.auth.apikeys import NewKey, insert_key
from apid.auth.key_verifier import principal_of
from apid.auth.registration import enable_account, register_account, request_reset, reset_password
from apid.auth.sessions import revoke_person, start_family
from apid.auth.standing import standings_of
from apid.auth.tokens import Principal
from apid.store.database import make_engine, run_read, run_write
from apid.store.migrate import upgrade
from apid.store.tables import refresh_token

DAY = 86400
PENDING, ACTIVE, DISABLED, LOCKED, DELETED = "pending", "active", "disabled", "locked", "deleted"


def _pause() -> None:
    """Time moves between two steps, so that "issued after" is never a tie of the clock."""
    time.sleep(0.003)


class AccountLife(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self._folder = tempfile.TemporaryDirectory()
        self.engine = make_engine(f"sqlite:///{Path(self._folder.name) / 'apid.db'}")
        upgrade(self.engine)
        self.generation = 0
        self.person_id: int | None = None
        self.state = DELETED
        self.ids_seen: set[int] = set()
        # each: kind, value, person (id), needs (state), at (issued, epoch seconds), live (an id unused)
        self.credentials: list[dict] = []
        self.revoked_at = 0.0

    def teardown(self) -> None:
        self.engine.dispose()
        self._folder.cleanup()

    # --- the account's life ------------------------------------------------------------------

    def _mailed(self, kind: str, secret: str, needed: str) -> None:
        for held in self.credentials:  # a new id of a purpose replaces the earlier ones
            if held["kind"] == kind and held["person"] == self.person_id:
                held["live"] = False
        self.credentials.append(
            {"kind": kind, "value": secret, "person": self.person_id, "needs": needed, "at": time.time(), "live": True}
        )

    @precondition(lambda self: self.state == DELETED)
    @rule()
    def register(self) -> None:
        self.generation += 1
        name = f"user{self.generation}"
        outcome, secret, _ = run_write(
            self.engine, register_account, name, f"{name}@example.com", "not-a-hash", "ROLE_USER", DAY
        )
        assert outcome == "created" and secret is not None
        self.person_id = run_read(self.engine, lambda c: c.exec_driver_sql("SELECT max(id) FROM person").scalar())
        assert self.person_id not in self.ids_seen, "an id was given again"
        self.ids_seen.add(self.person_id)
        self.state, self.revoked_at = PENDING, 0.0
        self._mailed("validate", secret, PENDING)
        _pause()

    @precondition(lambda self: self.state != DELETED)
    @rule()
    def register_again(self) -> None:
        """The same name and address again: a fresh validation id only for a pending account;
        any other is left as it is, and nothing lets it switch itself back on."""
        name = f"user{self.generation}"
        outcome, secret, _ = run_write(
            self.engine, register_account, name, f"{name}@example.com", "other-hash", "ROLE_USER", DAY
        )
        if self.state == PENDING:
            assert outcome == "again" and secret is not None
            self._mailed("validate", secret, PENDING)
        else:
            assert (outcome, secret) == ("email-taken", None)
        _pause()

    @precondition(lambda self: self.state != DELETED)
    @rule()
    def validate(self) -> None:
        """Open the newest validation link, whether or not it is still good."""
        links = [held for held in self.credentials if held["kind"] == "validate" and held["person"] == self.person_id]
        if not links:
            return
        link = links[-1]
        expected = self._expected(link)
        assert run_write(self.engine, enable_account, link["value"]) is expected
        if expected:
            link["live"] = False
            self.state = ACTIVE
        _pause()

    def _administer(self, changes: dict, state: str) -> None:
        run_write(self.engine, update_account, self.person_id, changes, None, None, None)
        self.state = state
        _pause()

    @precondition(lambda self: self.state in (ACTIVE, LOCKED))
    @rule()
    def disable(self) -> None:
        self._administer({"enabled": False, "accountLocked": False}, DISABLED)

    @precondition(lambda self: self.state in (ACTIVE, DISABLED))
    @rule()
    def lock(self) -> None:
        self._administer({"enabled": True, "accountLocked": True}, LOCKED)

    @precondition(lambda self: self.state in (PENDING, DISABLED, LOCKED))
    @rule()
    def enable(self) -> None:
        """An administrator's enable: a pending sign-up is validated by it too."""
        self._administer({"enabled": True, "accountLocked": False}, ACTIVE)

    @precondition(lambda self: self.state != DELETED)
    @rule()
    def delete(self) -> None:
        run_write(self.engine, delete_account, self.person_id)
        self.state = DELETED
        _pause()

    @precondition(lambda self: self.state != DELETED)
    @rule()
    def forgot_password(self) -> None:
        found = run_write(self.engine, request_reset, f"user{self.generation}@example.com", DAY)
        assert (found is not None) is (self.state == ACTIVE)
        if found is not None:
            self._mailed("reset", found[0], ACTIVE)
        _pause()

    @precondition(lambda self: self.state != DELETED)
    @rule()
    def reset(self) -> None:
        """Use the newest reset id, whether or not it is still good: a used one ends every login."""
        links = [held for held in self.credentials if held["kind"] == "reset" and held["person"] == self.person_id]
        if not links:
            return
        link = links[-1]
        expected = self._expected(link)
        changed = run_write(self.engine, reset_password, link["value"], "new-hash")
        assert (changed is not None) is expected
        if expected:
            link["live"] = False
            self._revoke()

    def _revoke(self) -> None:
        run_write(self.engine, revoke_person, self.person_id)
        self.revoked_at = time.time()
        _pause()

    @precondition(lambda self: self.state != DELETED)
    @rule()
    def logout_everywhere(self) -> None:
        self._revoke()

    @precondition(lambda self: self.state == ACTIVE)
    @rule()
    def log_in(self) -> None:
        """A login's access token and refresh, as `/authenticate` gives them."""
        _, family = run_write(self.engine, start_family, self.person_id, DAY)
        name = f"user{self.generation}"
        token = Principal(self.person_id, name, frozenset({"ROLE_USER"}), "jti", 2**40, time.time(), session=family)
        self.credentials.append(
            {"kind": "access", "value": token, "person": self.person_id, "needs": ACTIVE, "at": token.issued_at}
        )
        self.credentials.append(
            {
                "kind": "refresh",
                "value": (token, family),
                "person": self.person_id,
                "needs": ACTIVE,
                "at": token.issued_at,
            }
        )
        _pause()

    @precondition(lambda self: self.state == ACTIVE)
    @rule()
    def make_key(self) -> None:
        record, _ = run_write(
            self.engine, insert_key, self.person_id, NewKey("k", frozenset({"ROLE_USER"}), None, None)
        )
        self.credentials.append(
            {
                "kind": "key",
                "value": principal_of(record),
                "person": self.person_id,
                "needs": ACTIVE,
                "at": record.date_created.timestamp(),
            }
        )
        _pause()

    # --- the rule ------------------------------------------------------------------------------

    def _expected(self, held: dict) -> bool:
        """Accepted iff the account is the credential's, in the state it needs, and the
        credential was issued after the account's last revocation (and is unused, for an id)."""
        return (
            held["person"] == self.person_id
            and self.state == held["needs"]
            and held["at"] > self.revoked_at
            and held.get("live", True)
        )

    @invariant()
    def every_credential_follows_its_account(self) -> None:
        for held in self.credentials:
            if held["kind"] in ("access", "key"):
                principal = held["value"]
                standing = run_read(self.engine, standings_of, [principal.user_id]).get(principal.user_id)
                accepted = standing is not None and standing.accepts(principal)
            elif held["kind"] == "refresh":
                accepted = self._refresh_accepted(held)
            else:
                accepted = run_read(self.engine, onetime.find_live, held["value"]) is not None
            assert accepted is self._expected(held), (held["kind"], self.state, accepted)

    def _refresh_accepted(self, held: dict) -> bool:
        """What `/refreshToken` decides before rotating: the login's access token as the account
        stands (`Standings.admit`), and the login's refresh family not revoked."""
        principal, family = held["value"]
        standing = run_read(self.engine, standings_of, [principal.user_id]).get(principal.user_id)
        revoked = run_read(
            self.engine,
            lambda c: c.execute(
                select(refresh_token.c.id).where(refresh_token.c.family == family, refresh_token.c.revoked_at.is_(None))
            ).first(),
        )
        return standing is not None and standing.accepts(principal) and revoked is not None


TestAccountLife = AccountLife.TestCase
TestAccountLife.settings = settings(max_examples=30, stateful_step_count=20, deadline=None)
