"""A plugin written against apid 0.1.0's documented API, and frozen: never edit it to follow a
newer apid. Every public name of `apid.plugin`, `apid.records` and `apid.testing` that 0.1.0
exported is used here or in its tests the way the docs of that release showed, so a later
apid that breaks one of those forms without a deprecation period fails `make test`
(docs/compatibility.md). Forms deprecated since are used on purpose; the tests assert their
warnings.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from sqlalchemy import Column, Integer, MetaData, String, Table

from apid.plugin import (
    Account,
    Accounts,
    ActionRules,
    BadRequest,
    Call,
    Caller,
    Conflict,
    Controller,
    Database,
    Endpoint,
    FieldError,
    Forbidden,
    Hooks,
    InvalidFields,
    NotFound,
    PeerPinger,
    Problem,
    RouteCall,
    RuleSet,
    SecuritySettings,
    Services,
    UnitOfWork,
    Unprocessable,
    Validator,
    action,
    route,
)
from apid.records import Record, delete_row, get_row, insert_row, list_rows, update_row

# The protocols a 0.1 plugin could annotate with: they must all still be importable.
PROTOCOLS = (Account, Accounts, Database, Endpoint, Hooks, PeerPinger, RuleSet, SecuritySettings, UnitOfWork)
RECORDS = (Record, delete_row, get_row, insert_row, list_rows, update_row)
metadata = MetaData()
notes = Table("compat_note", metadata, Column("id", Integer, primary_key=True), Column("text", String(200)))


def no_shouting(fields: Mapping[str, Any]) -> list[FieldError]:
    text = fields.get("text")
    return [{"field": "text", "reason": "must not be all capitals"}] if text and text.isupper() else []


RULES: Validator = no_shouting


class CompatController(Controller):
    name = "compat"

    def __init__(self, services: Services) -> None:
        super().__init__(services)
        self._ids = itertools.count(1)
        self._notes: dict[int, dict[str, Any]] = {}

    @action(requires=("text",), validate=no_shouting)
    def create(self, call: Call) -> dict[str, Any]:
        if len(call.fields["text"]) > 200:
            # apid 0.1's form: the errors first, positionally (deprecated since 0.2)
            raise InvalidFields([{"field": "text", "reason": "must be at most 200 characters"}])
        if call.fields["text"] == "reserved":
            raise InvalidFields([{"field": "text", "reason": "is reserved"}], detail="that text is reserved")
        note_id = next(self._ids)
        self._notes[note_id] = {"id": note_id, "text": call.fields["text"], "author": call.caller.username}
        return self._notes[note_id]

    @action
    def show(self, call: Call) -> dict[str, Any]:
        call.require("id")
        note = self._notes.get(call.fields["id"])
        if note is None:
            raise NotFound(f"no note with id {call.fields['id']}")
        if note["author"] != call.caller.username and not call.caller.is_superuser:
            raise Forbidden("you may only read your own notes")
        return note

    @action
    def list(self, call: Call) -> list[dict[str, Any]]:
        offset, limit = call.page()
        return list(self._notes.values())[offset : offset + limit]

    @action
    async def update(self, call: Call) -> dict[str, Any]:
        note = self.show(call)
        if note["text"] == call.fields.get("text"):
            raise Conflict("the note says that already")
        if not call.fields.get("text"):
            raise Unprocessable("a note cannot be emptied")
        account = await self.services.accounts.get(call.caller.id)
        note["text"], note["editor"] = call.fields["text"], account.username if account else None
        return note

    @action
    def delete(self, call: Call) -> dict[str, Any]:
        if call.fields.get("id") is None:
            raise BadRequest("say which note")
        note = self.show(call)
        del self._notes[note["id"]]
        return note

    @route("/compatCount", "GET")
    def count(self, call: RouteCall) -> dict[str, Any]:
        caller: Caller | None = call.caller
        if call.query.get("fail"):
            raise Problem("asked to fail")
        return {"notes": len(self._notes), "caller": caller.username if caller else None}


def declared_rules() -> ActionRules:
    """What `@action(requires=..., validate=...)` declared on `create`, as 0.1's `ActionRules`."""
    return ActionRules(requires=("text",), validate=no_shouting)
