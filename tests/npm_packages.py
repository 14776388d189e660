"""npm packages the tests run, installed from a lock file in the repository (`npm ci`) into a
folder under tests/output/ (never committed), once: again only when the lock file changes. A
file lock keeps parallel test workers to one install. node and npm come from
scripts/system-deps."""

from __future__ import annotations

import fcntl
import shutil
import subprocess
from pathlib import Path


def installed(source: Path, home: Path, *files: str) -> Path:
    """`home`, holding the packages `source`'s package-lock.json names and a fresh copy of each
    of `source`'s `files`."""
    if shutil.which("npm") is None or shutil.which("node") is None:
        raise RuntimeError(f"{source.name} needs node and npm: run scripts/system-deps")
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".install-lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        wanted = (source / "package-lock.json").read_bytes()
        stamp = home / "node_modules" / ".installed-from"
        if not stamp.exists() or stamp.read_bytes() != wanted:
            for name in ("package.json", "package-lock.json"):
                shutil.copy(source / name, home / name)
            subprocess.run(
                ["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"],
                cwd=home,
                check=True,
                timeout=600,
                capture_output=True,
            )
            stamp.write_bytes(wanted)
        for name in files:
            shutil.copy(source / name, home / name)
    return home
