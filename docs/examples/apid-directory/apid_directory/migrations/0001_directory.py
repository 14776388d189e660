"""The directory: companies, each with its departments.

Revision ID: 0001
Revises:
Create Date: 2026-11-23
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "directory_company",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("created_by", sa.Integer, nullable=True),
        sa.Column("version", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.PrimaryKeyConstraint("id", name="pk_directory_company"),
        sa.UniqueConstraint("name", name="uq_directory_company_name"),
        # apid's tables are migrated first, so a plugin's may reference them
        sa.ForeignKeyConstraint(
            ["created_by"], ["person.id"], name="fk_directory_company_created_by", ondelete="SET NULL"
        ),
    )
    op.create_table(
        "directory_department",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("company_id", sa.Integer, nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("version", sa.Integer, nullable=False, server_default=sa.text("0")),
        sa.PrimaryKeyConstraint("id", name="pk_directory_department"),
        sa.ForeignKeyConstraint(
            ["company_id"], ["directory_company.id"], name="fk_directory_department_company_id", ondelete="CASCADE"
        ),
    )
    op.create_index("ix_directory_department_company_id", "directory_department", ["company_id"])


def downgrade() -> None:
    op.drop_table("directory_department")
    op.drop_table("directory_company")
