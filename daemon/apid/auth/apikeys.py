"""API keys: long-lived bearer credentials for machines, kept only as their SHA-256.

A key reads `apid_` + a lookup id of 12 characters + 43 characters of secret (32 random bytes),
all URL-safe: `apid_` and the lookup id are no secret (the key's `prefix`, shown in listings and
stored under a unique index to find the row); the whole key's SHA-256 is what is stored and
compared, in constant time. SHA-256 and not Argon2: a key is 256 random bits, so nothing is
gained by slowing down a guess, and a request must not pay for a password hash.

A key belongs to an account and carries a subset of its roles, optionally a scope (controllers
or `controller/action` endpoints it may call) and an expiry. Revoking it writes the key's token
id (`token_id`) to the deny list of `apid.auth.sessions` in the same transaction, which every
process and daemon reads every half second, so a key revoked anywhere is refused everywhere
within a second; the deny entry needs to outlive only what any daemon may have kept of the key
(`apid.auth.key_verifier`), as the row itself then says it is revoked.

A key outlasts the login that made it, so making one is told to its owner: creating and
revoking a key each queue a mail to the owner's address in the same transaction
(`apid.mail.outbox`), with the key's name, prefix and time, never the key. An account holds at
most `security.apiKeysPerAccount` live keys (neither revoked nor expired), counted in the
insert's transaction under a lock of the owner's row, so simultaneous creates cannot pass it.
A key's name holds no control or format character (Unicode Cc, Cf): it is printed by
`apid key list` and mailed, and must not move a terminal's cursor or forge a line; rows from
before the rule are printed escaped (`printable`).

These functions are shared by the `apikey` controller, the command line and the verifier.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import unicodedata
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, func, insert, or_, select, update

from apid.auth.identities import NO_PASSWORD
from apid.auth.sessions import deny
from apid.mail.message import PRODUCT, Message
from apid.mail.outbox import queue_mail
from apid.problems import Conflict, Forbidden, InvalidFields
from apid.store.database import inserted_id
from apid.store.tables import api_key, external_identity, person

if TYPE_CHECKING:
    from apid.plugin import RuleSet

PREFIX = "apid_"
LOOKUP_LENGTH = 12  # characters of the lookup id: 9 random bytes
SECRET_BYTES = 32
SECRET_LENGTH = 43  # characters of the secret: 32 bytes in unpadded URL-safe base64
KEY_SHAPE = re.compile(rf"{PREFIX}[A-Za-z0-9_-]{{{LOOKUP_LENGTH + SECRET_LENGTH}}}")
NAME_LENGTH = 100
# What a daemon keeps of a verified key before reading its row again (apid.auth.key_verifier),
# and how long a revocation stays on the deny list: longer, so that no daemon still holds the
# key unrevoked when its deny entry goes.
KEY_KEPT = 60.0
DENIED_FOR = 2 * int(KEY_KEPT)
NO_EXPIRY = 253402300799  # 9999-12-31T23:59:59Z: a Principal's `expires` for a key without one
KEY_CANNOT = "an API key cannot {what}: use the account's own login"
OUT_OF_SCOPE = "this API key may not call {path}: it is not in its scope"
CONTROL_CATEGORIES = frozenset({"Cc", "Cf"})  # control and format characters: never in a key's name
UNREACHABLE = ".invalid"  # a provider account's placeholder address (RFC 2606): no mail reaches it


def is_key(token: str) -> bool:
    """Whether a bearer token is an API key rather than an access token (a JWT never starts so)."""
    return token.startswith(PREFIX)


def token_id(key_id: int) -> str:
    """The key's id on the deny list shared with access tokens (`revoked_token.jti`)."""
    return f"apikey:{key_id}"


def key_digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def lookup_id(key: str) -> str:
    return key[len(PREFIX) : len(PREFIX) + LOOKUP_LENGTH]


def new_key() -> str:
    return PREFIX + secrets.token_urlsafe(9) + secrets.token_urlsafe(SECRET_BYTES)


def has_controls(text: str) -> bool:
    """Whether `text` holds a control or format character (Unicode categories Cc, Cf)."""
    return any(unicodedata.category(char) in CONTROL_CATEGORIES for char in text)


def printable(text: str) -> str:
    """`text` with each control or format character written as its escape (`\\x1b`, `\\u202e`),
    so that printing a name stored before the rule cannot drive a terminal or forge a line."""
    return "".join(
        char.encode("unicode_escape").decode("ascii") if unicodedata.category(char) in CONTROL_CATEGORIES else char
        for char in text
    )


def _aware(moment: datetime | None) -> datetime | None:
    if moment is None:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _iso(moment: datetime | None) -> str | None:
    aware = _aware(moment)
    return None if aware is None else aware.isoformat()


@dataclass(frozen=True)
class KeyRecord:
    """A key as stored, without its hash; `username` is its owner's."""

    id: int
    person_id: int
    username: str
    name: str
    prefix: str
    roles: frozenset[str]
    scopes: frozenset[str] | None
    date_created: datetime
    expires_at: datetime | None
    last_used_at: datetime | None
    revoked_at: datetime | None

    def to_dict(self) -> dict[str, Any]:
        """The key under the field names of apikey.json."""
        return {
            "id": self.id,
            "userId": self.person_id,
            "name": self.name,
            "prefix": PREFIX + self.prefix,
            "roles": sorted(self.roles),
            "scopes": None if self.scopes is None else sorted(self.scopes),
            "dateCreated": _iso(self.date_created),
            "expiresAt": _iso(self.expires_at),
            "lastUsedAt": _iso(self.last_used_at),
            "revokedAt": _iso(self.revoked_at),
        }


@dataclass(frozen=True)
class NewKey:
    """What a key to be created will be, once `check_new_key` accepted it."""

    name: str
    roles: frozenset[str]
    scopes: frozenset[str] | None
    expires_at: datetime | None


def refuse_key(caller_key: int | None, what: str) -> None:
    """A 403 when the caller is an API key: keys never manage keys (but revoke themselves)."""
    if caller_key is not None:
        raise Forbidden(KEY_CANNOT.format(what=what))


def parse_expiry(text: str) -> datetime:
    """An ISO 8601 date (its start, UTC) or date-time (UTC unless it names its offset)."""
    moment = datetime.fromisoformat(text) if "T" in text else datetime.combine(date.fromisoformat(text), time())
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def endpoints_of(rules: RuleSet) -> set[str]:
    """What a scope may name: every controller, and every `controller/action` endpoint."""
    names: set[str] = set()
    for state in rules.controllers.values():
        names.add(state.name)
        for version in state.versions.values():
            names.update(endpoint.path for endpoint in version.endpoints.values())
    return names


def check_new_key(
    name: Any,
    roles: Any,
    scopes: Any,
    expires: Any,
    owner_roles: frozenset[str],
    known_roles: frozenset[str],
    rules: RuleSet,
    now: datetime,
) -> NewKey:
    """The key to create, or one 400 naming every bad field (a role the owner does not hold:
    a 403). A key has at least one role and at most its owner's; a scope, when given, names at
    least one controller or endpoint that exists; an expiry is in the future."""
    errors = []
    if not isinstance(name, str) or not name.strip() or len(name) > NAME_LENGTH:
        errors.append({"field": "name", "reason": f"must be 1 to {NAME_LENGTH} characters"})
    elif has_controls(name):
        errors.append({"field": "name", "reason": "must not hold control or format characters"})
    if not isinstance(roles, list) or not roles or not all(isinstance(role, str) for role in roles):
        errors.append({"field": "roles", "reason": "must list at least one role"})
        roles = []
    elif unknown := sorted(set(roles) - known_roles):
        errors.append({"field": "roles", "reason": f"unknown roles: {', '.join(unknown)}"})
    if scopes is not None:
        if not isinstance(scopes, list) or not scopes or not all(isinstance(scope, str) for scope in scopes):
            errors.append({"field": "scopes", "reason": "must list controllers or controller/action endpoints"})
        elif unknown := sorted(set(scopes) - endpoints_of(rules)):
            errors.append({"field": "scopes", "reason": f"no such controller or endpoint: {', '.join(unknown)}"})
    expires_at = None
    if expires is not None:
        try:
            expires_at = parse_expiry(expires)
        except (TypeError, ValueError):
            errors.append({"field": "expiresAt", "reason": "expected an ISO 8601 date or date-time"})
        else:
            if expires_at <= now:
                errors.append({"field": "expiresAt", "reason": "must be in the future"})
    if errors:
        raise InvalidFields(errors=errors)
    beyond = sorted(set(roles) - owner_roles)
    if beyond:
        raise Forbidden(f"a key cannot hold roles its owner does not: {', '.join(beyond)}", field="roles")
    return NewKey(name.strip(), frozenset(roles), None if scopes is None else frozenset(scopes), expires_at)


_KEYS = select(api_key, person.c.username, person.c.email).join(person, person.c.id == api_key.c.person_id)


def _record(row: Any) -> KeyRecord:
    return KeyRecord(
        id=row.id,
        person_id=row.person_id,
        username=row.username,
        name=row.name,
        prefix=row.prefix,
        roles=frozenset(json.loads(row.roles)),
        scopes=None if row.scopes is None else frozenset(json.loads(row.scopes)),
        date_created=_aware(row.date_created) or row.date_created,
        expires_at=_aware(row.expires_at),
        last_used_at=_aware(row.last_used_at),
        revoked_at=_aware(row.revoked_at),
    )


def _notify(connection: Connection, row: Any, what: str, moment: datetime) -> None:
    """Queue the mail telling the key's owner it was `what` ("created", "revoked"), in the
    caller's transaction; a provider account's placeholder address gets none."""
    if row.email.endswith(UNREACHABLE):
        return
    queue_mail(
        connection,
        Message(
            row.email,
            f"{PRODUCT}: an API key of your account was {what}",
            (
                f"Hello {row.username},\n\nan API key of your {PRODUCT} account was {what} at "
                f"{moment.isoformat(timespec='seconds')}:\n\n"
                f"  name: {printable(row.name)}\n  prefix: {PREFIX}{row.prefix}\n\n"
                "If you did not do this, sign in, revoke the key (apikey/revoke) and change your password.\n"
            ),
        ),
    )


def is_provider_account(connection: Connection, person_id: int) -> bool:
    """Whether the account is an OpenID provider's subject (`apid.auth.identities`) with no
    password here: then each of its calls carries a token its provider issued. One given a
    password (by an administrator) can log in here, and proves its logins as any other."""
    found = (
        select(external_identity.c.id)
        .join(person, person.c.id == external_identity.c.person_id)
        .where(external_identity.c.person_id == person_id, person.c.password == NO_PASSWORD)
    )
    return connection.execute(found).first() is not None


def live_keys(connection: Connection, person_id: int, now: datetime) -> int:
    """How many keys of the account are neither revoked nor expired."""
    return connection.execute(
        select(func.count())
        .select_from(api_key)
        .where(
            api_key.c.person_id == person_id,
            api_key.c.revoked_at.is_(None),
            or_(api_key.c.expires_at.is_(None), api_key.c.expires_at > now),
        )
    ).scalar_one()


def insert_key(connection: Connection, person_id: int, new: NewKey, cap: int | None = None) -> tuple[KeyRecord, str]:
    """Store a new key of the account and tell its owner; the record and the key itself, which
    is never kept. With `cap`, an account holding that many live keys gets none more (409); the
    owner's row is locked first, so simultaneous creates count one after the other.
    Two lookup ids alike (72 random bits) would break the unique index: unheard of."""
    now = datetime.now(UTC)
    if cap is not None:
        connection.execute(select(person.c.id).where(person.c.id == person_id).with_for_update())
        if live_keys(connection, person_id, now) >= cap:
            raise Conflict(f"an account holds at most {cap} API keys (security.apiKeysPerAccount): revoke one first")
    key = new_key()
    key_id = inserted_id(
        connection,
        insert(api_key).values(
            person_id=person_id,
            name=new.name,
            prefix=lookup_id(key),
            key_hash=key_digest(key),
            roles=json.dumps(sorted(new.roles)),
            scopes=None if new.scopes is None else json.dumps(sorted(new.scopes)),
            date_created=now,
            expires_at=new.expires_at,
        ),
    )
    row = connection.execute(_KEYS.where(api_key.c.id == key_id)).one()
    _notify(connection, row, "created", now)
    return _record(row), key


def keys_by_lookup(connection: Connection, lookups: list[str]) -> dict[str, tuple[KeyRecord, str]]:
    """The keys with these lookup ids, each with its stored hash."""
    return {
        row.prefix: (_record(row), row.key_hash)
        for row in connection.execute(_KEYS.where(api_key.c.prefix.in_(lookups)))
    }


def list_keys(connection: Connection, owner: int | None, offset: int, limit: int) -> list[KeyRecord]:
    """The keys of `owner` (None: everyone's), oldest first."""
    query = _KEYS.order_by(api_key.c.id).offset(offset).limit(limit)
    if owner is not None:
        query = query.where(api_key.c.person_id == owner)
    return [_record(row) for row in connection.execute(query)]


def revoke_key(connection: Connection, key_id: int, owner: int | None) -> KeyRecord | None:
    """Revoke the key (of `owner` unless None), deny it everywhere and tell its owner; None
    when there is no such key. Revoking a revoked key changes nothing and mails nothing."""
    query = _KEYS.where(api_key.c.id == key_id)
    if owner is not None:
        query = query.where(api_key.c.person_id == owner)
    row = connection.execute(query).first()
    if row is None:
        return None
    if row.revoked_at is None:
        moment = datetime.now(UTC)
        connection.execute(update(api_key).where(api_key.c.id == key_id).values(revoked_at=moment))
        deny(connection, token_id(key_id), int(moment.timestamp()) + DENIED_FOR)
        row = connection.execute(_KEYS.where(api_key.c.id == key_id)).one()
        _notify(connection, row, "revoked", moment)
    return _record(row)


def record_use(connection: Connection, key_id: int, moment: datetime) -> None:
    """Note when the key was last used (`apid.auth.key_verifier` writes at most once a minute)."""
    connection.execute(update(api_key).where(api_key.c.id == key_id).values(last_used_at=moment))
