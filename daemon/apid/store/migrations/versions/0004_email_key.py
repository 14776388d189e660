"""person.email_key: the identity of an address by Unicode case fold, unique.

Each existing row gets the key of its address, computed by the daemon's own
`apid.auth.accounts.email_key`, so the keys are those the running code looks up. Two existing
addresses with one key (`ÄRGER@example.com` and `ärger@example.com`: the ASCII-only check
before this let both in) stop the migration before it changes anything, naming the rows:
which of the two is the person's is for an operator to decide, not for a migration to guess.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

import unicodedata

from apid.auth.accounts import email_key
from apid.store.unique_keys import FoldedKey

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def _shown(address: str) -> str:
    """The address quoted, and escaped too when it is decomposed (e + U+0301 looks like é)."""
    quoted = repr(address)
    return quoted if unicodedata.is_normalized("NFC", address) else f"{quoted} ({address!a})"


EMAIL_KEY = FoldedKey(
    revision,
    "person",
    "email",
    "email_key",
    384,
    email_key,
    clash="e-mail addresses are one address in another letter case or Unicode form",
    change="Change or delete",
    shown=_shown,
)


def upgrade() -> None:
    EMAIL_KEY.upgrade()


def downgrade() -> None:
    EMAIL_KEY.downgrade()
