"""Answers of GET calls (apid.calls.caching): ETag and 304, CACHE in IO State, the cache key, and
invalidation here at once and in other daemons through the change counters."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet.task import Clock
from twisted.web.test.requesthelper import DummyRequest

from apid.calls.caching import CHECK_SECONDS, AnswerCache, answer, cache_key, entity_tag
from apid.calls.pipeline import CallRequest, CallResult
from apid.config.files import load_api
from apid.config.kinds import API_FILE
from apid.iostate import IOStateError, check_shared_caches, parse
from apid.iostate.loader import UPDATECACHE_AGE
from apid.iostate.model import CachePolicy
from apid.plugin import action, action_rules
from apid_person import PersonController
from apid_sample import TeamController

REPO = Path(__file__).resolve().parents[2]
TEAM_FILE = REPO / "tests" / "sample_plugin" / "apid_sample" / "iostate" / "team.json"
PERSON_FILE = REPO / "iostate" / "person.json"
SOURCE = "team.json"


@pytest.fixture(scope="module")
def security():
    return load_api(REPO / "etc" / API_FILE, REPO).security


@pytest.fixture
def team() -> dict:
    return json.loads(TEAM_FILE.read_text(encoding="utf-8"))


def actions(team: dict) -> dict:
    return team["VERSION"]["1"]["URI"]


def endpoint_of(team: dict, security, action: str = "show"):
    return parse(team, SOURCE, security).versions["1"].endpoints[action]


# --- IO State ---------------------------------------------------------------------------------------


def test_cache_declares_max_age_and_sharing(team, security):
    actions(team)["show"]["CACHE"] = {"maxAge": 60}
    actions(team)["list"]["CACHE"] = {"maxAge": 5, "shared": True}
    state = parse(team, SOURCE, security)
    endpoints = state.versions["1"].endpoints
    assert endpoints["show"].cache == CachePolicy(60, shared=False)
    assert endpoints["list"].cache == CachePolicy(5, shared=True)
    assert endpoints["byLeader"].cache is None
    assert state.caches


def test_updatecache_is_the_original_frameworks_form(team, security):
    actions(team)["show"]["UPDATECACHE"] = True
    actions(team)["list"]["UPDATECACHE"] = False
    actions(team)["create"]["UPDATECACHE"] = True  # written on writing actions too: no effect there
    endpoints = parse(team, SOURCE, security).versions["1"].endpoints
    assert endpoints["show"].cache == CachePolicy(UPDATECACHE_AGE)
    assert endpoints["list"].cache is None
    assert endpoints["create"].cache is None


@pytest.mark.parametrize(
    "entry, fragments",
    [
        ({"CACHE": {"maxAge": 0}}, ["CACHE", "maxAge must be a whole number of at least 1"]),
        ({"CACHE": {"maxAge": "60"}}, ["CACHE", "maxAge must be"]),
        ({"CACHE": {}}, ["CACHE", "maxAge must be"]),
        ({"CACHE": {"maxAge": 60, "public": True}}, ["CACHE", "unknown members ['public']"]),
        ({"CACHE": {"maxAge": 60, "shared": "yes"}}, ["shared must be true or false"]),
        ({"CACHE": 60}, ["CACHE must be a JSON object"]),
        ({"UPDATECACHE": "true"}, ["UPDATECACHE must be true or false"]),
        ({"CACHE": {"maxAge": 60}, "UPDATECACHE": True}, ["give CACHE or UPDATECACHE, not both"]),
    ],
)
def test_a_bad_cache_is_refused_naming_where(team, security, entry, fragments):
    actions(team)["show"].update(entry)
    with pytest.raises(IOStateError) as info:
        parse(team, SOURCE, security)
    message = str(info.value)
    assert message.startswith(f"{SOURCE}: controller team, version 1, action show")
    for fragment in fragments:
        assert fragment in message


def test_cache_on_a_writing_action_is_refused(team, security):
    actions(team)["create"]["CACHE"] = {"maxAge": 60}
    with pytest.raises(IOStateError, match="action create, CACHE: only a GET action's answers are cached"):
        parse(team, SOURCE, security)


# --- a shared cache only where the action declares its answer caller-independent ----------------


def person_state(security, cache: dict):
    document = json.loads(PERSON_FILE.read_text(encoding="utf-8"))
    document["IOSTATE"]["VERSION"]["1"]["URI"]["show"]["CACHE"] = cache
    return parse(document, "person.json", security)


def caller_independent(controller) -> list[str]:
    return [name for name, handler in controller.actions().items() if action_rules(handler).caller_independent]


def test_a_shared_cache_on_an_action_not_declared_caller_independent_is_refused_naming_where(security):
    # person/show lets a caller read only their own record: a shared answer would skip that check
    state = person_state(security, {"maxAge": 60, "shared": True})
    with pytest.raises(IOStateError) as info:
        check_shared_caches(state, caller_independent(PersonController), "apid-person")
    message = str(info.value)
    assert message.startswith(
        'person.json: controller person, version 1, action show, CACHE: "shared": true is '
        "refused: the controller of apid-person does not declare show caller-independent"
    )
    assert "@action(caller_independent=True)" in message


def test_a_cache_per_caller_is_accepted_on_any_action(security):
    check_shared_caches(person_state(security, {"maxAge": 60}), caller_independent(PersonController), "apid-person")
    check_shared_caches(person_state(security, {"maxAge": 60, "shared": False}), [], "apid-person")


def test_a_shared_cache_on_an_action_declared_caller_independent_is_accepted(team, security):
    assert set(caller_independent(TeamController)) == {"show", "list"}
    actions(team)["show"]["CACHE"] = {"maxAge": 60, "shared": True}
    actions(team)["list"]["CACHE"] = {"maxAge": 5, "shared": True}
    check_shared_caches(parse(team, SOURCE, security), caller_independent(TeamController), "apid-sample")
    actions(team)["byLeader"]["CACHE"] = {"maxAge": 5, "shared": True}  # not declared: refused
    with pytest.raises(IOStateError, match="version 1, action byLeader, CACHE"):
        check_shared_caches(parse(team, SOURCE, security), caller_independent(TeamController), "apid-sample")


def test_an_action_declares_itself_caller_independent_only_when_asked():
    assert action_rules(action(lambda self, call: None)).caller_independent is False
    assert action_rules(action(requires=("id",))(lambda self, call: None)).caller_independent is False
    assert action_rules(action(caller_independent=True)(lambda self, call: None)).caller_independent is True


# --- ETag and 304 ----------------------------------------------------------------------------------


def answered(endpoint, body: bytes, if_none_match: str | None = None) -> tuple[DummyRequest, bytes]:
    request = DummyRequest([b""])
    held = None if if_none_match is None else if_none_match.encode()
    return request, answer(request, body, entity_tag(body), endpoint, held)


def test_every_get_answer_has_a_strong_etag_and_no_cache(team, security):
    request, body = answered(endpoint_of(team, security), b'{"id":1}')
    assert body == b'{"id":1}'
    tag = request.responseHeaders.getRawHeaders(b"ETag")[0]
    assert tag.startswith(b'"') and tag.endswith(b'"') and len(tag) == 34
    assert tag != entity_tag(b'{"id":2}')
    assert request.responseHeaders.getRawHeaders(b"Cache-Control") == [b"no-store"]


def test_a_cached_action_tells_clients_its_max_age_privately(team, security):
    actions(team)["show"]["CACHE"] = {"maxAge": 60, "shared": True}
    request, _ = answered(endpoint_of(team, security), b"{}")
    assert request.responseHeaders.getRawHeaders(b"Cache-Control") == [b"private, max-age=60"]


@pytest.mark.parametrize("condition", ["{tag}", "W/{tag}", '"other", {tag}', "*"])
def test_if_none_match_naming_the_tag_is_304_without_a_body(team, security, condition):
    tag = entity_tag(b'{"id":1}').decode()
    request, body = answered(endpoint_of(team, security), b'{"id":1}', condition.format(tag=tag))
    assert request.responseCode == 304 and body == b""
    assert request.responseHeaders.getRawHeaders(b"ETag") == [tag.encode()]


def test_if_none_match_naming_another_tag_gets_the_body(team, security):
    request, body = answered(endpoint_of(team, security), b'{"id":1}', entity_tag(b'{"id":2}').decode())
    assert request.responseCode in (None, 200) and body == b'{"id":1}'


# --- the key ----------------------------------------------------------------------------------------


def show_request(id_: str) -> CallRequest:
    return CallRequest("team", "show", None, "GET", text={"id": [id_]})


def test_the_key_separates_callers_unless_shared_and_always_roles_and_fields(team, security):
    actions(team)["show"]["CACHE"] = {"maxAge": 60}
    personal = endpoint_of(team, security)
    shared = replace(personal, cache=CachePolicy(60, shared=True))
    user, admin = frozenset({"ROLE_USER"}), frozenset({"ROLE_ADMIN"})
    assert cache_key(personal, user, 1, show_request("1")) != cache_key(personal, user, 2, show_request("1"))
    assert cache_key(shared, user, 1, show_request("1")) == cache_key(shared, user, 2, show_request("1"))
    assert cache_key(shared, user, 1, show_request("1")) != cache_key(shared, admin, 1, show_request("1"))
    assert cache_key(shared, user, 1, show_request("1")) != cache_key(shared, user, 1, show_request("2"))
    body = CallRequest("team", "show", None, "GET", body={"id": 1, "x": 2})
    same = CallRequest("team", "show", None, "GET", body={"x": 2, "id": 1})
    assert cache_key(shared, user, 1, body) == cache_key(shared, user, 1, same)


# --- the cache and its invalidation ---------------------------------------------------------------


def cached_show(team: dict, security, max_age: int = 60):
    actions(team)["show"]["CACHE"] = {"maxAge": max_age}
    return endpoint_of(team, security)


def remember(cache: AnswerCache, endpoint, key, generation: int | None = None) -> None:
    generation = cache.generation(endpoint.controller) if generation is None else generation
    cache.put(key, CallResult(endpoint, frozenset({"ROLE_USER"}), {"id": 1}), b'{"id":1}', b'"t"', generation)


@pytest_twisted.ensureDeferred
async def test_an_answer_is_served_until_its_max_age(team, security, database):
    endpoint, clock = cached_show(team, security, max_age=5), Clock()
    cache, key = AnswerCache(clock=clock, db=database), ("k",)
    remember(cache, endpoint, key)
    assert (await cache.get(key, endpoint)).body == b'{"id":1}'
    clock.advance(4.9)
    assert await cache.get(key, endpoint) is not None
    clock.advance(0.1)
    assert await cache.get(key, endpoint) is None


@pytest_twisted.ensureDeferred
async def test_a_reloaded_endpoint_misses(team, security, database):
    endpoint = cached_show(team, security)
    cache = AnswerCache(clock=Clock(), db=database)
    remember(cache, endpoint, ("k",))
    assert await cache.get(("k",), cached_show(team, security)) is None


@pytest_twisted.ensureDeferred
async def test_the_least_recently_used_answer_goes_first(team, security, database):
    endpoint = cached_show(team, security)
    cache = AnswerCache(clock=Clock(), db=database, max_entries=2)
    remember(cache, endpoint, ("a",))
    remember(cache, endpoint, ("b",))
    assert await cache.get(("a",), endpoint) is not None
    remember(cache, endpoint, ("c",))
    assert await cache.get(("b",), endpoint) is None
    assert await cache.get(("a",), endpoint) is not None


@pytest_twisted.ensureDeferred
async def test_a_write_drops_the_controllers_answers_at_once(team, security, database):
    endpoint = cached_show(team, security)
    cache = AnswerCache(clock=Clock(), db=database)
    remember(cache, endpoint, ("k",))
    await cache.changed(["person"])
    assert await cache.get(("k",), endpoint) is not None
    await cache.changed(["team"])
    assert await cache.get(("k",), endpoint) is None


def test_an_answer_a_write_overtook_is_not_kept(team, security, database):
    endpoint = cached_show(team, security)
    cache = AnswerCache(clock=Clock(), db=database)
    before = cache.generation("team")
    cache._move(["team"])  # a write finished while the GET ran
    remember(cache, endpoint, ("k",), generation=before)
    assert ("k",) not in cache._entries


@pytest_twisted.ensureDeferred
async def test_a_write_on_another_daemon_drops_answers_within_a_second(team, security, database):
    endpoint = cached_show(team, security)
    here_clock, there_clock = Clock(), Clock()
    here, there = AnswerCache(clock=here_clock, db=database), AnswerCache(clock=there_clock, db=database)
    remember(here, endpoint, ("k",))
    assert await here.get(("k",), endpoint) is not None  # reads the counters
    await there.changed(["team"])
    here_clock.advance(CHECK_SECONDS - 0.01)
    assert await here.get(("k",), endpoint) is not None  # counters read less than a second ago
    here_clock.advance(0.01)
    assert await here.get(("k",), endpoint) is None
    remember(here, endpoint, ("k",))
    here_clock.advance(CHECK_SECONDS)
    assert await here.get(("k",), endpoint) is not None  # the change is seen once


@pytest_twisted.ensureDeferred
async def test_a_daemons_own_write_is_not_taken_for_another_change(team, security, database):
    endpoint, clock = cached_show(team, security), Clock()
    here, there = AnswerCache(clock=clock, db=database), AnswerCache(clock=Clock(), db=database)
    assert await here.get(("k",), endpoint) is None  # reads the counters
    await here.changed(["team"])
    remember(here, endpoint, ("k",))
    clock.advance(CHECK_SECONDS)
    assert await here.get(("k",), endpoint) is not None
    # with another daemon's change unseen, this daemon's next write leaves it for the next read
    await there.changed(["team"])
    await here.changed(["team"])
    remember(here, endpoint, ("k",))
    clock.advance(CHECK_SECONDS)
    assert await here.get(("k",), endpoint) is None
