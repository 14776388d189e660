"""Access tokens (DESIGN 4.12): HS256 pinned, every claim required, any flaw is one 401."""

from __future__ import annotations

import base64
import json
import stat
import time
from pathlib import Path

import jwt
import pytest

from apid.auth.tokens import Principal, TokenService, load_secret
from apid.config.server import JwtConfig
from apid.problems import Unauthorized

SECRET = b"k" * 40
LIFETIME = 900
LEEWAY = 30
REQUIRED = ["iss", "aud", "sub", "roles", "iat", "exp", "jti"]
INVALID = "the access token is not valid"
EXPIRED = "the access token has expired"


def config(tmp_path=None, secret: bytes | None = SECRET) -> JwtConfig:
    return JwtConfig(
        secret=secret,
        secret_file=(tmp_path or Path("/nonexistent")) / "var" / "jwt.secret",
        issuer="apid",
        audience="apid",
        access_lifetime=LIFETIME,
        leeway=LEEWAY,
        refresh_lifetime=86400,
        refresh_grace=10,
    )


def service(clock=time.time) -> TokenService:
    return TokenService(config(), SECRET, clock)


def claims(**changes) -> dict:
    now = int(time.time())
    base = {
        "iss": "apid",
        "aud": "apid",
        "sub": "7",
        "name": "alice",
        "roles": ["ROLE_USER"],
        "iat": now,
        "exp": now + LIFETIME,
        "jti": "abc123",
    }
    base.update(changes)
    return base


def forge(payload: dict, key: bytes = SECRET, typ: str | None = "at+jwt") -> str:
    return jwt.encode(payload, key, algorithm="HS256", headers={"typ": typ})


def refused(token: str, message: str = INVALID) -> Unauthorized:
    with pytest.raises(Unauthorized) as caught:
        service().verify(token)
    assert caught.value.detail == message
    assert caught.value.status == 401
    assert caught.value.headers["WWW-Authenticate"].startswith("Bearer")
    return caught.value


def _b64(data: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


# --- issue and verify ---------------------------------------------------------------------


def test_issued_token_verifies_to_the_same_principal():
    now = int(time.time())
    tokens = service(lambda: now)
    token = tokens.issue(7, "alice", frozenset({"ROLE_USER", "ROLE_ADMIN"}))
    raw = jwt.decode(token, options={"verify_signature": False})

    principal = tokens.verify(token)

    assert principal == Principal(
        user_id=7,
        username="alice",
        roles=frozenset({"ROLE_USER", "ROLE_ADMIN"}),
        token_id=raw["jti"],
        issued_at=float(now),
        expires=now + LIFETIME,
    )
    assert raw["iat"] == now and raw["sub"] == "7"


def test_issued_token_pins_algorithm_and_type_and_has_fresh_jti():
    tokens = service()
    first, second = (tokens.issue(1, "a", frozenset({"ROLE_USER"})) for _ in range(2))
    assert jwt.get_unverified_header(first) == {"alg": "HS256", "typ": "at+jwt"}
    assert tokens.verify(first).token_id != tokens.verify(second).token_id


def test_hand_built_token_with_every_claim_verifies():
    # The forged-token tests below change one thing each from this valid baseline.
    assert service().verify(forge(claims())).user_id == 7


# --- each flaw is a 401 ---------------------------------------------------------------------


def test_expired_token_is_refused_as_expired():
    issued_long_ago = TokenService(config(), SECRET, lambda: time.time() - LIFETIME - LEEWAY - 5)
    refused(issued_long_ago.issue(7, "alice", frozenset({"ROLE_USER"})), EXPIRED)


def test_token_just_past_expiry_is_accepted_within_leeway():
    recently = TokenService(config(), SECRET, lambda: time.time() - LIFETIME - LEEWAY + 20)
    assert service().verify(recently.issue(7, "alice", frozenset({"ROLE_USER"}))).user_id == 7


def test_expiry_follows_the_service_clock():
    now = [time.time()]
    tokens = service(lambda: now[0])
    token = tokens.issue(7, "alice", frozenset({"ROLE_USER"}))
    now[0] += LIFETIME + LEEWAY + 1
    with pytest.raises(Unauthorized, match=EXPIRED):
        tokens.verify(token)


def test_a_token_verified_before_is_still_refused_once_expired():
    now = [time.time()]
    tokens = service(lambda: now[0])
    token = tokens.issue(7, "alice", frozenset({"ROLE_USER"}))
    assert tokens.verify(token).user_id == 7
    now[0] += LIFETIME + LEEWAY + 1
    with pytest.raises(Unauthorized, match=EXPIRED):
        tokens.verify(token)
    assert tokens.verify(token, allow_expired=True).user_id == 7


def test_a_token_altered_after_its_genuine_form_was_verified_is_refused():
    tokens = service()
    token = tokens.issue(7, "alice", frozenset({"ROLE_USER"}))
    tokens.verify(token)
    header, payload, signature = token.split(".")
    promoted = _b64({**jwt.decode(token, options={"verify_signature": False}), "roles": ["ROLE_ADMIN"]})
    for altered in (f"{header}.{promoted}.{signature}", f"{header}.{payload}.{signature[:-2]}AA", token + " "):
        with pytest.raises(Unauthorized, match=INVALID):
            tokens.verify(altered)
    assert tokens.verify(token).roles == frozenset({"ROLE_USER"})


def test_verified_tokens_kept_are_bounded_and_each_still_verifies(monkeypatch):
    monkeypatch.setattr("apid.auth.tokens.VERIFIED_KEPT", 3)
    tokens = service()
    issued = [tokens.issue(user, f"user{user}", frozenset({"ROLE_USER"})) for user in range(1, 6)]
    assert [tokens.verify(token).user_id for token in issued] == [1, 2, 3, 4, 5]
    assert len(tokens._verified) == 3
    assert [tokens.verify(token).user_id for token in issued] == [1, 2, 3, 4, 5]


def test_alg_none_token_is_refused():
    header = {"alg": "none", "typ": "at+jwt"}
    refused(f"{_b64(header)}.{_b64(claims())}.")


def test_token_signed_with_another_key_is_refused():
    refused(forge(claims(), key=b"x" * 40))


def test_token_for_another_audience_is_refused():
    refused(forge(claims(aud="someone-else")))


def test_token_from_another_issuer_is_refused():
    refused(forge(claims(iss="evil")))


@pytest.mark.parametrize("missing", REQUIRED)
def test_token_missing_a_required_claim_is_refused(missing):
    payload = claims()
    del payload[missing]
    refused(forge(payload))


@pytest.mark.parametrize("typ", ["JWT", None])
def test_token_with_wrong_type_header_is_refused(typ):
    refused(forge(claims(), typ=typ))


@pytest.mark.parametrize("garbage", ["", "not a token", "a.b.c", "e30.e30.e30"])
def test_garbage_is_refused(garbage):
    refused(garbage)


@pytest.mark.parametrize("roles", ["ROLE_USER", {"ROLE_USER": True}, [1], None])
def test_roles_not_a_list_of_strings_is_refused(roles):
    refused(forge(claims(roles=roles)))


def test_subject_that_is_not_a_user_id_is_refused():
    refused(forge(claims(sub="alice")))


# --- the secret -------------------------------------------------------------------------------


def test_configured_secret_is_used_and_no_file_is_written(tmp_path):
    cfg = config(tmp_path, secret=b"c" * 32)
    assert load_secret(cfg) == b"c" * 32
    assert not cfg.secret_file.exists()


def test_secret_file_is_created_once_with_mode_0600(tmp_path):
    cfg = config(tmp_path, secret=None)

    secret = load_secret(cfg)

    assert len(secret) >= 32
    assert stat.S_IMODE(cfg.secret_file.stat().st_mode) == 0o600
    assert cfg.secret_file.read_text().strip().encode() == secret


def test_secret_file_is_never_regenerated(tmp_path):
    cfg = config(tmp_path, secret=None)
    first = load_secret(cfg)
    written = cfg.secret_file.read_bytes()

    assert load_secret(cfg) == first
    assert cfg.secret_file.read_bytes() == written


def test_existing_secret_file_is_read_as_is(tmp_path):
    cfg = config(tmp_path, secret=None)
    cfg.secret_file.parent.mkdir(parents=True)
    cfg.secret_file.write_text("s" * 32 + "\n")
    assert load_secret(cfg) == b"s" * 32


def test_secret_file_with_short_secret_is_refused_and_kept(tmp_path):
    cfg = config(tmp_path, secret=None)
    cfg.secret_file.parent.mkdir(parents=True)
    cfg.secret_file.write_text("short\n")
    with pytest.raises(ValueError, match="at least 32 bytes"):
        load_secret(cfg)
    assert cfg.secret_file.read_text() == "short\n"
