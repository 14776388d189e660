"""person.username_key: the identity of a username by ASCII letter case, unique.

Before this, usernames were unique as typed and compared by lower() only in a check before the
write, so two concurrent creates of `Bob` and `bob` on PostgreSQL could both get in, and every
login scanned the whole table for lower(username). Each existing row gets the key of its name,
computed by the daemon's own `apid.auth.accounts.username_key`, so the keys are those the running
code looks up. Two existing names with one key stop the migration before it changes anything,
naming the rows: which account keeps the name is for an operator to decide, not a migration.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-28
"""

from apid.auth.accounts import username_key
from apid.store.unique_keys import FoldedKey

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

USERNAME_KEY = FoldedKey(
    revision,
    "person",
    "username",
    "username_key",
    64,
    username_key,
    clash="usernames are one name in another letter case",
    change="Rename or delete",
)


def upgrade() -> None:
    USERNAME_KEY.upgrade()


def downgrade() -> None:
    USERNAME_KEY.downgrade()
