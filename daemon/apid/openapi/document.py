"""OpenAPI 3.1 documents of the API, built from the role-filtered view of `apid.openapi.view`.

`build(view, settings)` turns the view of some roles into one document: every action those
roles may call as plain calls (`/v{app}[-{api}]/{controller}/{action}` and its `/{id}` form),
batch calls where they may batch it, and chains starting there, with the request and response
fields they send and receive typed as JSON Schema; the public endpoints; RFC 9457 problems as
error answers; the bearer scheme; the RateLimit, Link and Retry-After headers. With
`token=False` it is the document of someone without a token: the endpoints that answer without
one, the API calls of the anonymous role (`security.anonymousRole`, `anonymous_view`) included.
`/openapi.json` answers it through `OpenApiDocuments`; `apid openapi` prints it offline.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from apid.auth.endpoints import PublicPath
from apid.auth.issuers import PASSWORD_PATHS
from apid.auth.jwks import discovery_url
from apid.auth.login import LOGOUT, REFRESH_TOKEN
from apid.config.files import Config
from apid.config.kinds import ASYNCIO_REACTORS
from apid.declarations.actions import action_rules
from apid.http.operations import BATCH_TAG, BEARER, CHAIN_TAG, NO_TOKEN, PUBLIC_TAG, ROUTES_TAG
from apid.iostate.model import RuleSet
from apid.openapi.calls import (
    NO_RULES,
    action_schemas,
    batch_operation,
    honours_if_match,
    plain_operation,
    record_links,
    with_deprecation,
)
from apid.openapi.chains import chain_operations
from apid.openapi.components import shared_components
from apid.openapi.fields import components_read_without_nul, read_without_nul
from apid.openapi.public import RouteDoc, plugin_routes, public_paths
from apid.openapi.view import ActionDoc, ApiView, api_view
from apid.openapi.webhooks import webhook_messages
from apid.plugin import ActionRules

if TYPE_CHECKING:
    from apid.plugin_host.discovery import LoadedController

OPENAPI_VERSION = "3.1.0"


@dataclass(frozen=True)
class DocumentSettings:
    """What a document says besides the rules: the deployment's version, public paths and limits."""

    version: str
    reserved_uris: frozenset[str]
    batch_limit: int
    chain_limit: int
    server_url: str | None = None
    routes: tuple[RouteDoc, ...] = ()
    fixed: tuple[PublicPath, ...] = ()  # the fixed public endpoints, each declared beside its handler
    anonymous_role: str = "ROLE_ANONYMOUS"
    # what each action declares (`@action`), by "controller/action": what it requires and answers
    declared: Mapping[str, ActionRules] = field(default_factory=dict)
    issuers: tuple[str, ...] = ()  # the trusted OpenID providers (security.issuers)
    local_logins: bool = True  # false: the password endpoints are not served (security.localLogins)
    asyncio: bool = False  # the reactor runs asyncio: the actions that await it are served

    def serves(self, action: ActionDoc) -> bool:
        """Whether this deployment can serve `action`: one that awaits asyncio (`@action(asyncio=True)`)
        only under an asyncio reactor. Its operations are in no document of another."""
        return self.asyncio or not self.declared.get(action.name, NO_RULES).asyncio


def document_settings(
    config: Config,
    controllers: Iterable[LoadedController],
    *,
    fixed: Iterable[PublicPath],
    server_url: str | None = None,
) -> DocumentSettings:
    """The settings of a deployment's documents: `controllers` are the loaded ones (their
    routes and their actions' declarations), `fixed` the public endpoints the server answers;
    the server is `baseUrl` unless given."""
    controllers = list(controllers)
    return DocumentSettings(
        version=config.api.version,
        reserved_uris=config.api.reserved_uris,
        batch_limit=config.api.batch_limit,
        chain_limit=config.api.chain_limit,
        server_url=server_url or config.server.base_url,
        routes=plugin_routes(controllers),
        fixed=tuple(fixed),
        anonymous_role=config.api.security.anonymous_role,
        declared={
            f"{loaded.cls.name}/{name}": action_rules(handler)
            for loaded in controllers
            for name, handler in loaded.cls.actions().items()
        },
        issuers=tuple(issuer.issuer for issuer in config.api.security.issuers),
        local_logins=config.api.security.local_logins,
        asyncio=config.server.reactor in ASYNCIO_REACTORS,
    )


def anonymous_view(rules: RuleSet, settings: DocumentSettings) -> ApiView | None:
    """What a caller without a token may call in `rules` (as the anonymous role); None when nothing."""
    view = api_view(rules, {settings.anonymous_role}, settings.version)
    return view if view.controllers else None


def _api_paths(view: ApiView, settings: DocumentSettings) -> tuple[dict[str, Any], dict[str, Any]]:
    """The paths of every call `view` holds (plain, batch, chain), and the schemas they refer to."""
    paths: dict[str, dict[str, Any]] = {}
    schemas: dict[str, Any] = {}
    actions = [action for action in view.actions() if settings.serves(action)]
    app = settings.version
    for action in actions:
        rules = settings.declared.get(action.name, NO_RULES)
        links = record_links(action, actions)
        conditional = honours_if_match(action, actions)
        schemas.update(action_schemas(action, rules))
        method = action.method.lower()
        paths.setdefault(action.path("v", app), {})[method] = with_deprecation(
            action, plain_operation(action, False, rules, links, conditional=conditional)
        )
        if action.takes_id:
            paths.setdefault(action.path("v", app, with_id=True), {})[method] = with_deprecation(
                action, plain_operation(action, True, rules, links, conditional=conditional)
            )
        if action.batch:
            paths.setdefault(action.path("b", app), {})["post"] = with_deprecation(
                action, batch_operation(action, settings.batch_limit)
            )
        chain_path = action.path("c", app, with_id=action.takes_id)
        paths.setdefault(chain_path, {}).update(
            {
                form: with_deprecation(action, operation)
                for form, operation in chain_operations(action, actions, settings.chain_limit, rules).items()
            }
        )
    return paths, schemas


def build(view: ApiView | None, settings: DocumentSettings, *, token: bool = True) -> dict[str, Any]:
    """The OpenAPI document of what `view`'s roles may call; with no view, or `token` false, of
    a caller without a token: the endpoints that answer without one, and what `view` (the
    anonymous role's, `anonymous_view`) may call."""
    without_token = view is None or not token
    actions = [action for action in view.actions() if settings.serves(action)] if view is not None else []
    components = shared_components(sorted({action.name for action in actions}))
    paths = public_paths(settings.fixed, settings.routes, settings.reserved_uris, anonymous=without_token)
    tags = [{"name": PUBLIC_TAG, "description": "Accounts, sessions and the service's own endpoints"}]
    if any(ROUTES_TAG in op.get("tags", ()) for operations in paths.values() for op in operations.values()):
        tags.append({"name": ROUTES_TAG, "description": "Plugins' own paths, outside IO State"})
    if view is None or not token:
        description = (
            "The endpoints that answer without a token. Log in (POST /authenticate) and "
            "send the token to read the API your roles may call."
        )
    else:
        description = (
            f"The API as the roles {', '.join(sorted(view.roles)) or '(none)'} may call it, "
            "from the IO State rules in force."
        )
    if view is not None:
        api_paths, schemas = _api_paths(view, settings)
        if without_token:
            for operations in api_paths.values():
                for operation in operations.values():
                    operation["security"] = NO_TOKEN
        paths.update(api_paths)
        components["schemas"].update(schemas)
        for controller in view.controllers:
            versions = ", ".join(v.name + (" (current)" if v.current else "") for v in controller.versions)
            tags.append(
                {"name": controller.name, "description": f"Controller {controller.name}: API versions {versions}"}
            )
        tags.append({"name": BATCH_TAG, "description": "One endpoint called once per element of a batch (/b...)"})
        tags.append(
            {
                "name": CHAIN_TAG,
                "description": (
                    "Several endpoints in one request (/c...), each output's key feeding the next link's id; "
                    "the path's endpoint is the first link"
                ),
            }
        )
    document: dict[str, Any] = {
        "openapi": OPENAPI_VERSION,
        "info": {"title": "apid", "version": settings.version, "description": description},
    }
    if settings.server_url:
        document["servers"] = [{"url": settings.server_url}]
    if not settings.local_logins:
        for path in PASSWORD_PATHS:
            paths.pop(path, None)
    security = [*with_providers(settings.issuers, paths, components), *with_api_keys(paths, components)]
    document.update(
        {
            "security": security,
            "tags": tags,
            "paths": read_without_nul(paths),
            "components": components_read_without_nul(components),
        }
    )
    messages = webhook_messages(actions) if not without_token else {}
    if messages:
        document["webhooks"] = messages
    return document


def with_providers(issuers: Iterable[str], paths: Mapping[str, Any], components: dict[str, Any]) -> list[Any]:
    """Declare each trusted OpenID provider (an `openIdConnect` scheme naming its discovery
    document) as another way to send the bearer token wherever one is needed, but for
    refreshing and logging out (apid's own logins); the document's own security requirement."""
    schemes = {
        "openIdConnect" + (str(index + 1) if index else ""): {
            "type": "openIdConnect",
            "openIdConnectUrl": discovery_url(issuer),
            "description": f"An access token of {issuer}, as Authorization: Bearer <token>",
        }
        for index, issuer in enumerate(issuers)
    }
    if not schemes:
        return BEARER
    components["securitySchemes"].update(schemes)
    providers: list[dict[str, list[str]]] = [{name: []} for name in schemes]
    for path, operations in paths.items():
        if path in LOGIN_ONLY:  # apid's own logins only
            continue
        for operation in operations.values():
            if operation.get("security"):  # the token is needed here
                operation["security"] = [*operation["security"], *providers]
    return [*BEARER, *providers]


API_KEY_SCHEME = "apiKeyAuth"
LOGIN_ONLY = (REFRESH_TOKEN.path, LOGOUT.path)  # they take a login's access token, never an API key


def with_api_keys(paths: Mapping[str, Any], components: dict[str, Any]) -> list[dict[str, list[str]]]:
    """Declare API keys (`apid_...`, docs/accounts.md) as another bearer scheme wherever a
    token is needed, but for refreshing and logging out; the document's requirement of it."""
    components["securitySchemes"][API_KEY_SCHEME] = {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "apid_ API key",
        "description": "An API key of apikey/create or `apid key create`, as Authorization: Bearer apid_...",
    }
    requirement: dict[str, list[str]] = {API_KEY_SCHEME: []}
    for path, operations in paths.items():
        if path not in LOGIN_ONLY:
            for operation in operations.values():
                if operation.get("security"):  # the token is needed here
                    operation["security"] = [*operation["security"], requirement]
    return [requirement]


class OpenApiDocuments:
    """The documents `/openapi.json` answers, from the rule set in force: each built once per
    rule set and set of roles, and built anew after a reload swaps the rules."""

    MAX_KEPT = 64  # distinct role sets are few; this only bounds a pathological mix

    def __init__(self, rules: Callable[[], RuleSet], settings: DocumentSettings) -> None:
        self._rules = rules
        self._settings = settings
        self._built_from: RuleSet | None = None
        self._documents: dict[frozenset[str] | None, dict[str, Any]] = {}

    def document(self, roles: frozenset[str] | None) -> dict[str, Any]:
        """The document of `roles`, or of a caller without a token for None."""
        rules = self._rules()
        if rules is not self._built_from or len(self._documents) >= self.MAX_KEPT:
            self._documents.clear()
            self._built_from = rules
        if roles not in self._documents:
            if roles is None:
                self._documents[roles] = build(anonymous_view(rules, self._settings), self._settings, token=False)
            else:
                self._documents[roles] = build(api_view(rules, roles, self._settings.version), self._settings)
        return self._documents[roles]
