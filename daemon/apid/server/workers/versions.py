"""One daemon, one version of its code: a worker started after `pip install`, or after an edit
to an editable install, would import what is on disk now, and one port would answer from two
versions (a new plugin's routes on one worker, 404 on the others). The parent records the code
of apid and of every distribution providing controllers as it starts (`installed_code`: each
one's version and a digest of its modules' contents) and hands it to each worker
(`WorkerStart`); a worker that finds other code refuses to serve, exit status `CODE_CHANGED`,
and the parent says the daemon must be restarted instead of replacing it
(`apid.server.workers.parent`). The digest, not the version, is what tells: an editable
install keeps its version however its files change.
"""

from __future__ import annotations

import hashlib
import importlib.util
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from apid.plugin_host.discovery import GROUP

CODE_CHANGED = 3  # a worker's exit status when the code installed is not its parent's


@dataclass(frozen=True)
class Code:
    """A distribution's code as installed: its version, and a digest of its modules' files."""

    version: str
    digest: str


def installed_code() -> dict[str, Code]:
    """apid's code and each controller distribution's, by name; where a distribution is on
    sys.path twice, the first, as imports find it. Reads every module of each (a few
    milliseconds for apid's): not on the reactor."""
    packages: dict[str, set[str]] = {"apid": {"apid"}}
    versions = {"apid": metadata.version("apid")}
    for entry_point in metadata.entry_points(group=GROUP):
        dist = entry_point.dist
        if dist is not None and versions.setdefault(dist.name, dist.version) == dist.version:
            packages.setdefault(dist.name, set()).add(entry_point.module.partition(".")[0])
    return {name: Code(version, _digest(sorted(packages.get(name, ())))) for name, version in versions.items()}


def _digest(modules: Iterable[str]) -> str:
    """A digest of the source files of these top-level modules or packages, as imports would
    find them now (none found adds nothing: a distribution whose code is not there yet)."""
    digest = hashlib.blake2b(digest_size=16)
    for module in modules:
        spec = importlib.util.find_spec(module)
        if spec is None:
            continue
        if spec.submodule_search_locations:
            files = sorted(
                (path.relative_to(root), path)
                for root in map(Path, spec.submodule_search_locations)
                for path in root.rglob("*.py")
            )
        elif spec.origin is not None:
            files = [(Path(Path(spec.origin).name), Path(spec.origin))]
        else:
            continue
        for name, path in files:
            digest.update(f"{module}/{name}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def code_changes(started: Mapping[str, Code], now: Mapping[str, Code]) -> list[str]:
    """What differs from `started` in `now`, one phrase per distribution, sorted."""
    changes = []
    for name in sorted(started.keys() | now.keys()):
        before, after = started.get(name), now.get(name)
        if before is None:
            assert after is not None
            changes.append(f"{name} {after.version} installed")
        elif after is None:
            changes.append(f"{name} {before.version} removed")
        elif before.version != after.version:
            changes.append(f"{name} {before.version} -> {after.version}")
        elif before.digest != after.digest:
            changes.append(f"{name} {after.version}: its code changed")
    return changes
