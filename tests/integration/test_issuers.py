"""Tokens of a real OpenID provider (panva's oidc-provider, tests/identity_provider.py) against
the real daemon: accepted with the roles `security.issuers` maps them to, the caller's fields
filtered as for a local account; every kind of forged or foreign token refused; the provider's
key rotation followed, and a forged `kid` costing it at most one JWKS fetch per interval."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time

import jwt
import pytest
from cryptography.hazmat.primitives import serialization

from apid.auth.identities import username_for
from harness import ADMIN, USER, V, deployment_with_accounts, everyone, running_daemon, wait_for
from identity_provider import Provider, claims_of, signing_key
from receiver import Receiver

REFRESH = 1  # keysRefresh of the daemon under test: seconds between two fetches of the keys
CLIENTS = {
    "reader": {"realm_access": {"roles": ["apid-user", "offline_access"]}},
    "chief": {"realm_access": {"roles": ["apid-admin"]}},
    "newcomer": {"realm_access": {"roles": ["apid-user"]}},
    "crowd": {"realm_access": {"roles": ["apid-user"]}},
    "leaver": {"realm_access": {"roles": ["apid-user"]}},
    "hooked": {"realm_access": {"roles": ["apid-user"]}},
    "nobody": {"realm_access": {"roles": ["offline_access"]}},
}
RESOURCES = {
    "urn:apid:rs256": {"audience": "apid", "alg": "RS256"},
    "urn:apid:es256": {"audience": "apid", "alg": "ES256"},
    "urn:apid:eddsa": {"audience": "apid", "alg": "EdDSA"},
    "urn:apid:hs256": {"audience": "apid", "alg": "HS256", "key": "a-shared-secret-of-32-bytes-or-more"},
    "urn:other": {"audience": "another-api", "alg": "RS256"},
}


def issuer_settings(provider: Provider) -> dict:
    return {
        "issuer": provider.issuer,
        "audience": "apid",
        "claim": "realm_access.roles",
        "roles": {"apid-user": "ROLE_USER", "apid-admin": ["ROLE_ADMIN"]},
        "keysRefresh": REFRESH,
    }


def new_provider(folder, **changes) -> Provider:
    keys = [signing_key("rsa", "rsa-1"), signing_key("ec", "ec-1"), signing_key("ed", "ed-1")]
    return Provider(folder, keys, dict(CLIENTS), dict(RESOURCES), **changes).start()


@pytest.fixture(scope="module")
def provider(tmp_path_factory):
    provider = new_provider(tmp_path_factory.mktemp("provider"))
    yield provider
    provider.stop()


@pytest.fixture(scope="module")
def stranger(tmp_path_factory):
    """Another provider, trusted by nobody here, with the same clients."""
    provider = new_provider(tmp_path_factory.mktemp("stranger"))
    yield provider
    provider.stop()


@pytest.fixture(scope="module")
def receiver():
    receiver = Receiver()
    yield receiver
    receiver.close()


@pytest.fixture(scope="module")
def daemon(tmp_path_factory, provider, receiver):
    deployment = deployment_with_accounts(
        tmp_path_factory.mktemp("issuers"),
        server={"apiThrottle": True, "webhookActive": True},
        api={"security": {"issuers": [issuer_settings(provider)]}, "cors": {"allowedOrigins": [receiver.origin]}},
    )
    with running_daemon(deployment) as daemon:
        yield daemon


@pytest.fixture(scope="module")
def admin_token(daemon):
    return daemon.login(ADMIN[0], ADMIN[1])


def account_of(daemon, admin_token, provider, client) -> dict | None:
    name = username_for(provider.issuer, client)
    return next((person for person in everyone(daemon, admin_token) if person["username"] == name), None)


def refused(reply, *words: str) -> str:
    """The detail of a 401 problem, checked to hold `words`."""
    assert reply.status == 401, reply.body
    assert reply.content_type == "application/problem+json"
    detail = reply.json["detail"]
    for word in words:
        assert word in detail
    return detail


def test_a_provider_token_reaches_an_endpoint_with_its_mapped_role_and_the_fields_of_a_local_user(
    daemon, admin_token, provider
):
    token = provider.token("reader", "urn:apid:rs256")
    first = daemon.request("GET", f"{V}/person/list", token=token)
    assert first.status == 403  # ROLE_USER: no list, as for a local user
    account = account_of(daemon, admin_token, provider, "reader")
    assert account is not None and account["roles"] == ["ROLE_USER"] and account["enabled"]
    own = daemon.request("GET", f"{V}/person/show/{account['id']}", token=token)
    assert own.status == 200, own.body
    local = daemon.login(USER[0], USER[1])
    local_id = next(p["id"] for p in everyone(daemon, admin_token) if p["username"] == USER[0])
    local_own = daemon.request("GET", f"{V}/person/show/{local_id}", token=local)
    assert set(own.json) == set(local_own.json) == {"id", "version", "username", "email"}
    assert own.json["username"] == account["username"]
    other = daemon.request("GET", f"{V}/person/show/{local_id}", token=token)
    assert other.status == 403  # another's record, as for a local user
    assert own.headers["RateLimit-Policy"]  # charged to its own account's limit


@pytest.mark.parametrize("resource", ["urn:apid:es256", "urn:apid:eddsa"])
def test_es256_and_eddsa_tokens_are_accepted_too(daemon, provider, resource):
    token = provider.token("reader", resource)
    assert jwt.get_unverified_header(token)["alg"] in ("ES256", "EdDSA")
    assert daemon.request("GET", f"{V}/person/list", token=token).status == 403  # authenticated, ROLE_USER


def test_a_role_mapped_to_the_administrator_role_administers(daemon, provider):
    reply = daemon.request("GET", f"{V}/person/list", token=provider.token("chief", "urn:apid:rs256"))
    assert reply.status == 200, reply.body


def test_the_first_calls_of_a_new_subject_at_once_make_one_account(daemon, admin_token, provider):
    token = provider.token("crowd", "urn:apid:rs256")
    replies = []
    threads = [
        threading.Thread(target=lambda: replies.append(daemon.request("GET", f"{V}/person/list", token=token)))
        for _ in range(6)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert [reply.status for reply in replies] == [403] * 6
    name = username_for(provider.issuer, "crowd")
    assert [p["username"] for p in everyone(daemon, admin_token)].count(name) == 1


def test_a_providers_account_owns_hooks_and_a_new_subjects_account_is_a_person_event(
    daemon, admin_token, provider, receiver
):
    chief = provider.token("chief", "urn:apid:rs256")
    hook = daemon.request(
        "POST", f"{V}/hook/create", {"url": receiver.origin + "/people", "service": "person/create"}, token=chief
    )
    assert hook.status == 200, hook.body
    assert hook.json["userId"] == account_of(daemon, admin_token, provider, "chief")["id"]
    assert daemon.request("GET", f"{V}/person/list", token=provider.token("hooked", "urn:apid:rs256")).status == 403
    assert wait_for(lambda: any(received.path == "/people" for received in receiver.received))
    (event,) = [json.loads(received.body) for received in receiver.received if received.path == "/people"]
    assert event["data"]["id"] == account_of(daemon, admin_token, provider, "hooked")["id"]


def test_a_token_whose_claims_map_to_no_role_is_refused_saying_why_without_echoing_it(daemon, admin_token, provider):
    token = provider.token("nobody", "urn:apid:rs256")
    reply = daemon.request("GET", f"{V}/person/list", token=token)
    detail = refused(reply, "realm_access.roles", "maps to a role")
    assert token not in reply.body.decode() and token.split(".")[1] not in detail
    assert account_of(daemon, admin_token, provider, "nobody") is None  # nothing made for it


def test_a_token_of_another_issuer_is_refused(daemon, stranger):
    refused(daemon.request("GET", f"{V}/person/list", token=stranger.token("reader", "urn:apid:rs256")))


def test_a_token_for_another_audience_is_refused(daemon, provider):
    reply = daemon.request("GET", f"{V}/person/list", token=provider.token("reader", "urn:other"))
    refused(reply, "audience")


def test_an_hmac_token_of_the_provider_is_refused(daemon, provider):
    token = provider.token("reader", "urn:apid:hs256")
    assert jwt.get_unverified_header(token)["alg"] == "HS256"
    refused(daemon.request("GET", f"{V}/person/list", token=token), "algorithm")


def _segment(data: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def test_an_unsigned_token_is_refused(daemon, provider):
    genuine = provider.token("chief", "urn:apid:rs256")
    header = {**jwt.get_unverified_header(genuine), "alg": "none"}
    for signature in ("", genuine.split(".")[2]):
        forged = f"{_segment(header)}.{genuine.split('.')[1]}.{signature}"
        refused(daemon.request("GET", f"{V}/person/list", token=forged), "algorithm")


def test_a_token_signed_with_the_providers_public_key_as_an_hmac_secret_is_refused(daemon, provider):
    """The algorithm confusion attack: HS256 keyed with the RSA public key that apid holds."""
    genuine = provider.token("chief", "urn:apid:rs256")
    public = jwt.PyJWK(provider.keys[0], "RS256").key.public_key()
    pem = public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    signed = f"{_segment({'alg': 'HS256', 'typ': 'at+jwt', 'kid': provider.keys[0]['kid']})}.{genuine.split('.')[1]}"
    mac = hmac.new(pem, signed.encode(), hashlib.sha256).digest()
    forged = f"{signed}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"
    refused(daemon.request("GET", f"{V}/person/list", token=forged), "algorithm")


def test_a_token_with_an_unknown_kid_is_refused_and_fetches_the_keys_at_most_once_per_interval(daemon, provider):
    genuine = provider.token("chief", "urn:apid:rs256")
    assert daemon.request("GET", f"{V}/person/list", token=genuine).status == 200
    time.sleep(REFRESH + 0.2)  # the interval since the daemon's last fetch has passed
    fetched = provider.requests("/jwks")
    claims = claims_of(genuine)
    stranger_key = signing_key("rsa", "not-the-providers")
    key = jwt.PyJWK(stranger_key, "RS256").key
    for n in range(20):
        forged = jwt.encode({**claims, "jti": f"forged-{n}"}, key, algorithm="RS256", headers={"kid": f"forged-{n}"})
        refused(daemon.request("GET", f"{V}/person/list", token=forged), "kid")
    assert provider.requests("/jwks") == fetched + 1  # the first forged kid fetched; the other 19 waited for nothing


def test_a_key_rotation_at_the_provider_is_followed(daemon, provider):
    before = provider.token("chief", "urn:apid:es256")
    assert daemon.request("GET", f"{V}/person/list", token=before).status == 200
    provider.rotate([signing_key("ec", "ec-2"), signing_key("rsa", "rsa-2"), signing_key("ed", "ed-2")])
    time.sleep(REFRESH + 0.2)
    fetched = provider.requests("/jwks")
    after = provider.token("chief", "urn:apid:es256")
    assert jwt.get_unverified_header(after)["kid"] == "ec-2"
    reply = daemon.request("GET", f"{V}/person/list", token=after)
    assert reply.status == 200, reply.body
    assert provider.requests("/jwks") == fetched + 1
    eddsa = daemon.request("GET", f"{V}/person/list", token=provider.token("chief", "urn:apid:eddsa"))
    assert eddsa.status == 200  # the new keys of every type came in that one fetch
    assert provider.requests("/jwks") == fetched + 1


def test_an_account_disabled_in_apid_stays_refused_with_a_good_provider_token(daemon, admin_token, provider):
    token = provider.token("leaver", "urn:apid:rs256")
    assert daemon.request("GET", f"{V}/person/list", token=token).status == 403  # its account is made
    account = account_of(daemon, admin_token, provider, "leaver")
    update = daemon.request("PUT", f"{V}/person/update/{account['id']}", {"enabled": False}, token=admin_token)
    assert update.status == 200, update.body
    refused(daemon.request("GET", f"{V}/person/show/{account['id']}", token=token))
    fresh = provider.token("leaver", "urn:apid:rs256")
    refused(daemon.request("GET", f"{V}/person/show/{account['id']}", token=fresh))


def test_the_openapi_document_declares_the_provider(daemon, provider):
    reply = daemon.request("GET", "/openapi.json", token=provider.token("reader", "urn:apid:rs256"))
    assert reply.status == 200, reply.body
    schemes = reply.json["components"]["securitySchemes"]
    declared = [scheme for scheme in schemes.values() if scheme["type"] == "openIdConnect"]
    assert [scheme["openIdConnectUrl"] for scheme in declared] == [
        f"{provider.issuer}/.well-known/openid-configuration"
    ]
    show = reply.json["paths"][f"{V}/person/show/{{id}}"]["get"]
    assert len(show["security"]) == 2 + len(declared)  # the access token, an API key, each provider


def test_with_local_logins_switched_off_only_provider_tokens_sign_in(tmp_path, provider):
    deployment = deployment_with_accounts(
        tmp_path,
        api={"security": {"issuers": [issuer_settings(provider)], "localLogins": False}},
    )
    with running_daemon(deployment) as daemon:
        login = daemon.request("POST", "/authenticate", {"username": ADMIN[0], "password": ADMIN[1]})
        assert login.status == 404
        assert daemon.request("POST", "/register", {"username": "x", "password": "y", "email": "z"}).status == 404
        reply = daemon.request("GET", f"{V}/person/list", token=provider.token("chief", "urn:apid:rs256"))
        assert reply.status == 200, reply.body
        paths = daemon.request("GET", "/openapi.json").json["paths"]
        assert "/authenticate" not in paths and "/health" in paths
