"""The tables a downgrade drops, and their rows: what `apid migrate --to`/`--down` shows before it
deletes data, and refuses to delete unconfirmed.

A revision's `downgrade()` is code: which tables it drops is known only by running it. It runs
once on the migration's connection and is rolled back (DDL is transactional on PostgreSQL and
on apid's SQLite connections, which begin their transactions themselves); the tables present
before and gone after are the ones it drops.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from sqlalchemy import Connection, func, inspect, select, table


@dataclass(frozen=True)
class DroppedTable:
    """A table a downgrade drops, and how many rows it held."""

    name: str
    rows: int

    def describe(self) -> str:
        return f"{self.name} ({self.rows} {'row' if self.rows == 1 else 'rows'})"


def describe_tables(tables: Iterable[DroppedTable]) -> str:
    """`directory_company (3 rows), directory_department (1 row)`."""
    return ", ".join(each.describe() for each in tables)


def tables_dropped_by(connection: Connection, run: Callable[[], object]) -> frozenset[str]:
    """The names of the tables `run` drops on `connection`, found by running it and rolling
    back: nothing it did stays, and the connection is left outside a transaction."""
    before = _table_names(connection)
    try:
        run()
        after = _table_names(connection)
    finally:
        connection.rollback()
    return frozenset(before - after)


def row_counts(connection: Connection, names: Iterable[str]) -> tuple[DroppedTable, ...]:
    """Each table's rows, sorted by the table's name."""
    return tuple(
        DroppedTable(name, connection.execute(select(func.count()).select_from(table(name))).scalar_one())
        for name in sorted(names)
    )


def _table_names(connection: Connection) -> set[str]:
    return set(inspect(connection).get_table_names())  # a new Inspector: nothing cached from before
