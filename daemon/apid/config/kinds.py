"""The kinds of value that are apid's own in its two files (URLs, listen strings, secrets, roles,
providers, trusted proxies), and the names the files and their choices go by."""

from __future__ import annotations

import ipaddress
import re
from importlib import metadata
from urllib.parse import urlsplit

from apid.config.networks import TrustedProxies, proxy_network
from apid.config.nodes import ConfigError, Node, Reading, describe
from apid.config.settings import STRING, URL, Kind, http_url, under_root

SERVER_FILE = "service_server.yml"
API_FILE = "service_api.yml"
ENVIRONMENTS = ("development", "test", "production")
# The Twisted reactors `reactor` may name; the default is the fastest (docs/configuration.md).
REACTORS = ("default", "asyncio", "uvloop")
ASYNCIO_REACTORS = frozenset({"asyncio", "uvloop"})  # those an action awaiting asyncio runs under
DEFAULT_REACTOR = "default"
LOG_FORMATS = ("text", "json")  # apid.server.logs
TLS_CHOICES = ("always", "auto")  # apid.runtime.tls
LOOPBACK_LISTEN = "tcp:{port}:interface=127.0.0.1"


def listen_endpoint(value: str) -> str:
    """The Twisted endpoint a `listen` value names. A bare port means that port on loopback
    only (the safe default: exposing apid is a decision, `tcp:PORT` or `interface=0.0.0.0`);
    any other value is an endpoint string that `apid serve` checks when it builds the endpoint."""
    text = value.strip()
    if re.fullmatch(r"[0-9]+", text):
        port = int(text)
        if port > 65535:
            raise ValueError(f"port {port} is out of range 0-65535")
        return LOOPBACK_LISTEN.format(port=port)
    return text


def provider_url(value: str) -> str:
    """`value` if it is an https:// URL, or an http:// one on a loopback address (a provider
    on this machine, as the tests run one): an OpenID provider's keys decide who may call
    apid, so they never cross a network in clear text."""
    parts = urlsplit(http_url(value))
    host = parts.hostname or ""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if parts.scheme != "https" and not loopback:
        raise ValueError(
            f"must be an https:// URL (http:// only on a loopback address such as 127.0.0.1), got {value!r}"
        )
    if parts.query or parts.fragment:
        raise ValueError(f"must have no query or fragment, got {value!r}")
    return value


# --- the kinds of value that are apid's own (apid.config.settings has the plain ones) ------------------------


def _base_url(node: Node, reading: Reading) -> str:
    url = URL.read(node, reading).rstrip("/")
    if "?" in url or "#" in url:
        raise node.fail(f"must have no query or fragment (links are built on it), got {url!r}")
    return url


def _listen(node: Node, _: Reading) -> str:
    """A `listen` value; YAML reads a bare port (`listen: 8080`) as a number."""
    text = str(node.value) if isinstance(node.value, int) and not isinstance(node.value, bool) else node.string()
    try:
        return listen_endpoint(text)
    except ValueError as exc:
        raise node.fail(str(exc)) from None


def _endpoint(node: Node, reading: Reading) -> str:
    """A `listen` value Twisted can build a server endpoint from, checked now (without a
    reactor): the ports apid opens besides its own must not fail it once it started."""
    from twisted.internet.endpoints import serverFromString

    text = _listen(node, reading)
    if text.startswith("systemd:"):
        raise node.fail("systemd sockets are for the API's listen; give tcp:PORT:interface=ADDR")
    try:
        serverFromString(None, text)
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, OSError) as exc:
        raise node.fail(
            f"{exc}; give a port (9464 means tcp:9464:interface=127.0.0.1) "
            "or an endpoint such as tcp:PORT:interface=ADDR"
        ) from None
    return text


def _sqlite_at_root(url: str, reading: Reading) -> str:
    """Anchor a relative SQLite file path at the deployment root."""
    prefix = "sqlite:///"
    if url.startswith(prefix) and not url.startswith(prefix + "/") and url != prefix + ":memory:":
        return prefix + str(under_root(url[len(prefix) :], reading))
    return url


def _secret(node: Node, _: Reading) -> bytes:
    secret = node.string().encode()
    if len(secret) < 32:
        raise node.fail("must be at least 32 bytes long")
    return secret


def _reserved_uris(node: Node, _: Reading) -> frozenset[str]:
    uris = node.strings()
    for index, uri in enumerate(uris):
        if not uri.startswith("/"):
            raise node.child(index, uri).fail("must start with /")
    return frozenset(uri.rstrip("/") or "/" for uri in uris)


def _role_numbers(node: Node, _: Reading) -> dict[str, int]:
    """Each role's number; that each role is a declared one, ApiConfig.conflicts checks."""
    return {role: value.integer(minimum=1) for role, value in node.mapping().items()}


def _network_roles(node: Node, _: Reading) -> dict[str, frozenset[str]]:
    return {group: frozenset(roles.strings()) for group, roles in node.mapping().items()}


def _major_minor(raw: str) -> str | None:
    parts = raw.split(".")
    if len(parts) < 2 or not all(re.fullmatch(r"[0-9]+", part) for part in parts[:2]):
        return None
    return f"{parts[0]}.{parts[1]}"


def _version(node: Node, _: Reading) -> str:
    if isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        raise node.fail(f'must be a quoted string such as "1.10" (YAML read {node.value!r} as a number)')
    if not isinstance(node.value, str):
        raise node.fail(f'must be a quoted string such as "1.10", got {describe(node.value)}')
    version = _major_minor(node.value)
    if version is None:
        raise node.fail(f"must look like MAJOR.MINOR, got {node.value!r}")
    return version


def _installed_version(_: Reading) -> str:
    raw = metadata.version("apid")
    version = _major_minor(raw)
    if version is None:
        raise ConfigError(f"installed apid version: must look like MAJOR.MINOR, got {raw!r}")
    return version


BASE_URL = Kind("URL", _base_url)
PEER_URL = Kind("URL", lambda node, reading: URL.read(node, reading).rstrip("/"))
LISTEN = Kind("port or string", _listen)
ENDPOINT = Kind("port or string", _endpoint)
DATABASE_URL = Kind("string", STRING.read, finish=_sqlite_at_root)
SECRET = Kind("string, at least 32 bytes", _secret)
ROLE = Kind("role", STRING.read)
ROLE_MAP = Kind("role map", _role_numbers)
ORIGINS = Kind("list of strings", lambda node, _: tuple(origin.rstrip("/") for origin in node.strings()))
RESERVED_URIS = Kind("list of strings", _reserved_uris)
NETWORK_ROLES = Kind("mapping group -> list of strings", _network_roles)
VERSION = Kind("quoted string `MAJOR.MINOR`", _version)


def _trusted_proxies(node: Node, _: Reading) -> TrustedProxies:
    entries = node.strings()
    networks = []
    for index, entry in enumerate(entries):
        try:
            networks.append(proxy_network(entry))
        except ValueError as exc:
            raise node.child(index, entry).fail(str(exc)) from None
    return TrustedProxies(tuple(networks))


TRUSTED_PROXIES = Kind(
    "list of IP addresses and CIDR ranges",
    _trusted_proxies,
    show=lambda trusted: f"`{trusted}`" if trusted else "empty",
)


def _issuer(node: Node, _: Reading) -> str:
    try:
        return provider_url(node.string())
    except ValueError as exc:
        raise node.fail(str(exc)) from None


def _claim(node: Node, _: Reading) -> str:
    text = node.string()
    if not all(text.split(".")):
        raise node.fail(f"must be a claim name or a dotted path such as realm_access.roles, got {text!r}")
    return text


def _claim_roles(node: Node, _: Reading) -> dict[str, frozenset[str]]:
    """Claim value -> the roles it grants; each role is checked against networkRoles by
    `SecurityConfig.conflicts`."""
    table = {}
    for value, roles in node.mapping().items():
        table[value] = frozenset((roles.string(),) if isinstance(roles.value, str) else roles.strings())
        if not table[value]:
            raise roles.fail("expected a role or a non-empty list of roles")
    if not table:
        raise node.fail("expected at least one claim value and its roles")
    return table


ISSUER = Kind("URL", _issuer)
CLAIM = Kind("claim name or dotted path", _claim)
CLAIM_ROLES = Kind("mapping value -> role or list of roles", _claim_roles)
