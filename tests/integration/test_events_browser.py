"""The live event stream in a real browser (headless Chromium): a page on a second origin logs
in, asks for a stream ticket and opens an `EventSource`, as docs/events.md shows. It receives
a change; the daemon stops, a change is made meanwhile (`apid user add`) and the daemon starts
again on the same port; the page, its spent ticket refused, asks for another and resumes with
the last id it saw: it gets the change it missed, then the next one, each once and in order."""

from __future__ import annotations

import pytest

from browsers import WAIT_SECONDS, headless_chromium, second_origin
from harness import ADMIN, Daemon, deployment_with_accounts, free_port, new_person, wait_for

PAGE = b"<!doctype html><title>a dashboard</title><p>another origin"

# Runs in the page, on the second origin: subscribes as docs/events.md says, and keeps what it hears.
SUBSCRIBE = """
const [base, username, password, done] = arguments;
window.heard = []; window.opened = 0; window.refused = 0;
(async () => {
  const login = await fetch(`${base}/authenticate`, {
    method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify({username, password}),
  });
  const token = (await login.json()).token;
  async function subscribe() {
    const asked = await fetch(`${base}/events/ticket`, {method: "POST", headers: {Authorization: `Bearer ${token}`}});
    const {ticket} = await asked.json();
    const last = window.heard.length ? `&lastEventId=${window.heard[window.heard.length - 1].id}` : "";
    const source = new EventSource(`${base}/events?ticket=${ticket}&services=person${last}`);
    source.onopen = () => { window.opened += 1; };
    source.addEventListener("person/create", (event) => {
      window.heard.push({id: event.lastEventId, data: JSON.parse(event.data).data});
    });
    source.onerror = () => {
      if (source.readyState === EventSource.CLOSED) {  // the spent ticket refused: a new one, resuming
        window.refused += 1;
        setTimeout(() => subscribe().catch(() => setTimeout(subscribe, 500)), 200);
      }
    };
  }
  await subscribe();
  done(true);
})().catch((error) => done(String(error)));
"""


@pytest.fixture
def page_origin():
    with second_origin(PAGE) as origin:
        yield origin


def heard(browser) -> list[dict]:
    return browser.execute_script("return window.heard")


def test_an_event_source_on_another_origin_receives_and_resumes_after_a_restart(tmp_path, page_origin):
    deployment = deployment_with_accounts(tmp_path / "apid", api={"cors": {"allowedOrigins": [page_origin]}})
    listen = f"tcp:{free_port()}:interface=127.0.0.1"
    daemon = Daemon(deployment, listen=listen).start()
    try:
        with headless_chromium(tmp_path / "chromium-profile") as browser:
            browser.set_script_timeout(WAIT_SECONDS)
            browser.get(page_origin)
            base = f"http://127.0.0.1:{daemon.port}"
            assert browser.execute_async_script(SUBSCRIBE, base, ADMIN[0], ADMIN[1]) is True
            assert wait_for(lambda: browser.execute_script("return window.opened") == 1, timeout=WAIT_SECONDS)

            first = new_person(daemon, daemon.login(*ADMIN[:2]))
            assert wait_for(lambda: [event["data"]["id"] for event in heard(browser)] == [first["id"]], timeout=5)

            daemon.stop()
            deployment.add_user("missed", "missed-password-1", "missed@example.com", "ROLE_USER")  # while it is down
            daemon = Daemon(deployment, listen=listen).start()

            assert wait_for(lambda: len(heard(browser)) == 2, timeout=WAIT_SECONDS)
            assert browser.execute_script("return window.refused") >= 1  # the spent ticket, refused once back
            after = new_person(daemon, daemon.login(*ADMIN[:2]))
            assert wait_for(lambda: len(heard(browser)) == 3, timeout=5)
            events = heard(browser)
            people = {
                person["username"]: person["id"]
                for person in daemon.request("GET", "/v0.1/person/list", token=daemon.login(*ADMIN[:2])).json
            }
            assert [event["data"]["id"] for event in events] == [first["id"], people["missed"], after["id"]]
            ids = [int(event["id"]) for event in events]
            assert ids == sorted(set(ids))  # each once, in order
    finally:
        daemon.stop()
