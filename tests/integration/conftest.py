"""The integration suite's fixtures, defined here once: the module's deployment and its daemon
(started once per module), the administrator's and the user's tokens, a webhook receiver, the
deployment's SQLite file, and a daemon and a receiver of a test's own.

A module that needs its own settings overrides `deployment` alone (a module-scoped fixture that
returns a written deployment with the admin and the user, as `deployment_with_accounts` makes
it), and `daemon_options` when its daemon needs an environment or an interpreter of its own;
`daemon`, `admin_token` and `user_token` then follow from here. A module's further daemons, on
other settings, are fixtures of that module under names of their own.
"""

from __future__ import annotations

import sqlite3

import pytest

from harness import ADMIN, USER, Deployment, deployment_with_accounts, everyone, running_daemon
from receiver import Receiver


@pytest.fixture(scope="module")
def deployment(tmp_path_factory) -> Deployment:
    """The module's deployment: the repository's settings, the admin and the user."""
    return deployment_with_accounts(tmp_path_factory.mktemp("apid"))


@pytest.fixture(scope="module")
def daemon_options() -> dict:
    """How the module's daemon is started: `env` and `python`, as `harness.Daemon` takes them."""
    return {}


@pytest.fixture(scope="module")
def daemon(deployment, daemon_options):
    """The module's daemon on its deployment, started once for the module."""
    with running_daemon(deployment, **daemon_options) as running:
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


@pytest.fixture
def own_receiver():
    """A receiver of the test's own, for a daemon of its own: nothing else posts to it."""
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


@pytest.fixture
def reloading(tmp_path):
    """A daemon of the test's own (repository settings, the admin and the user), whose IO State
    files the test may change and reload without touching the module's daemon."""
    with running_daemon(deployment_with_accounts(tmp_path)) as daemon:
        yield daemon
