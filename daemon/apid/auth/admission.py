"""Whether a verified caller still stands, asked of every request and of every open live event
stream (apid.events.feed): one place, so that a stream is held to what a request would be."""

from __future__ import annotations

from apid.auth.sessions import Revocations
from apid.auth.standing import Standings
from apid.auth.tokens import Principal, TokenService
from apid.problems import Unauthorized


class CallerCheck:
    def __init__(self, *, tokens: TokenService, revocations: Revocations, standings: Standings) -> None:
        self._tokens = tokens
        self._revocations = revocations
        self._standings = standings

    async def admit(self, principal: Principal) -> Principal:
        """The caller of a request, their token just verified: a 401 when it was revoked (a
        logout, a password reset), else the account as it stands now (`Standings.admit`: its
        roles cut to those it still holds, a 401 or 403 when it may no longer call)."""
        if self._revocations.refuses(principal):
            raise Unauthorized("the access token was revoked; log in again")
        return await self._standings.admit(principal)

    async def still(self, principal: Principal) -> Principal:
        """`admit` for a caller verified a while ago (an open stream): their token's expiry too."""
        self._tokens.check_expiry(principal)
        return await self.admit(principal)

    def expired(self, principal: Principal) -> bool:
        """Whether the token `principal` came with has expired (cheap: a stream's, every second)."""
        try:
            self._tokens.check_expiry(principal)
        except Unauthorized:
            return True
        return False
