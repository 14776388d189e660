"""The `server` controller: the state of the API servers of the deployment."""

from __future__ import annotations

from typing import Any

from apid.plugin import Call, Controller, action


# what `services.pinger.ping_all` answers
class ServerController(Controller, stores=("peers", "total", "up", "down")):
    name = "server"

    @action(answers="record", carries=("peers", "total", "up", "down"))
    async def pingServers(self, call: Call) -> dict[str, Any]:
        """Every peer of `servers` (service_server.yml) asked at once for its /health."""
        return await self.services.pinger.ping_all()
