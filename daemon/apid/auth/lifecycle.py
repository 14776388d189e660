"""An account's lifecycle, and the one rule every credential of it is decided by.

    pending (registered, never validated) -> active -> disabled / locked / expired -> deleted

`person.enabled` alone cannot tell a sign-up waiting for its validation link from an account an
administrator switched off; `person.validated_at` (null: pending) does. Accounts made by the
command line, an administrator's `person/create` or a provider's first token are validated at
once. Only a pending account is validated by a `/validate` link or given a new one by `/register`.

The rule: a credential (access or refresh token, API key, provider token, mailed id) is accepted
only while its account is in the state the credential needs (`ACTIVE` for all but a validation
id, which needs `PENDING`) and only if it was issued after the account's last revocation
(`person.tokens_valid_after`: a password reset or change, an address reverted, every session
ended); a revert link alone outlives revocations (`apid.auth.onetime.OUTLIVES_REVOCATION`).
Disabling, locking or expiring an account suspends its credentials; they are not
revocations, so an administrator's re-enable brings back those not revoked meanwhile.
"""

from __future__ import annotations

import enum
from datetime import UTC, datetime
from typing import Any


class State(enum.Enum):
    PENDING = "pending"
    ACTIVE = "active"
    DISABLED = "disabled"
    LOCKED = "locked"
    EXPIRED = "expired"
    DELETED = "deleted"


def state_of(row: Any) -> State:
    """The state of a `person` row (None: deleted), from its `validated_at`, `enabled`,
    `account_locked` and `account_expired` columns."""
    if row is None:
        return State.DELETED
    if row.validated_at is None:
        return State.PENDING
    if not row.enabled:
        return State.DISABLED
    if row.account_locked:
        return State.LOCKED
    if row.account_expired:
        return State.EXPIRED
    return State.ACTIVE


def epoch(moment: datetime | None) -> float:
    """A stored moment in epoch seconds (SQLite gives it back naive, in UTC); None: 0."""
    if moment is None:
        return 0.0
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).timestamp()


def revoked_before(row: Any) -> float:
    """When the account's credentials were last revoked (epoch seconds; 0: never)."""
    return epoch(row.tokens_valid_after)


def accepts(state: State, needed: State, issued_at: float, valid_after: float) -> bool:
    """The one rule: a credential needing `needed`, issued at `issued_at`, is good while the
    account is in that state and the credential follows its last revocation (`valid_after`)."""
    return state is needed and issued_at >= valid_after
