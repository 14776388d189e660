"""account_token.address: the e-mail address an emailed id is about.

An owner's change of e-mail address mails two ids: to the new address, a confirmation that
makes the change (when `accounts.confirmEmailChange` is on), and to the old one, a link that
puts the old address back and ends every session. Each id carries the address it will set.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-27
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("account_token") as batch:
        batch.add_column(sa.Column("address", sa.String(254), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("account_token") as batch:
        batch.drop_column("address")
