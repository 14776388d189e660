"""A testing kit for plugins: `InMemoryApid` (the real request path, in memory), `ApidDaemon`
(the real `apid serve` in a subprocess), `WebhookReceiver` (a real HTTP server collecting
deliveries) and the pytest fixtures over them (`apid.testing.pytest_plugin`).

Each name is imported on first use, not here: pytest loads `apid.testing.pytest_plugin` in
every session where apid is installed, and that must not load a reactor, Klein or the daemon.
docs/testing.md is the reference of every name in `__all__`.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from apid.testing.calls import ApiCalls as ApiCalls
    from apid.testing.calls import Login as Login
    from apid.testing.calls import Reply as Reply
    from apid.testing.daemon import Account as Account
    from apid.testing.daemon import ApidDaemon as ApidDaemon
    from apid.testing.daemon import DaemonFailed as DaemonFailed
    from apid.testing.memory import Event as Event
    from apid.testing.memory import InMemoryApid as InMemoryApid
    from apid.testing.memory import PluginError as PluginError
    from apid.testing.memory import StillWaiting as StillWaiting
    from apid.testing.receiver import Answer as Answer
    from apid.testing.receiver import Delivery as Delivery
    from apid.testing.receiver import WebhookReceiver as WebhookReceiver

_HOMES = {
    "Account": "daemon",
    "Answer": "receiver",
    "ApiCalls": "calls",
    "ApidDaemon": "daemon",
    "DaemonFailed": "daemon",
    "Delivery": "receiver",
    "Event": "memory",
    "InMemoryApid": "memory",
    "Login": "calls",
    "PluginError": "memory",
    "Reply": "calls",
    "StillWaiting": "memory",
    "WebhookReceiver": "receiver",
}
__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'apid.testing' has no attribute {name!r}")
    value = getattr(import_module(f"apid.testing.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
