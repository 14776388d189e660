"""apid's pytest plugin (the `pytest11` entry point `apid`): fixtures for a plugin's tests.

- `apid_reactor`: `"default"` or `"asyncio"`, from `--apid-reactor` (default `default`, the
  daemon's):
  give it to `InMemoryApid(reactor=...)`; `apid_daemon` runs on it. Parametrize it to run
  a test on both.
- `webhook_receiver`: a `WebhookReceiver` on loopback, one per test module.
- `apid_daemon_settings`: what the module's daemon is started with (`ApidDaemon`'s keyword
  arguments); override it in a module or conftest.py to add settings, accounts or an
  environment.
- `apid_daemon`: the real `apid serve` for the module, with every installed plugin, its
  migrations run, an `admin` (ROLE_ADMIN) and a `user` (ROLE_USER), webhooks on and the
  module's `webhook_receiver` in `cors.allowedOrigins`.

docs/testing.md says how to use each.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from apid.testing.daemon import ApidDaemon, default_accounts
from apid.testing.receiver import WebhookReceiver
from apid.testing.settings import merged

REACTORS = ("default", "asyncio")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--apid-reactor",
        choices=REACTORS,
        default="default",
        help="the reactor of apid's testing kit and test daemons (apid_reactor): default or asyncio",
    )


@pytest.fixture(scope="session")
def apid_reactor(request: pytest.FixtureRequest) -> str:
    """The reactor apid runs on in these tests: `--apid-reactor`, default `default`."""
    reactor: str = request.config.getoption("--apid-reactor")
    return reactor


@pytest.fixture(scope="module")
def webhook_receiver() -> Iterator[WebhookReceiver]:
    """A webhook receiver on loopback for the module; `clear()` it between tests at will."""
    with WebhookReceiver() as receiver:
        yield receiver


@pytest.fixture(scope="module")
def apid_daemon_settings() -> dict[str, Any]:
    """`ApidDaemon`'s keyword arguments for the module's daemon (`server`, `api`, `accounts`,
    `env`, `python`); none by default."""
    return {}


@pytest.fixture(scope="module")
def apid_daemon(
    tmp_path_factory: pytest.TempPathFactory,
    apid_reactor: str,
    webhook_receiver: WebhookReceiver,
    apid_daemon_settings: dict[str, Any],
) -> Iterator[ApidDaemon]:
    """The real daemon for the module, started once: see the module's docstring."""
    settings = dict(apid_daemon_settings)
    api = merged({"cors": {"allowedOrigins": [webhook_receiver.origin]}}, settings.pop("api", {}))
    settings.setdefault("accounts", default_accounts())
    settings.setdefault("reactor", apid_reactor)
    with ApidDaemon(tmp_path_factory.mktemp("apid-daemon"), api=api, **settings) as daemon:
        yield daemon
