"""Debian's headless Chromium driven by Selenium, for the tests that need a real browser: its
CORS, its HTTP cache and its gzip are what a page of an SDK user meets.

Without Chromium a test using it is skipped, except on CI (`CI` set), where it fails:
scripts/system-deps installs it there.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from selenium import webdriver

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
WAIT_SECONDS = 15
# Headless, and quiet: without the background-networking flags Chromium reaches out to
# Google's services, which a closed network refuses (and which would be requests to other hosts).
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,1400",
]


def chromium_or_skip() -> None:
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not os.access(path, os.X_OK)]
    if not missing:
        return
    message = (
        f"this browser test needs Debian's chromium and chromium-driver ({', '.join(missing)} "
        "missing): run scripts/system-deps as root, or apt-get install chromium chromium-driver"
    )
    if os.environ.get("CI"):
        pytest.fail(message + " (on CI this test must run)")
    pytest.skip(message)


@contextmanager
def headless_chromium(profile: Path) -> Iterator[webdriver.Chrome]:
    """Chromium with a fresh profile in `profile`, its console and network events logged."""
    chromium_or_skip()
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=CHROMEDRIVER))
    driver.set_page_load_timeout(WAIT_SECONDS)
    driver.set_script_timeout(WAIT_SECONDS)
    try:
        yield driver
    finally:
        driver.quit()


@contextmanager
def second_origin(page: bytes) -> Iterator[str]:
    """Another origin than apid's: `page` (HTML) served from another port of loopback; its origin."""

    class Page(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *_args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
