"""change_event and stream_ticket: the live event stream's log of changes, and its tickets.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-29
"""

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "change_event",
        sa.Column("position", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("message_id", sa.String(length=40), nullable=False),
        sa.Column("service", sa.String(length=255), nullable=False),
        sa.Column("record", sa.Text(), nullable=False),
        sa.Column("created_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("position", name="pk_change_event"),
        sqlite_autoincrement=True,
    )
    op.create_index("ix_change_event_created_at", "change_event", ["created_at"])
    op.create_table(
        "stream_ticket",
        sa.Column("digest", sa.String(length=64), nullable=False),
        sa.Column("principal", sa.Text(), nullable=False),
        sa.Column("expires_at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("digest", name="pk_stream_ticket"),
    )
    op.create_index("ix_stream_ticket_expires_at", "stream_ticket", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_stream_ticket_expires_at", table_name="stream_ticket")
    op.drop_table("stream_ticket")
    op.drop_index("ix_change_event_created_at", table_name="change_event")
    op.drop_table("change_event")
