"""A third-party controller: teams kept in memory, each led by a person (an FKEY)."""

from __future__ import annotations

import itertools
import logging
from typing import Any

from twisted.logger import Logger

from apid.plugin import Call, Controller, NotFound, Page, Problem, RouteCall, action, route, setting, settings

log = Logger(namespace="apid_sample")


class AuditUnavailable(Problem):
    """No audit service is configured (`APID_SAMPLE_AUDIT_URL`), as under `make run`: a
    dependency that is not there, the daemon's 503 type, not an internal error."""

    status, slug = 503, "service-unavailable"


@settings
class TeamSettings:
    """`plugins.team` in service_server.yml."""

    default_budget: int = setting("defaultBudget", default=0, doc="The budget of a team created without one.")


TEAM = ("id", "name", "leaderId")  # what every team answered holds, never null


# What a team holds and `summary` computes (`led`): IO State may name no other field (and the
# page `list` reads, declared by its `page=`)
class TeamController(Controller, stores=("id", "name", "leaderId", "budget", "led")):
    name = "team"
    settings_class = TeamSettings
    settings: TeamSettings

    def __init__(self, services: Any) -> None:
        super().__init__(services)
        self._ids = itertools.count(1)
        self._teams: dict[int, dict[str, Any]] = {}

    async def started(self) -> None:
        """What the daemon's log says of the hooks, for the tests of their order."""
        log.info("team plugin started (default budget {budget})", budget=self.settings.default_budget)
        logging.getLogger(__name__).info("team plugin ready, told through the standard library's logging")

    async def stopping(self) -> None:
        log.info("team plugin stopping")

    @action(requires=("name", "leaderId"), answers="record", carries=TEAM)
    def create(self, call: Call) -> dict[str, Any]:
        team_id = next(self._ids)
        self._teams[team_id] = {
            "id": team_id,
            "name": call.fields["name"],
            "leaderId": call.fields["leaderId"],
            "budget": call.fields.get("budget", self.settings.default_budget),
        }
        return self._teams[team_id]

    shown = 0  # how many times `show` ran: GET /teamShows (a cached answer does not run it)

    # A team is the same for every caller (the roles decide its fields): IO State may share its
    # cached answers (CACHE "shared": true), as it may the list's.
    @action(requires=("id",), caller_independent=True, answers="record", carries=TEAM)
    def show(self, call: Call) -> dict[str, Any]:
        self.shown += 1
        team = self._teams.get(call.fields["id"])
        if team is None:
            raise NotFound(f"no team with id {call.fields['id']}")
        return team

    @action(caller_independent=True, answers="list", page=Page(default=100, maximum=1000), carries=TEAM)
    async def list(self, call: Call) -> list[dict[str, Any]]:
        leader = call.fields.get("leaderId")
        offset, limit = call.page()
        teams = [team for team in self._teams.values() if leader is None or team["leaderId"] == leader]
        return teams[offset : offset + limit]

    @action(requires=("leaderId",), answers="record", carries=TEAM)
    def byLeader(self, call: Call) -> dict[str, Any]:
        for team in self._teams.values():
            if team["leaderId"] == call.fields["leaderId"]:
                return team
        raise NotFound(f"person {call.fields['leaderId']} leads no team")

    @action(requires=("id",), answers="record", carries=(*TEAM, "led"))
    def summary(self, call: Call) -> dict[str, Any]:
        team = self.show(call)
        return {
            "id": team["id"],
            "name": team["name"],
            "leaderId": team["leaderId"],
            "led": sum(1 for t in self._teams.values() if t["leaderId"] == team["leaderId"]),
        }

    @route("/teamCount", "GET")
    def count(self, call: RouteCall) -> dict[str, Any]:
        """A path outside IO State: public when listed in reservedUris, private otherwise."""
        return {"teams": len(self._teams), "caller": call.caller.username if call.caller else None}

    cancelled_audits = 0  # audits stopped because their caller went away: GET /teamAudits

    @action(requires=("id",), answers="record", upstream=True, asyncio=True)
    async def audit(self, call: Call) -> dict[str, Any]:
        """One team, once an audit service (POST $APID_SAMPLE_AUDIT_URL/audit/{id}) has been told who
        read it and who leads it; a 503 from the service is tried again once, a moment later.
        httpx is an asyncio HTTP client: this action needs `reactor: asyncio`."""
        import asyncio
        import os

        import httpx  # a test dependency: only this action needs it
        from twisted.logger import Logger

        from apid.plugin import Problem

        team = self.show(call)
        leader = await self.services.accounts.get(team["leaderId"])  # a Deferred, awaited beside asyncio
        record = {"team": team["id"], "reader": call.caller.username, "leader": leader.username if leader else None}
        service = os.environ.get("APID_SAMPLE_AUDIT_URL")
        if not service:
            raise AuditUnavailable("no audit service: the daemon's APID_SAMPLE_AUDIT_URL is not set")
        url = f"{service}/audit/{team['id']}"
        try:
            async with httpx.AsyncClient(timeout=30) as client:
                reply = await client.post(url, json=record)
                if reply.status_code == 503:
                    await asyncio.sleep(0.1)
                    reply = await client.post(url, json=record)
        except asyncio.CancelledError:
            self.cancelled_audits += 1
            Logger(namespace="apid_sample").info("audit of team {id} cancelled", id=team["id"])
            raise
        if reply.is_error:
            raise Problem(f"the audit service answered {reply.status_code}")
        return team

    relay_timeout = 1.0  # seconds the relay service has to answer

    @action(requires=("id",), upstream=True, asyncio=True)
    async def relay(self, call: Call) -> dict[str, Any]:
        """One team, once a relay service (POST $APID_SAMPLE_AUDIT_URL/relay/{id}) took it: what
        goes wrong upstream is answered as docs/plugins.md says, "When a service you call fails"."""
        import os

        import httpx  # a test dependency: only this action and `audit` need it

        from apid.plugin import BadGateway, GatewayTimeout, ServiceUnavailable

        team = self.show(call)
        url = f"{os.environ.get('APID_SAMPLE_AUDIT_URL', 'http://127.0.0.1:9')}/relay/{team['id']}"
        try:
            async with httpx.AsyncClient(timeout=self.relay_timeout) as client:
                reply = await client.post(url, json=team)
        except httpx.TimeoutException:
            raise GatewayTimeout(f"the relay service did not answer within {self.relay_timeout:g} s") from None
        except httpx.ConnectError:
            raise ServiceUnavailable("the relay service cannot be reached", retry_after=30) from None
        except httpx.TransportError as error:
            raise BadGateway(f"the relay service failed: {type(error).__name__}") from None
        if reply.status_code == 503:
            raise ServiceUnavailable(
                "the relay service is down", retry_after=float(reply.headers.get("Retry-After", 30))
            )
        if reply.is_error:
            raise BadGateway(f"the relay service answered {reply.status_code}")
        return team

    @route("/teamAudits", "GET")
    def audits(self, call: RouteCall) -> dict[str, Any]:
        return {"cancelled": self.cancelled_audits}

    @route("/teamShows", "GET")
    def shows(self, call: RouteCall) -> dict[str, Any]:
        return {"shown": self.shown}
