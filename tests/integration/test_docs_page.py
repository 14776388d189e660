"""The /docs page over HTTP from the real daemon: public through `reservedUris`, with the
daemon's answer headers, its Content-Security-Policy and cacheable files.
(test_docs_browser.py drives it in a browser.)"""

from __future__ import annotations

import re

import yaml

from harness import REPO, deployment_with_accounts, running_daemon


def test_the_page_and_its_files_answer_without_a_token(daemon):
    page = daemon.request("GET", "/docs")
    assert page.status == 200
    assert page.content_type == "text/html; charset=utf-8"
    assert page.headers["X-Content-Type-Options"] == "nosniff"
    assert page.headers["Server"] == "apid"
    assert page.headers["Cache-Control"] == "no-store"
    assert page.headers["Content-Security-Policy"].startswith("default-src 'none'; script-src 'self'")
    urls = re.findall(r'(?:href|src)="([^"]+)"', page.body.decode())
    assert len(urls) == 6 and all(url.startswith("/docs/assets/") for url in urls)
    for url in urls:
        asset = daemon.request("GET", url)
        assert asset.status == 200, url
        assert asset.headers["X-Content-Type-Options"] == "nosniff"
        assert asset.headers["Cache-Control"] == "public, max-age=31536000, immutable"
        assert asset.content_type.split(";")[0] in ("text/javascript", "text/css", "image/png", "text/html")
    assert daemon.request("GET", "/docs/assets/index.html").status == 404


def test_the_page_needs_a_token_when_not_listed_in_reserved_uris(tmp_path):
    shipped = yaml.safe_load((REPO / "etc/service_api.yml").read_text())["reservedUris"]
    reserved = [uri for uri in shipped if not uri.startswith("/docs")]
    deployment = deployment_with_accounts(tmp_path, api={"reservedUris": reserved}, accounts=())
    with running_daemon(deployment) as daemon:
        for path in ("/docs", "/docs/assets/docs.js"):
            reply = daemon.request("GET", path)
            assert reply.status == 401, path
            assert reply.content_type == "application/problem+json"
