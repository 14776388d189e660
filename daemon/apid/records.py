"""Units of work over a plugin's own table: create, show, list, update and delete a record.

Each is a plain function of a SQLAlchemy connection, for `services.db.read(...)` or
`call.write(...)`: `call.write(insert_row, company, {"name": "Acme"})`. They expect a table
whose columns are keyed by their IO State field names (`Column("company_id", Integer,
key="companyId")`), with an integer `id` primary key and, for `update_row`, an integer
`version` column, so that a row answers as the dict an action returns. A missing record is a
404 and a change as of an old version a 409, named by `table.info["record"]` (default: the
table's name).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Connection, Label, Table, delete, insert, select, update

from apid.problems import Conflict, NotFound

Record = dict[str, Any]

__all__ = ["Record", "delete_row", "get_row", "insert_row", "list_rows", "update_row"]


def _fields(table: Table) -> list[Label[Any]]:
    return [column.label(str(column.key)) for column in table.columns]  # str: a plain JSON key


def _noun(table: Table) -> str:
    return str(table.info.get("record", table.name))  # info is untyped; the noun only fills messages


def _missing(table: Table, record_id: int) -> NotFound:
    return NotFound(f"no {_noun(table)} with id {record_id}")


def insert_row(connection: Connection, table: Table, values: Mapping[str, Any]) -> Record:
    return dict(connection.execute(insert(table).values(**values).returning(*_fields(table))).one()._mapping)


def get_row(connection: Connection, table: Table, record_id: int) -> Record:
    row = connection.execute(select(*_fields(table)).where(table.c.id == record_id)).first()
    if row is None:
        raise _missing(table, record_id)
    return dict(row._mapping)


def list_rows(
    connection: Connection, table: Table, offset: int, limit: int, where: Mapping[str, Any] | None = None
) -> list[Record]:
    """A page of records by id, those whose fields equal `where`'s values."""
    query = select(*_fields(table)).order_by(table.c.id).offset(offset).limit(limit)
    for name, value in (where or {}).items():
        query = query.where(table.c[name] == value)
    return [dict(row._mapping) for row in connection.execute(query)]


def update_row(
    connection: Connection, table: Table, record_id: int, version: int, changes: Mapping[str, Any]
) -> Record:
    """Change a record as of the version its caller read: a change made since then is a 409,
    never overwritten."""
    changed = connection.execute(
        update(table)
        .where(table.c.id == record_id, table.c.version == version)
        .values(**changes, version=table.c.version + 1)
        .returning(*_fields(table))
    ).first()
    if changed is None:
        current = connection.execute(select(table.c.version).where(table.c.id == record_id)).scalar()
        if current is None:
            raise _missing(table, record_id)
        raise Conflict(
            f"{_noun(table)} {record_id} was changed meanwhile (version {current}, you sent {version})",
            currentVersion=current,
        )
    return dict(changed._mapping)


def delete_row(connection: Connection, table: Table, record_id: int) -> Record:
    """Delete a record; it answers as it was, so that webhook subscribers learn what went."""
    deleted = connection.execute(delete(table).where(table.c.id == record_id).returning(*_fields(table))).first()
    if deleted is None:
        raise _missing(table, record_id)
    return dict(deleted._mapping)
