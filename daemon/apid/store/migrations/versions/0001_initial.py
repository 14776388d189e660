"""The accounts (person, role, person_role) and the specification's hook table.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "person",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("version", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("username", sa.String(64), nullable=False),
        sa.Column("password", sa.String(255), nullable=False),
        sa.Column("email", sa.String(254), nullable=False),
        sa.Column("enabled", sa.Boolean, nullable=False, server_default=sa.text("'1'")),
        sa.Column("account_locked", sa.Boolean, nullable=False, server_default=sa.text("'0'")),
        sa.Column("account_expired", sa.Boolean, nullable=False, server_default=sa.text("'0'")),
        sa.Column("password_expired", sa.Boolean, nullable=False, server_default=sa.text("'0'")),
        sa.Column("date_created", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("last_updated", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.PrimaryKeyConstraint("id", name="pk_person"),
        sa.UniqueConstraint("username", name="uq_person_username"),
        sa.UniqueConstraint("email", name="uq_person_email"),
    )
    op.create_table(
        "role",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("authority", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_role"),
        sa.UniqueConstraint("authority", name="uq_role_authority"),
    )
    op.create_table(
        "person_role",
        sa.Column("person_id", sa.Integer, nullable=False),
        sa.Column("role_id", sa.Integer, nullable=False),
        sa.ForeignKeyConstraint(
            ["person_id"], ["person.id"], name="fk_person_role_person_id_person", ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(["role_id"], ["role.id"], name="fk_person_role_role_id_role", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("person_id", "role_id", name="pk_person_role"),
    )
    op.create_table(
        "hook",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("version", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("attempts", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.Column("date_created", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("format", sa.String(16), nullable=False, server_default=sa.text("'JSON'")),
        sa.Column("last_modified", sa.DateTime(timezone=True), nullable=False, server_default=sa.func.now()),
        sa.Column("user_id", sa.Integer, nullable=False),
        sa.Column("is_enabled", sa.Boolean, nullable=False, server_default=sa.text("'1'")),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("service", sa.String(255), nullable=False),
        sa.Column("secret", sa.String(255), nullable=True),
        sa.ForeignKeyConstraint(["user_id"], ["person.id"], name="fk_hook_user_id_person", ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name="pk_hook"),
    )
    op.create_index("ix_hook_user_id", "hook", ["user_id"])


def downgrade() -> None:
    op.drop_index("ix_hook_user_id", table_name="hook")
    op.drop_table("hook")
    op.drop_table("person_role")
    op.drop_table("role")
    op.drop_table("person")
