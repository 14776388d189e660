"""Public endpoints: fixed paths that answer without a token when listed in `reservedUris`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from twisted.web.http import Request

from apid.accounts import Accounts
from apid.auth.tokens import Principal, TokenService
from apid.http import read_json_body, write_json
from apid.problems import InvalidFields, Unauthorized

Handler = Callable[[Request, Principal | None], Awaitable[bytes]]


@dataclass(frozen=True)
class PublicRoute:
    path: str
    method: str
    handler: Handler


def string_fields(body: dict[str, Any], *names: str) -> list[str]:
    """The named fields as strings; one 400 listing every field missing or of another type."""
    errors = [
        {"field": name, "reason": "is required" if body.get(name) is None else "must be a string"}
        for name in names
        if not isinstance(body.get(name), str) or not body[name]
    ]
    if errors:
        raise InvalidFields(errors)
    return [body[name] for name in names]


class AuthEndpoints:
    """`/authenticate` (log in) and `/health` (liveness for pings and load balancers)."""

    def __init__(self, accounts: Accounts, tokens: TokenService, version: str) -> None:
        self._accounts = accounts
        self._tokens = tokens
        self._version = version

    def routes(self) -> list[PublicRoute]:
        return [
            PublicRoute("/authenticate", "POST", self.authenticate),
            PublicRoute("/health", "GET", self.health),
        ]

    async def authenticate(self, request: Request, _principal: Principal | None) -> bytes:
        username, password = string_fields(read_json_body(request), "username", "password")
        account = await self._accounts.login(username, password)
        if account is None:
            raise Unauthorized("the username or password is wrong")
        token = self._tokens.issue(account.id, account.username, account.roles)
        request.setHeader(b"Cache-Control", b"no-store")
        return write_json(request, {"token": token})

    async def health(self, request: Request, _principal: Principal | None) -> bytes:
        request.setHeader(b"Cache-Control", b"no-store")
        return write_json(request, {"status": "pass", "version": self._version})
