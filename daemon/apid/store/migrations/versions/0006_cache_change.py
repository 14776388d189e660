"""cache_change: a change counter per controller, so that every daemon drops cached answers.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "cache_change",
        sa.Column("controller", sa.String(100), nullable=False),
        sa.Column("generation", sa.Integer, nullable=False),
        sa.PrimaryKeyConstraint("controller", name="pk_cache_change"),
    )


def downgrade() -> None:
    op.drop_table("cache_change")
