"""API keys as values: their shape, and what `check_new_key` lets a key be (apid.auth.apikeys)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from apid.auth.apikeys import (
    KEY_SHAPE,
    check_new_key,
    is_key,
    key_digest,
    lookup_id,
    new_key,
    parse_expiry,
    printable,
)
from apid.config.files import load
from apid.plugin_host.discovery import load_all
from apid.problems import Forbidden, InvalidFields

ROOT = Path(__file__).resolve().parents[2]
CONFIG = load(ROOT / "etc", "development", {})
RULES = load_all(ROOT / "iostate", CONFIG.api.security).rules
KNOWN = CONFIG.api.security.all_roles
NOW = datetime(2026, 11, 27, tzinfo=UTC)
USER = frozenset({"ROLE_USER"})


def check(**fields):
    values = {"name": "ci", "roles": ["ROLE_USER"], "scopes": None, "expires": None, **fields}
    return check_new_key(values["name"], values["roles"], values["scopes"], values["expires"], USER, KNOWN, RULES, NOW)


def test_a_key_is_the_prefix_a_lookup_id_and_32_random_bytes_url_safe():
    keys = {new_key() for _ in range(100)}
    assert len(keys) == 100
    for key in keys:
        assert KEY_SHAPE.fullmatch(key) and is_key(key) and len(key) == 5 + 12 + 43
        assert lookup_id(key) == key[5:17]
    assert len({lookup_id(key) for key in keys}) == 100
    assert key_digest("apid_x") == "59e67c17c38bc4a3473b411e6fff07b3b04bc07065593dfbb88b1ceb594f9ae7"  # SHA-256


def test_a_key_holds_only_roles_its_owner_holds():
    with pytest.raises(Forbidden) as refused:
        check(roles=["ROLE_USER", "ROLE_ADMIN"])
    assert refused.value.extensions["field"] == "roles" and "ROLE_ADMIN" in refused.value.detail
    assert check().roles == USER


def test_every_bad_field_is_named_in_one_400():
    with pytest.raises(InvalidFields) as refused:
        check(name=" ", roles=[], scopes=["nosuch", "person/nosuch"], expires="yesterday")
    assert {e["field"] for e in refused.value.extensions["errors"]} == {"name", "roles", "scopes", "expiresAt"}
    with pytest.raises(InvalidFields):
        check(roles=["ROLE_NOBODY"])
    with pytest.raises(InvalidFields):
        check(scopes=[])
    with pytest.raises(InvalidFields):
        check(expires=(NOW - timedelta(seconds=1)).isoformat())


def test_a_scope_names_controllers_or_endpoints_and_an_expiry_reads_dates_as_utc():
    new = check(scopes=["person", "hook/list"], expires="2027-01-01")
    assert new.scopes == {"person", "hook/list"}
    assert new.expires_at == datetime(2027, 1, 1, tzinfo=UTC)
    assert parse_expiry("2027-01-01T12:00:00+02:00") == datetime(2027, 1, 1, 10, tzinfo=UTC)
    assert parse_expiry("2027-01-01T12:00:00") == datetime(2027, 1, 1, 12, tzinfo=UTC)


@pytest.mark.parametrize("name", ["\x1b[2Jx", "a\nb", "tab\there", "bidi\u202eflip", "zero\u200bwidth", "\x00"])
def test_a_name_with_control_or_format_characters_is_refused(name):
    """Issue 33: names are printed by `apid key list` and mailed; they must not drive a terminal."""
    with pytest.raises(InvalidFields) as refused:
        check(name=name)
    assert [error["field"] for error in refused.value.extensions["errors"]] == ["name"]


def test_printable_writes_control_and_format_characters_as_escapes():
    assert printable("ok\x1b]0;x\x07\n\tz\u202e ünïcode") == "ok\\x1b]0;x\\x07\\n\\tz\\u202e ünïcode"
    assert printable("nightly export") == "nightly export"
