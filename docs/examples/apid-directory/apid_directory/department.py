"""The `department` controller: departments, each in a company (`companyId`, an FKEY)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy.exc import IntegrityError

from apid.plugin import Call, Controller, InvalidFields, action
from apid.records import Record, delete_row, get_row, insert_row, list_rows, update_row
from apid_directory.store import department

CHANGEABLE = ("companyId", "name")


async def _write_in_company(call: Call, work: Callable[..., Record], *args: Any) -> Record:
    """A write naming a company that does not exist: the foreign key says 400."""
    try:
        return await call.write(work, *args)
    except IntegrityError:
        raise InvalidFields(errors=[{"field": "companyId", "reason": "is not the id of a company"}]) from None


class DepartmentController(Controller):
    name = "department"

    @action(requires=("companyId", "name"))
    async def create(self, call: Call) -> Record:
        values = {name: call.fields[name] for name in CHANGEABLE}
        return await _write_in_company(call, insert_row, department, values)

    @action(requires=("id",))
    async def show(self, call: Call) -> Record:
        return await self.services.db.read(get_row, department, call.fields["id"])

    @action
    async def list(self, call: Call) -> list[Record]:
        """A page of departments, of one company when `companyId` is sent."""
        company_id = call.fields.get("companyId")
        where = {} if company_id is None else {"companyId": company_id}
        return await self.services.db.read(list_rows, department, *call.page(), where)

    @action(requires=("id", "version"))
    async def update(self, call: Call) -> Record:
        changes = {name: call.fields[name] for name in CHANGEABLE if call.fields.get(name) is not None}
        return await _write_in_company(call, update_row, department, call.fields["id"], call.fields["version"], changes)

    @action(requires=("id",))
    async def delete(self, call: Call) -> Record:
        return await call.write(delete_row, department, call.fields["id"])
