"""An owner's change of e-mail address (issue 25, item 1), against the real daemon.

The attack this closes: a stolen access token changed the account's address without the
password, `/forgotPassword` then mailed the new address, and `/resetPassword` gave the thief
the account. Now changing one's own address needs `currentPassword`, wrong guesses count
against the login limits, the old address is told with a link that puts it back, and with
`accounts.confirmEmailChange` the new address must confirm before it takes effect.
"""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple
from urllib.parse import parse_qs, urlsplit

import pytest

from assertions import assert_problem, error_fields
from harness import ADMIN, Daemon, Deployment, V, deployment_with_accounts, running_daemon
from outbox import Outbox, link_at

BASE_URL = "https://api.example.test"
HOME_URL = "https://app.example.test/home"
RESET_PAGE = "https://app.example.test/reset"
LOGIN_LIMITS = {"perAccountAddress": 3, "perAccount": 100, "perAddress": 100, "window": 600}
ATTACKER = "x@attacker.test"


def settings(**accounts) -> dict:
    return {"baseUrl": BASE_URL, "homeUrl": HOME_URL, "accounts": {"resetUrl": RESET_PAGE, **accounts}}


@pytest.fixture(scope="module")
def deployment(tmp_path_factory) -> Deployment:
    return deployment_with_accounts(
        tmp_path_factory.mktemp("email-change"), server=settings(), api={"abuseLimits": {"login": LOGIN_LIMITS}}
    )


@pytest.fixture(scope="module")
def confirming(tmp_path_factory):
    """A daemon whose new addresses confirm first, and its deployment."""
    deployment = deployment_with_accounts(
        tmp_path_factory.mktemp("email-confirm"), server=settings(confirmEmailChange=True)
    )
    with running_daemon(deployment) as running:
        yield running, deployment


class Owner(NamedTuple):
    """A fresh user account, logged in."""

    id: int
    name: str
    password: str
    address: str
    token: str


def new_account(daemon: Daemon, admin_token: str) -> Owner:
    name = f"ec-{uuid.uuid4().hex[:8]}"
    password, address = f"pw-{uuid.uuid4().hex[:12]}", f"{name}@example.org"
    reply = daemon.request(
        "POST", f"{V}/person/create", {"username": name, "password": password, "email": address}, token=admin_token
    )
    assert reply.status == 200, reply.body
    return Owner(reply.json["id"], name, password, address, daemon.login(name, password))


def move(daemon: Daemon, owner: Owner, new: str) -> None:
    """The owner changes their address to `new`, giving their password."""
    reply = update(daemon, owner.token, owner.id, email=new, currentPassword=owner.password)
    assert reply.status == 200, reply.body


def address_of(daemon: Daemon, admin_token: str, person_id: int) -> str:
    return daemon.request("GET", f"{V}/person/show/{person_id}", token=admin_token).json["email"]


def update(daemon: Daemon, token: str, person_id: int, **fields):
    return daemon.request("PUT", f"{V}/person/update/{person_id}", fields, token=token)


def test_a_stolen_token_cannot_change_the_address(daemon, deployment, admin_token):
    """The takeover sequence fails at its first step: nothing changes, nothing is mailed."""
    person_id, _, _, address, stolen = new_account(daemon, admin_token)
    outbox = Outbox(deployment)
    missing = update(daemon, stolen, person_id, email=ATTACKER)
    assert error_fields(assert_problem(missing, 400)) == {"currentPassword"}
    wrong = update(daemon, stolen, person_id, email=ATTACKER, currentPassword="a-guess-at-it")
    assert assert_problem(wrong, 403)["field"] == "currentPassword"
    assert address_of(daemon, admin_token, person_id) == address
    # the rest of the sequence has nothing to work with: no mail reaches the attacker
    assert daemon.request("POST", "/forgotPassword", {"email": ATTACKER}).status == 200
    assert daemon.request("POST", "/forgotPassword", {"email": ADMIN[2]}).status == 200
    outbox.wait(ADMIN[2])
    assert outbox.to(ATTACKER) == []


def test_a_chain_cannot_change_the_address_without_the_password(daemon, admin_token):
    person_id, _, _, address, token = new_account(daemon, admin_token)
    reply = daemon.request(
        "PUT",
        f"/c0.1/person/show/{person_id}",
        {
            "email": ATTACKER,
            "chain": {"key": "id", "type": "postchain", "order": {"person/update": "return"}},
        },
        token=token,
    )
    assert error_fields(assert_problem(reply, 400)) == {"currentPassword"}
    assert address_of(daemon, admin_token, person_id) == address


def test_the_old_address_is_told_and_its_link_takes_the_account_back(daemon, deployment, admin_token):
    owner = new_account(daemon, admin_token)
    person_id, name, _, address, token = owner
    outbox = Outbox(deployment)
    new = f"new-{name}@example.org"
    move(daemon, owner, new)
    assert address_of(daemon, admin_token, person_id) == new
    (notice,) = outbox.wait(address)
    assert new in notice.get_content()
    assert outbox.to(new) == []
    back = link_at(notice, BASE_URL)

    followed = daemon.request("POST", back)
    assert followed.status == 303, followed.body
    location = followed.headers["Location"]
    assert location.startswith(RESET_PAGE + "?id=")
    assert address_of(daemon, admin_token, person_id) == address
    # every session of the account is over, the one that made the change too
    assert_problem(daemon.request("GET", f"{V}/person/show/{person_id}", token=token), 401)
    # the link is used up, for the page and its POST alike; the reset page's id sets a new password
    assert_problem(daemon.request("GET", back), 400)
    assert_problem(daemon.request("POST", back), 400)
    (reset_id,) = parse_qs(urlsplit(location).query)["id"]
    reset = daemon.request("POST", "/resetPassword", {"id": reset_id, "password": "taken-back-password-1"})
    assert reset.status == 200, reset.body
    daemon.login(name, "taken-back-password-1")


def test_the_same_address_in_another_case_needs_no_password(daemon, admin_token):
    person_id, _, _, address, token = new_account(daemon, admin_token)
    reply = update(daemon, token, person_id, email=address.upper())
    assert reply.status == 200, reply.body
    assert address_of(daemon, admin_token, person_id) == address.upper()


def test_an_administrator_changes_another_accounts_address_without_a_password(daemon, deployment, admin_token):
    person_id, _, _, address, _ = new_account(daemon, admin_token)
    reply = update(daemon, admin_token, person_id, email=f"moved-{address}")
    assert reply.status == 200, reply.body
    assert address_of(daemon, admin_token, person_id) == f"moved-{address}"


def test_wrong_current_password_guesses_count_as_failed_logins(daemon, admin_token):
    """Simultaneous guesses: at most the (account, address) login limit is verified, the rest
    are 429; the login limit then holds for /authenticate too, and for the right password."""
    person_id, name, password, _, token = new_account(daemon, admin_token)
    guesses = [f"guess-{n:04d}-password" for n in range(12)]
    with ThreadPoolExecutor(max_workers=12) as pool:
        replies = list(
            pool.map(
                lambda guess: update(daemon, token, person_id, password="a-new-password-1", currentPassword=guess),
                guesses,
            )
        )
    statuses = sorted(reply.status for reply in replies)
    assert statuses == [403] * LOGIN_LIMITS["perAccountAddress"] + [429] * (12 - LOGIN_LIMITS["perAccountAddress"])
    refused = next(reply for reply in replies if reply.status == 429)
    assert int(refused.headers["Retry-After"]) > 0
    assert_problem(daemon.request("POST", "/authenticate", {"username": name, "password": password}), 429)
    assert_problem(update(daemon, token, person_id, password="a-new-password-1", currentPassword=password), 429)


def test_with_confirmation_the_new_address_takes_effect_when_it_confirms(confirming):
    daemon, deployment = confirming
    admin_token = daemon.login(ADMIN[0], ADMIN[1])
    owner = new_account(daemon, admin_token)
    person_id, name, _, address, token = owner
    outbox = Outbox(deployment)
    new = f"confirm-{name}@example.org"
    move(daemon, owner, new)
    assert address_of(daemon, admin_token, person_id) == address  # not yet
    (confirmation,) = outbox.wait(new)
    link = link_at(confirmation, BASE_URL)
    for method in ("HEAD", "GET"):  # a mail scanner's visit confirms nothing
        assert daemon.request(method, link).status == 200
    assert address_of(daemon, admin_token, person_id) == address and outbox.to(address) == []
    followed = daemon.request("POST", link)
    assert followed.status == 303 and followed.headers["Location"] == HOME_URL
    assert address_of(daemon, admin_token, person_id) == new
    # the old address is told only now, with its way back; the owner's session goes on
    (notice,) = outbox.wait(address)
    assert new in notice.get_content()
    assert daemon.request("GET", f"{V}/person/show/{person_id}", token=token).status == 200


def test_with_confirmation_an_address_another_account_holds_is_refused_at_once(confirming):
    daemon, deployment = confirming
    admin_token = daemon.login(ADMIN[0], ADMIN[1])
    person_id, _, password, _, token = new_account(daemon, admin_token)
    outbox = Outbox(deployment)
    reply = update(daemon, token, person_id, email=ADMIN[2].upper(), currentPassword=password)
    assert assert_problem(reply, 409)["field"] == "email"
    assert outbox.new() == []


# --- links that change state act on POST only (issue 33, item 6) --------------------------------


def test_opening_the_revert_link_changes_nothing_until_its_page_posts(daemon, deployment, admin_token):
    """A mail scanner opens every link (HEAD, then GET): the address stays, the owner stays
    signed in; the page's form POSTs to the same link, which carries it out."""
    owner = new_account(daemon, admin_token)
    outbox = Outbox(deployment)
    new = f"scanned-{owner.name}@example.org"
    move(daemon, owner, new)
    (notice,) = outbox.wait(owner.address)
    back = link_at(notice, BASE_URL)
    for method in ("HEAD", "GET", "GET"):
        opened = daemon.request(method, back)
        assert opened.status == 200, opened.body
        assert opened.headers["Cache-Control"] == "no-store" and opened.headers["Referrer-Policy"] == "no-referrer"
    page = daemon.request("GET", back)
    assert page.headers["Content-Type"] == "text/html; charset=utf-8"
    policy = page.headers["Content-Security-Policy"]
    assert "default-src 'none'" in policy and "form-action 'self'" in policy and "script" not in page.body.decode()
    (secret,) = parse_qs(urlsplit(back).query)["id"]
    assert f'<form method="post" action="?id={secret}">' in page.body.decode()
    as_json = daemon.request("GET", back, headers={"Accept": "application/json"})
    assert as_json.status == 200 and as_json.json["purpose"] == "email-revert" and as_json.json["method"] == "POST"
    assert address_of(daemon, admin_token, owner.id) == new
    assert daemon.request("GET", f"{V}/person/show/{owner.id}", token=owner.token).status == 200
    done = daemon.request("POST", back, headers={"Accept": "application/json"})
    assert done.status == 200, done.body
    assert done.json["done"] is True and done.json["location"].startswith(RESET_PAGE + "?id=")
    assert address_of(daemon, admin_token, owner.id) == owner.address
    assert_problem(daemon.request("GET", f"{V}/person/show/{owner.id}", token=owner.token), 401)


def test_a_post_needs_a_live_address_change_link(daemon, deployment, admin_token):
    assert_problem(daemon.request("POST", "/validate?id=made-up"), 400)
    # a password reset's id is not carried out by POST: it opens the site's reset page by GET
    owner = new_account(daemon, admin_token)
    outbox = Outbox(deployment)
    assert daemon.request("POST", "/forgotPassword", {"email": owner.address}).status == 200
    (reset,) = outbox.wait(owner.address)
    assert_problem(daemon.request("POST", link_at(reset, BASE_URL)), 400)
    assert daemon.request("GET", link_at(reset, BASE_URL)).status == 302


def test_the_owner_cancels_pending_revert_links(daemon, deployment, admin_token, database):
    owner = new_account(daemon, admin_token)
    outbox = Outbox(deployment)
    first_new = f"one-{owner.name}@example.org"
    move(daemon, owner, first_new)
    (first,) = outbox.wait(owner.address)
    later = f"two-{owner.name}@example.org"
    move(daemon, owner, later)
    outbox.wait(first_new)
    path = f"{V}/person/cancelReverts/{owner.id}"
    assert error_fields(assert_problem(daemon.request("PUT", path, {}, token=owner.token), 400)) == {"currentPassword"}
    wrong = daemon.request("PUT", path, {"currentPassword": "not-it-at-all"}, token=owner.token)
    assert assert_problem(wrong, 403)["field"] == "currentPassword"
    other = daemon.request("PUT", path, {"currentPassword": ADMIN[1]}, token=admin_token)
    assert "owner" in assert_problem(other, 403)["detail"]  # an administrator takes no one's way back
    cancelled = daemon.request("PUT", path, {"currentPassword": owner.password}, token=owner.token)
    assert cancelled.status == 200, cancelled.body
    assert cancelled.json == {"id": owner.id, "cancelled": 2}
    pending = database.execute(
        "SELECT count(*) FROM account_token WHERE person_id = ? AND purpose = 'email-revert' AND used_at IS NULL",
        (owner.id,),
    ).fetchone()[0]
    assert pending == 0
    for method in ("GET", "POST"):
        assert_problem(daemon.request(method, link_at(first, BASE_URL)), 400)
    assert address_of(daemon, admin_token, owner.id) == later
    again = daemon.request("PUT", path, {"currentPassword": owner.password}, token=owner.token)
    assert again.json == {"id": owner.id, "cancelled": 0}
