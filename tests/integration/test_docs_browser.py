"""The /docs page in a real browser (Debian's headless Chromium, driven by Selenium): it shows
the OpenAPI document of whoever logs in, calls "Try it out" with their token, breaks no rule of
its Content-Security-Policy, and asks nothing of any host but the daemon.

Screenshots go to tests/output/docs_browser/ (ignored by git). Chromium as tests/browsers.py
runs it: skipped without it, except on CI.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from selenium.common.exceptions import TimeoutException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from browsers import WAIT_SECONDS, headless_chromium
from harness import ADMIN, REPO, USER

OUTPUT = REPO / "tests" / "output" / "docs_browser"


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    with headless_chromium(tmp_path_factory.mktemp("chromium-profile")) as driver:
        yield driver


@pytest.fixture(scope="module")
def output() -> Path:
    OUTPUT.mkdir(parents=True, exist_ok=True)
    return OUTPUT


def shown_paths(driver) -> set[str]:
    """The operation paths Swagger UI shows (`/v0.1/person/list`, ...)."""
    return {
        element.get_attribute("data-path") or element.text
        for element in driver.find_elements(By.CSS_SELECTOR, ".opblock-summary-path")
    }


def has_path(paths: set[str], action: str) -> bool:
    return any(path.rstrip("/").endswith(action) or f"{action}/" in path for path in paths)


def wait_for_paths(driver, present: list[str], absent: list[str]) -> set[str]:
    """Wait until the document shown has every `present` action and none of `absent`."""

    def settled(_driver):
        paths = shown_paths(driver)
        ok = all(has_path(paths, a) for a in present) and not any(has_path(paths, a) for a in absent)
        return paths if ok else False

    try:
        return WebDriverWait(driver, WAIT_SECONDS).until(settled)
    except TimeoutException:
        raise AssertionError(f"shown: {sorted(shown_paths(driver))}, wanted {present} and not {absent}") from None


def log_in(driver, username: str, password: str) -> None:
    for field, value in (("login-username", username), ("login-password", password)):
        element = driver.find_element(By.ID, field)
        element.clear()
        element.send_keys(value)
    driver.find_element(By.ID, "login-button").click()
    WebDriverWait(driver, WAIT_SECONDS).until(
        lambda d: (
            f"Logged in as {username}" in d.find_element(By.ID, "login-state").text
            or d.find_element(By.ID, "login-error").text
        )
    )
    assert driver.find_element(By.ID, "login-error").text == ""


def try_it_out(driver, action: str) -> str:
    """Open the operation, press Try it out and Execute; the status code it got."""
    block = next(
        element
        for element in driver.find_elements(By.CSS_SELECTOR, ".opblock")
        if element.find_element(By.CSS_SELECTOR, ".opblock-summary-path")
        .get_attribute("data-path")
        .rstrip("/")
        .endswith(action)
    )
    block.find_element(By.CSS_SELECTOR, ".opblock-summary").click()
    for button in (".try-out__btn", ".execute"):
        WebDriverWait(driver, WAIT_SECONDS).until(lambda d, button=button: block.find_elements(By.CSS_SELECTOR, button))
        block.find_element(By.CSS_SELECTOR, button).click()
    status = WebDriverWait(driver, WAIT_SECONDS).until(
        lambda d: block.find_elements(By.CSS_SELECTOR, ".live-responses-table tbody .response-col_status")
    )
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", status[0])
    return status[0].text.strip()


def requested_urls(driver) -> list[str]:
    """Every URL the browser asked a host for (http, https, ws, wss), from Chromium's network
    events since the last call; its own chrome:// pages and data: URLs ask no host."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            url = message["params"]["request"]["url"]
            if url.split(":", 1)[0].lower() in ("http", "https", "ws", "wss"):
                urls.append(url)
    return urls


def test_each_caller_sees_their_own_endpoints_and_nothing_leaves_the_daemon(daemon, browser, output):
    origin = f"http://127.0.0.1:{daemon.port}"
    requested_urls(browser)  # what the browser did before: its start page
    browser.get(f"{origin}/docs")
    anonymous = wait_for_paths(browser, ["/authenticate"], ["person/list", "person/create"])
    assert "Not logged in" in browser.find_element(By.ID, "login-state").text

    log_in(browser, ADMIN[0], ADMIN[1])
    admin = wait_for_paths(browser, ["person/create", "person/list", "person/show"], [])
    assert "ROLE_ADMIN" in browser.find_element(By.ID, "login-state").text
    assert len(admin) > len(anonymous)
    assert browser.find_elements(By.CSS_SELECTOR, ".btn.authorize.locked")  # Swagger UI knows the token
    browser.save_screenshot(str(output / "docs-admin.png"))
    status = try_it_out(browser, "person/list")
    assert status == "200", status  # the call carried the admin's token
    browser.save_screenshot(str(output / "docs-admin-try-it-out.png"))
    browser.execute_script("window.scrollTo(0, 0)")

    log_in(browser, USER[0], USER[1])
    user = wait_for_paths(browser, ["person/show"], ["person/list", "person/create"])
    assert "ROLE_USER" in browser.find_element(By.ID, "login-state").text
    assert user < admin
    browser.save_screenshot(str(output / "docs-user.png"))

    urls = requested_urls(browser)
    assert any(url.startswith(f"{origin}/docs/assets/swagger-ui-bundle.js") for url in urls)
    assert any(url.startswith(f"{origin}/openapi.json") for url in urls)
    elsewhere = [url for url in urls if not url.startswith(f"{origin}/")]
    assert elsewhere == [], elsewhere

    console = browser.get_log("browser")
    assert [e["message"] for e in console if "Content Security Policy" in e["message"]] == []
    assert [e["message"] for e in console if e["level"] == "SEVERE"] == []


def test_the_token_is_kept_in_memory_only(daemon, browser):
    """After a login the page stored nothing: a token in web storage outlives the page and
    is readable by any script of the origin."""
    browser.get(f"http://127.0.0.1:{daemon.port}/docs")
    WebDriverWait(browser, WAIT_SECONDS).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".opblock"))
    log_in(browser, USER[0], USER[1])
    stored = browser.execute_script(
        "return [window.localStorage.length, window.sessionStorage.length, document.cookie]"
    )
    assert stored == [0, 0, ""]  # the refresh cookie is HttpOnly: not readable by script


def test_a_pasted_api_key_shows_and_calls_what_its_roles_may(daemon, browser, admin_token):
    """A key goes where the token goes, kept in page memory as well; forgetting it ends no login."""
    created = daemon.request(
        "POST",
        "/v0.1/apikey/create",
        {"name": "docs", "roles": ["ROLE_ADMIN"], "currentPassword": ADMIN[1]},
        token=admin_token,
    )
    assert created.status == 200, created.body
    key = created.json["key"]
    browser.get(f"http://127.0.0.1:{daemon.port}/docs")
    WebDriverWait(browser, WAIT_SECONDS).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".opblock"))
    browser.find_element(By.ID, "login-key").send_keys(key)
    browser.find_element(By.ID, "key-button").click()
    wait_for_paths(browser, ["person/list", "person/create"], [])
    assert f"Using API key {key[:17]}" in browser.find_element(By.ID, "login-state").text
    assert key not in browser.page_source
    assert try_it_out(browser, "person/list") == "200"  # the call carried the key
    stored = browser.execute_script("return [window.localStorage.length, window.sessionStorage.length]")
    assert stored == [0, 0]
