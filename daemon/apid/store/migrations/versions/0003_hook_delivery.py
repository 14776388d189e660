"""Webhook delivery: the hook's rotation, backoff and disabling columns, the outbox, the log.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("hook") as hook:
        hook.add_column(sa.Column("previous_secret", sa.String(255), nullable=True))
        hook.add_column(sa.Column("previous_secret_expires", sa.Float, nullable=True))
        hook.add_column(sa.Column("retry_at", sa.Float, nullable=True))
        hook.add_column(sa.Column("disabled_reason", sa.Text, nullable=True))
    op.create_table(
        "hook_message",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("hook_id", sa.Integer, nullable=False),
        sa.Column("type", sa.String(255), nullable=False),
        sa.Column("payload", sa.Text, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("tries", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("lease_owner", sa.String(64), nullable=True),
        sa.Column("lease_until", sa.Float, nullable=True),
        sa.Column("delivered_at", sa.Float, nullable=True),
        sa.ForeignKeyConstraint(["hook_id"], ["hook.id"], name="fk_hook_message_hook_id_hook", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_hook_message"),
    )
    op.create_index("ix_hook_message_hook_id", "hook_message", ["hook_id"])
    op.create_index("ix_hook_message_state_created_at", "hook_message", ["state", "created_at"])
    op.create_table(
        "hook_attempt",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("message_id", sa.String(40), nullable=False),
        sa.Column("hook_id", sa.Integer, nullable=False),
        sa.Column("attempted_at", sa.Float, nullable=False),
        sa.Column("status_code", sa.Integer, nullable=True),
        sa.Column("duration_ms", sa.Float, nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.ForeignKeyConstraint(
            ["message_id"], ["hook_message.id"], name="fk_hook_attempt_message_id_hook_message", ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(["hook_id"], ["hook.id"], name="fk_hook_attempt_hook_id_hook", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_hook_attempt"),
    )
    op.create_index("ix_hook_attempt_message_id", "hook_attempt", ["message_id"])
    op.create_index("ix_hook_attempt_hook_id", "hook_attempt", ["hook_id"])


def downgrade() -> None:
    op.drop_table("hook_attempt")
    op.drop_table("hook_message")
    with op.batch_alter_table("hook") as hook:
        for name in ("disabled_reason", "retry_at", "previous_secret_expires", "previous_secret"):
            hook.drop_column(name)
