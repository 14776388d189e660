"""external_identity: the account of each subject of a trusted OpenID provider.

A token of a provider in `security.issuers` acts as its subject's own `person`, made on the
subject's first call (apid.auth.identities); this table ties the provider's issuer and `sub`
to that account, one account per pair. Deleting the account deletes the tie.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "external_identity",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("issuer", sa.String(1024), nullable=False),
        sa.Column("subject", sa.String(255), nullable=False),
        sa.Column("person_id", sa.Integer, nullable=False),
        sa.Column("date_created", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["person_id"], ["person.id"], name="fk_external_identity_person_id_person", ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name="pk_external_identity"),
        sa.UniqueConstraint("issuer", "subject", name="uq_external_identity_issuer"),
        sa.UniqueConstraint("person_id", name="uq_external_identity_person_id"),
    )


def downgrade() -> None:
    op.drop_table("external_identity")
