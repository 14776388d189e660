"""The schema apid owns, as SQLAlchemy Core tables (the migrations create exactly these).

`hook` keeps the column names of the specification so that a row inserted by hand works.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    func,
    text,
)

metadata = MetaData(
    naming_convention={
        "ix": "ix_%(table_name)s_%(column_0_name)s",
        "uq": "uq_%(table_name)s_%(column_0_name)s",
        "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
        "pk": "pk_%(table_name)s",
    }
)

person = Table(
    "person",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("version", Integer, nullable=False, server_default=text("0")),
    Column("username", String(64), nullable=False, unique=True),
    # The identity of the name (apid.auth.accounts.username_key, ASCII letters lowercased): what
    # login, registration and uniqueness compare, through this unique index. As long as the
    # name: the fold maps one character to one.
    Column("username_key", String(64), nullable=False, unique=True),
    Column("password", String(255), nullable=False),
    Column("email", String(254), nullable=False, unique=True),
    # The identity of the address (apid.auth.accounts.email_key, Unicode case fold): what lookups
    # and uniqueness compare. Folding can lengthen text (ß -> ss, U+FB03 -> ffi): at most 3
    # code points for 1, and the Email type allows a 64-character local part and an ASCII
    # domain, which the fold keeps as long: 3 x 64 + 190 = 382.
    Column("email_key", String(384), nullable=False, unique=True),
    Column("enabled", Boolean, nullable=False, server_default=text("'1'")),
    Column("account_locked", Boolean, nullable=False, server_default=text("'0'")),
    Column("account_expired", Boolean, nullable=False, server_default=text("'0'")),
    Column("password_expired", Boolean, nullable=False, server_default=text("'0'")),
    Column("date_created", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("last_updated", DateTime(timezone=True), nullable=False, server_default=func.now()),
    # Access tokens issued before this moment are refused (set by a password reset).
    Column("tokens_valid_after", DateTime(timezone=True), nullable=True),
    # When the account was validated; null: pending, a sign-up never validated (apid.auth.lifecycle).
    # A row inserted by hand is validated, as it is enabled.
    Column("validated_at", DateTime(timezone=True), nullable=True, server_default=func.now()),
    # Ids are never given again (SQLite reuses the highest deleted one otherwise): a credential
    # of a deleted account can never name another.
    sqlite_autoincrement=True,
)

role = Table(
    "role",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("authority", String(64), nullable=False, unique=True),
)

person_role = Table(
    "person_role",
    metadata,
    Column("person_id", Integer, ForeignKey("person.id", ondelete="CASCADE"), primary_key=True),
    Column("role_id", Integer, ForeignKey("role.id", ondelete="CASCADE"), primary_key=True),
)

hook = Table(
    "hook",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("version", Integer, nullable=False, server_default=text("0")),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("date_created", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("format", String(16), nullable=False, server_default=text("'JSON'")),
    Column("last_modified", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("user_id", Integer, ForeignKey("person.id", ondelete="CASCADE"), nullable=False, index=True),
    Column("is_enabled", Boolean, nullable=False, server_default=text("'1'")),
    Column("url", Text, nullable=False),
    Column("service", String(255), nullable=False),
    Column("secret", String(255), nullable=True),
    # What the spec does not list, each with a default so that a hand-inserted row works:
    # the secret replaced by the last rotation, still signing until it expires (epoch seconds);
    Column("previous_secret", String(255), nullable=True),
    Column("previous_secret_expires", Float, nullable=True),
    # no delivery to this hook before this moment (backoff, Retry-After, a probe in flight);
    Column("retry_at", Float, nullable=True),
    # why delivery disabled the hook.
    Column("disabled_reason", Text, nullable=True),
    sqlite_autoincrement=True,  # ids never given again, as person's
)

# The delivery outbox: one message of one event for one hook, written before the call that
# caused it answers. `lease_owner`/`lease_until` say which daemon is delivering it.
hook_message = Table(
    "hook_message",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("hook_id", Integer, ForeignKey("hook.id", ondelete="CASCADE"), nullable=False, index=True),
    Column("type", String(255), nullable=False),
    Column("payload", Text, nullable=False),
    Column("state", String(16), nullable=False),
    Column("tries", Integer, nullable=False, server_default=text("0")),
    Column("created_at", Float, nullable=False),
    Column("lease_owner", String(64), nullable=True),
    Column("lease_until", Float, nullable=True),
    Column("delivered_at", Float, nullable=True),
    Index("ix_hook_message_state_created_at", "state", "created_at"),
)

# The delivery log: every attempt to deliver a message.
hook_attempt = Table(
    "hook_attempt",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("message_id", String(40), ForeignKey("hook_message.id", ondelete="CASCADE"), nullable=False, index=True),
    Column("hook_id", Integer, ForeignKey("hook.id", ondelete="CASCADE"), nullable=False, index=True),
    Column("attempted_at", Float, nullable=False),
    Column("status_code", Integer, nullable=True),
    Column("duration_ms", Float, nullable=False),
    Column("error", Text, nullable=True),
)

# Mail written in the transaction of the change that implies it (apid.mail.outbox), sent after
# commit by whichever daemon leases it; a sent message's row is deleted.
mail_outbox = Table(
    "mail_outbox",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("recipient", String(320), nullable=False),
    Column("subject", Text, nullable=False),
    Column("body", Text, nullable=False),
    Column("created_at", Float, nullable=False),
    Column("state", String(16), nullable=False),
    Column("tries", Integer, nullable=False, server_default=text("0")),
    Column("next_attempt_at", Float, nullable=False),
    Column("lease_owner", String(64), nullable=True),
    Column("lease_until", Float, nullable=True),
    Index("ix_mail_outbox_state_next_attempt_at", "state", "next_attempt_at"),
)

# Emailed one-time ids (account validation, password reset): only their SHA-256 is kept.
account_token = Table(
    "account_token",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("person_id", Integer, ForeignKey("person.id", ondelete="CASCADE"), nullable=False, index=True),
    Column("purpose", String(16), nullable=False),
    Column("token_hash", String(64), nullable=False, unique=True),
    Column("date_created", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    Column("used_at", DateTime(timezone=True), nullable=True),
    # The e-mail address an id of an address change sets (apid.auth.onetime), else none.
    Column("address", String(254), nullable=True),
)

# The account of each subject of a trusted OpenID provider (apid.auth.identities): one per
# issuer and `sub`, made on the subject's first call; deleting the account deletes the tie.
external_identity = Table(
    "external_identity",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("issuer", String(1024), nullable=False),
    Column("subject", String(255), nullable=False),
    Column("person_id", Integer, ForeignKey("person.id", ondelete="CASCADE"), nullable=False, unique=True),
    Column("date_created", DateTime(timezone=True), nullable=False),
    # when a token of the subject was last admitted (at most once a minute): its keys need it recent
    Column("vouched_at", DateTime(timezone=True), nullable=True),
    UniqueConstraint("issuer", "subject"),
)

# Refresh tokens, rotated at every use; a family is one login's chain of rotations.
refresh_token = Table(
    "refresh_token",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("person_id", Integer, ForeignKey("person.id", ondelete="CASCADE"), nullable=False, index=True),
    Column("family", String(32), nullable=False, index=True),
    Column("token_hash", String(64), nullable=False, unique=True),
    Column("date_created", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    Column("rotated_at", DateTime(timezone=True), nullable=True),
    Column("revoked_at", DateTime(timezone=True), nullable=True, index=True),
)

# Access tokens refused before their expiry (logout), by JWT id, until they expire anyway.
revoked_token = Table(
    "revoked_token",
    metadata,
    Column("jti", String(64), primary_key=True),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    Column("date_created", DateTime(timezone=True), nullable=False, index=True),
)

# Accounts whose standing (roles, enabled, locked, expired, sessions) changed: each daemon reads
# the rows written since its last look and forgets what it kept of those accounts. No foreign
# key: the row of a deleted account must outlive the account.
account_change = Table(
    "account_change",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("person_id", Integer, nullable=False),
    Column("changed_at", DateTime(timezone=True), nullable=False, index=True),
)

# How many times each controller's data changed through a writing API call: each daemon reads
# the counters at most once a second and drops its cached answers of those that moved.
cache_change = Table(
    "cache_change",
    metadata,
    Column("controller", String(100), primary_key=True),
    Column("generation", Integer, nullable=False),
)

# The deployment's IO State generation, one row (id 1): `apid iostate reload` and SIGHUP move
# it once the files load, and every daemon process reads it every half second and reloads.
iostate_change = Table(
    "iostate_change",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("generation", Integer, nullable=False),
    Column("changed_at", DateTime(timezone=True), nullable=False),
)

# Each daemon process (`who`: host:pid) and the generation it last tried to load: `outcome` is
# "ok" or why its rules in force stay; `seen_at` moves every minute while the process runs.
iostate_report = Table(
    "iostate_report",
    metadata,
    Column("who", String(300), primary_key=True),
    Column("generation", Integer, nullable=False),
    Column("outcome", Text, nullable=False),
    Column("tried_at", DateTime(timezone=True), nullable=False),
    Column("seen_at", DateTime(timezone=True), nullable=False),
)

# API keys (apid.auth.apikeys): a key is found by its lookup id (`prefix`, no secret) and
# checked against its SHA-256; the key itself is never stored. `roles` and `scopes` are JSON
# lists (scopes null: whatever the roles may call).
api_key = Table(
    "api_key",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("person_id", Integer, ForeignKey("person.id", ondelete="CASCADE"), nullable=False, index=True),
    Column("name", String(100), nullable=False),
    Column("prefix", String(16), nullable=False, unique=True),
    Column("key_hash", String(64), nullable=False),
    Column("roles", Text, nullable=False),
    Column("scopes", Text, nullable=True),
    Column("date_created", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=True),
    Column("last_used_at", DateTime(timezone=True), nullable=True),
    Column("revoked_at", DateTime(timezone=True), nullable=True),
    sqlite_autoincrement=True,  # ids never given again, as person's
)

# Idempotency-Key (apid.calls.idempotency): a caller's key, the request it was first used
# with (a SHA-256 `fingerprint`), and once answered the answer kept for 24 hours: its status,
# the headers a client reads (a JSON list of [name, value]) and its body.
idempotency_key = Table(
    "idempotency_key",
    metadata,
    Column("person_id", Integer, ForeignKey("person.id", ondelete="CASCADE"), primary_key=True),
    Column("key", String(255), primary_key=True),
    Column("fingerprint", String(64), nullable=False),
    Column("state", String(8), nullable=False),
    Column("claimed_at", DateTime(timezone=True), nullable=False, index=True),
    Column("status", Integer, nullable=True),
    Column("headers", Text, nullable=True),
    Column("body", LargeBinary, nullable=True),
)

# Every change an event-emitting endpoint made (IO State HOOK roles), in the change's own
# transaction: the live event stream's log (apid.events). `position` only grows, never reused
# (AUTOINCREMENT on SQLite), so that a client's Last-Event-ID names one change for good;
# `record` is the changed record as its action answered it (JSON, every field, each in its
# answer's form), filtered for each subscriber only when it is sent. Kept `events.retention`.
change_event = Table(
    "change_event",
    metadata,
    Column("position", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("message_id", String(40), nullable=False),
    Column("service", String(255), nullable=False),
    Column("record", Text, nullable=False),
    Column("created_at", Float, nullable=False, index=True),
    sqlite_autoincrement=True,
)

# Tickets for `EventSource`, which cannot send an Authorization header: `POST /events/ticket`
# writes one (its SHA-256 and the caller it stands for, as JSON), `GET /events?ticket=` opens
# a stream with it once, on any process of the deployment, until `expires_at`.
stream_ticket = Table(
    "stream_ticket",
    metadata,
    Column("digest", String(64), primary_key=True),
    Column("principal", Text, nullable=False),
    Column("expires_at", Float, nullable=False, index=True),
)
