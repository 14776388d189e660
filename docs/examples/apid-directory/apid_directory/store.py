"""The directory's tables as its code sees them.

The tables' schema (types, keys, constraints) is the migrations'; here each column's key is
its IO State field name, so that a row answers as the dict an action returns, and the units
of work of `apid.records` (create, show, list, update, delete) work on them as they are.
"""

from __future__ import annotations

from sqlalchemy import Column, Integer, MetaData, String, Table

metadata = MetaData()
company = Table(
    "directory_company",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(200)),
    Column("created_by", Integer, key="createdBy"),
    Column("version", Integer),
    info={"record": "company"},  # how problems name a record: "no company with id 7"
)
department = Table(
    "directory_department",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("company_id", Integer, key="companyId"),
    Column("name", String(200)),
    Column("version", Integer),
    info={"record": "department"},
)
