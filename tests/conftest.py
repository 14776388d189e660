"""What every test may use: tests/ on the import path, and a real PostgreSQL server per module."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from postgres import PostgresServer


@pytest.fixture(scope="module")
def postgres():
    """A real PostgreSQL server for the module (Debian's packages; see tests/postgres.py)."""
    server = PostgresServer().start()
    yield server
    server.stop()
