"""Companies and their departments.

Revision ID: 0001
Revises:
Create Date: 2026-10-28
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
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
    )
    op.create_table(
        "directory_department",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("company_id", sa.Integer, sa.ForeignKey("directory_company.id"), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("directory_department")
    op.drop_table("directory_company")
