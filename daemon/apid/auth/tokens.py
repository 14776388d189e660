"""Access tokens: HS256 JSON web tokens with every claim required and the algorithm pinned.

The secret is shared by all daemons of a deployment: from the configuration, or from a
secret file created once (mode 0600) and never regenerated, so a restart logs nobody out.

A client sends the same token with every request for its whole lifetime, and checking its
signature and claims was a sixth of a request's time (docs/benchmarks.md, the profile): the
principal of a token that passed is kept, keyed by the token's exact text, and only its expiry
is checked again. What may change while a token is good (its revocation, the account's
standing) is never kept here: the callers check it on every request.
"""

from __future__ import annotations

import os
import secrets
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import jwt

from apid.config.server import JwtConfig
from apid.plugin import Caller
from apid.problems import Unauthorized

ALGORITHM = "HS256"
TOKEN_TYPE = "at+jwt"
REQUIRED_CLAIMS = ["iss", "aud", "sub", "roles", "iat", "exp", "jti"]
NEEDS_TOKEN = "this endpoint needs an Authorization: Bearer <token> header"
# Verified tokens kept: a few thousand callers at once each hit; past that the oldest goes
# (about 1 KiB each with its principal).
VERIFIED_KEPT = 2048


@dataclass(frozen=True, slots=True)
class Principal:
    """The verified caller of one request."""

    user_id: int
    username: str
    roles: frozenset[str]
    token_id: str
    expires: int
    issued_at: float
    session: str | None = None  # the login (refresh family) the token belongs to
    # no token at all: the anonymous role only, admitted where IO State grants that role
    anonymous: bool = False
    # an API key (apid.auth.key_verifier): its id, and the controllers or endpoints it may call
    # (None: whatever its roles may)
    key_id: int | None = None
    key_scopes: frozenset[str] | None = None
    # the OpenID provider that issued the token (apid.auth.issuers); None for apid's own tokens
    issuer: str | None = None
    # the provider's subject (`sub`): its account is the one tied to issuer and subject
    subject: str | None = None

    def caller(self, *, roles: frozenset[str], superuser_role: str, address: str) -> Caller:
        """The `Caller` a plugin is handed for this principal, granted `roles`: built here
        alone, so that a field added to `Caller` is filled in once."""
        return Caller(
            id=self.user_id,
            username=self.username,
            roles=roles,
            is_superuser=superuser_role in roles,
            session=self.session,
            all_roles=self.roles,
            address=address,
            api_key=self.key_id,
        )


def anonymous_caller(role: str) -> Principal:
    """The caller of a request without a token: no account (id 0, no name), one role."""
    return Principal(
        user_id=0, username="", roles=frozenset({role}), token_id="", expires=0, issued_at=0.0, anonymous=True
    )


def load_secret(config: JwtConfig) -> bytes:
    """The configured secret, else the secret file's, creating that file once if missing."""
    if config.secret is not None:
        return config.secret
    path: Path = config.secret_file
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        # Written whole under a private name, then linked into place: a daemon starting at the
        # same moment either finds no file or the complete one, and the first link wins.
        fd, draft = tempfile.mkstemp(dir=path.parent, prefix=".jwt-secret-")
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(secrets.token_urlsafe(48))
            os.link(draft, path)
        except FileExistsError:
            pass
        finally:
            os.unlink(draft)
    secret = path.read_text(encoding="utf-8").strip().encode()
    if len(secret) < 32:
        raise ValueError(f"{path}: the JWT secret must be at least 32 bytes long")
    return secret


class TokenService:
    def __init__(self, config: JwtConfig, secret: bytes, clock: Callable[[], float]) -> None:
        self._config = config
        self._secret = secret
        self._clock = clock
        self._verified: dict[str, Principal] = {}

    def issue(self, user_id: int, username: str, roles: frozenset[str], session: str | None = None) -> str:
        now = self._clock()
        claims = {
            "iss": self._config.issuer,
            "aud": self._config.audience,
            "sub": str(user_id),
            "name": username,
            "roles": sorted(roles),
            # to the millisecond (a NumericDate may have a fraction), so that "refuse what was
            # issued before this password reset" spares a login made in the same second after it
            "iat": round(now, 3),
            "exp": int(now) + self._config.access_lifetime,
            "jti": uuid.uuid4().hex,
        }
        if session is not None:
            claims["sid"] = session
        return jwt.encode(claims, self._secret, algorithm=ALGORITHM, headers={"typ": TOKEN_TYPE})

    def verify(self, token: str, *, allow_expired: bool = False) -> Principal:
        """The token's principal; any flaw (signature, claims, expiry, type) is one 401.

        `allow_expired` accepts a genuine token past its expiry: refreshing needs to know
        whose it is, never whether it is still good.

        Expiry is checked against the service's clock (the one that issued the token), so all
        daemons and the tests agree on what "now" is.
        """
        principal = self._verified.get(token)
        if principal is None:
            principal = self._decode(token)
            if len(self._verified) >= VERIFIED_KEPT:
                del self._verified[next(iter(self._verified))]
            self._verified[token] = principal
        if not allow_expired:
            self.check_expiry(principal)
        return principal

    def check_expiry(self, principal: Principal) -> None:
        """401 once the token `principal` came with has expired (a stream outliving it ends)."""
        if principal.expires <= self._clock() - self._config.leeway:
            raise Unauthorized("the access token has expired")

    def _decode(self, token: str) -> Principal:
        """The principal of a token whose signature, type and claims hold, its expiry unchecked."""
        try:
            header = jwt.get_unverified_header(token)
            if header.get("typ") != TOKEN_TYPE:
                raise jwt.InvalidTokenError("wrong token type")
            claims = jwt.decode(
                token,
                self._secret,
                algorithms=[ALGORITHM],
                audience=self._config.audience,
                issuer=self._config.issuer,
                options={"require": REQUIRED_CLAIMS, "verify_exp": False, "verify_iat": False},
            )
            user_id = int(claims["sub"])
            roles = claims["roles"]
            if not isinstance(roles, list) or not all(isinstance(r, str) for r in roles):
                raise jwt.InvalidTokenError("roles must be a list of strings")
            if float(claims["iat"]) > self._clock() + self._config.leeway:
                raise jwt.InvalidTokenError("issued in the future")
            expires = int(claims["exp"])
        except (jwt.InvalidTokenError, ValueError, TypeError):
            raise Unauthorized("the access token is not valid") from None
        return Principal(
            user_id=user_id,
            username=str(claims.get("name", "")),
            roles=frozenset(roles),
            token_id=str(claims["jti"]),
            expires=expires,
            issued_at=float(claims["iat"]),
            session=claims.get("sid") if isinstance(claims.get("sid"), str) else None,
        )
