"""OpenAPI 3.1 documents (apid.openapi) of the repository's IO State and the sample plugin,
each validated with openapi-spec-validator."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest
from openapi_spec_validator import OpenAPIV31SpecValidator, validate

from apid.config.files import load
from apid.http.fixed_paths import OPENAPI_PATH
from apid.iostate import RuleSet, bind_references, parse_text
from apid.openapi.document import OpenApiDocuments, build, document_settings
from apid.openapi.view import api_view
from apid.plugin_host.discovery import load_all
from apid.server.service_endpoints import public_paths
from iostate_rules import SAMPLE_TEAM, expected_api_paths, network_roles, read_states

ROOT = Path(__file__).resolve().parents[2]
CONFIG = load(ROOT / "etc", "development", {})
BOUND = load_all(ROOT / "iostate", CONFIG.api.security)
SETTINGS = document_settings(CONFIG, BOUND.controllers.values(), fixed=public_paths(CONFIG))
STATES = read_states(ROOT / "iostate", SAMPLE_TEAM)
ADMIN, USER = "ROLE_ADMIN", "ROLE_USER"
API_PATH = re.compile(r"/[vbc][0-9]+\.[0-9]+")
PUBLIC = {
    "/authenticate",
    "/refreshToken",
    "/logout",
    "/register",
    "/validate",
    "/forgotPassword",
    "/validateResetPassword",
    "/resetPassword",
    "/health",
    "/error",
    OPENAPI_PATH,
}


def document(*roles: str) -> dict:
    return build(api_view(BOUND.rules, roles, "0.1") if roles else None, SETTINGS)


def operations(doc: dict) -> dict[tuple[str, str], dict]:
    return {(path, method): op for path, item in doc["paths"].items() for method, op in item.items()}


def api_operations(doc: dict) -> set[tuple[str, str]]:
    return {key for key in operations(doc) if API_PATH.match(key[0])}


def api_operation_map(doc: dict) -> dict[tuple[str, str], dict]:
    return {key: op for key, op in operations(doc).items() if API_PATH.match(key[0])}


def schema(doc: dict, reference: dict) -> dict:
    assert set(reference) == {"$ref"}
    kind, name = reference["$ref"].removeprefix("#/components/").split("/")
    return doc["components"][kind][name]


@pytest.mark.parametrize("roles", [(), (USER,), (ADMIN,), (ADMIN, USER)])
def test_every_document_is_valid_openapi_3_1(roles):
    doc = document(*roles)
    validate(doc, cls=OpenAPIV31SpecValidator)
    assert doc["openapi"] == "3.1.0"
    assert doc["info"]["version"] == "0.1"


@pytest.mark.parametrize("roles", [{USER}, {ADMIN}, {ADMIN, USER}])
def test_the_api_operations_are_exactly_those_the_io_state_gives_the_roles(roles):
    expected = expected_api_paths(STATES, roles, network_roles(), "0.1")
    assert api_operations(document(*roles)) == expected


def test_admin_and_user_documents_differ_exactly_as_their_io_state_does():
    admin, user = api_operations(document(ADMIN)), api_operations(document(USER))
    groups = network_roles()
    expected_admin = expected_api_paths(STATES, {ADMIN}, groups, "0.1")
    expected_user = expected_api_paths(STATES, {USER}, groups, "0.1")
    assert admin - user == expected_admin - expected_user != set()
    assert user - admin == expected_user - expected_admin
    assert ("/v0.1/server/pingServers", "get") in admin - user


def test_without_a_token_the_document_holds_only_the_endpoints_that_need_none():
    doc = document()
    assert set(doc["paths"]) == PUBLIC & CONFIG.api.reserved_uris
    assert not api_operations(doc)
    assert "/teamCount" not in doc["paths"]  # the sample plugin's route: not in reservedUris
    for (path, _method), operation in operations(doc).items():
        if path not in ("/refreshToken", "/logout"):  # these two take the current token, expired or not
            assert operation["security"] == [], path
    assert not any(name.endswith((".request", ".record", ".output")) for name in doc["components"]["schemas"])


def test_a_public_endpoint_not_in_reserved_uris_needs_the_token():
    settings = document_settings(CONFIG, BOUND.controllers.values(), fixed=public_paths(CONFIG))
    settings = type(settings)(**{**settings.__dict__, "reserved_uris": settings.reserved_uris - {"/health"}})
    anonymous = build(None, settings)
    assert "/health" not in anonymous["paths"]
    user = build(api_view(BOUND.rules, {USER}, "0.1"), settings)
    health = user["paths"]["/health"]["get"]
    assert health["security"] == [{"bearerAuth": []}, {"apiKeyAuth": []}]
    assert "401" in health["responses"]
    team_count = user["paths"]["/teamCount"]["get"]
    assert (
        team_count["security"] == [{"bearerAuth": []}, {"apiKeyAuth": []}]
        and "apid-sample-plugin" in team_count["description"]
    )


def test_plain_calls_have_their_fields_as_query_parameters_or_a_json_body():
    doc = document(USER)
    show = doc["paths"]["/v0.1/person/show"]["get"]
    assert [p for p in show["parameters"] if "name" in p] == [
        {
            "name": "id",
            "in": "query",
            "required": True,  # @action(requires=("id",))
            "schema": {
                "type": "integer",
                "format": "int64",
                "minimum": -(2**63),
                "maximum": 2**63 - 1,
                "description": "Person id. Primary key.",
                "examples": [1],
            },
        }
    ]
    by_id = doc["paths"]["/v0.1/person/show/{id}"]["get"]
    assert [p["in"] for p in by_id["parameters"] if "in" in p] == ["path"]
    assert {"$ref": "#/components/parameters/LinkRelations"} in by_id["parameters"]

    update = doc["paths"]["/v0.1/person/update/{id}"]["put"]
    body = update["requestBody"]["content"]["application/json"]["schema"]  # the id is the path's
    assert set(body["properties"]) == {"version", "email", "password", "currentPassword"}
    assert body["additionalProperties"] is False
    output = schema(doc, update["responses"]["200"]["content"]["application/json"]["schema"])
    record = schema(doc, {"$ref": output["$ref"]})  # @action(answers="record")
    assert set(record["properties"]) == {"id", "version"}


def test_the_admin_sees_admin_fields_and_the_user_does_not():
    admin, user = document(ADMIN), document(USER)
    fields = lambda doc, name: set(doc["components"]["schemas"][name]["properties"])  # noqa: E731
    assert fields(admin, "person.1.show.ROLE_ADMIN.record") - fields(user, "person.1.show.record") == {
        "enabled",
        "accountLocked",
        "accountExpired",
        "passwordExpired",
        "roles",
        "dateCreated",
        "lastUpdated",
    }
    assert "budget" in admin["components"]["schemas"]["team.1.show.ROLE_ADMIN.record"]["properties"]
    assert "budget" not in user["components"]["schemas"]["team.1.show.record"]["properties"]


def test_a_component_name_means_one_shape_in_every_document():
    """Shapes are named after the roles whose own fields they hold, so clients generated from
    the documents of different roles agree on what each name means."""
    documents = [document(*roles) for roles in [(USER,), (ADMIN,), (ADMIN, USER)]]
    seen: dict[str, dict] = {}
    for doc in documents:
        for name, shape in doc["components"]["schemas"].items():
            if not name.startswith(("ChainLink", "BlankChain", "PostChain", "PreChain")):
                assert seen.setdefault(name, shape) == shape, name
    assert "person.1.show.record" not in documents[1]["components"]["schemas"]


def test_outputs_say_what_each_action_declares_it_answers():
    schemas = document(ADMIN)["components"]["schemas"]
    assert schemas["person.1.create.ROLE_ADMIN.output"]["$ref"].endswith("person.1.create.ROLE_ADMIN.record")
    assert schemas["person.1.list.output"]["type"] == "array"
    assert "anyOf" not in schemas["team.1.list.output"]


def test_request_schemas_require_what_the_action_requires_and_never_as_null():
    doc = document(ADMIN)
    create = doc["components"]["schemas"]["person.1.create.ROLE_ADMIN.request"]
    assert create["required"] == ["username", "password", "email"]
    assert create["properties"]["username"]["type"] == "string"
    assert create["properties"]["enabled"]["type"] == ["boolean", "null"]
    body = doc["paths"]["/v0.1/person/update/{id}"]["put"]["requestBody"]
    assert "required" not in body["content"]["application/json"]["schema"]  # the id is in the path


def test_paging_fields_state_the_range_the_action_declares_and_the_daemon_enforces():
    doc = document(ADMIN)
    schemas = doc["components"]["schemas"]
    assert schemas["person.1.list.request"]["properties"]["max"] == {
        "type": ["integer", "null"],
        "format": "int32",
        "minimum": 1,
        "maximum": 100,
        "default": 20,
        "description": "Records per page, 1 to 100 (list)",
        "examples": [20],
    }
    offset = schemas["hook.1.deliveries.request"]["properties"]["offset"]
    assert (offset["minimum"], offset["default"]) == (0, 0)
    query = {p["name"]: p["schema"] for p in doc["paths"]["/v0.1/team/list"]["get"]["parameters"] if "name" in p}
    assert (query["max"]["minimum"], query["max"]["maximum"], query["max"]["default"]) == (1, 1000, 100)


def test_a_prechain_body_requires_what_its_first_call_requires():
    doc = document(ADMIN)

    def body(path: str, method: str) -> dict:
        return doc["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]

    assert body("/c0.1/person/create", "post")["required"] == ["username", "password", "email", "chain"]
    assert body("/c0.1/team/create", "post")["required"] == ["name", "leaderId", "chain"]
    assert body("/c0.1/person/update/{id}", "put")["required"] == ["chain"]  # the id is in the path
    assert body("/c0.1/person/create", "post")["properties"]["username"]["type"] == "string"  # never null


def test_a_chain_answers_json_objects_a_generated_client_keeps_whole():
    """Not a union of the output schemas: records have no required member, so a generated
    client's union parser would read every record as the first type and drop its members."""
    schemas = document(ADMIN)["components"]["schemas"]
    assert schemas["ChainOutput"]["type"] == "object" and schemas["ChainOutput"]["additionalProperties"] is True
    one, every, nothing = schemas["ChainAnswer"]["anyOf"]
    assert one == {"$ref": "#/components/schemas/ChainOutput"} and nothing == {"type": "null"}
    # any JSON items: a union of records, lists and null loses their members in openapi-generator
    assert every["type"] == "array" and every["items"] == {}


def test_a_create_links_to_the_show_update_and_delete_of_what_it_made():
    links = document(ADMIN)["paths"]["/v0.1/person/create"]["post"]["responses"]["200"]["links"]
    assert set(links) == {"show", "update", "delete"}
    assert links["show"] == {
        "operationId": "person.show.byId",
        "parameters": {"id": "$response.body#/id"},
        "description": "person/show of the record created",
    }
    operation_ids = {op["operationId"] for op in operations(document(ADMIN)).values()}
    assert {link["operationId"] for link in links.values()} <= operation_ids


def test_gets_say_their_etag_and_304_and_every_call_takes_a_request_id():
    doc = document(USER)
    show = doc["paths"]["/v0.1/person/show"]["get"]
    assert {"$ref": "#/components/parameters/IfNoneMatch"} in show["parameters"]
    assert {"$ref": "#/components/parameters/RequestId"} in show["parameters"]
    assert "ETag" in show["responses"]["200"]["headers"]
    assert show["responses"]["304"] == {"$ref": "#/components/responses/NotModified"}
    assert doc["servers"] == [{"url": CONFIG.server.base_url}]
    assert "<" not in json.dumps({k: v["description"] for k, v in doc["components"]["headers"].items()})


def test_the_document_without_a_token_has_no_empty_tag():
    doc = document()
    used = {tag for item in doc["paths"].values() for op in item.values() for tag in op.get("tags", ())}
    assert {tag["name"] for tag in doc["tags"]} == used


def test_values_types_become_json_schema_with_their_mock_data_as_example():
    schemas = document(ADMIN)["components"]["schemas"]
    person = schemas["person.1.list.record"]["properties"]
    team = schemas["team.1.create.record"]["properties"]
    hook = schemas["hook.1.create.record"]["properties"]
    assert person["id"]["type"] == "integer" and person["id"]["format"] == "int64"
    assert (person["id"]["minimum"], person["id"]["maximum"]) == (-(2**63), 2**63 - 1)
    assert hook["attempts"]["type"] == "integer" and hook["attempts"]["format"] == "int32"
    assert (hook["attempts"]["minimum"], hook["attempts"]["maximum"]) == (-(2**31), 2**31 - 1)
    assert team["budget"]["type"] == ["number", "null"] and team["budget"]["examples"] == [1000.5]
    assert person["enabled"]["type"] == "boolean" and person["enabled"]["examples"] == [True]
    assert person["email"]["format"] == "email" and person["email"]["examples"] == ["jdoe@example.com"]
    assert person["dateCreated"]["format"] == "date-time"
    assert person["roles"]["type"] == "array" and person["roles"]["examples"] == [["ROLE_USER"]]
    assert hook["url"]["format"] == "uri"
    assert team["leaderId"]["description"] == "The person leading the team. Refers to a person (its id)."
    assert "examples" not in hook["disabledReason"]  # mockData "null": no example
    assert schemas["apidoc.1.show.record"]["properties"]["controllers"]["type"] == "object"


def test_the_fields_an_action_carries_are_required_and_never_null_where_the_roles_receive_them():
    """`@action(carries=...)`: what a generated client may read without a null check; the rest
    of a record stays optional and nullable."""
    admin = document(ADMIN)["components"]["schemas"]
    assert admin["person.1.create.ROLE_ADMIN.record"]["required"] == ["id", "version"]  # all it answers
    listed = admin["person.1.list.record"]
    assert listed["required"] == [
        "id", "version", "username", "email", "enabled", "accountLocked", "accountExpired", "passwordExpired",
        "roles", "dateCreated", "lastUpdated",
    ]  # fmt: skip
    assert all(not isinstance(listed["properties"][name]["type"], list) for name in listed["required"])
    hook = admin["hook.1.create.record"]
    assert {"id", "version", "secret"} <= set(hook["required"]) and "disabledReason" not in hook["required"]
    assert hook["properties"]["disabledReason"]["type"] == ["string", "null"]
    assert admin["team.1.create.record"]["required"] == ["id", "name", "leaderId"]
    assert admin["team.1.create.record"]["properties"]["budget"]["type"] == ["number", "null"]
    assert admin["apikey.1.create.ROLE_ADMIN.record"]["required"][-1] == "key"
    assert admin["person.1.delete.record"]["required"] == ["id"]
    # a role that does not receive a carried field is not promised it
    user = document(USER)["components"]["schemas"]
    shown = next(
        schema for name, schema in user.items() if name.startswith("person.1.show.") and name.endswith("record")
    )
    assert set(shown["required"]) == set(shown["properties"]) == {"id", "version", "username", "email"}


def test_api_versions_other_than_the_current_carry_their_name_in_the_path():
    doc = document(USER)
    assert "/v0.1-2/team/show/{id}" in doc["paths"]
    assert "/v0.1-1/team/show" not in doc["paths"]
    assert set(doc["components"]["schemas"]["team.2.show.record"]["properties"]) == {"id", "name"}


def test_batch_forms_post_a_batch_and_answer_207_with_the_errors():
    doc = document(USER)
    batch = doc["paths"]["/b0.1/person/show"]["post"]
    body = batch["requestBody"]["content"]["application/json"]["schema"]
    assert body["required"] == ["batch"]
    assert body["properties"]["batch"]["maxItems"] == CONFIG.api.batch_limit
    assert body["properties"]["batch"]["items"] == {"$ref": "#/components/schemas/person.1.show.request"}
    multi = batch["responses"]["207"]["content"]["application/json"]["schema"]
    assert multi["required"] == ["data", "errors"]
    assert multi["properties"]["errors"]["items"] == {"$ref": "#/components/schemas/BatchError"}
    assert "/b0.1/person/update" not in doc["paths"]  # ROLE_USER is not in its BATCH list


def test_chain_forms_start_a_blankchain_postchain_or_prechain():
    doc = document(ADMIN)
    starting_with_show = doc["paths"]["/c0.1/team/show/{id}"]
    # no GET with a body: a blankchain is published POSTed (its GET form is told in prose)
    assert set(starting_with_show) == {"put", "post", "delete"}
    assert "served with GET and the same body too" in starting_with_show["post"]["description"]
    post = starting_with_show["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert post["properties"]["chain"]["anyOf"] == [
        {"$ref": "#/components/schemas/BlankChain"},
        {"$ref": "#/components/schemas/PostChain"},
    ]
    assert starting_with_show["post"]["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ChainAnswer"
    }
    assert "422" in starting_with_show["put"]["responses"]
    # a postchain's other members are the fields of the calls it may end with, typed
    put = starting_with_show["put"]["requestBody"]["content"]["application/json"]["schema"]
    assert put["additionalProperties"] is False and put["required"] == ["chain"]
    assert put["properties"]["chain"] == {"$ref": "#/components/schemas/PostChain"}
    assert put["properties"]["username"]["type"] == ["string", "null"]  # person/update's
    assert put["properties"]["url"]["format"] == "uri"  # hook/update's
    # where no call of a method but POST is written, a blankchain alone
    user = document(USER)["paths"]
    only_blank = [p for p, item in user.items() if p.startswith("/c") and set(item) == {"post"}]
    assert only_blank
    prechain = doc["paths"]["/c0.1/team/create"]
    assert set(prechain) == {"post"}
    body = prechain["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert set(body["properties"]) == {"name", "leaderId", "budget", "chain"}
    for name, kind in (("BlankChain", "blankchain"), ("PostChain", "postchain"), ("PreChain", "prechain")):
        chain = doc["components"]["schemas"][name]
        assert "allOf" not in json.dumps(chain)
        assert chain["required"] == ["key", "type", "order"]
        assert chain["properties"]["type"] == {"type": "string", "enum": [kind]}
        assert chain["properties"]["order"]["anyOf"][0]["items"] == {"$ref": "#/components/schemas/ChainLink"}


def test_no_operation_is_a_get_with_a_body():
    for roles in ((), (USER,), (ADMIN,)):
        gets = [key for key, op in operations(document(*roles)).items() if key[1] == "get" and "requestBody" in op]
        assert gets == [], gets


def test_each_chain_body_has_an_example_of_two_links_the_roles_may_call():
    doc = document(ADMIN)
    chains = {key: op for key, op in api_operation_map(doc).items() if key[0].startswith("/c")}
    example = chains[("/c0.1/person/show/{id}", "post")]["requestBody"]["content"]["application/json"]["example"]
    assert example == {
        "chain": {"key": "id", "type": "blankchain", "order": [{"link": "person/show", "key": "return"}]}
    }
    put = chains[("/c0.1/person/show/{id}", "put")]["requestBody"]["content"]["application/json"]["example"]
    assert put == {"chain": {"key": "id", "type": "postchain", "order": [{"link": "person/update", "key": "return"}]}}
    created = chains[("/c0.1/person/create", "post")]["requestBody"]["content"]["application/json"]["example"]
    assert created["chain"] == {"key": "id", "type": "prechain", "order": [{"link": "person/show", "key": "return"}]}
    assert (created["username"], created["email"]) == ("jdoe", "jdoe@example.com")
    for (path, method), operation in chains.items():
        example = operation["requestBody"]["content"]["application/json"].get("example")
        if example is not None:
            (link,) = example["chain"]["order"]
            controller, action = link["link"].split("/")
            assert any(p.startswith(f"/v0.1/{controller}/{action}") for p in doc["paths"]), (path, method, link)


def test_a_postchain_or_prechain_names_its_type_and_links_are_those_the_roles_may_call():
    admin, user = document(ADMIN), document(USER)
    body = admin["paths"]["/c0.1/team/show/{id}"]["put"]["requestBody"]["content"]["application/json"]["schema"]
    assert body["properties"]["chain"] == {"$ref": "#/components/schemas/PostChain"}
    prechain = admin["paths"]["/c0.1/team/create"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert prechain["properties"]["chain"] == {"$ref": "#/components/schemas/PreChain"}
    admin_links = admin["components"]["schemas"]["ChainLink"]["properties"]["link"]["enum"]
    user_links = user["components"]["schemas"]["ChainLink"]["properties"]["link"]["enum"]
    assert {"person/create", "person/show", "team/show"} <= set(admin_links)
    assert "person/show" in user_links and "person/create" not in user_links
    assert admin["components"]["schemas"]["Combine"]["anyOf"][0] == {"type": ["boolean", "null"]}


def test_every_call_may_answer_the_conflicts_and_refusals_plugins_raise():
    doc = document(ADMIN)
    for (path, method), operation in api_operation_map(doc).items():
        assert {"409", "422"} <= set(operation["responses"]), (path, method)
    assert schema(doc, doc["paths"]["/v0.1/person/create"]["post"]["responses"]["409"])["content"] == {
        "application/problem+json": {"schema": {"$ref": "#/components/schemas/ConflictProblem"}}
    }


def test_public_endpoints_refuse_empty_strings_and_say_the_account_policy():
    doc = document()

    def body(path: str) -> dict:
        return doc["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]["properties"]

    text = {"type": "string", "minLength": 1, "pattern": "^[^\\u0000]*$"}  # no NUL: never read
    assert body("/authenticate")["username"] == text
    register = body("/register")
    assert re.fullmatch(register["username"]["pattern"].strip("^$"), "jdoe.2")
    assert not re.fullmatch(register["username"]["pattern"].strip("^$"), "-x")
    assert (register["password"]["minLength"], register["password"]["maxLength"]) == (8, 128)
    assert register["email"]["format"] == "email"
    assert body("/resetPassword")["id"]["minLength"] == 1
    assert doc["paths"]["/validate"]["get"]["parameters"][0]["schema"] == text


def test_errors_are_rfc_9457_problems_and_calls_say_their_headers():
    doc = document(USER)
    show = doc["paths"]["/v0.1/person/show"]["get"]["responses"]
    assert set(show["200"]["headers"]) == {"RateLimit", "RateLimit-Policy", "Link", "ETag", "X-Request-ID"}
    for status in ("400", "401", "403", "404", "405", "409", "413", "415", "422", "429", "500", "503"):
        response = schema(doc, show[status])
        assert set(response["content"]) == {"application/problem+json"}
    problem = doc["components"]["schemas"]["Problem"]
    assert problem["required"] == ["type", "title", "status", "detail"]
    assert set(doc["components"]["responses"]["TooManyRequests"]["headers"]) == {
        "Retry-After",
        "RateLimit",
        "RateLimit-Policy",
        "X-Request-ID",
    }
    assert doc["components"]["securitySchemes"]["bearerAuth"] == {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "JWT",
        "description": "The access token from POST /authenticate, as Authorization: Bearer <token>",
    }
    assert doc["components"]["securitySchemes"]["apiKeyAuth"] == {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "apid_ API key",
        "description": "An API key of apikey/create or `apid key create`, as Authorization: Bearer apid_...",
    }
    assert doc["security"] == [{"bearerAuth": []}, {"apiKeyAuth": []}]
    # an API key is no login: refreshing and logging out take the access token alone
    assert (
        doc["paths"]["/refreshToken"]["get"]["security"]
        == doc["paths"]["/logout"]["post"]["security"]
        == [{"bearerAuth": []}]
    )
    assert doc["paths"]["/v0.1/person/show"]["get"]["security"] == [{"bearerAuth": []}, {"apiKeyAuth": []}]


def test_each_problem_type_has_its_schema_told_apart_by_type():
    doc = document(USER)
    schemas = doc["components"]["schemas"]
    conflict = schemas["ConflictProblem"]
    assert conflict["properties"]["type"] == {"type": "string", "const": "urn:apid:problem:conflict"}
    assert conflict["properties"]["currentVersion"]["type"] == "integer"
    assert conflict["externalDocs"]["url"] == "/docs/assets/problems.html#conflict"
    assert schemas["InvalidFieldsProblem"]["required"][-1] == "errors"
    assert schemas["InvalidFieldsProblem"]["properties"]["errors"]["items"] == {
        "$ref": "#/components/schemas/FieldError"
    }
    assert "violatedPolicies" in schemas["TooManyRequestsProblem"]["properties"]
    assert schemas["GoneProblem"]["required"][-1] == "currentApiVersion"
    bad = doc["components"]["responses"]["BadRequest"]["content"]["application/problem+json"]["schema"]
    assert bad["discriminator"] == {
        "propertyName": "type",
        "mapping": {
            "urn:apid:problem:bad-request": "#/components/schemas/BadRequestProblem",
            "urn:apid:problem:invalid-fields": "#/components/schemas/InvalidFieldsProblem",
        },
    }


def test_operation_ids_are_unique():
    ids = [op["operationId"] for op in operations(document(ADMIN, USER)).values()]
    assert len(ids) == len(set(ids))


def test_documents_are_built_once_per_rule_set_and_roles():
    holder = {"rules": BOUND.rules}
    documents = OpenApiDocuments(lambda: holder["rules"], SETTINGS)
    first = documents.document(frozenset({USER}))
    assert documents.document(frozenset({USER})) is first
    assert documents.document(None) is not first
    holder["rules"] = RuleSet(controllers={k: v for k, v in BOUND.rules.controllers.items() if k != "team"})
    after = documents.document(frozenset({USER}))
    assert after is not first
    assert not any("/team/" in path for path in after["paths"])


def test_operations_of_a_deprecated_version_say_so_and_answer_410_after_its_sunset():
    team = json.loads(SAMPLE_TEAM.read_text())
    team["VERSION"]["2"].update(DEPRECATED=["12/31/2025", "use v1"], SUNSET="2026-06-30")
    states = {**BOUND.rules.controllers, "team": parse_text(json.dumps(team), "team.json", CONFIG.api.security)}
    doc = build(api_view(RuleSet(controllers=bind_references(states)), {USER}, "0.1"), SETTINGS)
    validate(doc, cls=OpenAPIV31SpecValidator)
    deprecated = {key for key, op in api_operation_map(doc).items() if op.get("deprecated")}
    assert deprecated and deprecated == {key for key in api_operations(doc) if "-2/team/" in key[0]}
    show = doc["paths"]["/v0.1-2/team/show"]["get"]
    assert show["description"].endswith(
        "Deprecated: API version 2 of team is deprecated from 2025-12-31T00:00:00Z. "
        "Sunset 2026-06-30T00:00:00Z: from then on it answers 410 Gone. use v1"
    )
    assert set(show["responses"]["200"]["headers"]) >= {"Deprecation", "Sunset"}
    assert schema(doc, show["responses"]["410"])["description"].startswith("This API version is past its sunset")
    current = doc["paths"]["/v0.1/team/show"]["get"]
    assert "deprecated" not in current and "410" not in current["responses"]
    assert "Deprecation" not in current["responses"]["200"]["headers"]


def test_without_a_token_the_document_lists_what_the_anonymous_role_may_call():
    """team in the open group: its actions without a DEFAULT list admit ROLE_ANONYMOUS, and
    the public document lists them, needing no token; create (admins only) stays out."""
    team = json.loads(SAMPLE_TEAM.read_text())
    team["NETWORKGRP"] = "open"
    states = {**BOUND.rules.controllers, "team": parse_text(json.dumps(team), "team.json", CONFIG.api.security)}
    documents = OpenApiDocuments(lambda: RuleSet(controllers=bind_references(states)), SETTINGS)
    doc = documents.document(None)
    validate(doc, cls=OpenAPIV31SpecValidator)
    listed = api_operation_map(doc)
    assert ("/v0.1/team/list", "get") in listed and ("/v0.1/team/show/{id}", "get") in listed
    assert all(operation["security"] == [] for operation in listed.values())
    assert not any("/team/create" in path or "/person/" in path for path, _ in listed)
    assert doc["info"]["description"].startswith("The endpoints that answer without a token")
    assert set(doc["paths"]) - {path for path, _ in listed} == PUBLIC & CONFIG.api.reserved_uris


# --- webhooks (issue 36, item 6) ---------------------------------------------------------------


def expected_webhooks(roles: set[str]) -> set[str]:
    """The event types a hook of these roles hears of: every non-GET action whose HOOK grants
    one of the roles, named by its `controller/action` (`.v<api>` for a version not current)."""
    return {
        f"{state['NAME']}/{action}" + ("" if version == state["CURRENTSTABLE"] else f".v{version}")
        for state in STATES
        for version, block in state["VERSION"].items()
        for action, endpoint in block["URI"].items()
        if endpoint["METHOD"] != "GET" and roles & set(endpoint.get("ROLES", {}).get("HOOK", []))
    }


@pytest.mark.parametrize("roles", [{USER}, {ADMIN}, {ADMIN, USER}])
def test_the_webhooks_are_the_events_a_hook_of_the_roles_hears_each_with_its_payload(roles):
    doc = document(*roles)
    messages = doc.get("webhooks", {})
    assert set(messages) == expected_webhooks(roles)
    for name, message in messages.items():
        body = message["post"]["requestBody"]["content"]["application/json"]["schema"]
        assert body["required"] == ["id", "type", "timestamp", "data"]
        assert body["properties"]["type"] == {
            "const": name.partition(".v")[0],
            "description": "The event type: the action",
        }
        assert schema(doc, body["properties"]["data"])["type"] == "object"  # the record as these roles receive it
        headers = {parameter["name"] for parameter in message["post"]["parameters"]}
        assert headers == {"webhook-id", "webhook-timestamp", "webhook-signature"}


def test_a_caller_without_a_token_reads_no_webhooks():
    assert "webhooks" not in document()


def test_writes_that_compare_if_match_take_it_and_may_answer_412_and_no_other_operation_does():
    doc = document(ADMIN)
    if_match = {"$ref": "#/components/parameters/IfMatch"}
    taking = {key for key, op in api_operation_map(doc).items() if if_match in op.get("parameters", ())}
    answering = {key for key, op in api_operation_map(doc).items() if "412" in op["responses"]}
    assert taking == answering
    assert {
        ("/v0.1/person/update/{id}", "put"),
        ("/v0.1/person/update", "put"),
        ("/v0.1/person/delete/{id}", "delete"),
        ("/v0.1/hook/update/{id}", "put"),
    } <= taking
    # reads, creates (no record named yet), batches and chains do not
    assert all(method != "get" and path.startswith("/v") for path, method in taking), taking
    assert ("/v0.1/person/create", "post") not in taking and ("/v0.1/hook/create", "post") not in taking
    assert doc["paths"]["/v0.1/person/update/{id}"]["put"]["responses"]["412"] == {
        "$ref": "#/components/responses/PreconditionFailed"
    }
    answer = doc["components"]["responses"]["PreconditionFailed"]["content"]["application/problem+json"]["schema"]
    assert answer == {"$ref": "#/components/schemas/PreconditionFailedProblem"}


def test_the_limits_an_action_declares_are_in_its_request_schema():
    schemas = document(ADMIN)["components"]["schemas"]
    created = schemas["apikey.1.create.ROLE_ADMIN.request"]["properties"]
    assert (created["name"]["minLength"], created["name"]["maxLength"], created["name"]["pattern"]) == (1, 100, r"\S")
    assert created["roles"]["minItems"] == 1
    listed = schemas["apikey.1.list.request"]["properties"]
    assert (listed["max"]["minimum"], listed["max"]["maximum"], listed["offset"]["minimum"]) == (1, 100, 0)


def test_every_string_a_caller_sends_says_it_holds_no_nul_as_the_daemon_enforces():
    doc = document(ADMIN)
    create = doc["components"]["schemas"]["person.1.create.ROLE_ADMIN.request"]["properties"]
    assert create["username"]["pattern"] == "^[^\\u0000]*$" and create["email"]["pattern"] == "^[^\\u0000]*$"
    query = {p["name"]: p["schema"] for p in doc["paths"]["/v0.1/hook/list"]["get"]["parameters"] if "name" in p}
    assert all(schema.get("pattern") for schema in query.values() if schema.get("type") == "string")
    assert create["password"]["pattern"] == "^[^\\u0000]*$"
    # a pattern of its own, or fixed values, are left as they are
    url = doc["components"]["schemas"]["hook.1.create.request"]["properties"]["url"]
    assert url["pattern"] == "^[hH][tT][tT][pP][sS]?://"
    assert "pattern" not in doc["components"]["schemas"]["BlankChain"]["properties"]["type"]
    # answers are not read: a problem may quote the NUL it refused
    assert "pattern" not in doc["components"]["schemas"]["BadRequestProblem"]["properties"]["detail"]
    assert "pattern" not in doc["components"]["schemas"]["person.1.create.ROLE_ADMIN.record"]["properties"]["id"]


def test_every_writing_operation_takes_an_idempotency_key_and_no_read_does():
    doc = document(ADMIN)
    key = {"$ref": "#/components/parameters/IdempotencyKey"}
    for (path, method), operation in api_operation_map(doc).items():
        assert (key in operation["parameters"]) is (method != "get"), (path, method)
    created = doc["paths"]["/v0.1/person/create"]["post"]["responses"]["200"]["headers"]
    assert created["Idempotent-Replayed"] == {"$ref": "#/components/headers/Idempotent-Replayed"}
    parameter = doc["components"]["parameters"]["IdempotencyKey"]
    assert (parameter["name"], parameter["schema"]["maxLength"], parameter["schema"]["pattern"]) == (
        "Idempotency-Key",
        255,
        "^[!-~]+$",
    )


def test_a_paged_list_says_its_next_offset_header():
    doc = document(ADMIN)
    listed = doc["paths"]["/v0.1/person/list"]["get"]["responses"]["200"]["headers"]
    assert listed["Next-Offset"] == {"$ref": "#/components/headers/Next-Offset"}
    assert doc["components"]["headers"]["Next-Offset"]["schema"] == {"type": "integer", "minimum": 0}
    assert "Next-Offset" not in doc["paths"]["/v0.1/person/show/{id}"]["get"]["responses"]["200"]["headers"]


def test_a_body_is_required_only_where_it_must_hold_something():
    """A write by id with nothing else to send declares no body; one whose fields are all
    optional declares an optional one (no required empty body, which clients must then send)."""
    for roles in ((), (USER,), (ADMIN,)):
        doc = document(*roles)
        for (path, method), operation in operations(doc).items():
            body = operation.get("requestBody")
            if body is None or not body["required"]:
                continue
            shape = body["content"]["application/json"]["schema"]
            shape = shape if "$ref" not in shape else schema(doc, shape)
            assert shape.get("required") or "anyOf" in shape, (roles, path, method)
    admin = document(ADMIN)["paths"]
    assert "requestBody" not in admin["/v0.1/hook/enable/{id}"]["put"]
    assert admin["/v0.1/person/update/{id}"]["put"]["requestBody"]["required"] is False


def test_actions_awaiting_asyncio_are_documented_only_where_the_reactor_runs_it():
    """The sample's team/relay and team/audit (`@action(asyncio=True)`): a deployment on the
    default reactor could only answer them 500, so its documents leave them out."""
    on_asyncio = build(api_view(BOUND.rules, (ADMIN,), "0.1"), dataclasses.replace(SETTINGS, asyncio=True))
    for doc, served in ((document(ADMIN), False), (on_asyncio, True)):
        paths = {path for path in doc["paths"] if "/team/relay" in path or "/team/audit" in path}
        assert bool(paths) is served, paths
        links = doc["components"]["schemas"]["ChainLink"]["properties"]["link"]["enum"]
        assert ("team/relay" in links) is served
    assert expected_api_paths(STATES, {ADMIN}, network_roles(), "0.1", asyncio=True) == api_operations(on_asyncio)


def test_webhook_messages_are_nothing_a_client_calls():
    """`x-internal`: openapi-generator leaves them out (it renders them as untyped client methods)."""
    messages = document(ADMIN)["webhooks"]
    assert messages and all(item["post"]["x-internal"] is True for item in messages.values())
