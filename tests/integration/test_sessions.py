"""Sessions after login against the real daemon: /refreshToken, /logout, the refresh cookie,
rotation and reuse detection, revocation (by logout and by password reset) across a restart
and across two daemons sharing one deployment folder, and a plugin's public route.

Three deployments: the default one of conftest (reservedUris as in the repository, so the
sample plugin's /teamCount needs a token); `short` (access tokens of 1 s with no leeway, a
refresh grace of 1 s, refresh cookies of 120 s, secureCookies off); `shared` (two daemons on
one folder and SQLite database, /teamCount listed in reservedUris).
"""

from __future__ import annotations

import time
import uuid

import jwt
import pytest
import yaml

from apid.config import files as apid_config
from forged_tokens import secret_of
from harness import (
    ADMIN,
    REPO,
    USER,
    USER_ACCOUNT,
    Daemon,
    Deployment,
    Response,
    deployment_with_accounts,
    running_daemon,
    wait_for,
)
from sessions import claims_of, log_in, log_out, refresh, refresh_cookie, reset_password, whoami

REFRESH_LIFETIME_DEFAULT = 14 * 86400


# --- helpers ------------------------------------------------------------------------------------


def assert_401(reply: Response) -> dict:
    assert reply.status == 401, reply.body
    assert reply.content_type.startswith("application/problem+json"), reply.content_type
    return reply.json


def make_user(daemon: Daemon, admin_token: str, prefix: str) -> tuple[str, str, str]:
    """An enabled ROLE_USER account made by the administrator: (username, password, email)."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    password, address = f"pw-{uuid.uuid4().hex[:12]}", f"{name}@example.org"
    reply = daemon.request(
        "POST",
        "/v0.1/person/create",
        {
            "username": name,
            "password": password,
            "email": address,
            "enabled": True,
            "roles": ["ROLE_USER"],
        },
        token=admin_token,
    )
    assert reply.status == 200, reply.body
    return name, password, address


def wait_until_expired(daemon: Daemon, token: str) -> None:
    """Until a private call refuses the token as expired (accessLifetime 1 s, leeway 0)."""
    assert wait_for(lambda: whoami(daemon, token).status == 401, timeout=5, interval=0.2)
    assert "expired" in whoami(daemon, token).json["detail"]


# --- deployments --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def short_deployment(tmp_path_factory) -> Deployment:
    return deployment_with_accounts(
        tmp_path_factory.mktemp("short"),
        server={
            "secureCookies": False,
            "jwt": {"accessLifetime": 1, "leeway": 0, "refreshGrace": 1, "refreshLifetime": 120},
        },
        accounts=(USER_ACCOUNT,),
    )


@pytest.fixture(scope="module")
def short(short_deployment):
    with running_daemon(short_deployment) as running:
        yield running


def repository_reserved_uris() -> list[str]:
    return yaml.safe_load((REPO / "etc" / "service_api.yml").read_text())["reservedUris"]


@pytest.fixture(scope="module")
def shared_deployment(tmp_path_factory) -> Deployment:
    return deployment_with_accounts(
        tmp_path_factory.mktemp("shared"), api={"reservedUris": [*repository_reserved_uris(), "/teamCount"]}
    )


@pytest.fixture(scope="module")
def daemon_a(shared_deployment):
    with running_daemon(shared_deployment) as running:
        yield running


@pytest.fixture(scope="module")
def daemon_b(shared_deployment, daemon_a):
    with running_daemon(shared_deployment) as running:
        yield running


# --- refusals -----------------------------------------------------------------------------------


def test_refresh_with_another_users_name_or_cookie_is_refused(daemon, admin_token):
    token, cookie = log_in(daemon, *USER[:2])
    assert_401(refresh(daemon, ADMIN[0], token, cookie))
    # The administrator's own genuine token and name, with alice's cookie.
    assert_401(refresh(daemon, ADMIN[0], admin_token, cookie))
    # None of that used up or revoked alice's cookie.
    assert refresh(daemon, USER[0], token, cookie).status == 200


def test_refresh_without_the_cookie_or_the_token_is_refused(daemon):
    token, cookie = log_in(daemon, *USER[:2])
    assert_401(refresh(daemon, USER[0], token, None))
    assert_401(refresh(daemon, USER[0], token, ""))
    assert_401(refresh(daemon, USER[0], token, "A" * 43))
    assert_401(refresh(daemon, USER[0], None, cookie))
    assert_401(
        daemon.request(
            "GET",
            f"/refreshToken?name={USER[0]}",
            headers={"Authorization": f"Basic {token}", "Cookie": f"apid_refresh={cookie}"},
        )
    )
    assert (
        daemon.request("GET", "/refreshToken", token=token, headers={"Cookie": f"apid_refresh={cookie}"}).status == 400
    )  # no name
    assert refresh(daemon, USER[0], token, cookie).status == 200


def test_refresh_with_a_forged_token_is_refused(daemon):
    token, cookie = log_in(daemon, *USER[:2])
    claims = claims_of(token)
    header, payload, signature = token.split(".")
    other_key = jwt.encode({**claims, "jti": uuid.uuid4().hex}, b"k" * 48, algorithm="HS256", headers={"typ": "at+jwt"})
    unsigned = jwt.encode(claims, None, algorithm="none", headers={"typ": "at+jwt"})
    tampered = ".".join([header, jwt.encode({**claims, "name": ADMIN[0]}, b"x" * 32).split(".")[1], signature])
    for forged in (other_key, unsigned, tampered, f"{header}.{payload}.", "not-a-token"):
        assert_401(refresh(daemon, USER[0], forged, cookie))
    assert refresh(daemon, USER[0], token, cookie).status == 200


def test_a_forged_or_foreign_token_logs_nobody_out(daemon, admin_token):
    token, cookie = log_in(daemon, *USER[:2])
    forged = jwt.encode(
        {**claims_of(token), "jti": uuid.uuid4().hex}, b"k" * 48, algorithm="HS256", headers={"typ": "at+jwt"}
    )
    assert_401(log_out(daemon, forged, cookie))
    assert_401(daemon.request("POST", "/logout", headers={"Cookie": f"apid_refresh={cookie}"}))
    # Another account's genuine token with alice's cookie: that token is logged out, her family is not.
    other_token, _ = log_in(daemon, *ADMIN[:2])
    assert log_out(daemon, other_token, cookie).status == 204
    assert_401(whoami(daemon, other_token))
    assert whoami(daemon, admin_token).status == 200
    assert whoami(daemon, token).status == 200
    assert refresh(daemon, USER[0], token, cookie).status == 200


def test_refresh_after_logout_is_refused(daemon):
    token, cookie = log_in(daemon, *USER[:2])
    reply = log_out(daemon, token, cookie)
    assert reply.status == 204 and reply.body == b""
    assert_401(refresh(daemon, USER[0], token, cookie))
    assert_401(whoami(daemon, token))
    fresh, fresh_cookie = log_in(daemon, *USER[:2])
    assert_401(refresh(daemon, USER[0], fresh, cookie))
    assert refresh(daemon, USER[0], fresh, fresh_cookie).status == 200


# --- the cookie ---------------------------------------------------------------------------------


def test_the_refresh_cookie_attributes(daemon, deployment):
    """HttpOnly, SameSite=Strict, Path=/, Max-Age the refresh lifetime, and Secure: the test
    environment is not development, and `secureCookies` defaults to true outside development
    (issue 3: "Secure outside development"; docs/accounts.md and the `secureCookies` row of
    docs/configuration.md say the same)."""
    reply = daemon.request("POST", "/authenticate", {"username": USER[0], "password": USER[1]})
    assert reply.status == 200
    token = reply.json["token"]
    for answer in (reply, refresh(daemon, USER[0], token, refresh_cookie(reply).value)):
        assert answer.status == 200, answer.body
        assert answer.headers["Cache-Control"] == "no-store"
        cookie = refresh_cookie(answer)
        assert cookie["httponly"] is True
        assert cookie["samesite"].lower() == "strict"
        assert cookie["path"] == "/"
        assert cookie["max-age"] == str(REFRESH_LIFETIME_DEFAULT)
        assert cookie["secure"] is True
        assert cookie["domain"] == "" and cookie["expires"] == ""
        assert len(cookie.value) >= 43 and "." not in cookie.value  # opaque, 256 bits, not a JWT
        assert cookie.value not in answer.body.decode()

    cleared = refresh_cookie(log_out(daemon, token, refresh_cookie(reply).value))
    assert cleared.value == "" and cleared["max-age"] == "0" and cleared["path"] == "/"

    configs = {env: apid_config.load(deployment.config_dir, env, env={}) for env in ("development", "test")}
    assert configs["development"].server.secure_cookies is False
    assert configs["test"].server.secure_cookies is True


def test_the_cookie_follows_the_configuration(short):
    reply = short.request("POST", "/authenticate", {"username": USER[0], "password": USER[1]})
    cookie = refresh_cookie(reply)
    assert cookie["max-age"] == "120"  # jwt.refreshLifetime
    assert cookie["secure"] == ""  # secureCookies: false
    assert cookie["httponly"] is True and cookie["samesite"].lower() == "strict"


# --- rotation -----------------------------------------------------------------------------------


def test_each_refresh_rotates_and_a_recent_cookie_still_works(daemon):
    """Within the grace window (10 s by default) the previous cookie works again, for a client
    that lost an answer."""
    token, first = log_in(daemon, *USER[:2])
    cookies, tokens = [first], [token]
    for _ in range(3):
        reply = refresh(daemon, USER[0], tokens[-1], cookies[-1])
        assert reply.status == 200, reply.body
        cookies.append(refresh_cookie(reply).value)
        tokens.append(reply.json["token"])
    assert len(set(cookies)) == 4 and len(set(tokens)) == 4
    assert {claims_of(t)["name"] for t in tokens} == {USER[0]}

    reply = refresh(daemon, USER[0], tokens[-1], cookies[-2])  # the previous one, again
    assert reply.status == 200, reply.body
    newest = refresh_cookie(reply).value
    assert newest not in cookies
    assert whoami(daemon, reply.json["token"]).status == 200
    assert refresh(daemon, USER[0], reply.json["token"], newest).status == 200


def test_a_rotated_cookie_after_the_grace_window_revokes_its_family(short):
    token, first = log_in(short, *USER[:2])
    other_token, other_family = log_in(short, *USER[:2])
    reply = refresh(short, USER[0], token, first)
    assert reply.status == 200, reply.body
    second = refresh_cookie(reply).value
    time.sleep(1.6)  # refreshGrace is 1 s
    assert_401(refresh(short, USER[0], token, first))  # reuse: someone else holds the family
    assert_401(refresh(short, USER[0], token, second))  # so its newest cookie is refused too
    assert refresh(short, USER[0], other_token, other_family).status == 200  # another login is untouched


def test_a_token_refreshes_only_with_a_cookie_of_its_own_login(short):
    """The access token names its login (sid): a logged-out or stolen token cannot be traded
    with the cookie of another login of the same user."""
    token, _ = log_in(short, *USER[:2])
    other_token, other_cookie = log_in(short, *USER[:2])
    assert_401(refresh(short, USER[0], token, other_cookie))
    assert refresh(short, USER[0], other_token, other_cookie).status == 200


# --- expired but genuine tokens -----------------------------------------------------------------


def test_an_expired_but_genuine_token_refreshes(short, short_deployment):
    token, cookie = log_in(short, *USER[:2])
    wait_until_expired(short, token)
    reply = refresh(short, USER[0], token, cookie)
    assert reply.status == 200, reply.body
    new = jwt.decode(
        reply.json["token"],
        secret_of(short_deployment),
        algorithms=["HS256"],
        audience="apid",
        options={"verify_exp": False},
    )
    old = claims_of(token)
    assert new["name"] == USER[0] and new["sub"] == old["sub"]
    assert new["iat"] > old["iat"] and new["exp"] > old["exp"] and new["jti"] != old["jti"]
    assert refresh_cookie(reply).value != cookie


def test_logout_with_an_expired_but_genuine_token_still_revokes(short):
    token, cookie = log_in(short, *USER[:2])
    wait_until_expired(short, token)
    reply = log_out(short, token, cookie)
    assert reply.status == 204, reply.body
    assert_401(refresh(short, USER[0], token, cookie))
    fresh, fresh_cookie = log_in(short, *USER[:2])
    assert_401(refresh(short, USER[0], fresh, cookie))
    assert refresh(short, USER[0], fresh, fresh_cookie).status == 200


# --- password reset -----------------------------------------------------------------------------


def test_a_password_reset_revokes_every_session_of_the_account(daemon, deployment, admin_token):
    name, password, address = make_user(daemon, admin_token, "resetter")
    first, first_cookie = log_in(daemon, name, password)
    second, second_cookie = log_in(daemon, name, password)
    bystander, bystander_cookie = log_in(daemon, *USER[:2])
    assert whoami(daemon, first).status == 200

    reset_password(daemon, deployment, address, "brand-new-password-1")
    assert wait_for(lambda: whoami(daemon, first).status == 401, timeout=1.0)
    assert_401(whoami(daemon, second))
    after, after_cookie = log_in(daemon, name, "brand-new-password-1")
    assert whoami(daemon, after).status == 200
    assert_401(refresh(daemon, name, after, first_cookie))
    assert_401(refresh(daemon, name, after, second_cookie))
    assert_401(refresh(daemon, name, first, after_cookie))
    assert refresh(daemon, name, after, after_cookie).status == 200
    # Other accounts keep their sessions.
    assert whoami(daemon, bystander).status == 200
    assert refresh(daemon, USER[0], bystander, bystander_cookie).status == 200


# --- across daemons and restarts ----------------------------------------------------------------


def test_logout_on_one_daemon_holds_on_another_within_a_second(daemon_a, daemon_b):
    token, cookie = log_in(daemon_a, *USER[:2])
    assert whoami(daemon_b, token).status == 200
    assert log_out(daemon_a, token, cookie).status == 204
    started = time.monotonic()
    refused = wait_for(lambda: whoami(daemon_b, token).status == 401, timeout=1.5, interval=0.05)
    print(f"\nlogout on daemon A refused on daemon B after {time.monotonic() - started:.2f} s")
    assert refused
    fresh, _ = log_in(daemon_b, *USER[:2])
    assert_401(refresh(daemon_b, USER[0], fresh, cookie))
    assert_401(refresh(daemon_b, USER[0], token, cookie))


def test_a_password_reset_on_one_daemon_holds_on_another(daemon_a, daemon_b, shared_deployment):
    admin_token = daemon_a.login(ADMIN[0], ADMIN[1])
    name, password, address = make_user(daemon_a, admin_token, "shared")
    token, cookie = log_in(daemon_b, name, password)
    reset_password(daemon_a, shared_deployment, address, "shared-new-password-1")
    assert wait_for(lambda: whoami(daemon_b, token).status == 401, timeout=1.5, interval=0.05)
    after, _ = log_in(daemon_b, name, "shared-new-password-1")
    assert whoami(daemon_a, after).status == 200 and whoami(daemon_b, after).status == 200
    assert_401(refresh(daemon_a, name, after, cookie))


def test_revocation_holds_across_a_restart(daemon_b):
    kept, _ = log_in(daemon_b, *USER[:2])
    token, cookie = log_in(daemon_b, *USER[:2])
    assert log_out(daemon_b, token, cookie).status == 204
    daemon_b.stop()
    daemon_b.start()
    assert_401(whoami(daemon_b, token))  # the first request after the restart
    assert whoami(daemon_b, kept).status == 200  # the signing secret survived the restart too
    fresh, _ = log_in(daemon_b, *USER[:2])
    assert_401(refresh(daemon_b, USER[0], fresh, cookie))


# --- a plugin's public route ---------------------------------------------------------------------


def test_a_plugin_route_not_in_reserved_uris_needs_a_token(daemon):
    assert_401(daemon.request("GET", "/teamCount"))
    forged = jwt.encode(
        {
            "iss": "apid",
            "aud": "apid",
            "sub": "2",
            "name": USER[0],
            "roles": ["ROLE_USER"],
            "iat": int(time.time()),
            "exp": int(time.time()) + 600,
            "jti": uuid.uuid4().hex,
        },
        b"k" * 48,
        algorithm="HS256",
        headers={"typ": "at+jwt"},
    )
    assert_401(daemon.request("GET", "/teamCount", token=forged))
    token, cookie = log_in(daemon, *USER[:2])
    reply = daemon.request("GET", "/teamCount", token=token)
    assert reply.status == 200, reply.body
    assert reply.json["caller"] == USER[0] and isinstance(reply.json["teams"], int)
    assert log_out(daemon, token, cookie).status == 204
    assert_401(daemon.request("GET", "/teamCount", token=token))


def test_a_plugin_route_listed_in_reserved_uris_is_public(daemon_a, daemon_b):
    for running in (daemon_a, daemon_b):
        reply = running.request("GET", "/teamCount")
        assert reply.status == 200, reply.body
        assert reply.json == {"teams": 0, "caller": None}
