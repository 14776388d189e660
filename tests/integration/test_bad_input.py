"""Bad input through the running daemon: every error is an RFC 9457 problem with the right
status, and nothing stored changes (checked by listing every account before and after).
"""

from __future__ import annotations

import http.client
import io
import json
import socket
import sqlite3
import time

import jwt
import pytest

from assertions import assert_json, assert_problem, error_fields
from forged_tokens import forge, tampered
from harness import (
    ADMIN,
    ADMIN_ACCOUNT,
    USER,
    Daemon,
    Deployment,
    Response,
    V,
    deployment_with_accounts,
    everyone,
    running_daemon,
)

ANSWER_HEADERS = {"X-Content-Type-Options": "nosniff", "Server": "apid", "Cache-Control": "no-store"}


def send_raw(daemon: Daemon, data: bytes, timeout: float = 10) -> Response:
    """Bytes written as they are on a fresh connection, and the one answer read back: the
    daemon must close the connection after it (send `Connection: close` unless it refuses)."""
    with socket.create_connection(("127.0.0.1", daemon.port), timeout=timeout) as sock:
        sock.sendall(data)
        return parse_answer(read_until_closed(sock))


def read_until_closed(sock: socket.socket) -> bytes:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def parse_answer(data: bytes) -> Response:
    """The one HTTP answer `data` holds, which must be all of it (a 100 Continue would not be)."""
    assert data.startswith(b"HTTP/1.1 ") and not data.startswith(b"HTTP/1.1 100"), data[:200]
    reply = http.client.HTTPResponse(_Received(data))
    reply.begin()
    answer = Response(reply.status, reply.headers, reply.read())
    assert data.endswith(answer.body), "bytes after the answer"
    return answer


class _Received:
    """Received bytes in the shape of the socket http.client reads an answer from."""

    def __init__(self, data: bytes) -> None:
        self._file = io.BytesIO(data)

    def makefile(self, *_: object, **__: object) -> io.BytesIO:
        return self._file


def post_json(daemon: Daemon, path: str, raw: bytes, token: str | None = None) -> Response:
    return daemon.request("POST", path, token=token, body=raw, headers={"Content-Type": "application/json"})


def assert_answer_headers(reply: Response) -> None:
    for name, value in ANSWER_HEADERS.items():
        assert reply.headers.get_all(name) == [value], (name, reply.headers.items())


# --- sanity: the forging helper makes tokens the daemon accepts, so the 401s below mean something


def test_a_forged_token_with_the_deployment_secret_is_accepted(daemon, deployment):
    reply = daemon.request("GET", f"{V}/person/show/1", token=forge(deployment))
    assert reply.status == 200, reply.body
    assert reply.json["username"] == ADMIN[0]


# --- bodies -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, content_type, status",
    [
        (b'{"email": "x@example.com"', "application/json", 400),
        (b'{"email": }', "application/json", 400),
        (b"\xff\xfe{}", "application/json", 400),
        (b"email=x@example.com", "text/plain", 415),
        (b"email=x@example.com", "application/x-www-form-urlencoded", 415),
        (b'{"email": "x@example.com"}', None, 415),
        (b'[{"email": "x@example.com"}]', "application/json", 400),
        (b'"x@example.com"', "application/json", 400),
        (b"42", "application/json", 400),
    ],
    ids=["truncated", "syntax", "not-utf8", "text-plain", "form", "no-content-type", "array", "string", "number"],
)
def test_a_body_that_is_not_a_json_object_changes_nothing(
    daemon, admin_token, user_id, unchanged, raw, content_type, status
):
    headers = {"Content-Type": content_type} if content_type else {}
    path = f"{V}/person/update/{user_id}"
    reply = daemon.request("PUT", path, token=admin_token, body=raw, headers=headers)
    assert_problem(reply, status, instance=path)


def test_a_bad_body_on_create_creates_nothing(daemon, admin_token, unchanged):
    reply = daemon.request(
        "POST",
        f"{V}/person/create",
        token=admin_token,
        body=b'{"username": "half", "password": "half-password", ',
        headers={"Content-Type": "application/json"},
    )
    assert_problem(reply, 400, instance=f"{V}/person/create")


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_not_json(daemon, admin_token, constant):
    before = daemon.request("GET", f"{V}/team/list", token=admin_token).json
    body = f'{{"name": "Nan", "leaderId": 1, "budget": {constant}}}'.encode()
    reply = daemon.request(
        "POST", f"{V}/team/create", token=admin_token, body=body, headers={"Content-Type": "application/json"}
    )
    assert_problem(reply, 400)
    assert daemon.request("GET", f"{V}/team/list", token=admin_token).json == before


# --- strict JSON: depth, strings that are not Unicode text, repeated members, numbers -------------

DEEP = b"[" * 10_000 + b"]" * 10_000


@pytest.mark.parametrize(
    "raw",
    [
        b'{"username": ' + DEEP + b', "password": "x"}',
        b'{"username": "admin", "password": ' + b'{"a":' * 50_000 + b"1" + b"}" * 50_000 + b"}",
        b'{"username": ' + b"[" * 65 + b"]" * 65 + b', "password": "x"}',
        b'{"username": ' + b"[" * 100_000,
    ],
)
def test_deep_nesting_on_authenticate_is_400_saying_so(daemon, raw):
    body = assert_problem(post_json(daemon, "/authenticate", raw), 400, instance="/authenticate")
    assert "deeper than 64 levels" in body["detail"]
    assert body["limit"] == 64


@pytest.mark.parametrize(
    "path, field_raw",
    [
        (f"{V}/person/create", b'"email": '),
        ("/b0.1/person/show", b'"batch": [{"id": 1}], "pad": '),
    ],
)
def test_deep_nesting_on_an_api_call_is_400_saying_so(daemon, admin_token, unchanged, path, field_raw):
    body = assert_problem(post_json(daemon, path, b"{" + field_raw + DEEP + b"}", admin_token), 400, instance=path)
    assert "deeper than 64 levels" in body["detail"]


def test_nesting_of_64_levels_is_json_the_daemon_reads(daemon, admin_token, unchanged):
    raw = (
        b'{"username": "deep64", "password": "deep64-password", "email": "deep64@example.com", "roles": '
        + b"[" * 63
        + b"]" * 63
        + b"}"
    )
    reply = post_json(daemon, f"{V}/person/create", raw, admin_token)
    assert error_fields(assert_problem(reply, 400)) == {"roles"}  # read, typed, then refused as no role


@pytest.mark.parametrize(
    "raw, field",
    [
        (b'{"username": "\\ud800abc", "password": "a-password-1"}', "username"),
        (b'{"username": "admin", "password": "x\\udfff"}', "password"),
        (b'{"username": "admin", "password": "a-password-1", "\\ud800": 1}', "\\ud800"),
        (b'{"username": "ad\\u0000min", "password": "a-password-1"}', "username"),
    ],
)
def test_text_that_is_not_storable_on_authenticate_is_400_naming_the_field(daemon, raw, field):
    body = assert_problem(post_json(daemon, "/authenticate", raw), 400, instance="/authenticate")
    assert error_fields(body) == {field}


@pytest.mark.parametrize(
    "raw, field, reason",
    [
        (
            b'{"username": "lone\\ud83d", "password": "lone-password-1", "email": "lone@example.com"}',
            "username",
            "lone surrogate",
        ),
        (b'{"username": "nul\\u0000", "password": "nul-password-1", "email": "nul@example.com"}', "username", "NUL"),
        (b'{"username": "nulpw", "password": "nul-\\u0000-password", "email": "nulpw@example.com"}', "password", "NUL"),
    ],
)
def test_text_that_is_not_storable_on_create_is_400_and_creates_nothing(
    daemon, admin_token, unchanged, raw, field, reason
):
    body = assert_problem(post_json(daemon, f"{V}/person/create", raw, admin_token), 400)
    assert error_fields(body) == {field}
    assert reason in body["errors"][0]["reason"]


def test_text_that_is_not_storable_in_a_batch_element_names_its_place(daemon, admin_token, unchanged):
    raw = (
        b'{"batch": [{"username": "fine1", "password": "fine1-password", "email": "fine1@example.com"},'
        b' {"username": "bad\\udc00", "password": "bad-password-1", "email": "bad@example.com"}]}'
    )
    body = assert_problem(post_json(daemon, "/b0.1/person/create", raw, admin_token), 400)
    assert error_fields(body) == {"batch.1.username"}


def test_a_member_given_twice_is_400_naming_it_and_changes_nothing(daemon, admin_token, user_id, unchanged):
    path = f"{V}/person/update/{user_id}"
    reply = daemon.request(
        "PUT",
        path,
        token=admin_token,
        headers={"Content-Type": "application/json"},
        body=b'{"email": "first@example.com", "email": "second@example.com"}',
    )
    body = assert_problem(reply, 400, instance=path)
    assert error_fields(body) == {"email"}


@pytest.mark.parametrize(
    "number, detail",
    [
        (b"1e999", "too large for a double"),
        (b"-1e999", "too large for a double"),
        (b"7" * 5000, "more than 4300 digits"),
    ],
)
def test_a_number_no_machine_type_holds_is_400(daemon, admin_token, user_id, unchanged, number, detail):
    reply = daemon.request(
        "PUT",
        f"{V}/person/update/{user_id}",
        token=admin_token,
        headers={"Content-Type": "application/json"},
        body=b'{"version": ' + number + b"}",
    )
    assert detail in assert_problem(reply, 400)["detail"]


def test_two_json_documents_are_400(daemon, admin_token, user_id, unchanged):
    reply = daemon.request(
        "PUT",
        f"{V}/person/update/{user_id}",
        token=admin_token,
        headers={"Content-Type": "application/json"},
        body=b'{"email": "one@example.com"} {"email": "two@example.com"}',
    )
    assert "not valid JSON" in assert_problem(reply, 400)["detail"]


# --- whole numbers past 64 bits: a 400 naming the field wherever they come from --------------------

HUGE = "99999999999999999999999"


def test_a_huge_id_in_the_path_is_400_naming_it(daemon, admin_token):
    path = f"{V}/person/show/{HUGE}"
    body = assert_problem(daemon.request("GET", path, token=admin_token), 400, instance=path)
    assert body["errors"] == [{"field": "id", "reason": "number out of range (Long)"}]


def test_a_huge_id_in_the_query_is_400_naming_it(daemon, admin_token):
    reply = daemon.request("GET", f"{V}/person/show?id={'1' * 5000}", token=admin_token)
    assert assert_problem(reply, 400)["errors"] == [{"field": "id", "reason": "number out of range (Long)"}]


def test_a_huge_number_in_a_json_body_is_400_naming_it(daemon, admin_token, user_id, unchanged):
    reply = daemon.request(
        "PUT",
        f"{V}/person/update/{user_id}",
        token=admin_token,
        headers={"Content-Type": "application/json"},
        body=f'{{"version": {HUGE}}}'.encode(),
    )
    assert assert_problem(reply, 400)["errors"] == [{"field": "version", "reason": "number out of range (Long)"}]


def test_a_huge_id_in_a_batch_element_is_that_elements_400(daemon, admin_token):
    reply = post_json(
        daemon, "/b0.1/person/show", f'{{"batch": [{{"id": 1}}, {{"id": {HUGE}}}]}}'.encode(), admin_token
    )
    body = assert_json(reply, 207)
    assert body["data"] is None
    (error,) = body["errors"]
    assert (error["index"], error["status"]) == (1, 400)
    assert error["errors"] == [{"field": "id", "reason": "number out of range (Long)"}]


def test_a_huge_id_in_a_chain_link_is_400_naming_it_and_the_link(daemon, admin_token):
    path = f"/c0.1/person/show/{HUGE}"
    reply = daemon.request("GET", path, {"chain": {"key": "id", "order": {"person/show": "return"}}}, token=admin_token)
    body = assert_problem(reply, 400, instance=path)
    assert error_fields(body) == {"id"}
    assert body["link"] == {"position": 0, "endpoint": "person/show"}


def test_a_whole_number_past_64_bits_for_a_float_is_its_double(daemon, admin_token):
    reply = post_json(
        daemon,
        f"{V}/team/create",
        b'{"name": "big spender", "leaderId": 1, "budget": 1' + b"0" * 30 + b"}",
        admin_token,
    )
    created = assert_json(reply)
    assert created["budget"] == 1e30
    shown = assert_json(daemon.request("GET", f"{V}/team/show/{created['id']}", token=admin_token))
    assert shown["budget"] == 1e30


# --- fields -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field, value",
    [
        ("roles", ["ROLE_ADMIN"]),
        ("username", "alice2"),
        ("enabled", False),
        ("accountLocked", False),
    ],
)
def test_a_field_the_role_may_not_send_is_400_naming_it(
    daemon, admin_token, user_token, user_id, unchanged, field, value
):
    reply = daemon.request(
        "PUT", f"{V}/person/update/{user_id}", {field: value, "email": "escalate@example.com"}, token=user_token
    )
    body = assert_problem(reply, 400)
    assert field in error_fields(body)
    assert field in body["detail"]


def test_a_field_unknown_to_the_controller_is_400_naming_it(daemon, admin_token, unchanged):
    reply = daemon.request(
        "POST",
        f"{V}/person/create",
        {"username": "nick", "password": "nick-password-1", "email": "nick@example.com", "nickname": "Nick"},
        token=admin_token,
    )
    assert "nickname" in error_fields(assert_problem(reply, 400))


def test_a_field_the_endpoint_does_not_take_is_400_naming_it(daemon, admin_token, user_id, unchanged):
    reply = daemon.request("PUT", f"{V}/person/update/{user_id}", {"dateCreated": "2020-01-01"}, token=admin_token)
    assert "dateCreated" in error_fields(assert_problem(reply, 400))


def test_an_unknown_query_field_is_400_naming_it(daemon, admin_token):
    reply = daemon.request("GET", f"{V}/person/show/1?debug=1", token=admin_token)
    assert "debug" in error_fields(assert_problem(reply, 400))


@pytest.mark.parametrize(
    "field, value",
    [
        ("enabled", "yes"),
        ("enabled", 1),
        ("email", "not-an-email"),
        ("email", 42),
        ("version", "1"),
        ("version", 1.5),
        ("version", True),
        ("roles", "ROLE_ADMIN"),
        ("username", ["alice"]),
        ("id", 2**70),
    ],
)
def test_a_wrongly_typed_value_is_400_naming_the_field(daemon, admin_token, user_id, unchanged, field, value):
    fields = {"email": "typed@example.com", field: value}
    reply = daemon.request("PUT", f"{V}/person/update/{user_id}", fields, token=admin_token)
    assert field in error_fields(assert_problem(reply, 400))


@pytest.mark.parametrize(
    "path, field",
    [
        (f"{V}/person/show/abc", "id"),
        (f"{V}/person/show/1.5", "id"),
        (f"{V}/person/show?id=abc", "id"),
        (f"{V}/person/show?id=1&id=2", "id"),
        (f"{V}/person/list?max=ten", "max"),
        (f"{V}/person/list?max=101", "max"),
    ],
)
def test_a_wrongly_typed_text_field_is_400_naming_it(daemon, admin_token, path, field):
    assert field in error_fields(assert_problem(daemon.request("GET", path, token=admin_token), 400))


def test_a_page_size_of_zero_is_400(daemon, admin_token):
    reply = daemon.request("GET", f"{V}/person/list?max=0", token=admin_token)
    assert "max" in error_fields(assert_problem(reply, 400))


def test_a_value_that_breaks_the_account_policy_creates_nothing(daemon, admin_token, unchanged):
    reply = daemon.request(
        "POST",
        f"{V}/person/create",
        {"username": "shorty", "password": "short", "email": "shorty@example.com"},
        token=admin_token,
    )
    assert "password" in error_fields(assert_problem(reply, 400))


def test_a_missing_required_field_creates_nothing(daemon, admin_token, unchanged):
    reply = daemon.request(
        "POST", f"{V}/person/create", {"username": "nopass", "email": "nopass@example.com"}, token=admin_token
    )
    assert "password" in error_fields(assert_problem(reply, 400))


def test_an_unknown_role_on_create_creates_nothing(daemon, admin_token, unchanged):
    reply = daemon.request(
        "POST",
        f"{V}/person/create",
        {"username": "ghosted", "password": "ghost-password", "email": "ghost@example.com", "roles": ["ROLE_GHOST"]},
        token=admin_token,
    )
    assert "roles" in error_fields(assert_problem(reply, 400))


def test_an_email_with_a_trailing_newline_is_refused(daemon, admin_token, unchanged):
    reply = daemon.request(
        "POST",
        f"{V}/person/create",
        {"username": "newline", "password": "newline-password", "email": "newline@example.com\n"},
        token=admin_token,
    )
    assert "email" in error_fields(assert_problem(reply, 400))


def test_an_explicit_null_for_an_optional_field_is_not_a_conflict(daemon, admin_token):
    fields = {"username": "nulled", "password": "nulled-password", "email": "nulled@example.com", "enabled": None}
    reply = daemon.request("POST", f"{V}/person/create", fields, token=admin_token)
    # null is either "not sent" (the default applies) or a bad value; never a conflict.
    assert reply.status in (200, 400), reply.body
    if reply.status == 200:
        stored = daemon.request("GET", f"{V}/person/show/{reply.json['id']}", token=admin_token).json
        assert stored["enabled"] is True
    else:
        assert "enabled" in error_fields(assert_problem(reply, 400))
        assert "nulled" not in [p["username"] for p in everyone(daemon, admin_token)]


# --- every bad field of a call in one problem ------------------------------------------------------

ALL_WRONG = {"username": "allwrong", "password": "x", "nickname": "Al"}


def test_unknown_missing_and_policy_errors_of_create_come_in_one_problem(daemon, admin_token, unchanged):
    body = assert_problem(daemon.request("POST", f"{V}/person/create", ALL_WRONG, token=admin_token), 400)
    assert body["type"] == "urn:apid:problem:invalid-fields"
    assert error_fields(body) == {"nickname", "email", "password"}
    reasons = {error["field"]: error["reason"] for error in body["errors"]}
    assert reasons["email"] == "is required"
    assert "characters long" in reasons["password"]


def test_a_batch_element_reports_all_its_bad_fields_in_one_problem(daemon, admin_token, unchanged):
    reply = daemon.request("POST", "/b0.1/person/create", {"batch": [ALL_WRONG]}, token=admin_token)
    body = assert_json(reply, 207)
    (error,) = body["errors"]
    assert (error["index"], error["status"], error["type"]) == (0, 400, "urn:apid:problem:invalid-fields")
    assert error_fields(error) == {"nickname", "email", "password"}


def test_a_user_update_lists_fields_not_allowed_badly_typed_and_the_policy_together(
    daemon, user_token, user_id, unchanged
):
    reply = daemon.request(
        "PUT",
        f"{V}/person/update/{user_id}",
        {"enabled": False, "version": "one", "password": "short"},
        token=user_token,
    )
    assert error_fields(assert_problem(reply, 400)) == {"enabled", "version", "password"}


# --- addresses -------------------------------------------------------------------------------------


def test_an_unknown_application_version_is_404_naming_the_served_version(daemon, admin_token):
    body = assert_problem(
        daemon.request("GET", "/v0.2/person/show/1", token=admin_token), 404, instance="/v0.2/person/show/1"
    )
    assert "0.1" in body["detail"]
    assert "0.2" in body["detail"]


def test_an_unknown_application_version_does_not_run_a_write(daemon, admin_token, user_id, unchanged):
    reply = daemon.request("PUT", f"/v9.9/person/update/{user_id}", {"email": "v99@example.com"}, token=admin_token)
    assert "0.1" in assert_problem(reply, 404)["detail"]


@pytest.mark.parametrize(
    "path, named",
    [
        (f"{V}/nosuch/show/1", "nosuch"),
        (f"{V}/person/nosuch/1", "nosuch"),
        ("/v0.1-9/person/show/1", "9"),
        ("/v0.1-2/person/show/1", "2"),
        ("/v0.1-1/team/nosuch", "nosuch"),
        ("/x0.1/person/show/1", None),
        ("/v0.1x/person/show/1", None),
    ],
)
def test_an_unknown_controller_action_or_api_version_is_404(daemon, admin_token, path, named):
    body = assert_problem(daemon.request("GET", path, token=admin_token), 404, instance=path)
    if named is not None:
        assert named in body["detail"]


@pytest.mark.parametrize(
    "method, path, allow",
    [
        ("POST", f"{V}/person/show/1", "GET"),
        ("PUT", f"{V}/person/list", "GET"),
        ("GET", f"{V}/person/create", "POST"),
        ("PATCH", f"{V}/person/update/1", "PUT"),
    ],
)
def test_a_wrong_method_is_405_with_allow(daemon, admin_token, method, path, allow):
    reply = daemon.request(method, path, token=admin_token)
    body = assert_problem(reply, 405, instance=path)
    assert [m.strip() for m in reply.headers["Allow"].split(",")] == [allow]
    assert body["detail"]


def test_a_wrong_method_does_not_run_the_write(daemon, admin_token, user_id, unchanged):
    reply = daemon.request("POST", f"{V}/person/delete/{user_id}", token=admin_token)
    assert_problem(reply, 405)
    assert reply.headers["Allow"] == "DELETE"
    reply = daemon.request("DELETE", f"{V}/person/update/{user_id}", {"email": "del@example.com"}, token=admin_token)
    assert_problem(reply, 405)
    assert reply.headers["Allow"] == "PUT"


@pytest.mark.parametrize("path", ["/nope", "/a/b/c/d/e", "/v0.1/person/show/1/extra", "/favicon.ico", "/"])
def test_klein_own_404_is_a_problem_not_html(daemon, admin_token, path):
    assert_problem(daemon.request("GET", path, token=admin_token), 404, instance=path)
    assert_problem(daemon.request("GET", path), 404, instance=path)


@pytest.mark.parametrize(
    "method, path, allowed",
    [
        ("POST", "/health", "GET"),
        ("DELETE", "/health", "GET"),
        ("GET", "/authenticate", "POST"),
        ("PUT", "/authenticate", "POST"),
    ],
)
def test_klein_own_405_is_a_problem_with_allow(daemon, method, path, allowed):
    reply = daemon.request(method, path)
    assert_problem(reply, 405, instance=path)
    assert allowed in [m.strip() for m in reply.headers["Allow"].split(",")]


@pytest.mark.parametrize("path", ["/%ff", f"{V}/person/show/%ff"])
def test_a_path_that_is_not_utf8_is_a_problem_not_html(daemon, admin_token, path):
    assert_problem(daemon.request("GET", path, token=admin_token), 400)


def test_a_query_that_is_not_utf8_is_a_problem(daemon, admin_token):
    assert_problem(daemon.request("GET", f"{V}/person/show?id=%ff", token=admin_token), 400)


@pytest.mark.parametrize("path", [f"{V}/person/show/1%00", "/he%00alth", f"{V}/per%00son/show/1"])
def test_a_nul_in_the_path_is_400(daemon, admin_token, path):
    assert "NUL" in assert_problem(daemon.request("GET", path, token=admin_token), 400)["detail"]


@pytest.mark.parametrize(
    "path, field",
    [
        (f"{V}/person/show?id=1%00", "id"),
        ("/validate?id=%00", "id"),
        ("/error?status=%00", "status"),
    ],
)
def test_a_nul_in_the_query_is_400_naming_the_field(daemon, admin_token, path, field):
    body = assert_problem(daemon.request("GET", path, token=admin_token), 400)
    assert body["errors"] == [{"field": field, "reason": "holds a NUL character (%00)"}]


@pytest.mark.parametrize("path", [f"{V}/person/show/..%2F..%2Fetc%2Fpasswd", f"{V}/person/show/..%2f..%2f..%2f"])
def test_an_id_that_climbs_out_of_the_path_is_404(daemon, admin_token, path):
    assert_problem(daemon.request("GET", path, token=admin_token), 404)


@pytest.mark.parametrize("path", [f"{V}/person/show/%2e%2e", f"{V}/person/show/.%2E"])
def test_an_id_of_dots_is_400_naming_it(daemon, admin_token, path):
    assert error_fields(assert_problem(daemon.request("GET", path, token=admin_token), 400)) == {"id"}


@pytest.mark.parametrize("method", ["FOO", "TRACE", "get", "CONNECT"])
def test_an_odd_method_is_a_405_problem(daemon, admin_token, method):
    reply = daemon.request(method, f"{V}/person/show/1", token=admin_token)
    body = assert_problem(reply, 405)
    assert method not in reply.headers["Allow"].split(", ")
    assert body["allow"]


def test_asterisk_for_anything_but_options_is_a_405_problem(daemon):
    reply = send_raw(daemon, b"GET * HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert_problem(reply, 405, instance="*")
    assert reply.headers["Allow"] == "OPTIONS"


@pytest.mark.parametrize(
    "head, status",
    [
        (b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20_000 + b"\r\n\r\n", 431),
        (b"GET /health HTTP/1.1\r\nHost: x\r\n" + b"".join(b"X-%d: a\r\n" % n for n in range(501)) + b"\r\n", 431),
        (b"GET /health HTTP/1.1\r\nHost: x\r\nX-One: " + b"b" * 9000 + b"\r\nX-Two: " + b"c" * 9000 + b"\r\n\r\n", 431),
        (b"GET /health HTTP/1.1\r\nHost: x\r\nX-Nul: a\x00b\r\n\r\n", 400),
        (b"POST /authenticate HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n", 400),
        (b"POST /authenticate HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n{}", 400),
        (b"POST /authenticate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n", 400),
    ],
)
def test_headers_too_large_or_malformed_are_problems(daemon, head, status):
    reply = send_raw(daemon, head)
    assert_problem(reply, status)
    assert reply.headers["Connection"] == "close"
    assert_answer_headers(reply)


@pytest.mark.parametrize(
    "line, status",
    [
        (b"GET /" + b"a" * 20_000 + b" HTTP/1.1", 414),
        (b"GARBAGE", 400),
        (b"G\xffT /health HTTP/1.1", 400),
        (b"GET /health HTTP/2.0", 400),
    ],
)
def test_a_request_line_too_long_or_malformed_is_a_problem(daemon, line, status):
    reply = send_raw(daemon, line + b"\r\nHost: x\r\n\r\n")
    assert reply.status == status
    assert reply.headers["Content-Type"] == "application/problem+json"
    body = json.loads(reply.body)
    assert body["status"] == status and body["type"].startswith("urn:apid:problem:") and body["detail"]
    assert "instance" not in body  # no request target could be read


def test_the_daemon_keeps_serving_after_malformed_requests(daemon, admin_token):
    assert daemon.request("GET", f"{V}/person/show/1", token=admin_token).status == 200


# --- the headers of every answer ----------------------------------------------------------------------


def test_an_api_answer_carries_the_answer_headers(daemon, admin_token):
    reply = daemon.request("GET", f"{V}/person/show/1", token=admin_token)
    assert_json(reply)
    assert_answer_headers(reply)
    assert "Twisted" not in str(reply.headers)


@pytest.mark.parametrize(
    "method, path, status",
    [
        ("GET", f"{V}/person/show/abc", 400),
        ("GET", f"{V}/nosuch/show/1", 404),
        ("GET", "/nowhere/at/all/here/x", 404),
        ("DELETE", "/health", 405),
    ],
)
def test_a_problem_carries_the_answer_headers(daemon, admin_token, method, path, status):
    reply = daemon.request(method, path, token=admin_token)
    assert_problem(reply, status)
    assert_answer_headers(reply)


@pytest.mark.parametrize("method, path, body", [("GET", "/health", None), ("POST", "/authenticate", {})])
def test_a_public_endpoint_carries_the_answer_headers(daemon, method, path, body):
    assert_answer_headers(daemon.request(method, path, body))


# --- authentication ---------------------------------------------------------------------------------


def _bad_authorization(deployment: Deployment, case: str) -> dict[str, str]:
    tokens = {
        "malformed": "not.a.token",
        "garbage": "x" * 40,
        "expired": lambda: forge(deployment, iat=int(time.time()) - 7200, exp=int(time.time()) - 3600),
        "alg-none": lambda: jwt.encode(
            {
                "iss": "apid",
                "aud": "apid",
                "sub": "1",
                "roles": ["ROLE_ADMIN"],
                "iat": int(time.time()),
                "exp": int(time.time()) + 600,
                "jti": "none",
            },
            None,
            algorithm="none",
            headers={"typ": "at+jwt"},
        ),
        "other-key": lambda: forge(deployment, key=b"another-deployment-secret-0123456789abcdef"),
        "other-algorithm": lambda: forge(deployment, algorithm="HS512"),
        "wrong-audience": lambda: forge(deployment, aud="someone-else"),
        "wrong-issuer": lambda: forge(deployment, iss="someone-else"),
        "wrong-type": lambda: forge(deployment, header={"typ": "JWT"}),
        "no-expiry": lambda: forge(deployment, drop=("exp",)),
        "no-jti": lambda: forge(deployment, drop=("jti",)),
        "roles-not-a-list": lambda: forge(deployment, roles="ROLE_ADMIN"),
        # a user's token whose payload was edited to claim ROLE_ADMIN, signature left as it was
        "tampered": lambda: tampered(forge(deployment, sub="2", name=USER[0], roles=["ROLE_USER"])),
    }
    if case == "missing":
        return {}
    if case == "basic":
        return {"Authorization": "Basic YWRtaW46YWRtaW4tcGFzc3dvcmQtMQ=="}
    if case == "bearer-empty":
        return {"Authorization": "Bearer "}
    token = tokens[case]
    return {"Authorization": f"Bearer {token() if callable(token) else token}"}


BAD_AUTH = [
    "missing",
    "basic",
    "bearer-empty",
    "malformed",
    "garbage",
    "expired",
    "alg-none",
    "other-key",
    "other-algorithm",
    "wrong-audience",
    "wrong-issuer",
    "wrong-type",
    "no-expiry",
    "no-jti",
    "roles-not-a-list",
    "tampered",
]


@pytest.mark.parametrize("case", BAD_AUTH)
def test_a_missing_or_bad_token_is_401_with_www_authenticate_and_changes_nothing(
    daemon, deployment, admin_token, user_id, unchanged, case
):
    path = f"{V}/person/update/{user_id}"
    reply = daemon.request("PUT", path, {"email": "intruder@example.com"}, headers=_bad_authorization(deployment, case))
    assert_problem(reply, 401, instance=path)
    assert reply.headers["WWW-Authenticate"].lower().startswith("bearer")


@pytest.mark.parametrize("case", ["missing", "expired", "other-key"])
def test_a_bad_token_on_a_read_is_401_without_data(daemon, deployment, case):
    reply = daemon.request("GET", f"{V}/person/show/1", headers=_bad_authorization(deployment, case))
    body = assert_problem(reply, 401)
    assert ADMIN[2] not in json.dumps(body)


def test_an_unknown_controller_without_a_token_is_401_not_404(daemon):
    assert_problem(daemon.request("GET", f"{V}/nosuch/show/1"), 401)


@pytest.mark.parametrize("roles", [["ROLE_ANONYMOUS"], ["ROLE_GHOST"], []])
def test_a_role_outside_the_endpoint_roles_is_403(daemon, deployment, admin_token, roles, unchanged):
    token = forge(deployment, roles=roles)
    assert_problem(daemon.request("GET", f"{V}/person/show/1", token=token), 403)
    assert_problem(daemon.request("PUT", f"{V}/person/update/1", {"email": "anon@example.com"}, token=token), 403)


def test_a_user_calling_an_admin_endpoint_is_403_and_creates_nothing(daemon, admin_token, user_token, unchanged):
    reply = daemon.request(
        "POST",
        f"{V}/person/create",
        {"username": "sneaky", "password": "sneaky-password", "email": "sneaky@example.com"},
        token=user_token,
    )
    assert_problem(reply, 403)


def test_a_wrong_password_and_an_unknown_user_get_the_same_401(daemon):
    same_id = {"X-Request-ID": "one-id-for-both"}  # so that the bodies may be equal
    wrong_password = daemon.request(
        "POST", "/authenticate", {"username": ADMIN[0], "password": "not-the-password"}, headers=same_id
    )
    unknown_user = daemon.request(
        "POST", "/authenticate", {"username": "nobody-here", "password": "not-the-password"}, headers=same_id
    )
    assert_problem(wrong_password, 401, instance="/authenticate")
    assert wrong_password.status == unknown_user.status
    assert wrong_password.body == unknown_user.body
    assert wrong_password.content_type == unknown_user.content_type
    assert wrong_password.headers.get("WWW-Authenticate") == unknown_user.headers.get("WWW-Authenticate")
    assert "token" not in wrong_password.json


@pytest.mark.parametrize(
    "body, fields",
    [
        ({}, {"username", "password"}),
        ({"username": ADMIN[0]}, {"password"}),
        ({"password": ADMIN[1]}, {"username"}),
        ({"username": 1, "password": ADMIN[1]}, {"username"}),
        ({"username": ADMIN[0], "password": [ADMIN[1]]}, {"password"}),
        ({"username": ADMIN[0], "password": None}, {"password"}),
        ({"username": ADMIN[0], "password": ""}, {"password"}),
    ],
)
def test_authenticate_with_missing_or_non_string_fields_is_400(daemon, body, fields):
    reply = daemon.request("POST", "/authenticate", body)
    assert error_fields(assert_problem(reply, 400, instance="/authenticate")) == fields


@pytest.mark.parametrize(
    "raw, content_type, status",
    [
        (b"", "application/json", 400),
        (b"username=admin", "application/x-www-form-urlencoded", 415),
        (b'["admin", "admin-password-1"]', "application/json", 400),
        (b'{"username": "admin",', "application/json", 400),
    ],
)
def test_authenticate_with_a_body_that_is_not_a_json_object(daemon, raw, content_type, status):
    reply = daemon.request("POST", "/authenticate", body=raw, headers={"Content-Type": content_type})
    assert_problem(reply, status, instance="/authenticate")


# --- body size limit: a daemon of its own with maxBodyBytes 2048 -------------------------------


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    deployment = deployment_with_accounts(
        tmp_path_factory.mktemp("apid-small"), api={"maxBodyBytes": 2048}, accounts=(ADMIN_ACCOUNT,)
    )
    with running_daemon(deployment) as running:
        running.token = running.login(ADMIN[0], ADMIN[1])
        yield running


def padded_create(name: str, size: int) -> bytes:
    """A valid create body padded with JSON whitespace to exactly `size` bytes."""
    raw = json.dumps({"username": name, "password": f"{name}-password", "email": f"{name}@example.com"}).encode()
    assert len(raw) < size
    return raw[:-1] + b" " * (size - len(raw)) + b"}"


def small_people(small) -> list[str]:
    reply = small.request("GET", f"{V}/person/list?max=100", token=small.token)
    assert reply.status == 200
    return [p["username"] for p in reply.json]


def test_a_body_within_max_body_bytes_is_accepted(small):
    reply = small.request(
        "POST",
        f"{V}/person/create",
        token=small.token,
        body=padded_create("within", 2048),
        headers={"Content-Type": "application/json"},
    )
    assert reply.status == 200, reply.body
    assert "within" in small_people(small)


def test_a_body_over_max_body_bytes_is_413_and_creates_nothing(small):
    before = small_people(small)
    reply = small.request(
        "POST",
        f"{V}/person/create",
        token=small.token,
        body=padded_create("over", 2049),
        headers={"Content-Type": "application/json"},
    )
    assert_problem(reply, 413, instance=f"{V}/person/create")
    assert small_people(small) == before


def test_a_chunked_body_over_max_body_bytes_is_413_and_creates_nothing(small):
    before = small_people(small)
    data = padded_create("chunked", 4000)
    connection = http.client.HTTPConnection("127.0.0.1", small.port, timeout=30)
    try:
        connection.request(
            "POST",
            f"{V}/person/create",
            body=iter([data[i : i + 500] for i in range(0, len(data), 500)]),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {small.token}"},
            encode_chunked=True,
        )
        reply = connection.getresponse()
        status, content_type, body = reply.status, reply.getheader("Content-Type"), reply.read()
    finally:
        connection.close()
    assert status == 413, body
    assert content_type == "application/problem+json"
    assert json.loads(body)["status"] == 413
    assert small_people(small) == before


def test_an_authenticate_body_over_max_body_bytes_is_413(small):
    reply = small.request("POST", "/authenticate", {"username": ADMIN[0], "password": ADMIN[1], "pad": "x" * 3000})
    assert_problem(reply, 413, instance="/authenticate")


@pytest.mark.parametrize("path", [f"{V}/person/create", "/authenticate"])
@pytest.mark.parametrize("expect", [b"", b"Expect: 100-continue\r\n"])
def test_a_declared_body_over_max_body_bytes_is_413_at_once_without_reading_it(small, path, expect):
    """Headers declaring 50 MB and no body at all: the 413 (and no 100 Continue) comes within
    a second, and the connection is closed."""
    before = small_people(small)
    with socket.create_connection(("127.0.0.1", small.port), timeout=1) as sock:
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer {small.token}\r\nContent-Length: 52428800\r\n".encode()
            + expect
            + b"\r\n"
        )
        reply = parse_answer(read_until_closed(sock))
    assert_problem(reply, 413, instance=path)
    assert reply.json["limit"] == 2048
    assert reply.headers["Connection"] == "close"
    assert_answer_headers(reply)
    assert small_people(small) == before


def test_a_chunked_body_is_cut_off_at_max_body_bytes_with_413(small):
    before = small_people(small)
    chunk = b"400\r\n" + b" " * 0x400 + b"\r\n"
    with socket.create_connection(("127.0.0.1", small.port), timeout=1) as sock:
        sock.sendall(
            f"POST {V}/person/create HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer {small.token}\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
        )
        sock.sendall(chunk * 3)  # 3 KiB, never terminated: the 413 cannot wait for the end
        reply = parse_answer(read_until_closed(sock))
    assert_problem(reply, 413, instance=f"{V}/person/create")
    assert_answer_headers(reply)
    assert small_people(small) == before


def test_a_client_still_sending_a_refused_body_reads_the_413(small):
    """The rest of a refused body is read and dropped before the connection closes, so a client
    that sends everything before it reads is not reset before it sees the answer."""
    body = b" " * 50_000_000
    reply = small.request("POST", "/authenticate", body=body, headers={"Content-Type": "application/json"})
    assert_problem(reply, 413, instance="/authenticate")


def test_the_daemon_keeps_serving_after_refused_bodies(small):
    assert small.request("GET", "/health").status == 200
    reply = small.request(
        "POST",
        f"{V}/person/create",
        token=small.token,
        body=padded_create("after", 2048),
        headers={"Content-Type": "application/json"},
    )
    assert reply.status == 200, reply.body
    assert "after" in small_people(small)


# --- a controller that fails: a daemon whose database loses a table under it -------------------


@pytest.fixture(scope="module")
def fragile(tmp_path_factory):
    with running_daemon(deployment_with_accounts(tmp_path_factory.mktemp("apid-fragile"))) as running:
        running.token = running.login(ADMIN[0], ADMIN[1])
        yield running


def rename_table(deployment: Deployment, old: str, new: str) -> None:
    db = sqlite3.connect(deployment.root / "var" / "test.db", timeout=30, isolation_level=None)
    try:
        db.execute(f"ALTER TABLE {old} RENAME TO {new}")
    finally:
        db.close()


def test_a_controller_error_is_a_500_problem_without_a_traceback(fragile):
    # a first call, so that the daemon knows the caller's account standing: the error to see
    # is the controller's, not the token check's
    assert fragile.request("GET", f"{V}/person/show/1", token=fragile.token).status == 200
    rename_table(fragile.deployment, "person_role", "person_role_away")
    try:
        reply = fragile.request("GET", f"{V}/person/show/1", token=fragile.token)
    finally:
        rename_table(fragile.deployment, "person_role_away", "person_role")
    body = assert_problem(reply, 500, instance=f"{V}/person/show/1")
    assert body["detail"] == "person/show failed; the error was logged"
    text = reply.body.decode()
    for leak in ("Traceback", 'File "', "sqlite", "SELECT", "person_role", "OperationalError"):
        assert leak not in text, leak
    # The daemon keeps serving once the database is whole again.
    assert fragile.request("GET", f"{V}/person/show/1", token=fragile.token).status == 200


def test_a_controller_error_during_a_write_leaves_nothing_half_made(fragile):
    before = fragile.request("GET", f"{V}/person/show/2", token=fragile.token).json
    rename_table(fragile.deployment, "person_role", "person_role_away")
    try:
        reply = fragile.request(
            "PUT",
            f"{V}/person/update/2",
            {"email": "half@example.com", "roles": ["ROLE_USER", "ROLE_ADMIN"]},
            token=fragile.token,
        )
    finally:
        rename_table(fragile.deployment, "person_role_away", "person_role")
    assert_problem(reply, 500)
    assert "Traceback" not in reply.body.decode()
    assert fragile.request("GET", f"{V}/person/show/2", token=fragile.token).json == before


def test_a_slow_client_does_not_block_others(small):
    """A request whose body never finishes arriving must not stop the daemon answering others."""
    with socket.create_connection(("127.0.0.1", small.port), timeout=30) as slow:
        slow.sendall(
            b"POST /authenticate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b'Content-Length: 100\r\n\r\n{"user'
        )
        reply = small.request("GET", "/health")
        assert reply.status == 200


# --- last: nothing sent above left a traceback in the log of a daemon that should have none ---------


def test_no_request_left_a_traceback_in_the_daemon_log(daemon, small):
    for running in (daemon, small):
        assert "Traceback" not in running.stderr, running.stderr[-3000:]
