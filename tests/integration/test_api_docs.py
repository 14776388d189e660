"""The API described through the running daemon: `/v0.1/apidoc/show` and `/openapi.json` per role,
after a reload, and `apid openapi` offline. Every expectation is worked out from the IO State
files of the deployment (tests/iostate_rules.py), never written out by hand."""

from __future__ import annotations

import json
import re
import signal

import pytest
from openapi_spec_validator import OpenAPIV31SpecValidator, validate

from assertions import assert_problem
from harness import ADMIN, USER, Daemon, V, wait_for
from iostate_rules import (
    SAMPLE_TEAM,
    documented_calls,
    expected_api_paths,
    expected_calls,
    network_roles,
    read_states,
)

ADMIN_ROLE, USER_ROLE = "ROLE_ADMIN", "ROLE_USER"
API_PATH = re.compile(r"/[vbc][0-9]+\.[0-9]+")
ALLOWED_ORIGIN = "http://localhost:3000"


def states(daemon: Daemon) -> list[dict]:
    return read_states(daemon.deployment.root / "iostate", SAMPLE_TEAM)


def groups(daemon: Daemon) -> dict:
    return network_roles(daemon.deployment.config_dir / "service_api.yml")


def apidoc(daemon: Daemon, token: str, query: str = "") -> dict:
    reply = daemon.request("GET", f"{V}/apidoc/show{query}", token=token)
    assert reply.status == 200, reply.body
    assert reply.content_type == "application/json"
    return reply.json


def openapi(daemon: Daemon, token: str | None = None) -> dict:
    reply = daemon.request("GET", "/openapi.json", token=token)
    assert reply.status == 200, reply.body
    assert reply.content_type == "application/json"
    document = reply.json
    validate(document, cls=OpenAPIV31SpecValidator)
    return document


def api_operations(document: dict) -> set[tuple[str, str]]:
    return {(path, method) for path, item in document["paths"].items() if API_PATH.match(path) for method in item}


# --- apidoc/show ----------------------------------------------------------------------------------


@pytest.mark.parametrize("who, roles", [(ADMIN, {ADMIN_ROLE}), (USER, {USER_ROLE})])
def test_apidoc_show_describes_what_the_callers_roles_may_call(daemon, who, roles):
    document = apidoc(daemon, daemon.login(*who[:2]))
    assert document["roles"] == sorted(roles)
    assert document["version"] == "0.1"
    assert documented_calls(document) == expected_calls(states(daemon), roles, groups(daemon))


def test_the_admin_and_user_documents_differ_exactly_as_their_io_state_does(daemon, admin_token, user_token):
    admin, user = documented_calls(apidoc(daemon, admin_token)), documented_calls(apidoc(daemon, user_token))
    expected_admin = expected_calls(states(daemon), {ADMIN_ROLE}, groups(daemon))
    expected_user = expected_calls(states(daemon), {USER_ROLE}, groups(daemon))
    assert set(admin) - set(user) == set(expected_admin) - set(expected_user) != set()
    assert (
        {k for k in set(admin) & set(user) if admin[k] != user[k]}
        == {k for k in set(expected_admin) & set(expected_user) if expected_admin[k] != expected_user[k]}
        != set()
    )
    assert "ROLE_ADMIN" not in json.dumps(apidoc(daemon, user_token))


def test_apidoc_show_narrows_to_one_controller_the_caller_may_call(daemon, user_token):
    person = apidoc(daemon, user_token, "?controller=person")
    assert set(person["controllers"]) == {"person"}
    show = person["controllers"]["person"]["versions"]["1"]["actions"]["show"]
    assert show["paths"]["v"] == [f"{V}/person/show", f"{V}/person/show/{{id}}", f"{V}/person"]
    assert show["request"]["id"] == {
        "type": "Long",
        "description": "Person id",
        "mockData": 1,
        "key": "PKEY",
        "reference": None,
    }
    refused = daemon.request("GET", f"{V}/apidoc/show?controller=server", token=user_token)
    assert_problem(refused, 404)


def test_apidoc_show_needs_a_token_and_a_role_its_io_state_admits(daemon):
    assert_problem(daemon.request("GET", f"{V}/apidoc/show"), 401)
    assert_problem(daemon.request("POST", f"{V}/apidoc/show", {}, token=daemon.login(*USER[:2])), 405)


# --- /openapi.json ----------------------------------------------------------------------------------


def test_openapi_without_a_token_lists_only_the_endpoints_that_need_none(daemon):
    document = openapi(daemon)
    assert not api_operations(document)
    assert {"/authenticate", "/register", "/health", "/openapi.json"} <= set(document["paths"])
    assert "/teamCount" not in document["paths"]


@pytest.mark.parametrize("who, roles", [(ADMIN, {ADMIN_ROLE}), (USER, {USER_ROLE})])
def test_openapi_with_a_token_describes_the_callers_api(daemon, who, roles):
    document = openapi(daemon, daemon.login(*who[:2]))
    assert api_operations(document) == expected_api_paths(states(daemon), roles, groups(daemon), "0.1")
    assert "/teamCount" in document["paths"]  # a plugin route: any logged-in caller may call it
    assert document["servers"][0]["url"].startswith("http")  # baseUrl


def test_openapi_with_a_bad_token_is_refused_not_downgraded(daemon):
    reply = daemon.request("GET", "/openapi.json", headers={"Authorization": "Bearer not-a-token"})
    assert_problem(reply, 401)


def test_openapi_answers_an_allowed_origin_with_cors_headers(daemon, user_token):
    reply = daemon.request("GET", "/openapi.json", token=user_token, headers={"Origin": ALLOWED_ORIGIN})
    assert reply.status == 200
    assert reply.headers["Access-Control-Allow-Origin"] == ALLOWED_ORIGIN
    preflight = daemon.request(
        "OPTIONS",
        "/openapi.json",
        headers={
            "Origin": ALLOWED_ORIGIN,
            "Access-Control-Request-Method": "GET",
            "Access-Control-Request-Headers": "Authorization",
        },
    )
    assert preflight.status in (200, 204)
    assert "Authorization" in preflight.headers["Access-Control-Allow-Headers"]


# --- apid openapi ------------------------------------------------------------------------------------


def test_apid_openapi_prints_the_document_of_the_roles_asked(daemon, deployment):
    done = deployment.cli("openapi", "--role", USER_ROLE)
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    validate(document, cls=OpenAPIV31SpecValidator)
    served = openapi(daemon, daemon.login(*USER[:2]))
    assert document["paths"] == served["paths"]
    assert document["components"] == served["components"]
    assert document["servers"] == [{"url": "http://127.0.0.1:8080"}]

    public = deployment.cli("openapi")
    assert public.returncode == 0, public.stderr
    anonymous = json.loads(public.stdout)
    validate(anonymous, cls=OpenAPIV31SpecValidator)
    assert anonymous["paths"] == openapi(daemon)["paths"]

    unknown = deployment.cli("openapi", "--role", "ROLE_GHOST")
    assert unknown.returncode == 2
    assert "unknown role ROLE_GHOST" in unknown.stderr


def test_apid_routes_lists_the_apidoc_endpoint(deployment):
    done = deployment.cli("routes")
    assert done.returncode == 0, done.stderr
    assert any(line.split()[:2] == ["GET", f"{V}/apidoc/show"] for line in done.stdout.splitlines()), done.stdout


# --- after a reload ----------------------------------------------------------------------------------


def test_after_a_reload_the_docs_follow_the_new_rules(reloading):
    user = reloading.login(*USER[:2])
    assert ("person", "1", "show") in documented_calls(apidoc(reloading, user))
    assert (f"{V}/person/show", "get") in api_operations(openapi(reloading, user))

    path = reloading.deployment.root / "iostate" / "person.json"
    document = json.loads(path.read_text())
    show = document["IOSTATE"]["VERSION"]["1"]["URI"]["show"]
    show["ROLES"].update(DEFAULT=["ROLE_ADMIN"], BATCH=["ROLE_ADMIN"])
    document["IOSTATE"]["VERSION"]["1"]["URI"]["update"]["RESPONSE"]["permitAll"].append("email")
    path.write_text(json.dumps(document))
    reloading.process.send_signal(signal.SIGHUP)

    assert wait_for(lambda: ("person", "1", "show") not in documented_calls(apidoc(reloading, user)))
    after = documented_calls(apidoc(reloading, user))
    assert after == expected_calls(states(reloading), {USER_ROLE}, groups(reloading))
    assert "email" in after[("person", "1", "update")].response
    assert api_operations(openapi(reloading, user)) == expected_api_paths(
        states(reloading), {USER_ROLE}, groups(reloading), "0.1"
    )
    assert (f"{V}/person/show", "get") not in api_operations(openapi(reloading, user))
    admin = reloading.login(*ADMIN[:2])
    assert ("person", "1", "show") in documented_calls(apidoc(reloading, admin))


def test_openapi_is_answered_with_an_etag_and_304_while_it_holds(daemon, admin_token):
    first = daemon.request("GET", "/openapi.json", token=admin_token)
    assert first.status == 200
    tag = first.headers["etag"]
    assert first.headers["cache-control"] == "private, no-cache"
    again = daemon.request("GET", "/openapi.json", token=admin_token, headers={"If-None-Match": tag})
    assert (again.status, again.body) == (304, b"")
    public = daemon.request("GET", "/openapi.json", headers={"If-None-Match": tag})
    assert public.status == 200 and public.headers["etag"] != tag


def test_the_served_documents_say_exactly_what_each_action_answers(daemon, admin_token, user_token):
    admin, user = openapi(daemon, admin_token), openapi(daemon, user_token)
    assert admin["servers"] and admin["servers"][0]["url"].startswith("http")
    for document in (admin, user):
        schemas = document["components"]["schemas"]
        assert not [n for n in schemas if n.startswith("person.") and n.endswith(".output") and "anyOf" in schemas[n]]
        assert "ConflictProblem" in schemas and "BlankChain" in schemas
        assert "allOf" not in json.dumps(schemas["PostChain"])
    shared = set(admin["components"]["schemas"]) & set(user["components"]["schemas"])
    for name in shared - {"ChainLink", "BlankChain", "PostChain", "PreChain", "ChainAnswer"}:
        assert admin["components"]["schemas"][name] == user["components"]["schemas"][name], name
    create = admin["components"]["schemas"]["person.1.create.ROLE_ADMIN.request"]
    assert create["required"] == ["username", "password", "email"]
    assert {"routes"} - {tag["name"] for tag in openapi(daemon)["tags"]} == {"routes"}
