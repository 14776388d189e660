"""external_identity.vouched_at: when the provider last vouched for its subject.

A provider account's API keys are taken only while its provider vouches for the subject: a
token of the subject was admitted within the issuer's `keysLifetime` (apid.auth.standing).
Existing identities count as vouched for at the upgrade, so their keys get one more
`keysLifetime` for their owners to call once with a provider token.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-28
"""

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("external_identity") as batch:
        batch.add_column(sa.Column("vouched_at", sa.DateTime(timezone=True), nullable=True))
    identity = sa.table("external_identity", sa.column("vouched_at", sa.DateTime(timezone=True)))
    op.get_bind().execute(identity.update().values(vouched_at=datetime.now(UTC)))


def downgrade() -> None:
    with op.batch_alter_table("external_identity") as batch:
        batch.drop_column("vouched_at")
