"""A third-party controller: teams kept in memory, each led by a person (an FKEY)."""

from __future__ import annotations

import itertools
from typing import Any

from apid.plugin import Call, Controller, NotFound, RouteCall, action, route


class TeamController(Controller):
    name = "team"

    def __init__(self, services: Any) -> None:
        super().__init__(services)
        self._ids = itertools.count(1)
        self._teams: dict[int, dict[str, Any]] = {}

    @action(requires=("name", "leaderId"))
    def create(self, call: Call) -> dict[str, Any]:
        team_id = next(self._ids)
        self._teams[team_id] = {"id": team_id, "name": call.fields["name"],
                                "leaderId": call.fields["leaderId"], "budget": call.fields.get("budget", 0)}
        return self._teams[team_id]

    @action(requires=("id",))
    def show(self, call: Call) -> dict[str, Any]:
        team = self._teams.get(call.fields["id"])
        if team is None:
            raise NotFound(f"no team with id {call.fields['id']}")
        return team

    @action
    async def list(self, call: Call) -> list[dict[str, Any]]:
        return list(self._teams.values())

    @action(requires=("id",))
    def byLeader(self, call: Call) -> dict[str, Any]:
        for team in self._teams.values():
            if team["leaderId"] == call.fields["id"]:
                return team
        raise NotFound(f"person {call.fields['id']} leads no team")

    @action(requires=("id",))
    def summary(self, call: Call) -> dict[str, Any]:
        team = self.show(call)
        return {"id": team["id"], "name": team["name"], "leaderId": team["leaderId"],
                "led": sum(1 for t in self._teams.values() if t["leaderId"] == team["leaderId"])}

    @route("/teamCount", "GET")
    def count(self, call: RouteCall) -> dict[str, Any]:
        """A path outside IO State: public when listed in reservedUris, private otherwise."""
        return {"teams": len(self._teams), "caller": call.caller.username if call.caller else None}
