"""The `company` controller: companies, each named once, each remembering who created it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy.exc import IntegrityError

from apid.plugin import Call, Conflict, Controller, action
from apid.records import Record, delete_row, get_row, insert_row, list_rows, update_row
from apid_directory.store import company


async def _write_named(call: Call, work: Callable[..., Record], *args: Any) -> Record:
    """A write that may give a company the name of another: the unique key says 409."""
    try:
        return await call.write(work, *args)
    except IntegrityError:
        raise Conflict(f"a company named {call.fields['name']!r} exists already", field="name") from None


class CompanyController(Controller):
    name = "company"

    @action(requires=("name",))
    async def create(self, call: Call) -> Record:
        return await _write_named(call, insert_row, company, {"name": call.fields["name"], "createdBy": call.caller.id})

    @action(requires=("id",))
    async def show(self, call: Call) -> Record:
        return await self.services.db.read(get_row, company, call.fields["id"])

    @action
    async def list(self, call: Call) -> list[Record]:
        return await self.services.db.read(list_rows, company, *call.page())

    @action(requires=("id", "version"))
    async def update(self, call: Call) -> Record:
        changes = {"name": call.fields["name"]} if call.fields.get("name") is not None else {}
        return await _write_named(call, update_row, company, call.fields["id"], call.fields["version"], changes)

    @action(requires=("id",))
    async def delete(self, call: Call) -> Record:
        """Its departments go with it (ON DELETE CASCADE)."""
        return await call.write(delete_row, company, call.fields["id"])
