"""The /docs page and its files, answered in memory: content types, caching by digest, gzip,
the Content-Security-Policy, and nothing served but the listed files.
(tests/integration/test_docs_browser.py drives the page in a real browser.)"""

from __future__ import annotations

import gzip
import re

import pytest
import pytest_twisted
from twisted.internet.defer import Deferred, gatherResults
from twisted.python.failure import Failure
from twisted.web.test.requesthelper import DummyRequest

from apid.auth.endpoints import PublicRoute
from apid.http.compression import accepts_gzip
from apid.openapi.docs_page import CONTENT_SECURITY_POLICY, DocsPage, load_assets
from apid.problems import NotFound


@pytest.fixture(scope="module")
def docs() -> DocsPage:
    return DocsPage(load_assets())  # in memory from the start: `answer` never waits


def request(path: str, query: dict[str, str] | None = None, **headers: str) -> DummyRequest:
    made = DummyRequest(path.lstrip("/").split("/"))
    made.path = path.encode()
    made.args = {key.encode(): [value.encode()] for key, value in (query or {}).items()}
    for name, value in headers.items():
        made.requestHeaders.setRawHeaders(name.replace("_", "-").encode(), [value.encode()])
    return made


def answer(handler, made: DummyRequest) -> bytes:
    """What a handler answered (they never wait: everything is in memory)."""
    results: list = []
    Deferred.fromCoroutine(handler(made, None)).addBoth(results.append)
    (result,) = results
    if isinstance(result, Failure):
        result.raiseException()
    return result


def header(made: DummyRequest, name: str) -> str | None:
    values = made.responseHeaders.getRawHeaders(name.encode())
    return None if values is None else ", ".join(value.decode() for value in values)


def test_the_page_names_only_its_own_files_each_with_its_digest(docs):
    made = request("/docs")
    page = answer(docs.page, made).decode()
    assert header(made, "Content-Type") == "text/html; charset=utf-8"
    assert header(made, "Content-Security-Policy") == CONTENT_SECURITY_POLICY
    assert header(made, "Referrer-Policy") == "no-referrer"
    urls = re.findall(r'(?:href|src)="([^"]+)"', page)
    assets = load_assets()
    assert sorted(urls) == sorted(asset.url for asset in assets.values())
    assert 'data-spec-url="/openapi.json"' in page
    assert "<script>" not in page and "style=" not in page and "://" not in page


def test_the_policy_allows_this_origin_only():
    directives = dict(d.split(" ", 1) for d in CONTENT_SECURITY_POLICY.split("; "))
    assert directives["default-src"] == "'none'"
    assert directives["script-src"] == "'self'"
    assert directives["style-src"] == "'self'"
    assert directives["connect-src"] == "'self'"
    assert directives["img-src"] == "'self' data:"
    assert directives["form-action"] == "'none'" and directives["frame-ancestors"] == "'none'"
    assert "unsafe" not in CONTENT_SECURITY_POLICY


def test_the_viewer_is_swagger_ui_5_which_renders_openapi_3_1():
    bundle = load_assets()["swagger-ui-bundle.js"].body
    version = re.search(rb'PACKAGE_VERSION:"(\d+)\.(\d+)\.(\d+)"', bundle)
    assert version is not None and int(version.group(1)) >= 5


@pytest.mark.parametrize(
    "name, content_type",
    [
        ("swagger-ui-bundle.js", "text/javascript; charset=utf-8"),
        ("swagger-ui.css", "text/css; charset=utf-8"),
        ("docs.js", "text/javascript; charset=utf-8"),
        ("docs.css", "text/css; charset=utf-8"),
        ("favicon-32x32.png", "image/png"),
    ],
)
def test_a_file_at_its_current_digest_is_cached_for_a_year(docs, name, content_type):
    asset = load_assets()[name]
    made = request(f"/docs/assets/{name}", {"v": asset.digest})
    assert answer(docs.asset, made) == asset.body
    assert header(made, "Content-Type") == content_type
    assert header(made, "Cache-Control") == "public, max-age=31536000, immutable"
    assert header(made, "ETag") == f'"{asset.digest}"'


def test_a_file_asked_without_its_digest_is_revalidated_by_etag(docs):
    made = request("/docs/assets/docs.js")
    answer(docs.asset, made)
    assert header(made, "Cache-Control") == "no-cache"
    again = request("/docs/assets/docs.js", if_none_match=header(made, "ETag"))
    assert answer(docs.asset, again) == b""
    assert again.responseCode == 304


@pytest_twisted.ensureDeferred
async def test_the_installed_files_are_read_at_the_first_request_and_kept():
    docs = DocsPage()
    first, second = request("/docs/assets/docs.css"), request("/docs")
    css, page = await gatherResults(
        [Deferred.fromCoroutine(docs.asset(first, None)), Deferred.fromCoroutine(docs.page(second, None))]
    )
    assert css == load_assets()["docs.css"].body
    assert load_assets()["docs.css"].url in page.decode()
    assert answer(docs.asset, request("/docs/assets/docs.css")) == css  # from memory now: no waiting


def test_text_is_gzipped_when_asked_and_images_are_not(docs):
    asset = load_assets()["swagger-ui-bundle.js"]
    made = request("/docs/assets/swagger-ui-bundle.js", accept_encoding="gzip, deflate, br")
    body = answer(docs.asset, made)
    assert header(made, "Content-Encoding") == "gzip"
    assert gzip.decompress(body) == asset.body and len(body) < len(asset.body) / 2
    assert header(made, "ETag") == f'"{asset.digest}-gzip"'
    assert header(made, "Vary") == "Accept-Encoding"
    image = request("/docs/assets/favicon-32x32.png", accept_encoding="gzip")
    answer(docs.asset, image)
    assert header(image, "Content-Encoding") is None


@pytest.mark.parametrize(
    "value, expected",
    [
        ("gzip", True),
        ("br, gzip;q=0.5", True),
        ("GZIP", True),
        ("gzip;q=0", False),
        ("gzip; q=0.0", False),
        ("br", False),
        ("", False),
        ("x-gzip", False),
    ],
)
def test_accept_encoding_is_read_with_its_weights(value, expected):
    assert accepts_gzip(request("/", accept_encoding=value)) is expected


@pytest.mark.parametrize("name", ["index.html", "swagger-editor-bundle.js", "..", "__init__.py", "page.html", ""])
def test_nothing_but_the_listed_files_is_served(docs, name):
    with pytest.raises(NotFound):
        answer(docs.asset, request(f"/docs/assets/{name}"))


def test_a_route_with_a_variable_part_is_reserved_by_its_fixed_part():
    def handler():
        return None

    assert PublicRoute("/docs/assets/<name>", "GET", handler).reserved_as == "/docs/assets"
    assert PublicRoute("/docs", "GET", handler).reserved_as == "/docs"
    assert PublicRoute("/health/", "GET", handler).reserved_as == "/health"
    assert PublicRoute("/", "GET", handler).reserved_as == "/"
    routes = {route.reserved_as for route in DocsPage().routes()}
    assert routes == {"/docs", "/docs/assets"}
