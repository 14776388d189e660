"""The directory's tables, declared once.

This is their schema: types, keys, constraints. `apid migrate --generate directory -m "..."`
writes the next revision file from the difference between these declarations and the
database, and the revisions are what `apid migrate` runs. Each column's key is its IO State
field name (`company_id` is `companyId`), so that a row answers as the dict an action returns
and the units of work of `apid.records` work on these tables as they are.
"""

from __future__ import annotations

from sqlalchemy import Column, ForeignKey, Integer, MetaData, String, Table, UniqueConstraint, text

# Every constraint and index named after its table and columns, as the revisions name them.
metadata = MetaData(
    naming_convention={
        "pk": "pk_%(table_name)s",
        "uq": "uq_%(table_name)s_%(column_0_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s",
        "ix": "ix_%(column_0_label)s",
    }
)
company = Table(
    "directory_company",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(200), nullable=False),
    # apid's tables are migrated first, so a plugin's may reference them; an account may be
    # deleted at any time: the company outlives its creator's
    Column("created_by", Integer, ForeignKey("person.id", ondelete="SET NULL"), key="createdBy"),
    Column("version", Integer, nullable=False, server_default=text("0")),
    UniqueConstraint("name"),
    info={"record": "company"},  # how problems name a record: "no company with id 7"
)
department = Table(
    "directory_department",
    metadata,
    Column("id", Integer, primary_key=True),
    Column(
        "company_id",
        Integer,
        ForeignKey("directory_company.id", ondelete="CASCADE"),
        nullable=False,
        index=True,
        key="companyId",
    ),
    Column("name", String(200), nullable=False),
    Column("version", Integer, nullable=False, server_default=text("0")),
    info={"record": "department"},
)
