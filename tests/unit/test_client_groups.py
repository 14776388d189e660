"""Per-address limits count an IPv6 client by its network (issue 33, item 7): `client_group`,
the abuse limits (`AbuseLimiter`) and the per-address connection cap (`OpenConnections`), with
`security.ipv6Prefix` (64 by default) and its bounds."""

from __future__ import annotations

from pathlib import Path

import pytest
import pytest_twisted
import yaml
from twisted.internet import task
from twisted.internet.address import IPv6Address

from apid.auth.limits import AbuseLimiter, MemoryWindows
from apid.config.api import AbuseLimit
from apid.config.files import load_api
from apid.config.kinds import API_FILE
from apid.config.networks import TrustedProxies, proxy_network
from apid.config.nodes import ConfigError
from apid.http.proxies import client_group
from apid.http.site import ApidSite, OpenConnections, TextPaths
from apid.problems import TooManyRequests

REPO = Path(__file__).resolve().parents[2]
PREFIX = "2001:db8:1:2"
LIMITS = {"login": AbuseLimit(per_address=3, per_account=100, window=60, per_account_address=100)}


def addresses(count: int, prefix: str = PREFIX) -> list[str]:
    """`count` addresses of one /64, spread over its host bits."""
    return [f"{prefix}:{n:x}:{n * 7919 % 65536:x}:{n * 31:x}:{n + 1:x}" for n in range(count)]


def test_an_ipv6_address_counts_as_its_network_and_ipv4_as_itself():
    assert {client_group(each, 64) for each in addresses(25)} == {f"{PREFIX}::/64"}
    assert client_group("2001:db8:1:3::1", 64) == "2001:db8:1:3::/64"
    assert client_group("2001:db8:1:2::1", 56) == "2001:db8:1::/56"
    assert client_group("2001:db8:1:2::1", 128) == "2001:db8:1:2::1"
    assert client_group("203.0.113.9", 64) == "203.0.113.9"
    assert client_group("::ffff:203.0.113.9", 64) == "::ffff:203.0.113.9"  # a dual-stack socket's IPv4 peer
    assert client_group("unknown", 64) == "unknown"


@pytest_twisted.ensureDeferred
async def test_25_addresses_of_one_slash_64_share_one_abuse_limit():
    limiter = AbuseLimiter(store=MemoryWindows(task.Clock()), limits=LIMITS)
    spread = addresses(25)
    for address in spread[:3]:
        assert await limiter.reserve("login", address, "alice")
    for address in spread[3:]:
        with pytest.raises(TooManyRequests):
            await limiter.reserve("login", address, "alice")
    assert await limiter.reserve("login", "2001:db8:1:3::1", "alice")  # the next /64 is another client
    per_address = AbuseLimiter(store=MemoryWindows(task.Clock()), limits=LIMITS, ipv6_prefix=128)
    assert [await per_address.reserve("login", address, "alice") for address in spread] == [True] * 25


def test_the_connection_cap_counts_one_slash_64_as_one_client():
    site = ApidSite(resource=TextPaths(None), max_body_bytes=1024, limits=None)
    site.reactor = task.Clock()
    connections = OpenConnections(site, 2)
    connections.serve_behind(TrustedProxies((proxy_network("fd00::/8"),)), relayed=False)
    built = [connections.buildProtocol(IPv6Address("TCP", a, 40000)) for a in addresses(4)]
    assert [wrapper is not None for wrapper in built] == [True, True, False, False]
    assert connections.buildProtocol(IPv6Address("TCP", "2001:db8:9::1", 40000)) is not None
    # a trusted proxy's connections are never counted, whatever its network
    assert all(connections.buildProtocol(IPv6Address("TCP", f"fd00::{n}", 1)) for n in range(1, 6))


def test_the_prefix_is_a_setting_of_1_to_128_bits(tmp_path):
    data = yaml.safe_load((REPO / "etc" / API_FILE).read_text(encoding="utf-8"))
    path = tmp_path / API_FILE

    def loaded(prefix: object | None) -> int:
        if prefix is not None:
            data["security"]["ipv6Prefix"] = prefix
        path.write_text(yaml.safe_dump(data), encoding="utf-8")
        return load_api(path, tmp_path).security.ipv6_prefix

    assert loaded(None) == 64
    assert loaded(48) == 48
    for bad in (0, 129, "64"):
        with pytest.raises(ConfigError, match="ipv6Prefix"):
            loaded(bad)
