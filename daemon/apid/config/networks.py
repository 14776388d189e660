"""IP networks in the configuration: `trustedProxies`, read from the files, and the addresses
they hold, compared as integers (apid.http.proxies resolves each request's client with them)."""

from __future__ import annotations

import functools
import ipaddress
from dataclasses import dataclass, field

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
# Addresses read from text, remembered: the same proxies and clients come back, and reading one
# (ipaddress) costs microseconds.
REMEMBERED = 4096


def proxy_network(text: str) -> Network:
    """One entry of `trustedProxies`, an address or a CIDR range; ValueError saying what is wrong."""
    try:
        return ipaddress.ip_network(text.strip())
    except ValueError:
        pass
    try:
        meant = ipaddress.ip_network(text.strip(), strict=False)
    except ValueError:
        raise ValueError(
            f"must be an IP address or CIDR range (such as 10.0.0.5, 10.0.0.0/8 or fd00::/8), got {text!r}"
        ) from None
    raise ValueError(f"{text!r} has bits set past its prefix length: did you mean {meant}?")


@functools.lru_cache(maxsize=REMEMBERED)
def ip_address_of(text: str) -> Address | None:
    """`text` as an IP address (a dual-stack socket's IPv4-mapped peer as the IPv4 one), or None."""
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


@dataclass(frozen=True)
class TrustedProxies:
    """The peers whose forwarding headers (and PROXY headers) apid believes: none by default."""

    networks: tuple[Network, ...] = ()
    # (IP version, network, netmask) of each, as integers: what `holds` compares
    _ranges: tuple[tuple[int, int, int], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        ranges = tuple((net.version, int(net.network_address), int(net.netmask)) for net in self.networks)
        object.__setattr__(self, "_ranges", ranges)

    def __bool__(self) -> bool:
        return bool(self.networks)

    def trusts(self, host: str) -> bool:
        """Whether the peer at `host` (an address as Twisted gives it) is a trusted proxy."""
        if not self.networks:
            return False
        address = ip_address_of(host)
        return address is not None and self.holds(address)

    def holds(self, address: Address) -> bool:
        version, value = address.version, int(address)
        return any(version == each and value & mask == network for each, network, mask in self._ranges)

    def __str__(self) -> str:
        return ", ".join(map(str, self.networks)) or "nobody"
