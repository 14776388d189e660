"""One daemon, one version of its code: a worker started after `pip install` would import what
is installed now, and one port would answer from two versions (a new plugin's routes on one
worker, 404 on the others). The parent records the versions of apid and of every distribution
providing controllers as it starts and hands them to each worker (`WorkerStart`); a worker
that finds others installed refuses to serve, exit status `CODE_CHANGED`, and the parent
says the daemon must be restarted instead of replacing it (`apid.server.workers.parent`).
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import metadata

from apid.plugin_host.discovery import GROUP

CODE_CHANGED = 3  # a worker's exit status when the code installed is not its parent's


def installed_versions() -> dict[str, str]:
    """apid's version and each controller distribution's, by name; where a distribution is on
    sys.path twice, the first, as imports find it (reads the disk: not on the reactor)."""
    versions = {"apid": metadata.version("apid")}
    for entry_point in metadata.entry_points(group=GROUP):
        if entry_point.dist is not None:
            versions.setdefault(entry_point.dist.name, entry_point.dist.version)
    return versions


def code_changes(started: Mapping[str, str], now: Mapping[str, str]) -> list[str]:
    """What differs from `started` in `now`, one phrase per distribution, sorted."""
    changes = []
    for name in sorted(started.keys() | now.keys()):
        before, after = started.get(name), now.get(name)
        if before is None:
            changes.append(f"{name} {after} installed")
        elif after is None:
            changes.append(f"{name} {before} removed")
        elif before != after:
            changes.append(f"{name} {before} -> {after}")
    return changes
