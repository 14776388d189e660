"""The HTTP methods apid knows, named once: those an IO State endpoint may declare, and those
the API's router answers (the rest with a 405 naming these; anything else is counted as
`other` by the metrics)."""

from __future__ import annotations

ENDPOINT_METHODS = ("GET", "POST", "PUT", "DELETE")  # what IO State may declare, and CORS allows
KNOWN_METHODS = (*ENDPOINT_METHODS, "PATCH", "HEAD", "OPTIONS")
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})  # RFC 9110 section 9.2.1: nothing to repeat or to keep
