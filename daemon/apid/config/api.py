"""`service_api.yml`, shared by every environment: rate limits, security, providers and abuse
limits, each declared once as a field of the class that holds it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from apid.config.kinds import (
    CLAIM,
    CLAIM_ROLES,
    ISSUER,
    NETWORK_ROLES,
    ORIGINS,
    RESERVED_URIS,
    ROLE_MAP,
    VERSION,
    _installed_version,
)
from apid.config.settings import Derived, Invalid, list_of, per_kind, section, setting, settings

# --- service_api.yml, shared ----------------------------------------------------------------------------


@settings
class ThrottleConfig:
    rate_limit: Mapping[str, int] = setting(
        "rateLimit",
        default={},
        kind=ROLE_MAP,
        doc="Requests per user per day, by role (the largest of the user's ruled roles applies).",
    )
    data_limit: Mapping[str, int] = setting(
        "dataLimit",
        default={},
        kind=ROLE_MAP,
        doc="MB per role. Accepted and validated; has no effect, as the specification says.",
    )
    expires: int = setting(
        "expires", default=3600, at_least=1, doc="Seconds a user stays locked once the limit is reached."
    )


@settings
class IssuerConfig:
    """An OpenID provider whose access tokens apid accepts, and what their claims grant
    (docs/accounts.md, Signing in with your identity provider)."""

    issuer: str = setting(
        "issuer",
        kind=ISSUER,
        doc="The provider's issuer, exactly as its tokens' `iss` and its discovery document "
        "(`{issuer}/.well-known/openid-configuration`) give it: https, or http on a loopback address only.",
    )
    audience: str = setting(
        "audience",
        doc="The `aud` its tokens must hold: Keycloak's client id (or an audience mapper's value), Entra ID's "
        "application ID URI or client id.",
    )
    claim: str = setting(
        "claim",
        kind=CLAIM,
        doc="The claim whose values map to roles: a name (`groups`, `roles`, `scope`) or a dotted path "
        "(`realm_access.roles`), holding a list of strings or a string of space-separated values.",
    )
    roles: Mapping[str, frozenset[str]] = setting(
        "roles",
        kind=CLAIM_ROLES,
        doc="Claim value -> an apid role or a list of roles, each in `security.networkRoles`. A token whose values "
        "map to no role is refused (401).",
    )
    keys_refresh: float = setting(
        "keysRefresh",
        default=60.0,
        doc="Seconds at least between two fetches of the provider's keys: a token naming a key apid does not hold "
        "(the provider rotated its keys, or the token is forged) fetches them at most this often.",
    )
    keys_lifetime: float = setting(
        "keysLifetime",
        default=3600.0,
        also="at least `keysRefresh`",
        doc="Seconds the keys fetched are used before they are fetched again, so that a key the provider withdrew "
        "stops being trusted (while the provider cannot be reached, the keys held go on serving). Also how long the "
        "API keys of the provider's accounts last after the provider last vouched (a token of the subject admitted).",
    )

    def roles_of(self, claims: Mapping[str, Any]) -> frozenset[str]:
        """The roles `claims` grant: those of each string value at the claim's path."""
        value: Any = claims
        for name in self.claim.split("."):
            value = value.get(name) if isinstance(value, dict) else None
        values = value.split() if isinstance(value, str) else value if isinstance(value, list) else ()
        return frozenset().union(*(self.roles.get(each, ()) for each in values if isinstance(each, str)))

    def conflicts(self, given: frozenset[str]) -> Iterator[Invalid]:
        if self.keys_lifetime < self.keys_refresh:
            yield Invalid("must be at least keysRefresh", "keysLifetime", "keysRefresh")


@settings
class SecurityConfig:
    superuser_role: str = setting(
        "superuserRole",
        doc="The role that marks a caller as superuser (`Caller.is_superuser` for plugins; `person` lets a "
        "superuser reach any record). Must be in some group.",
    )
    user_role: str = setting(
        "userRole",
        doc="The role `person/create` gives a new account when no `roles` are sent. Must be in some group.",
    )
    # the role of a caller without a token: endpoints whose roles include it answer anonymously
    anonymous_role: str = setting(
        "anonymousRole",
        default="ROLE_ANONYMOUS",
        doc="The role of a request without a token (the original framework's `anonRole`): an endpoint whose IO "
        "State roles include it answers such requests with that role's fields; every other endpoint answers them "
        "401 ([iostate.md](iostate.md#calls-without-a-token-the-anonymous-role)). Its `throttle.rateLimit` entry "
        "limits each client address. When set, it must be in some group; it may not be `superuserRole` or "
        "`userRole`.",
    )
    network_groups: tuple[str, ...] = setting(
        "networkGroups", doc="The network groups an IO State file may name in `NETWORKGRP`."
    )
    network_roles: Mapping[str, frozenset[str]] = setting(
        "networkRoles",
        kind=NETWORK_ROLES,
        doc="The roles of each group. Every group here must be in `networkGroups`, and every group of "
        "`networkGroups` needs a list here. The union of all lists is the set of known roles (checked by "
        "`apid user add --role`, by `throttle` and by the `person` controller). Every role an IO State file names "
        "must be in its group's list.",
    )
    issuers: tuple[IssuerConfig, ...] = setting(
        "issuers",
        default=(),
        kind=list_of(IssuerConfig, "providers"),
        doc="OpenID providers whose access tokens apid accepts beside its own, each token acting as its subject's "
        "own account (made on its first call); see "
        "[accounts.md](accounts.md#signing-in-with-your-identity-provider).",
    )
    ipv6_prefix: int = setting(
        "ipv6Prefix",
        default=64,
        at_least=1,
        also="at most 128",
        doc="How many leading bits of an IPv6 client address make one client for every per-address limit (the "
        "abuse limits of logins, registrations and reset requests, and `connections.perAddress`): one host "
        "usually holds a whole /64 and may send from any address in it. 128 counts each address alone. IPv4 "
        "addresses count one by one.",
    )
    local_logins: bool = setting(
        "localLogins",
        default=True,
        doc="`false` switches password accounts off: `/authenticate`, `/refreshToken`, `/logout`, `/register`, "
        "`/validate`, `/forgotPassword`, `/validateResetPassword` and `/resetPassword` are not served (404), "
        "callers sign in with a provider of `issuers`, and the access tokens and API keys of accounts without a "
        "provider identity are refused (401).",
    )
    api_keys_per_account: int = setting(
        "apiKeysPerAccount",
        default=20,
        at_least=1,
        doc="How many API keys one account may hold at once (revoked and expired keys do not count): "
        "`apikey/create` past it answers 409. See [accounts.md](accounts.md#api-keys).",
    )

    @property
    def all_roles(self) -> frozenset[str]:
        return frozenset().union(*self.network_roles.values())

    def conflicts(self, given: frozenset[str]) -> Iterator[Invalid]:
        for group in self.network_roles:
            if group not in self.network_groups:
                yield Invalid(f"group {group!r} is not listed in security.networkGroups", ("networkRoles", group))
        for group in self.network_groups:
            if group not in self.network_roles:
                yield Invalid(f"group {group!r} has no role list", "networkRoles")
        if self.ipv6_prefix > 128:
            yield Invalid("must be at most 128 (the bits of an IPv6 address)", "ipv6Prefix")
        for key, role in (("superuserRole", self.superuser_role), ("userRole", self.user_role)):
            if role not in self.all_roles:
                yield Invalid(f"role {role!r} is in no group of networkRoles", key)
            if role == self.anonymous_role:
                yield Invalid(f"role {role!r} is the anonymous role: every caller without a token would hold it", key)
        if "anonymousRole" in given and self.anonymous_role not in self.all_roles:
            yield Invalid(f"role {self.anonymous_role!r} is in no group of networkRoles", "anonymousRole")
        seen: set[str] = set()
        for index, issuer in enumerate(self.issuers):
            if issuer.issuer in seen:
                yield Invalid(f"issuers[{index}]: {issuer.issuer} is listed twice", "issuers")
            seen.add(issuer.issuer)
            for value, roles in issuer.roles.items():
                for role in sorted(roles - self.all_roles):
                    yield Invalid(
                        f"issuers[{index}].roles: role {role!r} (for {value!r}) is in no group of networkRoles",
                        "issuers",
                    )


@settings
class AbuseLimit:
    """At most `per_address` attempts from one client address, `per_account` for one account
    name and, where set (logins), `per_account_address` for one account name from one
    address, within `window` seconds."""

    per_address: int = setting(
        "perAddress",
        at_least=1,
        doc="Attempts allowed from one client address per window, for all names together.",
    )
    per_account: int = setting(
        "perAccount",
        at_least=1,
        doc="Attempts allowed for one account name (username, or the email for `register` and `reset`) per "
        "window, from all addresses together.",
    )
    window: int = setting("window", at_least=1, doc="Seconds of a window; it starts with the first attempt it counts.")
    per_account_address: int | None = setting(
        "perAccountAddress",
        default=None,
        at_least=1,
        doc="Failed logins allowed for one username from one client address per window.",
    )


@settings
class ApiConfig:
    reserved_uris: frozenset[str] = setting(
        "reservedUris",
        default=frozenset(),
        kind=RESERVED_URIS,
        doc="Public paths: a public route (the account endpoints of [accounts.md](accounts.md), `/health`, "
        "`/error`, and a plugin's `@route` paths) whose path is listed answers without a token; one not listed "
        "needs `Authorization: Bearer`. Each must start with `/`; a trailing `/` is ignored. API calls (`/v`, "
        "`/b`, `/c`) always need a token, listed or not. Keep `/authenticate` listed, or nobody can log in. "
        "`/openapi.json` listed answers a caller without a token the OpenAPI document of the public endpoints; "
        "not listed, it needs a token ([api-docs.md](api-docs.md#openapijson)). A route whose path ends in a "
        "variable part is public when the fixed part before it is listed: `/docs/assets` covers every file of "
        "the docs page ([api-docs.md](api-docs.md#the-docs-page)).",
    )
    throttle: ThrottleConfig = section("throttle")
    attempts: int = setting(
        "attempts",
        default=5,
        at_least=1,
        doc="Consecutive failed retry rounds after which a hook is disabled (deliveries in flight together fail "
        "as one round; with the default retries, 11 to 22 minutes of failures); see [webhooks.md](webhooks.md).",
    )
    proc_cores: int = setting(
        "procCores",
        default=8,
        at_least=1,
        doc="Worker processes serving the one listening socket, capped at the CPUs apid may run on (`nproc`: "
        "taskset and cgroup limits count); `1` is a single process. Above 1, `apid serve` is a parent that "
        "migrates, binds the socket and starts the workers; see [operations.md](operations.md#worker-processes).",
    )
    iostate_dir: Path = setting(
        "iostateDir",
        default=Path("iostate"),
        doc="Folder of IO State files that override the ones plugins ship; see [iostate.md](iostate.md). A "
        "missing folder counts as empty.",
    )
    batch_limit: int = setting(
        "batchLimit",
        default=100,
        at_least=1,
        doc="Most elements in one batch call (`/b...`); more is a 413, refused before anything is charged to the "
        "rate limit. See [batch-and-chain.md](batch-and-chain.md).",
    )
    chain_limit: int = setting(
        "chainLimit",
        default=10,
        at_least=2,
        doc="Most links in one chain call (`/c...`), the path's endpoint included; more is a 422 "
        "(`rule: chain-limit`), refused before anything is charged.",
    )
    max_body_bytes: int = setting(
        "maxBodyBytes",
        default=1048576,
        at_least=1024,
        doc="Largest request body in bytes; a bigger one is answered 413 as soon as its headers say so, or a "
        "chunked one passes the limit, before it is read (see [errors.md](errors.md#the-http-layer)).",
    )
    security: SecurityConfig = section("security", required=True)
    allowed_origins: tuple[str, ...] = setting(
        "cors.allowedOrigins",
        default=(),
        kind=ORIGINS,
        doc="Origins (trailing `/` removed) whose browsers may call apid; see "
        "[links-and-cors.md](links-and-cors.md). A webhook's URL must be on one of these origins, checked when "
        "the hook is saved and before every delivery.",
    )
    version: str = setting(
        "api.version",
        kind=VERSION,
        derived=Derived("`MAJOR.MINOR` of the installed `apid` distribution (`0.1` for 0.1.0)", _installed_version),
        doc="The application version every API path carries (`/v0.1/...`, `/b0.1/...`, `/c0.1/...`). Parts after "
        'the second are dropped (`"1.2.3"` gives `1.2`). It must be quoted: an unquoted `1.10` is refused with '
        '`api.version: must be a quoted string such as "1.10" (YAML read 1.1 as a number)`.',
    )
    # A login is limited hardest per (account, address), so that guessing from one address locks
    # only that pair and not the account's owner elsewhere; the whole account and the address
    # get the wider limits that a distributed guess or a credential-stuffing run would cross
    # (docs/accounts.md says why these numbers).
    abuse: Mapping[str, AbuseLimit] = section(
        "abuseLimits",
        kind=per_kind(
            AbuseLimit,
            login={"perAccountAddress": 5, "perAccount": 100, "perAddress": 50, "window": 900},
            register={"perAddress": 20, "perAccount": 5, "window": 900},
            reset={"perAddress": 20, "perAccount": 5, "window": 900},
        ),
        doc="Limits on failed logins, registrations and reset requests; see [abuseLimits](#abuselimits).",
    )

    def conflicts(self, given: frozenset[str]) -> Iterator[Invalid]:
        for key, numbers in (("rateLimit", self.throttle.rate_limit), ("dataLimit", self.throttle.data_limit)):
            for role in numbers:
                if role not in self.security.all_roles:
                    yield Invalid(f"role {role!r} is not in security.networkRoles", ("throttle", key, role))
