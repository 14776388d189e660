"""Standard Webhooks signatures: `v1,<base64 HMAC-SHA256 of "{id}.{timestamp}.{body}">`.

Secrets look like `whsec_<base64 of 32 random bytes>`; the key is the decoded bytes, as the
Standard Webhooks libraries expect, so a receiver can verify with any of them.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

PREFIX = "whsec_"


def new_secret() -> str:
    return PREFIX + base64.b64encode(secrets.token_bytes(32)).decode("ascii")


def _key(secret: str) -> bytes:
    return base64.b64decode(secret.removeprefix(PREFIX))


def sign(secret: str, message_id: str, timestamp: int, body: bytes) -> str:
    signed = f"{message_id}.{timestamp}.".encode() + body
    digest = hmac.new(_key(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def signature_header(secrets_in_force: list[str], message_id: str, timestamp: int, body: bytes) -> str:
    """One signature per secret in force, space-separated: during a rotation's grace period a
    receiver holding either the old or the new secret verifies the message."""
    return " ".join(sign(secret, message_id, timestamp, body) for secret in secrets_in_force)
