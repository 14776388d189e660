"""The account lifecycle through the real daemon (issue 33, item 1): the two reproductions.

- A disabled account cannot switch itself back on through /register and /validate: the sign-up
  of its own name and address answers as always, mails no validation link, changes nothing.
- A deleted account's id is never given to the next account (SQLite AUTOINCREMENT), and the
  deleted subject's still-valid provider token reaches no account at all.
"""

from __future__ import annotations

import uuid

import pytest

from assertions import assert_problem
from harness import ADMIN, V, deployment_with_accounts, person_named, running_daemon, wait_for
from identity_provider import Provider, signing_key
from outbox import LINK, Outbox
from sessions import log_in

SENT = "A validation email was sent to the address given. Please check your inbox.\n"


@pytest.fixture(scope="module")
def deployment(tmp_path_factory):
    return deployment_with_accounts(tmp_path_factory.mktemp("lifecycle"))


@pytest.fixture(scope="module")
def admin_token(daemon):
    return daemon.login(ADMIN[0], ADMIN[1])


def test_a_disabled_account_cannot_switch_itself_back_on_by_registering_again(daemon, deployment, admin_token):
    name, password = f"erin-{uuid.uuid4().hex[:6]}", "erin-password-1"
    address = f"{name}@example.org"
    created = daemon.request(
        "POST",
        f"{V}/person/create",
        {"username": name, "password": password, "email": address, "roles": ["ROLE_USER"]},
        token=admin_token,
    )
    assert created.status == 200, created.body
    token, _ = log_in(daemon, name, password)
    made = deployment.cli("key", "create", "--user", name, "--name", "erin's", "--role", "ROLE_USER")
    assert made.returncode == 0, made.stderr
    (key,) = [line.split(": ", 1)[1] for line in made.stdout.splitlines() if line.startswith("key: ")]
    assert daemon.request("GET", f"{V}/person/show/{created.json['id']}", token=key).status == 200
    disabled = daemon.request("PUT", f"{V}/person/update/{created.json['id']}", {"enabled": False}, token=admin_token)
    assert disabled.status == 200, disabled.body
    outbox = Outbox(deployment)

    again = daemon.request("POST", "/register", {"username": name, "password": "any-password-2", "email": address})
    assert again.status == 200 and again.body.decode() == SENT  # the same answer as always

    # the notice of the key made above may come too (a key's owner is told, issue 33): not this
    assert wait_for(lambda: any("API key" not in str(m["Subject"]) for m in outbox.to(address)), timeout=10)
    (mail,) = [m for m in outbox.to(address) if "API key" not in str(m["Subject"])]
    assert not LINK.search(mail.get_content()), "a disabled account was mailed a link that switches it back on"
    assert "already has one" in mail.get_content()
    after = person_named(daemon, admin_token, name)
    assert after["enabled"] is False and after["version"] == disabled.json["version"]
    assert_problem(daemon.request("POST", "/authenticate", {"username": name, "password": password}), 401)
    for credential in (token, key):
        assert_problem(daemon.request("GET", f"{V}/person/show/{created.json['id']}", token=credential), 401)


# --- a deleted provider account's id --------------------------------------------------------------


@pytest.fixture(scope="module")
def provider(tmp_path_factory):
    keys = [signing_key("rsa", "rsa-1")]
    clients = {"gone": {"realm_access": {"roles": ["apid-user"]}}}
    resources = {"urn:apid:rs256": {"audience": "apid", "alg": "RS256"}}
    provider = Provider(tmp_path_factory.mktemp("provider"), keys, clients, resources).start()
    yield provider
    provider.stop()


@pytest.fixture(scope="module")
def provider_daemon(tmp_path_factory, provider):
    issuer = {
        "issuer": provider.issuer,
        "audience": "apid",
        "claim": "realm_access.roles",
        "roles": {"apid-user": "ROLE_USER"},
    }
    deployment = deployment_with_accounts(tmp_path_factory.mktemp("ids"), api={"security": {"issuers": [issuer]}})
    with running_daemon(deployment) as daemon:
        yield daemon


def test_a_deleted_provider_accounts_id_is_never_given_again_and_its_token_reaches_no_account(
    provider_daemon, provider
):
    daemon = provider_daemon
    admin = daemon.login(ADMIN[0], ADMIN[1])
    token = provider.token("gone", "urn:apid:rs256")
    assert daemon.request("GET", f"{V}/person/list", token=token).status == 403  # its account is made, the newest
    newest = max(person["id"] for person in daemon.request("GET", f"{V}/person/list", token=admin).json)
    deleted = daemon.request("DELETE", f"{V}/person/delete/{newest}", token=admin)
    assert deleted.status in (200, 204), deleted.body

    created = daemon.request(
        "POST",
        f"{V}/person/create",
        {"username": "next-one", "password": "next-password-1", "email": "next@example.org", "roles": ["ROLE_USER"]},
        token=admin,
    )
    assert created.status == 200, created.body
    assert created.json["id"] > newest  # never the deleted account's id

    for path in (f"{V}/person/show/{newest}", f"{V}/person/show/{created.json['id']}"):
        assert_problem(daemon.request("GET", path, token=token), 401)
    made = daemon.request("POST", f"{V}/apikey/create", {"name": "theirs", "roles": ["ROLE_USER"]}, token=token)
    assert_problem(made, 401)
