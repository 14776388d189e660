"""mail_outbox: mail written with the change that implies it, sent after commit.

A change that mails (a notice, a validation or reset link) writes its message here in its own
transaction (apid.mail.outbox.queue_mail); a daemon leases it, sends it and deletes the row.
A hang-up, a crash or a SIGKILL after commit loses nothing: the row waits for the next sender.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-28
"""

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "mail_outbox",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("recipient", sa.String(320), nullable=False),
        sa.Column("subject", sa.Text, nullable=False),
        sa.Column("body", sa.Text, nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("tries", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("next_attempt_at", sa.Float, nullable=False),
        sa.Column("lease_owner", sa.String(64), nullable=True),
        sa.Column("lease_until", sa.Float, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_mail_outbox"),
    )
    op.create_index("ix_mail_outbox_state_next_attempt_at", "mail_outbox", ["state", "next_attempt_at"])


def downgrade() -> None:
    op.drop_table("mail_outbox")
