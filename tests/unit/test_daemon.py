"""Building the listening endpoint before anything starts (apid.server.listening.server_endpoint)."""

from __future__ import annotations

import pytest
from twisted.internet.endpoints import TCP4ServerEndpoint
from twisted.internet.task import Clock

from apid.config.nodes import ConfigError
from apid.server.listening import server_endpoint


def test_a_tcp_endpoint_is_built_with_the_larger_backlog():
    endpoint = server_endpoint(Clock(), "tcp:18236:interface=127.0.0.1")
    assert isinstance(endpoint, TCP4ServerEndpoint)
    assert (endpoint._port, endpoint._interface, endpoint._backlog) == (18236, "127.0.0.1", 1024)


@pytest.mark.parametrize("listen", ["18236x", "127.0.0.1:8080", "tcp:http", "tcp:80:iface=lo"])
def test_a_description_twisted_cannot_use_names_the_forms_apid_takes(listen):
    with pytest.raises(ConfigError) as info:
        server_endpoint(Clock(), listen)
    message = str(info.value)
    assert message.startswith(f"listen {listen!r}: ")
    assert "give a port (8080 means tcp:8080:interface=127.0.0.1)" in message
    assert "tcp:PORT:interface=ADDR" in message


@pytest.mark.parametrize("listen", ["systemd:domain=INET:name=http", "systemd:domain=INET:index=0"])
def test_a_systemd_socket_that_was_not_passed_says_how_to_pass_it(listen):
    with pytest.raises(ConfigError) as info:
        server_endpoint(Clock(), listen)
    assert "systemd passed no such socket" in str(info.value)
    assert "systemd-socket-activate" in str(info.value)
