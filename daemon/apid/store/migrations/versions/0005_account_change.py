"""Account standing shared by daemons: the account_change log, refresh tokens by revoked_at.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "account_change",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("person_id", sa.Integer, nullable=False),
        sa.Column("changed_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_account_change"),
    )
    op.create_index("ix_account_change_changed_at", "account_change", ["changed_at"])
    op.create_index("ix_refresh_token_revoked_at", "refresh_token", ["revoked_at"])


def downgrade() -> None:
    op.drop_index("ix_refresh_token_revoked_at", "refresh_token")
    op.drop_table("account_change")
