"""Fixtures that start the real daemon: one per test module, with an admin and a user."""

from __future__ import annotations

import sqlite3

import pytest

from harness import ADMIN, USER, Deployment, deployment_with_accounts, everyone, running_daemon
from receiver import Receiver


@pytest.fixture(scope="module")
def deployment(tmp_path_factory) -> Deployment:
    return deployment_with_accounts(tmp_path_factory.mktemp("apid"))


@pytest.fixture(scope="module")
def daemon(deployment):
    with running_daemon(deployment) as running:
        yield running


@pytest.fixture(scope="module")
def admin_token(daemon) -> str:
    return daemon.login(ADMIN[0], ADMIN[1])


@pytest.fixture(scope="module")
def user_token(daemon) -> str:
    return daemon.login(USER[0], USER[1])


@pytest.fixture(scope="module")
def user_id(daemon, admin_token) -> int:
    people = daemon.request("GET", "/v0.1/person/list", token=admin_token).json
    return next(p["id"] for p in people if p["username"] == USER[0])


@pytest.fixture
def unchanged(daemon, admin_token):
    """Asserts after the test that no account was created, changed or deleted."""
    before = everyone(daemon, admin_token)
    yield
    assert everyone(daemon, admin_token) == before


@pytest.fixture(scope="module")
def receiver():
    """A webhook receiver on loopback for the module (tests/receiver.py)."""
    receiver = Receiver()
    yield receiver
    receiver.close()


@pytest.fixture(scope="module")
def database(deployment):
    """The module deployment's SQLite file, read and written as any SQL client would."""
    connection = sqlite3.connect(deployment.root / "var" / "test.db", isolation_level=None, timeout=30)
    connection.row_factory = sqlite3.Row
    yield connection
    connection.close()
