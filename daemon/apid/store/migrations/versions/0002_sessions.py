"""One-time account ids, refresh tokens, revoked access tokens, person.tokens_valid_after.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("person") as person:
        person.add_column(sa.Column("tokens_valid_after", sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        "account_token",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("person_id", sa.Integer, nullable=False),
        sa.Column("purpose", sa.String(16), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("date_created", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("used_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["person_id"], ["person.id"], name="fk_account_token_person_id_person", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_account_token"),
        sa.UniqueConstraint("token_hash", name="uq_account_token_token_hash"),
    )
    op.create_index("ix_account_token_person_id", "account_token", ["person_id"])
    op.create_table(
        "refresh_token",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("person_id", sa.Integer, nullable=False),
        sa.Column("family", sa.String(32), nullable=False),
        sa.Column("token_hash", sa.String(64), nullable=False),
        sa.Column("date_created", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("rotated_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["person_id"], ["person.id"], name="fk_refresh_token_person_id_person", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_refresh_token"),
        sa.UniqueConstraint("token_hash", name="uq_refresh_token_token_hash"),
    )
    op.create_index("ix_refresh_token_person_id", "refresh_token", ["person_id"])
    op.create_index("ix_refresh_token_family", "refresh_token", ["family"])
    op.create_table(
        "revoked_token",
        sa.Column("jti", sa.String(64), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("date_created", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("jti", name="pk_revoked_token"),
    )
    op.create_index("ix_revoked_token_date_created", "revoked_token", ["date_created"])


def downgrade() -> None:
    op.drop_table("revoked_token")
    op.drop_table("refresh_token")
    op.drop_table("account_token")
    with op.batch_alter_table("person") as person:
        person.drop_column("tokens_valid_after")
