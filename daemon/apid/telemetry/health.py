"""What `GET /health` answers: `pass`, or `fail` with a 503 while the daemon should get no
traffic, so that load balancers route around it and peers' pings count it down.

Parts of the daemon report their conditions here, each under a name of its own: the database
while it cannot be reached, the shutdown while it drains. /health fails while any condition
holds. The body follows the health check response format of
draft-inadvisable-health-check (`status`, `version`, and per failing check its `output`).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType


class Health:
    """The conditions that make /health fail now, by the name of the check reporting each."""

    def __init__(self) -> None:
        self._failing: dict[str, str] = {}

    def fail(self, check: str, output: str) -> None:
        """`check` fails from now on, for the reason `output` (replacing its earlier one)."""
        self._failing[check] = output

    def passes(self, check: str) -> None:
        """`check` holds no more (whether or not it failed)."""
        self._failing.pop(check, None)

    @property
    def failing(self) -> Mapping[str, str]:
        return MappingProxyType(self._failing)

    def document(self, version: str) -> tuple[int, dict[str, object]]:
        """The status and body /health answers now."""
        if not self._failing:
            return 200, {"status": "pass", "version": version}
        checks = {check: [{"status": "fail", "output": output}] for check, output in sorted(self._failing.items())}
        return 503, {
            "status": "fail",
            "version": version,
            "output": "; ".join(output for _, output in sorted(self._failing.items())),
            "checks": checks,
        }
