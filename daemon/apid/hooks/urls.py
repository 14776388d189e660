"""Which URLs a hook may send to: http or https, no userinfo, an origin in `cors.allowedOrigins`.

The same check runs when a hook is created or changed through the API and again before every
delivery, so a row inserted by SQL, or an origin removed from the configuration, never
reaches a host that is not allowed.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

DEFAULT_PORTS = {"http": 80, "https": 443}


class UrlRefused(ValueError):
    """The URL may not receive webhooks; the message says why."""


def origin(url: str) -> tuple[str, str, int]:
    """(scheme, host, port) of an http(s) URL, host lowercased and port made explicit."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise UrlRefused(f"{url!r} is not a URL: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise UrlRefused(f"a hook URL is http or https, not {scheme or 'schemeless'}")
    if not parts.hostname:
        raise UrlRefused(f"{url!r} names no host")
    return scheme, parts.hostname.lower(), port if port is not None else DEFAULT_PORTS[scheme]


def check_url(url: str, allowed_origins: Iterable[str]) -> None:
    """Raise `UrlRefused` unless `url` may receive webhooks."""
    if any(ord(char) < 33 or ord(char) == 127 for char in url):
        raise UrlRefused("a hook URL holds no spaces or control characters")
    parts = urlsplit(url)
    if "@" in parts.netloc:
        raise UrlRefused("a hook URL carries no user name or password; the signature authenticates apid")
    target = origin(url)
    for entry in allowed_origins:
        try:
            if origin(entry) == target:
                return
        except UrlRefused:
            continue
    scheme, host, port = target
    raise UrlRefused(f"{scheme}://{host}:{port} is not in cors.allowedOrigins")
