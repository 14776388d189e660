"""Every credential follows its account's standing (issue 33, item 2), against the real daemon
and a real OpenID provider (tests/identity_provider.py): with `security.localLogins` false a
password account's access tokens and API keys are refused; a key made through a provider stops
once the provider has issued no token for its subject within the issuer's `keysLifetime`."""

from __future__ import annotations

import sqlite3
import time

import pytest

from apid.auth.identities import username_for
from assertions import assert_problem
from harness import ADMIN, USER, V, deployment_with_accounts, running_daemon, wait_for
from identity_provider import Provider, signing_key

LIFETIME = 2  # keysLifetime of the daemon under test, in seconds
CLIENTS = {"chief": {"realm_access": {"roles": ["apid-admin"]}}}
RESOURCES = {"urn:apid:rs256": {"audience": "apid", "alg": "RS256"}}


@pytest.fixture(scope="module")
def provider(tmp_path_factory):
    provider = Provider(
        tmp_path_factory.mktemp("provider"), [signing_key("rsa", "rsa-1")], dict(CLIENTS), dict(RESOURCES)
    ).start()
    yield provider
    provider.stop()


def issuer_settings(provider: Provider) -> dict:
    return {
        "issuer": provider.issuer,
        "audience": "apid",
        "claim": "realm_access.roles",
        "roles": {"apid-admin": ["ROLE_ADMIN"]},
        "keysRefresh": 1,
        "keysLifetime": LIFETIME,
    }


def cli_key(deployment, name: str, role: str) -> str:
    """A new key of account `name`, made on the server (`apid key create`): its text."""
    made = deployment.cli("key", "create", "--user", name, "--name", "ci", "--role", role)
    assert made.returncode == 0, made.stderr
    (key,) = [line.split(": ", 1)[1] for line in made.stdout.splitlines() if line.startswith("key: ")]
    return key


def test_with_local_logins_switched_off_a_password_accounts_tokens_and_keys_are_refused(tmp_path, provider):
    """Issue 33: `localLogins: false` left password accounts' tokens able to mint keys."""
    deployment = deployment_with_accounts(tmp_path, api={"security": {"issuers": [issuer_settings(provider)]}})
    key = cli_key(deployment, USER[0], "ROLE_USER")
    with running_daemon(deployment) as daemon:
        token = daemon.login(ADMIN[0], ADMIN[1])  # before the switch
        assert daemon.request("GET", f"{V}/person/list", token=key).status == 403  # the key works: ROLE_USER
    deployment.api = {"security": {"issuers": [issuer_settings(provider)], "localLogins": False}}
    deployment.write()
    with running_daemon(deployment) as daemon:
        minted = daemon.request("POST", f"{V}/apikey/create", {"name": "x", "roles": ["ROLE_USER"]}, token=token)
        assert_problem(minted, 401)
        assert "localLogins" in minted.json["detail"]
        assert_problem(daemon.request("GET", f"{V}/person/list", token=token), 401)
        by_key = daemon.request("GET", f"{V}/person/list", token=key)
        assert_problem(by_key, 401)
        assert "localLogins" in by_key.json["detail"]
        listed = daemon.request("GET", f"{V}/person/list", token=provider.token("chief", "urn:apid:rs256"))
        assert listed.status == 200, listed.body  # a provider's account is untouched


def test_a_key_made_through_a_provider_stops_once_the_provider_no_longer_vouches(tmp_path, provider):
    """Issue 33: a ROLE_ADMIN key of a provider's account outlived every token of the provider."""
    deployment = deployment_with_accounts(tmp_path, api={"security": {"issuers": [issuer_settings(provider)]}})
    with running_daemon(deployment) as daemon:
        first = daemon.request("GET", f"{V}/person/list", token=provider.token("chief", "urn:apid:rs256"))
        assert first.status == 200, first.body  # the subject's account is made, vouched for now
        made_at = time.monotonic()
        key = cli_key(deployment, username_for(provider.issuer, "chief"), "ROLE_ADMIN")
        if time.monotonic() - made_at < LIFETIME - 0.5:  # under load the CLI may outlast the bound
            assert daemon.request("GET", f"{V}/person/list", token=key).status == 200
        assert wait_for(
            lambda: daemon.request("GET", f"{V}/person/list", token=key).status == 401, timeout=LIFETIME + 5
        )
        refused = daemon.request("GET", f"{V}/person/show/1", token=key)
        assert_problem(refused, 401)
        assert "identity provider" in refused.json["detail"]
    with sqlite3.connect(deployment.root / "var" / "test.db") as stored:
        (vouched,) = stored.execute("SELECT vouched_at FROM external_identity").fetchone()
    assert vouched is not None  # the moment of the subject's first token, when its account was made
