"""idempotency_key: the first answer to a caller's Idempotency-Key, kept for 24 hours.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "idempotency_key",
        sa.Column("person_id", sa.Integer(), nullable=False),
        sa.Column("key", sa.String(length=255), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("state", sa.String(length=8), nullable=False),
        sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("status", sa.Integer(), nullable=True),
        sa.Column("headers", sa.Text(), nullable=True),
        sa.Column("body", sa.LargeBinary(), nullable=True),
        sa.ForeignKeyConstraint(
            ["person_id"], ["person.id"], name="fk_idempotency_key_person_id_person", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("person_id", "key", name="pk_idempotency_key"),
    )
    op.create_index("ix_idempotency_key_claimed_at", "idempotency_key", ["claimed_at"])


def downgrade() -> None:
    op.drop_index("ix_idempotency_key_claimed_at", table_name="idempotency_key")
    op.drop_table("idempotency_key")
