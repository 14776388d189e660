"""Access tokens of the OpenID providers `security.issuers` trusts, checked as apid checks its own.

`Application` hands a token here when it claims to come from a configured issuer (`claims_issuer`,
read without verifying: it only says where the token is checked). Here the token's signature
is verified with the provider's key named by its `kid` (`apid.auth.jwks`, the algorithm pinned
by the key), `iss`, `aud`, `sub`, `exp` and `iat` are required, `iss` and `aud` must be the
configured ones, and `exp`, `nbf` and `iat` are checked with `jwt.leeway`. The configured claim
is mapped to apid roles (`IssuerConfig.roles_of`): a token mapping to none is refused, saying
why. The subject's own `person` (`apid.auth.identities`) is then the caller, so revocations,
the account's standing, own-record rules, webhooks and rate limits apply as for a local login.

A verified token's principal is kept, keyed by the token's exact text, as `TokenService` keeps
apid's own: the next request with it costs a dictionary lookup and the expiry check.

With `security.localLogins: false` the endpoints of password accounts (`PASSWORD_PATHS`) are
not served, and the providers are the only way in.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import jwt
import orjson
from twisted.internet.interfaces import IReactorTime

from apid.auth.identities import ExternalIdentities
from apid.auth.jwks import ALGORITHMS, ProviderClient, ProviderKeys
from apid.auth.login import SESSION_PATHS
from apid.auth.registration import ACCOUNT_PATHS
from apid.auth.tokens import VERIFIED_KEPT, Principal
from apid.config.api import IssuerConfig
from apid.problems import Unauthorized

REQUIRED_CLAIMS = ["iss", "aud", "sub", "exp", "iat"]
SIGNING_ALGORITHMS = frozenset(ALGORITHMS.values())
NOT_VALID = "the access token is not valid"
# What `security.localLogins: false` leaves out: every endpoint of password accounts.
PASSWORD_PATHS = frozenset(path.path for path in (*SESSION_PATHS, *ACCOUNT_PATHS))


@functools.lru_cache(maxsize=VERIFIED_KEPT)
def claims_issuer(token: str) -> str | None:
    """The `iss` a JWT claims, unverified; None for anything that is no JWT with a string `iss`.
    Kept per token: a client sends the same one with every request, and reading it costs
    more than the rest of what apid's own token costs once verified."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        claims = orjson.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, orjson.JSONDecodeError):
        return None
    issuer = claims.get("iss") if isinstance(claims, dict) else None
    return issuer if isinstance(issuer, str) else None


class ExternalIssuers:
    """The configured providers' tokens, verified into principals."""

    def __init__(
        self,
        *,
        issuers: Iterable[IssuerConfig],
        keys: Callable[[IssuerConfig], ProviderKeys],
        identities: ExternalIdentities,
        clock: Callable[[], float],
        leeway: int,
    ) -> None:
        self._issuers: Mapping[str, IssuerConfig] = {issuer.issuer: issuer for issuer in issuers}
        self._keys = {name: keys(issuer) for name, issuer in self._issuers.items()}
        self._identities = identities
        self._clock = clock
        self._leeway = leeway
        self._verified: dict[str, Principal] = {}

    def issued(self, token: str) -> bool:
        """Whether `token` claims a configured issuer: then it is checked here, and only here."""
        return token in self._verified or claims_issuer(token) in self._issuers

    def kept(self, token: str) -> Principal | None:
        """The principal of a token verified before, without a coroutine (every request but a
        token's first); None when it must be verified (`verify`). An expired one is a 401."""
        principal = self._verified.get(token)
        if principal is not None and principal.expires <= self._clock() - self._leeway:
            raise Unauthorized("the access token has expired")
        return principal

    async def verify(self, token: str) -> Principal:
        """The principal of a good token of a configured provider; any flaw is a 401 saying which."""
        principal = self.kept(token)
        if principal is None:
            principal = await self._principal(token)
            if len(self._verified) >= VERIFIED_KEPT:
                del self._verified[next(iter(self._verified))]
            self._verified[token] = principal
            return self.kept(token) or principal
        return principal

    async def _principal(self, token: str) -> Principal:
        issuer = self._issuers.get(claims_issuer(token) or "")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError:
            raise Unauthorized(NOT_VALID) from None
        if issuer is None:
            raise Unauthorized(NOT_VALID)
        if header.get("alg") not in SIGNING_ALGORITHMS:
            raise Unauthorized("the access token's algorithm is not one apid accepts (RS256, ES256, EdDSA)")
        kid = header.get("kid")
        key = await self._keys[issuer.issuer].key(kid) if isinstance(kid, str) else None
        if key is None:
            raise Unauthorized("the access token's signing key (kid) is not one its provider publishes")
        claims = self._claims(token, issuer, key.algorithm, key.key)
        roles = issuer.roles_of(claims)
        if not roles:
            raise Unauthorized(
                f"the access token's {issuer.claim} claim holds no value that security.issuers maps to a role "
                "of apid; ask your identity provider's administrator for access"
            )
        subject = claims["sub"]
        account = await self._identities.account(issuer.issuer, subject, roles)
        jti = claims.get("jti")
        return Principal(
            user_id=account.person_id,
            username=account.username,
            roles=roles,
            # what revoking a token names: its jti, else its digest (Entra ID's tokens have no jti)
            token_id=jti if isinstance(jti, str) and jti else "sha256:" + hashlib.sha256(token.encode()).hexdigest(),
            expires=int(claims["exp"]),
            issued_at=float(claims["iat"]),
            issuer=issuer.issuer,
            subject=subject,
        )

    def _claims(self, token: str, issuer: IssuerConfig, algorithm: str, key: Any) -> dict[str, Any]:
        """The claims of a token whose signature, issuer, audience and times hold; its expiry
        is checked on every use (`verify`), by the service's clock as apid's own tokens are."""
        now = self._clock()
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=[algorithm],
                audience=issuer.audience,
                issuer=issuer.issuer,
                leeway=self._leeway,
                options={"require": REQUIRED_CLAIMS, "verify_exp": False, "verify_iat": False, "verify_nbf": False},
            )
            if not isinstance(claims["sub"], str) or not 0 < len(claims["sub"]) <= 255:
                raise jwt.InvalidTokenError("sub must be a string of 1 to 255 characters")
            times = {name: float(claims[name]) for name in ("exp", "iat", "nbf") if name in claims}
        except jwt.InvalidAudienceError:
            raise Unauthorized(
                f"the access token is not for this API: its audience (aud) is not {issuer.audience!r}"
            ) from None
        except (jwt.InvalidTokenError, ValueError, TypeError):
            raise Unauthorized(NOT_VALID) from None
        if times["iat"] > now + self._leeway or times.get("nbf", now) > now + self._leeway:
            raise Unauthorized("the access token is not valid yet (iat or nbf)")
        return claims


def external_issuers(
    reactor: IReactorTime, issuers: Sequence[IssuerConfig], identities: ExternalIdentities, leeway: int
) -> ExternalIssuers | None:
    """The checker of the configured providers' tokens; None when no provider is trusted."""
    if not issuers:
        return None
    client = ProviderClient(reactor)

    def keys(issuer: IssuerConfig) -> ProviderKeys:
        return ProviderKeys(
            issuer=issuer.issuer,
            get_json=client.get_json,
            clock=reactor,
            refresh=issuer.keys_refresh,
            lifetime=issuer.keys_lifetime,
        )

    return ExternalIssuers(issuers=issuers, keys=keys, identities=identities, clock=time.time, leeway=leeway)
