"""A third-party controller for the tests of who receives copies of records (issue 33): room
bookings kept in memory, each with its booker's private note, which `show` gives only to the
booker and administrators, and whose IO State lets users subscribe to `bookings/create`.

`Bookings` declares who may see a booking (`may_see`: as `show` decides); `UndeclaredBookings`
is the same plugin as written for an apid without that declaration. It is never installed: a
test puts this folder on the daemon's PYTHONPATH beside the metadata pip would write, naming
one of the two (tests/integration/test_webhook_audience.py).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

from apid.plugin import Call, Caller, Controller, Forbidden, NotFound, Services, action


def booker_or_administrator(caller: Caller, record: Mapping[str, Any]) -> bool:
    return caller.is_superuser or record.get("userId") == caller.id


class Bookings(Controller):
    name = "bookings"
    fields = frozenset({"id", "userId", "room", "note"})

    def __init__(self, services: Services) -> None:
        super().__init__(services)
        self._ids = itertools.count(1)
        self._bookings: dict[int, dict[str, Any]] = {}

    @action(requires=("room",), answers="record", may_see=booker_or_administrator)
    def create(self, call: Call) -> dict[str, Any]:
        booking = {
            "id": next(self._ids),
            "userId": call.caller.id,
            "room": call.fields["room"],
            "note": call.fields.get("note"),
        }
        self._bookings[booking["id"]] = booking
        return booking

    @action(requires=("id",), answers="record")
    def show(self, call: Call) -> dict[str, Any]:
        booking = self._bookings.get(call.fields["id"])
        if booking is None:
            raise NotFound(f"no booking with id {call.fields['id']}")
        if not booker_or_administrator(call.caller, booking):
            raise Forbidden("you may only see your own bookings")
        return booking


class UndeclaredBookings(Bookings):
    @action(requires=("room",), answers="record")
    def create(self, call: Call) -> dict[str, Any]:
        return super().create(call)
