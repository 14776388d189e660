"""A third-party plugin written last month from apid 0.1's docs, and frozen: never edit it to
follow a newer apid (docs/compatibility.md). Companies and their departments, in tables of
its own. Like many plugins of its time, its controllers keep their own `table` (a SQLAlchemy
Table) and `fields` (API name to column) as class attributes, names 0.1 gave no meaning to, and
its list actions read the paging fields themselves.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Column, ForeignKey, Integer, MetaData, String, Table, insert, select

from apid.plugin import Call, Controller, InvalidFields, NotFound, action

metadata = MetaData()
companies = Table(
    "directory_company",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("name", String(200), nullable=False),
)
departments = Table(
    "directory_department",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("company_id", Integer, ForeignKey("directory_company.id"), nullable=False),
    Column("name", String(200), nullable=False),
)


def _row(fields: dict[str, Any], row: Any) -> dict[str, Any]:
    return {name: row._mapping[column.name] for name, column in fields.items()}


def _page(call: Call) -> tuple[int, int]:
    offset = call.fields.get("offset") or 0
    limit = call.fields.get("max") or 10
    if offset < 0 or not 1 <= limit <= 100:
        raise InvalidFields(errors=[{"field": "max", "reason": "must be 1 to 100, with offset 0 or more"}])
    return offset, limit


class CompanyController(Controller):
    name = "company"
    table = companies
    fields = {"id": companies.c.id, "name": companies.c.name}  # noqa: RUF012 (frozen as written)

    @action
    async def create(self, call: Call) -> dict[str, Any]:
        def work(connection: Any) -> dict[str, Any]:
            new = connection.execute(insert(self.table).values(name=call.fields["name"]).returning(*self.table.c))
            return _row(self.fields, new.first())

        return await self.services.db.write(work)

    @action
    async def show(self, call: Call) -> dict[str, Any]:
        def work(connection: Any) -> dict[str, Any]:
            found = connection.execute(select(self.table).where(self.table.c.id == call.fields["id"])).first()
            if found is None:
                raise NotFound(f"no company with id {call.fields['id']}")
            return _row(self.fields, found)

        return await self.services.db.read(work)

    @action
    async def list(self, call: Call) -> list[dict[str, Any]]:
        offset, limit = _page(call)

        def work(connection: Any) -> list[dict[str, Any]]:
            rows = connection.execute(select(self.table).order_by(self.table.c.id).offset(offset).limit(limit))
            return [_row(self.fields, row) for row in rows]

        return await self.services.db.read(work)


class DepartmentController(Controller):
    name = "department"
    table = departments
    fields = {  # noqa: RUF012 (frozen as written)
        "id": departments.c.id,
        "companyId": departments.c.company_id,
        "name": departments.c.name,
    }

    @action
    async def create(self, call: Call) -> dict[str, Any]:
        def work(connection: Any) -> dict[str, Any]:
            values = {"company_id": call.fields["companyId"], "name": call.fields["name"]}
            return _row(
                self.fields, connection.execute(insert(self.table).values(values).returning(*self.table.c)).first()
            )

        return await self.services.db.write(work)

    @action
    async def list(self, call: Call) -> list[dict[str, Any]]:
        offset, limit = _page(call)

        def work(connection: Any) -> list[dict[str, Any]]:
            query = select(self.table).where(self.table.c.company_id == call.fields["companyId"])
            rows = connection.execute(query.order_by(self.table.c.id).offset(offset).limit(limit))
            return [_row(self.fields, row) for row in rows]

        return await self.services.db.read(work)
