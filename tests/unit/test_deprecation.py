"""The answer headers and the 410 of deprecated API versions (apid.calls.deprecation), on the sample
plugin's team.json with its version 2 deprecated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from twisted.web.test.requesthelper import DummyRequest

from apid.calls.deprecation import announce
from apid.calls.links import add_links
from apid.calls.paths import parse_target
from apid.config.files import load_api
from apid.iostate import RuleSet, parse_text
from apid.problems import Gone
from iostate_rules import SAMPLE_TEAM

ROOT = Path(__file__).resolve().parents[2]
SECURITY = load_api(ROOT / "etc" / "service_api.yml", ROOT).security
SINCE, SUNSET = 1767225600, 1782777600  # 2026-01-01, 2026-06-30
DOCS = '</docs>; rel="deprecation"; type="text/html"'


def rules(**version_2) -> RuleSet:
    team = json.loads(SAMPLE_TEAM.read_text())
    team["VERSION"]["2"].update(DEPRECATED="2026-01-01", **version_2)
    return RuleSet(controllers={"team": parse_text(json.dumps(team), "team.json", SECURITY)})


def answered(rule_set: RuleSet, prefix: str, action: str | None, now: float = SINCE) -> DummyRequest:
    request = DummyRequest([b""])
    announce(request, rule_set, parse_target("0.1", prefix, "team", action, None), "0.1", now)
    return request


def header(request: DummyRequest, name: bytes) -> list[bytes] | None:
    return request.responseHeaders.getRawHeaders(name)


def test_a_deprecated_version_names_its_successor_in_the_current_version():
    request = answered(rules(SUNSET="2026-06-30"), "b0.1-2", "show")
    assert header(request, b"Deprecation") == [f"@{SINCE}".encode()]
    assert header(request, b"Sunset") == [b"Tue, 30 Jun 2026 00:00:00 GMT"]
    assert header(request, b"Link") == [f'</b0.1/team/show>; rel="successor-version", {DOCS}'.encode()]


def test_without_an_action_the_successor_is_the_same_default_call():
    # version 2's default action is show, which version 1 has too
    assert header(answered(rules(), "v0.1-2", None), b"Link") == [
        f'</v0.1/team/show>; rel="successor-version", {DOCS}'.encode()
    ]


def test_an_action_the_current_version_lacks_leads_to_its_default_action():
    team = json.loads(SAMPLE_TEAM.read_text())
    team["VERSION"]["2"]["URI"]["legacy"] = team["VERSION"]["2"]["URI"]["show"]
    team["VERSION"]["2"]["DEPRECATED"] = "2026-01-01"
    rule_set = RuleSet(controllers={"team": parse_text(json.dumps(team), "team.json", SECURITY)})
    assert header(answered(rule_set, "v0.1-2", "legacy"), b"Link") == [
        f'</v0.1/team/list>; rel="successor-version", {DOCS}'.encode()
    ]


def test_current_and_unknown_versions_get_nothing():
    for prefix in ("v0.1", "v0.1-1", "v0.1-9"):
        request = answered(rules(), prefix, "show")
        assert [header(request, name) for name in (b"Deprecation", b"Sunset", b"Link")] == [None, None, None]


def test_the_version_is_gone_from_its_sunset_on():
    assert header(answered(rules(SUNSET="2026-06-30"), "v0.1-2", "show", now=SUNSET - 0.5), b"Sunset")
    request = DummyRequest([b""])
    with pytest.raises(Gone) as gone:
        announce(request, rules(SUNSET="2026-06-30"), parse_target("0.1", "c0.1-2", "team", "show", "4"), "0.1", SUNSET)
    assert gone.value.status == 410
    assert gone.value.extensions == {"currentApiVersion": "1", "successor": "/c0.1/team/show"}
    assert header(request, b"Deprecation") == [f"@{SINCE}".encode()]  # the 410 carries them too


def test_added_links_join_those_already_set():
    request = answered(rules(), "v0.1-2", "show")
    add_links(request, '</v0.1-2/team/show/1>; rel="self"; method="GET"')
    assert header(request, b"Link") == [
        f'</v0.1/team/show>; rel="successor-version", {DOCS}, </v0.1-2/team/show/1>; rel="self"; method="GET"'.encode()
    ]
