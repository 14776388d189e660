"""A throwaway PostgreSQL server from Debian's binaries, for tests that need the real thing.

PostgreSQL refuses to run as root, so when the tests run as root (as CI does) the server
runs as the `postgres` system user that Debian's package creates. `halt()` and `resume()` stop
it and start it again on the same port with the same data: an outage, for the outage tests.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import psycopg

from harness import free_port


def _bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        raise RuntimeError(f"PostgreSQL's {name} is not installed (Debian package postgresql)")
    return found[-1]


class PostgresServer:
    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="apid-pg-"))
        self.data = self.folder / "data"
        self.port = free_port()
        self._as_root = os.geteuid() == 0

    def _run(self, *command: str) -> None:
        if self._as_root:
            command = ("runuser", "-u", "postgres", "--", *command)
        subprocess.run(command, check=True, capture_output=True, timeout=120)

    def start(self) -> PostgresServer:
        if self._as_root:
            shutil.chown(self.folder, "postgres")
        self._run(_bin("initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        self._launch()
        self._run(_bin("createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "apid")
        return self

    def _launch(self) -> None:
        self._run(
            _bin("pg_ctl"),
            "-D",
            str(self.data),
            "-w",
            "-l",
            str(self.folder / "log"),
            "-o",
            f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off",
            "start",
        )

    def halt(self) -> None:
        """Stop the server as an operator would (`pg_ctl stop -m fast`: clients are disconnected,
        open transactions rolled back), keeping its data for `resume`."""
        self._run(_bin("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def resume(self) -> None:
        """Start the halted server again, on the same port with the same data."""
        self._launch()

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/apid"

    def new_database(self, name: str) -> str:
        """The URL of a new, empty database on this server (for a test that migrates its own)."""
        with psycopg.connect(f"host=127.0.0.1 port={self.port} user=postgres dbname=apid", autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{name}"')
        return self.url.rsplit("/", 1)[0] + "/" + name

    def stop(self) -> None:
        try:
            self._run(_bin("pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop")
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)
