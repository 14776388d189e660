"""Logging in, staying logged in, logging out: /authenticate, /refreshToken, /logout.

A login answers an access token (a JWT, in the body) and sets an HttpOnly, SameSite=Strict
cookie holding an opaque refresh token. /refreshToken trades the cookie and the current
access token (expired is fine, forged is not) for a new access token and a new cookie.
/logout ends the login the access token belongs to (its `sid`: the refresh family), so every
cookie and every access token of it is refused until they expire. Refreshing
needs a cookie of the token's own login: an old, logged-out token cannot be traded with the
cookie of another login.
"""

from __future__ import annotations

from twisted.web.http import Request

from apid.auth.account_service import Accounts
from apid.auth.accounts import username_key
from apid.auth.apikeys import is_key
from apid.auth.endpoints import PublicPath, PublicRoute, fields_of, query_value, string_fields
from apid.auth.limits import AbuseLimiter
from apid.auth.sessions import Revocations, Rotation, rotate, start_family
from apid.auth.standing import Standings
from apid.auth.tokens import Principal, TokenService
from apid.config.server import JwtConfig
from apid.http.answers import write_json
from apid.http.operations import BEARER, FILLED_STRING, STRING, json_answer, json_body, problem_answers, query_parameter
from apid.http.requests import bearer_token, client_address, read_json_body
from apid.problems import Unauthorized
from apid.store.database import Database

REFRESH_COOKIE = b"apid_refresh"
WRONG_CREDENTIALS = "the username or password is wrong"
NO_REFRESH = "the session cannot be refreshed; log in again"
NO_KEY = "an API key is no login: it is neither refreshed nor logged out (revoke it with apikey/revoke)"

_TOKEN_ANSWER = {
    "type": "object",
    "required": ["token"],
    "properties": {"token": {"type": "string", "description": "A JWT access token"}},
}
_REFRESH_COOKIE_PARAMETER = {
    "name": REFRESH_COOKIE.decode("ascii"),
    "in": "cookie",
    "required": False,
    "schema": STRING,
    "description": "The refresh cookie set at login",
}
AUTHENTICATE = PublicPath(
    "/authenticate",
    "POST",
    {
        "summary": "Log in",
        "requestBody": json_body({"username": FILLED_STRING, "password": FILLED_STRING}),
        "responses": {
            "200": json_answer("The access token, and the refresh cookie", _TOKEN_ANSWER, "Set-Cookie"),
            **problem_answers("400", "401", "429"),
        },
    },
)
REFRESH_TOKEN = PublicPath(
    "/refreshToken",
    "GET",
    {
        "summary": "A new access token for the current one (expired is fine) and the refresh cookie",
        "security": BEARER,  # the current token, even expired, beside the cookie
        "parameters": [query_parameter("name", "Your username"), _REFRESH_COOKIE_PARAMETER],
        "responses": {
            "200": json_answer("A new access token, and a new refresh cookie", _TOKEN_ANSWER, "Set-Cookie"),
            **problem_answers("400", "401"),
        },
    },
)
LOGOUT = PublicPath(
    "/logout",
    "POST",
    {
        "summary": "End the login: the refresh cookie and every access token of it",
        "security": BEARER,
        "parameters": [_REFRESH_COOKIE_PARAMETER],
        "responses": {"204": {"description": "Logged out; the cookie is cleared"}, **problem_answers("401")},
    },
)
SESSION_PATHS = (AUTHENTICATE, REFRESH_TOKEN, LOGOUT)


class SessionEndpoints:
    def __init__(
        self,
        *,
        accounts: Accounts,
        tokens: TokenService,
        db: Database,
        revocations: Revocations,
        standings: Standings,
        limiter: AbuseLimiter,
        jwt: JwtConfig,
        secure_cookies: bool,
    ) -> None:
        self._accounts = accounts
        self._tokens = tokens
        self._db = db
        self._revocations = revocations
        self._standings = standings
        self._limiter = limiter
        self._jwt = jwt
        self._secure = secure_cookies

    def routes(self) -> list[PublicRoute]:
        return [
            AUTHENTICATE.route(self.authenticate),
            REFRESH_TOKEN.route(self.refresh),
            LOGOUT.route(self.logout),
        ]

    def _set_cookie(self, request: Request, secret: str, max_age: int) -> None:
        request.addCookie(
            REFRESH_COOKIE,
            secret.encode("ascii"),
            path=b"/",
            max_age=str(max_age).encode("ascii"),
            secure=self._secure,
            httpOnly=True,
            sameSite="strict",
        )

    def _answer_token(self, request: Request, token: str, refresh_secret: str) -> bytes:
        self._set_cookie(request, refresh_secret, self._jwt.refresh_lifetime)
        request.setHeader(b"Cache-Control", b"no-store")
        return write_json(request, {"token": token})

    async def authenticate(self, request: Request, _principal: Principal | None) -> bytes:
        body = read_json_body(request)
        ((username, password),) = fields_of(
            body, lambda: string_fields(body, "username", "password"), allowed=("username", "password")
        )
        address = client_address(request)
        # Counted before the password is verified, so that simultaneous guesses cannot all
        # get through; a login that succeeds gives the count back.
        counted = await self._limiter.reserve("login", address, username)
        account = await self._accounts.login(username, password)
        if account is None:
            raise Unauthorized(WRONG_CREDENTIALS)
        if counted:
            await self._limiter.release("login", address, username)
        refresh_secret, session = await self._db.write(start_family, account.id, self._jwt.refresh_lifetime)
        token = self._tokens.issue(account.id, account.username, account.roles, session)
        return self._answer_token(request, token, refresh_secret)

    def _current_token(self, request: Request) -> Principal:
        token = bearer_token(request)
        if not token:
            raise Unauthorized("send the current access token as Authorization: Bearer <token>")
        if is_key(token):
            raise Unauthorized(NO_KEY)
        return self._tokens.verify(token, allow_expired=True)

    async def refresh(self, request: Request, _principal: Principal | None) -> bytes:
        principal = self._current_token(request)  # the token first (401), then the fields (400), as for any call
        name = query_value(request, "name")
        cookie = request.getCookie(REFRESH_COOKIE)
        # Names compare in any letter case, as at login (the token holds the stored spelling).
        same_name = username_key(principal.username) == username_key(name)
        if not same_name or not cookie or self._revocations.refuses(principal):
            raise Unauthorized(NO_REFRESH)
        try:
            await self._standings.admit(principal)
        except Unauthorized:
            raise Unauthorized(NO_REFRESH) from None
        outcome = await self._db.write(
            rotate,
            cookie.decode("ascii", "replace"),
            principal.user_id,
            principal.session,
            self._jwt.refresh_lifetime,
            self._jwt.refresh_grace,
        )
        if outcome.status is Rotation.REUSED and principal.session is not None:
            self._revocations.ended(principal.session)
        if outcome.status is not Rotation.ROTATED or outcome.secret is None:  # ROTATED always holds the new secret
            raise Unauthorized(NO_REFRESH)
        account = await self._accounts.get(principal.user_id)
        if account is None or not account.may_log_in:
            raise Unauthorized(NO_REFRESH)
        token = self._tokens.issue(account.id, account.username, account.roles, principal.session)
        return self._answer_token(request, token, outcome.secret)

    async def logout(self, request: Request, _principal: Principal | None) -> bytes:
        """Idempotent: a token already logged out answers 204 again; the token of an account
        that may no longer use it (deleted, disabled) is refused and nothing is written."""
        principal = self._current_token(request)
        if not self._revocations.refuses(principal):
            await self._revocations.end_session(await self._standings.admit(principal))
        self._set_cookie(request, "", 0)
        request.setResponseCode(204)
        return b""
