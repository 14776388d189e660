"""A page on a second origin calls apid from a real browser (headless Chromium): it logs in,
reads a record's ETag (exposed by CORS), gets a 304 sending it back in If-None-Match, reads a
gzip-compressed list and revalidates it, and writes with If-Match: a stale tag is a 412 it can
read, the current one makes the change. The preflights for If-None-Match and If-Match are the
browser's own."""

from __future__ import annotations

import pytest

from browsers import headless_chromium, second_origin
from harness import ADMIN, deployment_with_accounts, new_person, show_person

PAGE = b"<!doctype html><title>another origin</title><p>an SDK user's page"

# Runs in the page, on the second origin; calls back with what it saw.
FLOW = """
const [base, username, password, personId, done] = arguments;
(async () => {
  const seen = {};
  const login = await fetch(`${base}/authenticate`, {
    method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify({username, password}),
  });
  const auth = {"Authorization": `Bearer ${(await login.json()).token}`};
  const show = `${base}/v0.1/person/show/${personId}`;

  const first = await fetch(show, {headers: auth});
  seen.tag = first.headers.get("ETag");
  seen.version = (await first.json()).version;
  const again = await fetch(show, {headers: {...auth, "If-None-Match": seen.tag}});
  seen.revalidated = again.status;

  const list = `${base}/v0.1/person/list?max=50`;
  const listed = await fetch(list, {headers: auth});
  seen.listTag = listed.headers.get("ETag");
  seen.listLength = (await listed.json()).length;
  seen.listRevalidated = (await fetch(list, {headers: {...auth, "If-None-Match": seen.listTag}})).status;

  const update = `${base}/v0.1/person/update/${personId}`;
  const write = (tag, email) => fetch(update, {
    method: "PUT", headers: {...auth, "Content-Type": "application/json", "If-Match": tag},
    body: JSON.stringify({email}),
  });
  const stale = await write('"deadbeef"', "stale@example.com");
  seen.stale = [stale.status, (await stale.json()).type];
  const current = await write(seen.tag, "browser@example.com");
  seen.current = [current.status, await current.json()];
  done(seen);
})().catch((error) => done({error: String(error)}));
"""


@pytest.fixture(scope="module")
def page_origin():
    with second_origin(PAGE) as origin:
        yield origin


@pytest.fixture(scope="module")
def deployment(tmp_path_factory, page_origin):
    return deployment_with_accounts(tmp_path_factory.mktemp("apid"), api={"cors": {"allowedOrigins": [page_origin]}})


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    with headless_chromium(tmp_path_factory.mktemp("chromium-profile")) as driver:
        yield driver


def test_a_page_on_another_origin_revalidates_and_writes_conditionally(daemon, admin_token, browser, page_origin):
    for _ in range(6):  # a list over the compression threshold
        someone = new_person(daemon, admin_token)
    browser.get(f"{page_origin}/")
    base = f"http://127.0.0.1:{daemon.port}"
    seen = browser.execute_async_script(FLOW, base, ADMIN[0], ADMIN[1], someone["id"])

    assert "error" not in seen, seen
    assert seen["tag"] and seen["tag"].startswith('"'), seen  # exposed: a page can read it
    assert seen["revalidated"] == 304
    assert seen["listLength"] >= 8
    assert seen["listTag"].endswith('-gzip"'), seen  # Chromium asked for gzip, and decoded it
    assert seen["listRevalidated"] == 304
    assert seen["stale"] == [412, "urn:apid:problem:precondition-failed"]
    assert seen["current"] == [200, {"id": someone["id"], "version": seen["version"] + 1}]
    assert show_person(daemon, admin_token, someone["id"])["email"] == "browser@example.com"

    # nothing refused by CORS: the one error logged is the stale write's 412, a failed resource to Chromium
    errors = [entry["message"] for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert len(errors) == 1 and "412" in errors[0], errors
