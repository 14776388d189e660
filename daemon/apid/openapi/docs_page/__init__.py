"""The `/docs` page: the caller's OpenAPI document (`/openapi.json`) shown by Swagger UI, with
a login box so that each caller sees the endpoints of their own roles.

Everything the page loads comes from the daemon: Swagger UI's files from the `swagger-ui-py`
distribution (a regular dependency), the page's own script and style from this package. They
are read once, in a thread, at the first request for the page or one of its files (a daemon
whose page nobody opens does not hold them: about 2 MiB), and served from memory under
`/docs/assets/` by name from a fixed list, so no other file on disk can be asked for. The page
answers a Content-Security-Policy that lets it load and call this origin only.
"""

from __future__ import annotations

import gzip
import hashlib
import html
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

from twisted.internet.defer import DeferredLock
from twisted.internet.threads import deferToThread
from twisted.web.http import Request

from apid.auth.endpoints import PublicRoute
from apid.auth.tokens import Principal
from apid.http.compression import accepts_gzip
from apid.http.conditions import held
from apid.http.fixed_paths import DOCS_PATH
from apid.http.requests import query_fields
from apid.problems import PROBLEM_TYPES, TYPES_PAGE, NotFound, type_uri

PAGE_PATH = DOCS_PATH
ASSETS_PATH = "/docs/assets"
SPEC_URL = "/openapi.json"
VIEWER_DISTRIBUTION = "swagger-ui-py"
HERE = Path(__file__).resolve().parent

# No inline script, style or event handler anywhere: Swagger UI 5 sets its inline styles
# through the DOM (allowed by `style-src 'self'`) and draws its icons from data: URIs in its
# stylesheet. The login form is sent by script, never by the browser itself: `form-action
# 'none'` keeps a password from going anywhere the script did not choose if it failed to load.
CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    ]
)
IMMUTABLE = b"public, max-age=31536000, immutable"
REVALIDATE = b"no-cache"
CONTENT_TYPES = {
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".png": "image/png",
    ".html": "text/html; charset=utf-8",
}


@dataclass(frozen=True)
class Asset:
    """One file the page loads: its bytes, media type and a digest that names this content."""

    name: str
    body: bytes
    content_type: str
    digest: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "digest", hashlib.sha256(self.body).hexdigest()[:16])

    @property
    def url(self) -> str:
        """Its URL with the digest as `v`: a new build gets a new URL, so a year's caching is safe."""
        return f"{ASSETS_PATH}/{self.name}?v={self.digest}"


def viewer_folder() -> Path:
    """Swagger UI's files in the installed `swagger-ui-py`, found without importing its Python
    code (which would bring in its web framework adapters)."""
    spec = importlib.util.find_spec("swagger_ui")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            f"the docs page needs the {VIEWER_DISTRIBUTION} distribution: pip install {VIEWER_DISTRIBUTION}"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "static"


def load_assets() -> dict[str, Asset]:
    """The files the page may load, by name: these and nothing else are served."""
    viewer = viewer_folder()
    files = {
        "swagger-ui-bundle.js": viewer / "swagger-ui-bundle.js",
        "swagger-ui.css": viewer / "swagger-ui.css",
        "favicon-32x32.png": viewer / "favicon-32x32.png",
        "docs.js": HERE / "docs.js",
        "docs.css": HERE / "docs.css",
    }
    assets = {name: Asset(name, path.read_bytes(), CONTENT_TYPES[path.suffix]) for name, path in files.items()}
    name = TYPES_PAGE.rpartition("/")[2]
    assets[name] = Asset(name, problem_types_page(), CONTENT_TYPES[".html"])
    return assets


def problem_types_page() -> bytes:
    """The page every problem `type` leads to (RFC 9457 3.1.1): one section per type, its
    anchor the type's slug, saying its status, what it means and the members it carries."""
    sections = []
    for kind in PROBLEM_TYPES:
        members = ", ".join(f"<code>{html.escape(name)}</code>" for name in kind.members) or "none beyond RFC 9457's"
        sections.append(
            f'<section id="{kind.slug}"><h2>{kind.slug}</h2>'
            f"<p><code>{html.escape(type_uri(kind))}</code>, status {kind.status}</p>"
            f"<p>{html.escape(' '.join((kind.__doc__ or '').split()))}</p>"
            f"<p>Members: {members}</p></section>"
        )
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>apid problem types</title></head>'
        "<body><h1>apid problem types</h1><p>Every error apid answers is an RFC 9457 problem "
        "(<code>application/problem+json</code>) with <code>type</code>, <code>title</code>, "
        "<code>status</code>, <code>detail</code>, <code>instance</code> and <code>requestId</code>; "
        "in a chain also <code>link</code> and <code>nonSafeCallCompleted</code>.</p>"
        + "".join(sections)
        + "</body></html>"
    ).encode("utf-8")


def render_page(assets: dict[str, Asset], spec_url: str = SPEC_URL) -> bytes:
    """page.html with the assets' URLs (`{url[docs.js]}`) and the document's filled in."""
    template = (HERE / "page.html").read_text(encoding="utf-8")
    urls = {name: asset.url for name, asset in assets.items()}
    return template.format(url=urls, spec_url=spec_url).encode("utf-8")


@dataclass(frozen=True)
class PageFiles:
    """The page and its files as served: each file read once, each text file also compressed."""

    assets: dict[str, Asset]
    page: bytes
    gzipped: dict[str, bytes]

    @classmethod
    def of(cls, assets: dict[str, Asset]) -> PageFiles:
        # Swagger UI's script shrinks to a third
        gzipped = {
            name: gzip.compress(asset.body, compresslevel=6, mtime=0)
            for name, asset in assets.items()
            if asset.content_type.startswith("text/")
        }
        return cls(assets, render_page(assets), gzipped)


class DocsPage:
    """`GET /docs` (the page) and `GET /docs/assets/<name>` (what it loads): public when
    `/docs` and `/docs/assets` are in `reservedUris`."""

    def __init__(self, assets: dict[str, Asset] | None = None) -> None:
        """Serves `assets` if given, else the installed files, read and compressed once, in a
        thread, at the first request: serving never touches the disk or compresses on the
        reactor thread."""
        self._files = None if assets is None else PageFiles.of(assets)
        self._loading = DeferredLock()

    async def _loaded(self) -> PageFiles:
        if self._files is None:
            async with self._loading:  # the first requests wait for one reading
                if self._files is None:
                    self._files = await deferToThread(lambda: PageFiles.of(load_assets()))
        return self._files

    def routes(self) -> list[PublicRoute]:
        return [
            PublicRoute(PAGE_PATH, "GET", self.page),
            PublicRoute(f"{ASSETS_PATH}/<name>", "GET", self.asset),
        ]

    async def page(self, request: Request, _principal: Principal | None) -> bytes:
        request.setHeader(b"Content-Type", b"text/html; charset=utf-8")
        request.setHeader(b"Content-Security-Policy", CONTENT_SECURITY_POLICY.encode("ascii"))
        request.setHeader(b"Referrer-Policy", b"no-referrer")
        return (await self._loaded()).page

    async def asset(self, request: Request, _principal: Principal | None) -> bytes:
        name = request.path.decode("utf-8", "replace").rstrip("/").rpartition("/")[2]
        files = await self._loaded()
        asset = files.assets.get(name)
        if asset is None:
            raise NotFound(f"the docs page has no file {name!r}")
        gzipped = asset.content_type.startswith("text/") and accepts_gzip(request)
        etag = f'"{asset.digest}{"-gzip" if gzipped else ""}"'.encode("ascii")
        request.setHeader(b"Content-Type", asset.content_type.encode("ascii"))
        request.setHeader(b"ETag", etag)
        request.responseHeaders.addRawHeader(b"Vary", b"Accept-Encoding")
        current = query_fields(request).get("v") == [asset.digest]
        request.setHeader(b"Cache-Control", IMMUTABLE if current else REVALIDATE)
        if held(request.getHeader(b"if-none-match"), etag):
            request.setResponseCode(304)
            return b""
        if gzipped:
            request.setHeader(b"Content-Encoding", b"gzip")
            return files.gzipped[asset.name]
        return asset.body
