"""Signing up and recovering an account, without revealing whether an account exists.

/register and /forgotPassword answer the same text whatever happened, and do the same
costly work (a password hash) on every path, so neither the answer nor its timing tells an
account apart from none; what differs goes by email, to the address's owner only.
Emailed ids are single use and expire (`apid.auth.onetime`).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, select
from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.http import Request

from apid.auth import link_page, onetime
from apid.auth.accounts import (
    change_account,
    email_key,
    get_account,
    insert_account,
    username_key,
)
from apid.auth.address_change import PURPOSES, AddressChanges
from apid.auth.endpoints import (
    EMAIL,
    PublicPath,
    PublicRoute,
    email_field,
    fields_of,
    query_value,
    string_fields,
    write_text,
)
from apid.auth.lifecycle import State, state_of
from apid.auth.limits import AbuseLimiter
from apid.auth.passwords import Passwords
from apid.auth.sessions import Revocations
from apid.auth.tokens import Principal
from apid.config.account_policy import PASSWORD_LENGTH, USERNAME, check_credentials
from apid.config.server import AccountsConfig
from apid.hooks.events import AccountEvents
from apid.http.answers import write_json
from apid.http.operations import (
    FILLED_STRING,
    header_refs,
    json_answer,
    json_body,
    problem_answers,
    query_parameter,
    text_answer,
)
from apid.http.requests import client_address, read_json_body
from apid.mail.message import PRODUCT, Message
from apid.mail.outbox import queue_mail
from apid.problems import BadRequest, NotFound
from apid.store.database import Database, DatabaseUnavailable
from apid.store.tables import person

log = Logger(namespace="apid.accounts")

SENT = "A validation email was sent to the address given. Please check your inbox.\n"
RESET_DONE = "Your password was changed. Please log in with the new password.\n"


def _person_by_email(connection: Connection, email: str) -> Any:
    """The account of this address in any letter case or Unicode form (`email_key`)."""
    return connection.execute(select(person).where(person.c.email_key == email_key(email))).first()


def _person_by_username(connection: Connection, username: str) -> Any:
    """The account of this name in any ASCII letter case (`username_key`, a unique index)."""
    return connection.execute(select(person).where(person.c.username_key == username_key(username))).first()


def register_account(
    connection: Connection,
    username: str,
    email: str,
    password_hash: str,
    role: str,
    lifetime: int,
    events: AccountEvents | None = None,
) -> tuple[str, str | None, str]:
    """What registering these details means, as (outcome, validation id, address to mail):
    "created" (a pending account and a validation id), "again" (the same pending account: a
    fresh id), "email-taken" or "name-taken" (nothing created or changed: an account past
    pending, disabled too, is never touched). Mail about an existing account goes to the
    address on file, never to the spelling that was typed."""
    by_email = _person_by_email(connection, email)
    if by_email is not None:
        if state_of(by_email) is State.PENDING and by_email.username_key == username_key(username):
            return "again", onetime.issue(connection, by_email.id, onetime.VALIDATE, lifetime), by_email.email
        return "email-taken", None, by_email.email
    if _person_by_username(connection, username) is not None:
        return "name-taken", None, email
    account = insert_account(connection, username, email, password_hash, [role], enabled=False, pending=True)
    if events is not None:
        events.record(connection, "create", account)
    return "created", onetime.issue(connection, account.id, onetime.VALIDATE, lifetime), email


def enable_account(connection: Connection, secret: str, events: AccountEvents | None = None) -> bool:
    """Use a validation id: its pending account becomes active (`onetime.NEEDS`)."""
    live = onetime.consume(connection, secret, onetime.VALIDATE)
    if live is None:
        return False
    change_account(connection, live.person_id, events, enabled=True, validated_at=onetime.now())
    return True


def request_reset(connection: Connection, email: str, lifetime: int) -> tuple[str, str] | None:
    """A reset id for the active account with this email, replacing earlier ones, and the
    address on file (mail goes there, never to the spelling that was typed); else None."""
    row = _person_by_email(connection, email)
    if state_of(row) is not State.ACTIVE:
        return None
    return onetime.issue(connection, row.id, onetime.RESET, lifetime), row.email


def reset_password(
    connection: Connection, secret: str, password_hash: str, events: AccountEvents | None = None
) -> int | None:
    """Set the password of the id's account and use the id up; the account's id, or None."""
    live = onetime.consume(connection, secret, onetime.RESET)
    if live is None:
        return None
    change_account(connection, live.person_id, events, password=password_hash, password_expired=False)
    return live.person_id


_NEW_USERNAME = {
    "type": "string",
    "pattern": f"^{USERNAME.pattern}$",
    "description": "3 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit",
}
_NEW_PASSWORD = {
    "type": "string",
    "minLength": PASSWORD_LENGTH[0],
    "maxLength": PASSWORD_LENGTH[1],
    "description": "Not the username",
}
_SENT_ANSWER = text_answer("A validation email was sent (the same answer whether or not an account exists)")
REGISTER = PublicPath(
    "/register",
    "POST",
    {
        "summary": "Sign up: a validation email is sent",
        "requestBody": json_body({"username": _NEW_USERNAME, "password": _NEW_PASSWORD, "email": EMAIL.json_schema}),
        "responses": {"200": _SENT_ANSWER, **problem_answers("400", "429")},
    },
)
VALIDATE = PublicPath(
    "/validate",
    "GET",
    {
        "summary": "Follow an emailed link: validates the account, or opens a password reset",
        "parameters": [query_parameter("id", "The id from the emailed link")],
        "responses": {
            "302": {
                "description": "To the home page (account validated) or the reset page",
                "headers": header_refs("Location"),
            },
            "200": {
                "description": "An address change's link: a page (JSON for `Accept: application/json`) whose form "
                "carries it out by `POST /validate`; nothing changes yet"
            },
            **problem_answers("400"),
        },
    },
)
CONFIRM_LINK = PublicPath(
    "/validate",
    "POST",
    {
        "summary": "Carry out an emailed address-change link (the page `GET /validate` shows posts here)",
        "parameters": [query_parameter("id", "The id from the emailed link")],
        "responses": {
            "303": {"description": "To the home page or the reset page", "headers": header_refs("Location")},
            **problem_answers("400"),
        },
    },
)
FORGOT_PASSWORD = PublicPath(
    "/forgotPassword",
    "POST",
    {
        "summary": "Ask for a password reset email",
        "requestBody": json_body({"email": EMAIL.json_schema}),
        "responses": {"200": _SENT_ANSWER, **problem_answers("400", "429")},
    },
)
VALIDATE_RESET_PASSWORD = PublicPath(
    "/validateResetPassword",
    "GET",
    {
        "summary": "Whether a reset id is still good",
        "parameters": [query_parameter("id", "The reset id")],
        "responses": {
            "200": json_answer(
                "The id is good until expires",
                {
                    "type": "object",
                    "required": ["valid", "expires"],
                    "properties": {"valid": {"type": "boolean"}, "expires": {"type": "string", "format": "date-time"}},
                },
            ),
            **problem_answers("400", "404"),
        },
    },
)
RESET_PASSWORD = PublicPath(
    "/resetPassword",
    "POST",
    {
        "summary": "Set a new password with a reset id; ends the account's other logins",
        "requestBody": json_body({"id": FILLED_STRING, "password": _NEW_PASSWORD}),
        "responses": {"200": text_answer("The password was changed"), **problem_answers("400")},
    },
)
ACCOUNT_PATHS = (REGISTER, VALIDATE, CONFIRM_LINK, FORGOT_PASSWORD, VALIDATE_RESET_PASSWORD, RESET_PASSWORD)


class AccountEndpoints:
    def __init__(
        self,
        *,
        db: Database,
        passwords: Passwords,
        revocations: Revocations,
        limiter: AbuseLimiter,
        accounts: AccountsConfig,
        base_url: str,
        home_url: str,
        user_role: str,
        events: AccountEvents | None = None,
        addresses: AddressChanges | None = None,
    ) -> None:
        self._events = events  # None when webhookActive is false
        self._addresses = addresses
        self._db = db
        self._passwords = passwords
        self._revocations = revocations
        self._limiter = limiter
        self._config = accounts
        self._base_url = base_url
        self._home_url = home_url
        self._user_role = user_role

    def routes(self) -> list[PublicRoute]:
        return [
            REGISTER.route(self.register),
            VALIDATE.route(self.validate),
            CONFIRM_LINK.route(self.confirm_link),
            FORGOT_PASSWORD.route(self.forgot_password),
            VALIDATE_RESET_PASSWORD.route(self.validate_reset),
            RESET_PASSWORD.route(self.reset_password),
        ]

    async def register(self, request: Request, _principal: Principal | None) -> bytes:
        body = read_json_body(request)

        def credentials() -> tuple[str, str]:
            username, password = string_fields(body, "username", "password")
            check_credentials(username, password)
            return username, password

        (username, password), email = fields_of(
            body, credentials, lambda: email_field(body), allowed=("username", "password", "email")
        )
        await self._limiter.reserve("register", client_address(request), email)
        password_hash = await self._passwords.hash(password)

        def register(connection: Connection) -> None:
            """Every outcome mails once, in the transaction: the same work whatever happened."""
            outcome, secret, address = register_account(
                connection,
                username,
                email,
                password_hash,
                self._user_role,
                self._config.validation_lifetime,
                self._events,
            )
            queue_mail(connection, self._registration_mail(outcome, username, address, secret))

        await self._db.write(register)
        return write_text(request, SENT)

    def _registration_mail(self, outcome: str, username: str, email: str, secret: str | None) -> Message:
        if secret is not None:
            return Message(
                email,
                f"{PRODUCT}: confirm your account",
                (
                    f"Hello {username},\n\nto confirm your {PRODUCT} account, open this link within "
                    f"{onetime.duration(self._config.validation_lifetime)}:\n\n"
                    f"{onetime.link(self._base_url, secret)}\n\n"
                    "If you did not sign up, ignore this message.\n"
                ),
            )
        if outcome == "email-taken":
            return Message(
                email,
                f"{PRODUCT}: someone tried to sign up with your address",
                (
                    f"Hello,\n\nsomeone tried to create a {PRODUCT} account with this address, which already "
                    "has one. If it was you, log in, or reset your password if you forgot it.\n"
                    "If it was not you, ignore this message: nothing was changed.\n"
                ),
            )
        return Message(
            email,
            f"{PRODUCT}: your account was not created",
            (
                f"Hello,\n\nwe could not create a {PRODUCT} account with the username you chose. "
                "Please sign up again with another username.\n"
            ),
        )

    async def validate(self, request: Request, _principal: Principal | None) -> bytes:
        """Every emailed link: a validation enables the account, a reset goes on to the site's
        reset page (the id still unused), an address change's link shows a page that carries it
        out by POST (`link_page`: GET and HEAD, as mail scanners send, change nothing)."""
        secret = query_value(request, "id")
        live = await self._db.read(onetime.find_live, secret)
        purpose = live.purpose if live is not None else None
        if purpose == onetime.VALIDATE and await self._db.write(enable_account, secret, self._events):
            return self._redirect(request, self._home_url)
        if purpose == onetime.RESET:
            return self._redirect(request, onetime.page(self._config.reset_url, secret))
        if live is not None and purpose in PURPOSES and self._addresses is not None:
            return link_page.confirmation_page(request, secret, live.purpose, live.expires_at)
        raise BadRequest(onetime.BAD_LINK)

    async def confirm_link(self, request: Request, _principal: Principal | None) -> bytes:
        """`POST /validate?id=`: carry out an address change's link (`address_change`)."""
        secret = query_value(request, "id")
        live = await self._db.read(onetime.find_live, secret)
        if live is None or live.purpose not in PURPOSES or self._addresses is None:
            raise BadRequest(onetime.BAD_LINK)
        return link_page.followed(request, live.purpose, await self._addresses.follow(secret, live.purpose))

    def _redirect(self, request: Request, location: str) -> bytes:
        request.setResponseCode(302)
        request.setHeader(b"Location", location.encode("utf-8"))
        request.setHeader(b"Cache-Control", b"no-store")
        return b""

    async def forgot_password(self, request: Request, _principal: Principal | None) -> bytes:
        """Answer first, then look the address up: the answer and its timing are the same
        for an address with an account and one without."""
        body = read_json_body(request)
        (email,) = fields_of(body, lambda: email_field(body), allowed=("email",))
        await self._limiter.reserve("reset", client_address(request), email)
        Deferred.fromCoroutine(self._send_reset(email)).addErrback(_reset_failed)
        return write_text(request, SENT)

    async def _send_reset(self, email: str) -> None:
        def reset(connection: Connection) -> None:
            found = request_reset(connection, email, self._config.reset_lifetime)
            if found is not None:
                queue_mail(connection, self._reset_mail(*found))

        await self._db.write(reset)

    def _reset_mail(self, secret: str, address: str) -> Message:
        return Message(
            address,
            f"{PRODUCT}: reset your password",
            (
                f"Hello,\n\nto choose a new {PRODUCT} password, open this link within "
                f"{onetime.duration(self._config.reset_lifetime)}:\n\n{onetime.link(self._base_url, secret)}\n\n"
                "If you did not ask for this, ignore this message: your password stays as it is.\n"
            ),
        )

    async def validate_reset(self, request: Request, _principal: Principal | None) -> bytes:
        live = await self._db.read(onetime.find_live, query_value(request, "id"))
        if live is None or live.purpose != onetime.RESET:
            raise NotFound(onetime.BAD_LINK)
        request.setHeader(b"Cache-Control", b"no-store")
        return write_json(request, {"valid": True, "expires": live.expires_at.isoformat()})

    async def reset_password(self, request: Request, _principal: Principal | None) -> bytes:
        body = read_json_body(request)
        ((secret, password),) = fields_of(
            body, lambda: string_fields(body, "id", "password"), allowed=("id", "password")
        )
        live = await self._db.read(onetime.find_live, secret)
        if live is None or live.purpose != onetime.RESET:
            raise BadRequest(onetime.BAD_LINK)
        account = await self._db.read(get_account, live.person_id)
        check_credentials(account.username if account else None, password)
        person_id = await self._db.write(reset_password, secret, await self._passwords.hash(password), self._events)
        if person_id is None:
            raise BadRequest(onetime.BAD_LINK)
        await self._revocations.revoke_person(person_id)
        return write_text(request, RESET_DONE)


def _reset_failed(failure: Failure) -> None:
    """A reset request answered, then lost: logged, unless the database was out of reach,
    which its outage's own lines say once (`apid.store.outage`) rather than once a request."""
    if not failure.check(DatabaseUnavailable):
        log.failure("a password reset request failed", failure)
