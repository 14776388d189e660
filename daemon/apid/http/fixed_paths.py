"""Fixed paths apid answers itself and other parts link to, named below them all: the `/docs`
page, which a deprecated version's answers point to (apid.calls.deprecation)."""

from __future__ import annotations

DOCS_PATH = "/docs"
