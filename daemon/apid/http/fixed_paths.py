"""Fixed paths apid answers itself and other parts link to, named below them all: the `/docs`
page, which a deprecated version's answers point to (apid.calls.deprecation), and the OpenAPI
document, which the edge routes (apid.server.application) and the documents list (apid.openapi)."""

from __future__ import annotations

DOCS_PATH = "/docs"
OPENAPI_PATH = "/openapi.json"
