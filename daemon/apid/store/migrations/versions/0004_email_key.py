"""person.email_key: the identity of an address by Unicode case fold, unique.

Each existing row gets the key of its address, computed by the daemon's own
`apid.accounts.email_key`, so the keys are those the running code looks up. Two existing
addresses with one key (`ÄRGER@example.com` and `ärger@example.com`: the ASCII-only check
before this let both in) stop the migration before it changes anything, naming the rows:
which of the two is the person's is for an operator to decide, not for a migration to guess.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

import unicodedata

import sqlalchemy as sa
from alembic import op

from apid.accounts import email_key
from apid.store.migrate import MigrationRefused

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

person = sa.table("person", sa.column("id", sa.Integer), sa.column("email", sa.String), sa.column("email_key", sa.String))


def _shown(address: str) -> str:
    """The address quoted, and escaped too when it is decomposed (e + U+0301 looks like é)."""
    quoted = repr(address)
    return quoted if unicodedata.is_normalized("NFC", address) else f"{quoted} ({ascii(address)})"


def _keys(connection: sa.Connection) -> dict[int, str]:
    """The key of every row's address; refuses with every collision listed."""
    rows = connection.execute(sa.select(person.c.id, person.c.email).order_by(person.c.id)).all()
    holders: dict[str, list[tuple[int, str]]] = {}
    for person_id, address in rows:
        holders.setdefault(email_key(address), []).append((person_id, address))
    clashes = [held for held in holders.values() if len(held) > 1]
    if clashes:
        listed = "\n".join(
            "  " + ", ".join(f"person {person_id} {_shown(address)}" for person_id, address in held) for held in clashes)
        raise MigrationRefused(
            "migration 0004 (person.email_key): these accounts' e-mail addresses are one address "
            "in another letter case or Unicode form, and must be made distinct first:\n"
            f"{listed}\n"
            "Change or delete all but one of each group (UPDATE person SET email = ... WHERE id = ...), "
            "then migrate again. Nothing was changed.")
    return {person_id: key for key, held in holders.items() for person_id, _ in held}


def upgrade() -> None:
    connection = op.get_bind()
    keys = _keys(connection)  # before any change: a refusal leaves the schema as it was
    with op.batch_alter_table("person") as batch:
        batch.add_column(sa.Column("email_key", sa.String(384), nullable=True))
    if keys:
        connection.execute(
            sa.update(person).where(person.c.id == sa.bindparam("row_id")).values(email_key=sa.bindparam("key")),
            [{"row_id": person_id, "key": key} for person_id, key in keys.items()],
        )
    with op.batch_alter_table("person") as batch:
        batch.alter_column("email_key", existing_type=sa.String(384), nullable=False)
        batch.create_unique_constraint("uq_person_email_key", ["email_key"])


def downgrade() -> None:
    with op.batch_alter_table("person") as batch:
        batch.drop_constraint("uq_person_email_key", type_="unique")
        batch.drop_column("email_key")
