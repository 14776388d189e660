"""A column holding a folded key of another, unique: the identity two spellings share.

`person.email_key` (migration 0004) and `person.username_key` (0009) are added alike: every
existing row gets the key the daemon's own fold gives its value, so the keys are those the
running code looks up; values that fold alike stop the migration before it changes anything,
listing the rows, since which of them keeps the value is for an operator to decide.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import sqlalchemy as sa
from alembic import op

from apid.store.migrate import MigrationRefused


@dataclass(frozen=True)
class FoldedKey:
    """`key` of `table` holds `fold(source)`, `length` characters at most, unique."""

    revision: str
    table: str
    source: str
    key: str
    length: int
    fold: Callable[[str], str]
    clash: str  # what rows folding alike are, in the refusal: "usernames are one name in another letter case"
    change: str  # what the operator does to all but one of them: "Rename or delete"
    shown: Callable[[str], str] = repr  # a value as the refusal quotes it

    @property
    def constraint(self) -> str:
        return f"uq_{self.table}_{self.key}"

    def _rows(self) -> sa.TableClause:
        return sa.table(
            self.table, sa.column("id", sa.Integer), sa.column(self.source, sa.String), sa.column(self.key, sa.String)
        )

    def _keys(self, connection: sa.Connection) -> dict[int, str]:
        """The key of every row; refuses with every clash listed."""
        rows = self._rows()
        found = connection.execute(sa.select(rows.c.id, rows.c[self.source]).order_by(rows.c.id)).all()
        holders: dict[str, list[tuple[int, str]]] = {}
        for row_id, value in found:
            holders.setdefault(self.fold(value), []).append((row_id, value))
        clashes = [held for held in holders.values() if len(held) > 1]
        if clashes:
            listed = "\n".join(
                "  " + ", ".join(f"{self.table} {row_id} {self.shown(value)}" for row_id, value in held)
                for held in clashes
            )
            raise MigrationRefused(
                f"migration {self.revision} ({self.table}.{self.key}): these accounts' {self.clash}, "
                f"and must be made distinct first:\n{listed}\n"
                f"{self.change} all but one of each group "
                f"(UPDATE {self.table} SET {self.source} = ... WHERE id = ...), "
                "then migrate again. Nothing was changed."
            )
        return {row_id: key for key, held in holders.items() for row_id, _ in held}

    def upgrade(self) -> None:
        connection = op.get_bind()
        keys = self._keys(connection)  # before any change: a refusal leaves the schema as it was
        with op.batch_alter_table(self.table) as batch:
            batch.add_column(sa.Column(self.key, sa.String(self.length), nullable=True))
        if keys:
            rows = self._rows()
            connection.execute(
                sa.update(rows).where(rows.c.id == sa.bindparam("row_id")).values({self.key: sa.bindparam("folded")}),
                [{"row_id": row_id, "folded": key} for row_id, key in keys.items()],
            )
        with op.batch_alter_table(self.table) as batch:
            batch.alter_column(self.key, existing_type=sa.String(self.length), nullable=False)
            batch.create_unique_constraint(self.constraint, [self.key])

    def downgrade(self) -> None:
        with op.batch_alter_table(self.table) as batch:
            batch.drop_constraint(self.constraint, type_="unique")
            batch.drop_column(self.key)
