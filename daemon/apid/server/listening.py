"""The daemon's listening endpoint: built from `listen` before anything starts, and described
for the ready line, by the one process and by the parent of the workers alike."""

from __future__ import annotations

from twisted.internet.address import IPv4Address, IPv6Address
from twisted.internet.endpoints import serverFromString
from twisted.internet.interfaces import IListeningPort, IStreamServerEndpoint

from apid.config.nodes import ConfigError
from apid.runtime.reactors import Reactor


def with_backlog(listen: str) -> str:
    """Twisted's default TCP backlog is 50, too small under load: ask for 1024 unless set."""
    if listen.split(":", 1)[0] in ("tcp", "tcp6") and "backlog=" not in listen:
        return listen + ":backlog=1024"
    return listen


def server_endpoint(reactor: Reactor, listen: str) -> IStreamServerEndpoint:
    """The endpoint `listen` describes, built before anything starts: a description Twisted
    cannot use, or a systemd socket that was not passed, is a configuration error (exit 2)."""
    try:
        return serverFromString(reactor, with_backlog(listen))
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, OSError) as exc:
        error = exc
    if listen.startswith("systemd:") and isinstance(error, (KeyError, IndexError)):
        reason = (
            f"systemd passed no such socket ({error}); start apid through its .socket unit, "
            "or try it with systemd-socket-activate (docs/operations.md)"
        )
    else:
        reason = (
            f"{error}; give a port (8080 means tcp:8080:interface=127.0.0.1) "
            "or an endpoint such as tcp:PORT:interface=ADDR"
        )
    raise ConfigError(f"listen {listen!r}: {reason}")


def describe(port: IListeningPort) -> str:
    host = port.getHost()
    if isinstance(host, IPv4Address | IPv6Address):
        name = f"[{host.host}]" if ":" in host.host else host.host
        return f"http://{name}:{host.port}"
    return str(getattr(host, "name", host))
