"""Access tokens made by hand, for the tests that the daemon refuses what it did not issue:
signed with a deployment's own secret (or another key, or algorithm), or a genuine token
whose payload was edited."""

from __future__ import annotations

import base64
import json
import time
import uuid
import warnings
from typing import Any

import jwt

from harness import ADMIN, Deployment


def secret_of(deployment: Deployment) -> bytes:
    """The deployment's JWT signing secret."""
    return (deployment.root / "var" / "jwt.secret").read_text(encoding="utf-8").strip().encode()


def b64(data: dict) -> str:
    """JSON as a token's segment: base64url without padding."""
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def admin_claims(**claims: Any) -> dict[str, Any]:
    """The claims of an administrator's access token, valid for ten minutes; `claims` replace them."""
    now = int(time.time())
    return {
        "iss": "apid",
        "aud": "apid",
        "sub": "1",
        "name": ADMIN[0],
        "roles": ["ROLE_ADMIN"],
        "iat": now,
        "exp": now + 600,
        "jti": uuid.uuid4().hex,
        **claims,
    }


def forge(
    deployment: Deployment,
    key: bytes | None = None,
    algorithm: str = "HS256",
    header: dict | None = None,
    drop: tuple[str, ...] = (),
    **claims: Any,
) -> str:
    """An administrator's token with chosen claims (`drop` removes some), signed with the
    deployment's secret unless told otherwise."""
    payload = admin_claims(**claims)
    for name in drop:
        payload.pop(name)
    headers = {"typ": "at+jwt", **(header or {})}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # short HMAC keys only warn
        return jwt.encode(payload, secret_of(deployment) if key is None else key, algorithm=algorithm, headers=headers)


def tampered(token: str) -> str:
    """A genuine token whose payload now claims ROLE_ADMIN, its signature left as it was."""
    header, payload, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=="))
    claims["roles"] = ["ROLE_ADMIN"]
    return f"{header}.{b64(claims)}.{signature}"
