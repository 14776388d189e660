"""`security.issuers`: read and checked at load, claims mapped to roles, tokens routed by their
claimed issuer (tests/integration/test_issuers.py runs a real provider against the daemon)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
import yaml

from apid.auth.identities import username_for
from apid.auth.issuers import claims_issuer
from apid.config.account_policy import check_credentials
from apid.config.files import load_api
from apid.config.kinds import API_FILE
from apid.config.nodes import ConfigError
from apid.iostate.types import EMAIL
from apid.problems import InvalidFields

REPO = Path(__file__).resolve().parents[2]
KEYCLOAK = {
    "issuer": "https://sso.example.com/realms/acme",
    "audience": "apid",
    "claim": "realm_access.roles",
    "roles": {"apid-admin": "ROLE_ADMIN", "apid-user": ["ROLE_USER"], "both": ["ROLE_USER", "ROLE_ADMIN"]},
}


def api_with(tmp_path: Path, **security: object) -> Path:
    data = yaml.safe_load((REPO / "etc" / API_FILE).read_text(encoding="utf-8"))
    data["security"].update(security)
    path = tmp_path / API_FILE
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def refusal(tmp_path: Path, **security: object) -> str:
    path = api_with(tmp_path, **security)
    with pytest.raises(ConfigError) as info:
        load_api(path, tmp_path)
    return str(info.value)


def test_an_issuer_is_read_with_its_defaults(tmp_path):
    security = load_api(api_with(tmp_path, issuers=[KEYCLOAK]), tmp_path).security
    (issuer,) = security.issuers
    assert issuer.issuer == KEYCLOAK["issuer"] and issuer.audience == "apid"
    assert issuer.roles == {
        "apid-admin": {"ROLE_ADMIN"},
        "apid-user": {"ROLE_USER"},
        "both": {"ROLE_USER", "ROLE_ADMIN"},
    }
    assert (issuer.keys_refresh, issuer.keys_lifetime) == (60.0, 3600.0)
    assert security.local_logins is True


def test_no_issuers_and_local_logins_by_default():
    security = load_api(REPO / "etc" / API_FILE, REPO).security
    assert security.issuers == () and security.local_logins is True


@pytest.mark.parametrize(
    "change, reason",
    [
        (
            {"roles": {"apid-user": "ROLE_NOBODY"}},
            "issuers[0].roles: role 'ROLE_NOBODY' (for 'apid-user') is in no group",
        ),
        ({"issuer": "http://sso.example.com/realms/acme"}, "must be an https:// URL (http:// only on a loopback"),
        ({"issuer": "sso.example.com"}, "must be an absolute http:// or https:// URL"),
        ({"claim": "realm_access..roles"}, "must be a claim name or a dotted path"),
        ({"roles": {}}, "expected at least one claim value and its roles"),
        ({"roles": {"apid-user": []}}, "expected a role or a non-empty list of roles"),
        ({"keysRefresh": 0}, "must be greater than 0"),
        ({"keysRefresh": 600, "keysLifetime": 60}, "keysLifetime: must be at least keysRefresh"),
        ({"audiences": "apid"}, "unknown key"),
    ],
)
def test_a_bad_issuer_is_refused_naming_the_file_and_key(tmp_path, change, reason):
    message = refusal(tmp_path, issuers=[{**KEYCLOAK, **change}])
    assert API_FILE in message and "security.issuers" in message
    assert reason in message


def test_an_issuer_listed_twice_is_refused(tmp_path):
    assert "is listed twice" in refusal(tmp_path, issuers=[KEYCLOAK, KEYCLOAK])


@pytest.mark.parametrize("issuer", ["http://127.0.0.1:8081", "http://localhost:8081/realms/x", "http://[::1]:8081"])
def test_a_provider_on_a_loopback_address_may_use_http(tmp_path, issuer):
    (read,) = load_api(api_with(tmp_path, issuers=[{**KEYCLOAK, "issuer": issuer}]), tmp_path).security.issuers
    assert read.issuer == issuer


@pytest.mark.parametrize(
    "claim, claims, roles",
    [
        ("realm_access.roles", {"realm_access": {"roles": ["apid-user", "offline_access"]}}, {"ROLE_USER"}),
        ("groups", {"groups": ["both", "apid-admin"]}, {"ROLE_USER", "ROLE_ADMIN"}),
        ("scope", {"scope": "openid apid-user profile"}, {"ROLE_USER"}),
        ("roles", {"roles": ["unmapped"]}, set()),
        ("realm_access.roles", {"realm_access": ["apid-user"]}, set()),
        ("groups", {"groups": [{"name": "apid-user"}, 7, None]}, set()),
        ("groups", {}, set()),
    ],
)
def test_a_claim_maps_to_the_roles_of_its_values(tmp_path, claim, claims, roles):
    (issuer,) = load_api(api_with(tmp_path, issuers=[{**KEYCLOAK, "claim": claim}]), tmp_path).security.issuers
    assert issuer.roles_of(claims) == roles


def _jwt_with(claims: object) -> str:
    payload = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    return f"eyJhbGciOiJSUzI1NiJ9.{payload}.c2ln"


def test_the_claimed_issuer_is_read_without_verifying_and_anything_else_claims_none():
    assert claims_issuer(_jwt_with({"iss": "https://sso.example.com/realms/acme"})) == KEYCLOAK["issuer"]
    for token in ("apid_abc", "a.b", _jwt_with({"iss": 7}), _jwt_with(["iss"]), "a.!!!.c", "a.bm90IGpzb24.c"):
        assert claims_issuer(token) is None


def test_a_subjects_username_is_its_providers_host_and_a_digest_no_one_can_register():
    name = username_for(KEYCLOAK["issuer"], "f81d4fae-7dec-11d0-a765-00a0c91e6bf6")
    assert name.startswith("sso.example.com:") and len(name) == len("sso.example.com:") + 24
    assert name != username_for("https://sso.example.com/realms/other", "f81d4fae-7dec-11d0-a765-00a0c91e6bf6")
    with pytest.raises(InvalidFields):
        check_credentials(name, None)  # as /register, person/create and apid user add check a name
    assert not EMAIL.fullmatch(f"{name}@external.invalid")
