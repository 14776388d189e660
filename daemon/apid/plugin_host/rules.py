"""The rule set in force, swapped whole when the IO State files are read again (`apid reload`,
SIGHUP, a change seen by the watcher: `apid.server.reloading`)."""

from __future__ import annotations

from pathlib import Path

from apid.config.api import SecurityConfig
from apid.iostate import RuleSet
from apid.plugin_host.discovery import Bound, bind


class RuleBook:
    """The rule set in force. A reload reads and validates the IO State files again and
    swaps the whole set at once; a set that fails validation is refused and the last good
    one stays. Requests already running keep the set they started with."""

    def __init__(self, bound: Bound, iostate_dir: Path, security: SecurityConfig) -> None:
        self.current = bound.rules
        self._controllers = list(bound.controllers.values())
        self._iostate_dir = iostate_dir
        self._security = security

    def read(self) -> RuleSet:
        """Bind the installed controllers to the files as they are now (blocking file I/O)."""
        return bind(self._controllers, self._iostate_dir, self._security).rules

    def swap(self, rules: RuleSet) -> None:
        self.current = rules
