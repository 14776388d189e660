"""iostate_change, iostate_report: a deployment-wide IO State generation that every daemon
process watches and reloads on, and each process's report of its last reload.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "iostate_change",
        sa.Column("id", sa.Integer, autoincrement=False, nullable=False),
        sa.Column("generation", sa.Integer, nullable=False),
        sa.Column("changed_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_iostate_change"),
    )
    op.create_table(
        "iostate_report",
        sa.Column("who", sa.String(300), nullable=False),
        sa.Column("generation", sa.Integer, nullable=False),
        sa.Column("outcome", sa.Text, nullable=False),
        sa.Column("tried_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("who", name="pk_iostate_report"),
    )


def downgrade() -> None:
    op.drop_table("iostate_report")
    op.drop_table("iostate_change")
