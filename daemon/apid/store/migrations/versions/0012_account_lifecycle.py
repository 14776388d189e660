"""account lifecycle: pending accounts apart from disabled ones, ids never reused.

`person.validated_at` (null: pending, a sign-up never validated) tells a sign-up waiting for
its link from an account an administrator disabled, which `enabled` alone could not: a
disabled account's owner could register again and validate it back on (apid.auth.lifecycle).
An existing disabled account with an unused, unexpired validation id is pending; every other
account was validated when it was made.

On SQLite, `person`, `api_key` and `hook` are rebuilt with AUTOINCREMENT, so that the id of a
deleted row is never given again (a deleted provider account's token reached the next
sign-up, which got its id); `person`'s sequence starts past the ids of accounts deleted in the
last hour too (`account_change` keeps them). PostgreSQL's sequences never give an id twice.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-28
"""

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

REBUILT = ("person", "api_key", "hook")


def _pending_ids(connection: sa.Connection) -> set[int]:
    """Disabled accounts holding a validation id still good: sign-ups waiting for their link."""
    now = datetime.now(UTC)
    rows = connection.execute(
        sa.text(
            "SELECT t.person_id, t.expires_at FROM account_token t JOIN person p ON p.id = t.person_id "
            "WHERE t.purpose = 'validate' AND t.used_at IS NULL AND p.enabled = :off"
        ).bindparams(sa.bindparam("off", False, sa.Boolean)),
    )
    pending = set()
    for person_id, expires_at in rows:
        if isinstance(expires_at, str):  # SQLite without the column's type: its stored text
            expires_at = datetime.fromisoformat(expires_at)
        if (expires_at if expires_at.tzinfo else expires_at.replace(tzinfo=UTC)) > now:
            pending.add(person_id)
    return pending


def upgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    for name in REBUILT:
        with op.batch_alter_table(
            name, recreate="always" if sqlite else "auto", table_kwargs={"sqlite_autoincrement": True}
        ) as batch:
            if name == "person":
                batch.add_column(
                    sa.Column("validated_at", sa.DateTime(timezone=True), nullable=True, server_default=sa.func.now())
                )
    connection = op.get_bind()
    person = sa.table("person", sa.column("id", sa.Integer), sa.column("validated_at"), sa.column("date_created"))
    connection.execute(person.update().values(validated_at=person.c.date_created))
    pending = _pending_ids(connection)
    if pending:
        connection.execute(person.update().where(person.c.id.in_(sorted(pending))).values(validated_at=None))
    if sqlite:
        _past_deleted_ids(connection)


def _past_deleted_ids(connection: sa.Connection) -> None:
    """Start `person`'s sequence past every id its rows or its recent deletions used."""
    highest = connection.execute(
        sa.text(
            "SELECT MAX(id) FROM (SELECT MAX(id) AS id FROM person UNION ALL SELECT MAX(person_id) FROM account_change)"
        )
    ).scalar()
    if highest is None:
        return
    connection.execute(sa.text("DELETE FROM sqlite_sequence WHERE name = 'person'"))
    connection.execute(sa.text("INSERT INTO sqlite_sequence (name, seq) VALUES ('person', :seq)"), {"seq": highest})


def downgrade() -> None:
    sqlite = op.get_bind().dialect.name == "sqlite"
    for name in REBUILT:
        with op.batch_alter_table(name, recreate="always" if sqlite else "auto") as batch:
            if name == "person":
                batch.drop_column("validated_at")
