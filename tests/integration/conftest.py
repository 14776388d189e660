"""Fixtures that start the real daemon: one per test module, with an admin and a user."""

from __future__ import annotations

import pytest

from harness import ADMIN, USER, Daemon, Deployment


@pytest.fixture(scope="module")
def deployment(tmp_path_factory) -> Deployment:
    deployment = Deployment(tmp_path_factory.mktemp("apid"))
    deployment.write()
    deployment.add_user(*ADMIN, "ROLE_ADMIN")
    deployment.add_user(*USER, "ROLE_USER")
    return deployment


@pytest.fixture(scope="module")
def daemon(deployment):
    running = Daemon(deployment).start()
    yield running
    running.stop()


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
