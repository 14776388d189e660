"""The application: API calls (routed by `apid.server.dispatch`) and the Klein routes of every other
path (`apid.http.routes`), with authentication at the edge.

Public routes answer without a token only when their path is in `reservedUris`; every other
route (API calls `/v`, `/b`, `/c`, and plugins' `@route` paths) is authenticated against the
account's current standing and charged to the caller's rate limit, then handled. An API call
without an Authorization header is made as the anonymous role (`security.anonymousRole`), and
only an endpoint whose IO State roles include it answers one; any other answers 401. A GET
call's answer carries its ETag and comes from the cache when its action declares one
(`apid.calls.caching`). Every error leaves as an RFC 9457 problem (`apid.http.routes.answer_failure`).
Each request is named for the metrics and the access log by what it reached (`name`): its IO
State endpoint and API version, `batch` or `chain`, or the route's pattern.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import suppress
from typing import Any

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.web.resource import IResource

from apid.auth.admission import CallerCheck
from apid.auth.apikeys import OUT_OF_SCOPE, is_key
from apid.auth.endpoints import PublicRoute
from apid.auth.issuers import ExternalIssuers
from apid.auth.key_verifier import KeyVerifier
from apid.auth.tokens import NEEDS_TOKEN, Principal, TokenService, anonymous_caller
from apid.calls.batch import BatchRunner
from apid.calls.caching import AnswerCache, answer, cache_key, entity_tag
from apid.calls.chain import ChainRunner, order_names
from apid.calls.deprecation import announce
from apid.calls.idempotency import HEADER as IDEMPOTENCY_KEY
from apid.calls.idempotency import Idempotency
from apid.calls.incoming import Incoming
from apid.calls.links import add_links, link_header, next_offset, page_links
from apid.calls.paths import CallKind, Target, parse_target
from apid.calls.pipeline import Admission, CallRequest, CallResult, Pipeline, Purpose
from apid.calls.preconditions import checked_write, single_calls_only, unchanged_since
from apid.calls.rate_limits import RateLimiter
from apid.events.endpoint import EVENTS_PATH, TICKET_PATH, LiveEvents
from apid.http.answers import write_json
from apid.http.conditions import Preconditions
from apid.http.fixed_paths import OPENAPI_PATH
from apid.http.methods import KNOWN_METHODS, SAFE_METHODS
from apid.http.requests import asks_for_links, bearer_token, client_address, query_fields, read_json_body
from apid.http.routes import answer_failure, klein_routes
from apid.http.site import ApidRequest
from apid.iostate import Endpoint
from apid.openapi.serving import revalidated
from apid.plugin import Controller, RouteCall
from apid.problems import Forbidden, NotFound, Problem, Unauthorized
from apid.runtime.coroutines import started
from apid.server.dispatch import ApiDispatch

log = Logger(namespace="apid.app")

API_METHODS = list(KNOWN_METHODS)
KIND_NAMES = {CallKind.BATCH: "batch", CallKind.CHAIN: "chain"}  # metrics' names (a call: its endpoint's)


class Application:
    def __init__(
        self,
        *,
        version: str,
        reserved_uris: frozenset[str],
        tokens: TokenService,
        keys: KeyVerifier,
        check: CallerCheck,
        pipeline: Pipeline,
        batch: BatchRunner,
        chain: ChainRunner,
        public_routes: Iterable[PublicRoute],
        clock: IReactorTime,
        rate_limiter: RateLimiter | None = None,
        openapi: Callable[[frozenset[str] | None], Any] | None = None,
        anonymous_role: str = "ROLE_ANONYMOUS",
        cache: AnswerCache | None = None,
        issuers: ExternalIssuers | None = None,
        idempotency: Idempotency | None = None,
        events: LiveEvents | None = None,
    ) -> None:
        self.version = version
        self._issuers = issuers  # the trusted OpenID providers (security.issuers), if any
        self._reserved = reserved_uris
        self._tokens = tokens
        self._keys = keys
        self._check = check
        self._pipeline = pipeline
        self._batch = batch
        self._chain = chain
        self._rate_limiter = rate_limiter
        self._clock = clock
        self._openapi = openapi
        self._anonymous = anonymous_caller(anonymous_role)
        self._cache = cache
        self._idempotency = idempotency  # None: Idempotency-Key is not read (a kit without a database)
        self._events = events  # None: `events.enabled` is off, and /events is not found
        self.klein = klein_routes()
        self._public_routes = list(public_routes)
        self._add_routes(self._public_routes)

    def resource(self) -> IResource:
        """API calls routed by their own grammar (`apid.server.dispatch`), every other path by Klein."""
        claimed = {route.path.strip("/").partition("/")[0].encode() for route in self._public_routes}
        return ApiDispatch(
            handle=self._api, failed=answer_failure, methods=API_METHODS, routes=self.klein.resource(), claimed=claimed
        )

    async def authenticate(self, request: ApidRequest) -> Principal:
        return await self._authenticated(bearer_token(request), client_address(request))

    async def _authenticated(self, token: str | None, address: str) -> Principal:
        """The caller of a request sending `token` as their account stands now: the token
        verified, not revoked, and its roles cut to those the account still holds. A key
        refused counts against the request's client address (`KeyVerifier`)."""
        if token is None:
            raise Unauthorized(NEEDS_TOKEN)
        if not token:
            raise Unauthorized("the Authorization header must read Bearer <token>")
        if self._issuers is not None and self._issuers.issued(token):
            # a trusted OpenID provider's token: kept, or verified once
            principal = self._issuers.kept(token) or await self._issuers.verify(token)
        elif is_key(token):  # an API key: kept, or read once a minute
            principal = self._keys.kept(token) or await self._keys.verify(token, address)
        else:
            principal = self._tokens.verify(token)
        return await self._check.admit(principal)

    def _add_routes(self, public_routes: Iterable[PublicRoute]) -> None:
        app = self.klein
        seen: dict[tuple[str, str], PublicRoute] = {}
        for route in public_routes:
            key = (route.method, route.path.rstrip("/") or "/")
            if key in seen:
                raise ValueError(f"two endpoints answer {route.method} {route.path}")
            seen[key] = route
            app.route(
                route.path, methods=[route.method], endpoint=f"public {route.method} {route.path}", strict_slashes=False
            )(self._public(route))
        if self._openapi is not None:
            if ("GET", OPENAPI_PATH) in seen:
                raise ValueError(f"two endpoints answer GET {OPENAPI_PATH}")
            app.route(OPENAPI_PATH, methods=["GET"], endpoint="openapi")(self._openapi_route(self._openapi))
        if self._events is not None:
            for path in (EVENTS_PATH, TICKET_PATH):
                if any(route_path == path for _, route_path in seen):
                    raise ValueError(f"{path} is apid's own (the live event stream): a plugin's route may not take it")
            app.route(EVENTS_PATH, methods=["GET"], endpoint="events")(self._events_route(self._events))
            app.route(TICKET_PATH, methods=["POST"], endpoint="events ticket")(self._ticket_route(self._events))
        app.route("/", methods=API_METHODS, endpoint="root")(self._nothing)

    def _public(self, route: PublicRoute) -> Callable[..., Any]:
        path = route.reserved_as

        async def handle(request: ApidRequest, **_: Any) -> bytes:
            request.endpoint_name = route.path
            if path in self._reserved:
                return await route.handler(request, None)
            principal = await self.authenticate(request)
            if principal.key_scopes is not None:  # a plugin's own path is in no key's scope
                raise Forbidden(OUT_OF_SCOPE.format(path=route.path))
            await self._charge(request, principal, client_address(request), 1)
            return await route.handler(request, principal)

        return handle

    async def _api(
        self, request: ApidRequest, prefix: str, controller: str, action: str | None = None, id: str | None = None
    ) -> bytes:
        target = parse_target(self.version, prefix, controller, action, id)
        try:
            return await self._call(request, target)
        except Exception:
            # perhaps refused before its endpoint was known: named now, on this slower path only
            with suppress(Problem):  # no such endpoint: `other`
                name(
                    request,
                    self._pipeline.endpoint(
                        CallRequest(
                            controller=target.controller,
                            action=target.action,
                            api_version=target.api_version,
                            method=None,
                        )
                    ),
                    target.kind,
                )
            raise

    async def _call(self, request: ApidRequest, target: Target) -> bytes:
        """The request read once (`Incoming`), in the order its refusals go: the caller (401
        without a token where the endpoint needs one, before anything else is read), the
        deprecation of the API version, the body (400 or 415); then the call (`_answer`), once
        per key when a writing call sends an Idempotency-Key (`Idempotency`)."""
        token = bearer_token(request)
        address = client_address(request)
        if token is None:
            # No token: the anonymous role, where the endpoint admits it; a 401 anywhere else.
            principal = self._anonymous
            self._pipeline.check_anonymous(
                principal,
                CallRequest(
                    controller=target.controller, action=target.action, api_version=target.api_version, method=None
                ),
                Purpose.BATCH if target.kind is CallKind.BATCH else Purpose.DEFAULT,
            )
        else:
            principal = await self._authenticated(token, address)
        announce(request, self._pipeline.rules(), target, self.version, self._clock.seconds())
        incoming = read_incoming(request, target, principal, address)
        sent_key = incoming.idempotency_key
        if sent_key is not None and self._idempotency is not None and incoming.method not in SAFE_METHODS:
            return await self._idempotency.once(request, incoming, sent_key, lambda: self._answer(request, incoming))
        return await self._answer(request, incoming)

    async def _answer(self, request: ApidRequest, incoming: Incoming) -> bytes:
        """A call read: a single call here, a batch or chain in `_many`."""
        target, principal, address = incoming.target, incoming.principal, incoming.address
        if target.kind is not CallKind.CALL:
            return await self._many(request, incoming)
        await self._charge(
            request, principal, address, 1, lambda: endpoint_calls(self._pipeline.endpoint, target, incoming.body)
        )
        call = CallRequest(
            controller=target.controller,
            action=target.action,
            api_version=target.api_version,
            method=incoming.method,
            body=incoming.body,
            text=incoming.text,
        )
        admitted = self._pipeline.admit(principal, call, address=address)
        name(request, admitted.endpoint, target.kind)
        if admitted.endpoint.is_safe:
            return await self._get(request, incoming, admitted, call)
        condition = incoming.preconditions.if_match
        if condition is not None:
            call = await checked_write(self._pipeline, principal, admitted, call, condition, address)
        result = await self._pipeline.execute(admitted, call)
        self._set_call_links(request, incoming, result)
        return write_json(request, result.data)

    async def _many(self, request: ApidRequest, incoming: Incoming) -> bytes:
        """A batch or a chain: parsed before the charge (one refused for its method, shape or
        size costs nothing), charged a request per element or link, then run."""
        target, principal = incoming.target, incoming.principal
        if target.kind is CallKind.BATCH:
            batch = self._batch.parse(target, incoming.method, incoming.body)
            await self._charge_many(request, incoming)
            path = request.path.decode("utf-8", "replace")
            outcome, batched = await self._batch.run(principal, target, batch, path, incoming.address)
            name(request, batched, target.kind)
            self._set_links(request, incoming, batched, None)
            return write_json(request, outcome.body, outcome.status)
        chain = self._chain.parse(principal, target, incoming.body, incoming.method)
        await self._charge_many(request, incoming)
        chained = await self._chain.run(principal, target, chain, incoming.method, incoming.text, incoming.address)
        name(request, chained.endpoint, target.kind)
        self._set_links(request, incoming, chained.endpoint, chained.record)
        return write_json(request, chained.body)

    async def _charge_many(self, request: ApidRequest, incoming: Incoming) -> None:
        """A parsed batch or chain: refused with If-Match, else charged per element or link."""
        target, body = incoming.target, incoming.body
        single_calls_only(target.kind, incoming.preconditions.if_match)
        await self._charge(
            request,
            incoming.principal,
            incoming.address,
            request_cost(target.kind, body),
            lambda: endpoint_calls(self._pipeline.endpoint, target, body),
        )

    async def _get(self, request: ApidRequest, incoming: Incoming, admitted: Admission, call: CallRequest) -> bytes:
        """A GET call: from the cache when its action declares one and holds the answer, with
        its ETag, answering 304 to a client that holds it already."""
        endpoint = admitted.endpoint
        conditions = incoming.preconditions
        key = None
        if endpoint.cache is not None and self._cache is not None:
            key = cache_key(endpoint, admitted.granted, incoming.principal.user_id, call)
            cached = await self._cache.get(key, endpoint)
            if cached is not None:
                request.setHeader(b"Content-Type", b"application/json")
                self._set_call_links(request, incoming, cached.result)
                unchanged_since(conditions.if_match, cached.tag)
                return answer(request, cached.body, cached.tag, endpoint, conditions.if_none_match)
            generation = self._cache.generation(endpoint.controller)
        result = await self._pipeline.execute(admitted, call)
        body = write_json(request, result.data)
        tag = entity_tag(body)
        if key is not None and self._cache is not None:
            self._cache.put(key, result, body, tag, generation)
        self._set_call_links(request, incoming, result)
        unchanged_since(conditions.if_match, tag)
        return answer(request, body, tag, endpoint, conditions.if_none_match)

    def _set_call_links(self, request: ApidRequest, incoming: Incoming, result: CallResult) -> None:
        paging = page_links(result.endpoint, result.granted, result.data, result.page, incoming.uri)
        if paging:
            following = next_offset(result.data, result.page)
            if following is not None:
                request.setHeader(b"Next-Offset", str(following).encode("ascii"))
        self._set_links(request, incoming, result.endpoint, result.data, paging)

    def _set_links(
        self, request: ApidRequest, incoming: Incoming, endpoint: Endpoint, data: Any, paging: Sequence[str] = ()
    ) -> None:
        """The answer's `Link` header: a list answer's `paging` links always, the related calls
        of `endpoint` for the record `data` when the request asked for them."""
        if incoming.wants_links:
            value = link_header(
                self._pipeline.rules(),
                endpoint,
                data,
                incoming.principal.roles,
                self.version,
                incoming.target.api_version,
                incoming.uri,
                incoming.method,
                paging,
            )
        elif paging:
            value = ", ".join(paging)
        else:
            return
        add_links(request, value)

    async def _charge(
        self,
        request: ApidRequest,
        principal: Principal,
        address: str,
        cost: int,
        calls: Callable[[], Sequence[tuple[Endpoint, int]]] = tuple,
    ) -> None:
        """Count the request against the caller's rate limit and its `calls` against their
        endpoints' RATELIMIT (a 429 past either) and say so in the RateLimit fields."""
        if self._rate_limiter is None:
            return
        limited = calls() if self._pipeline.rules().limits_calls else ()
        charged = await self._rate_limiter.charge(principal, cost, address, limited)
        for name, value in charged.items():
            request.setHeader(name.encode("ascii"), value.encode("ascii"))

    def _openapi_route(self, document: Callable[[frozenset[str] | None], Any]) -> Callable[..., Any]:
        async def serve(request: ApidRequest) -> bytes:
            """The OpenAPI document of the caller's roles; without an Authorization header (and
            with /openapi.json in reservedUris), the one of the endpoints that need no token."""
            request.endpoint_name = OPENAPI_PATH
            if bearer_token(request) is None and OPENAPI_PATH in self._reserved:
                return revalidated(request, write_json(request, document(None)))
            principal = await self.authenticate(request)
            await self._charge(request, principal, client_address(request), 1)
            return revalidated(request, write_json(request, document(principal.roles)))

        return serve

    def _events_route(self, events: LiveEvents) -> Callable[..., Any]:
        async def serve(request: ApidRequest) -> bytes:
            """The caller's live event stream: authenticated by its token, or by a stream ticket
            (`EventSource` sends no Authorization header), charged as one request."""
            request.endpoint_name = EVENTS_PATH
            principal = await events.principal_of_ticket(request) or await self.authenticate(request)
            await self._charge(request, principal, client_address(request), 1)
            return await events.stream(request, principal)

        return serve

    def _ticket_route(self, events: LiveEvents) -> Callable[..., Any]:
        async def issue(request: ApidRequest) -> bytes:
            request.endpoint_name = TICKET_PATH
            principal = await self.authenticate(request)
            await self._charge(request, principal, client_address(request), 1)
            return await events.ticket(request, principal)

        return issue

    def _nothing(self, request: ApidRequest) -> bytes:
        raise NotFound("nothing here: API calls look like /v{version}/{controller}/{action}")


def read_incoming(request: ApidRequest, target: Target, principal: Principal, address: str) -> Incoming:
    """What the call path gets of an API call's request, read here once."""
    body = read_json_body(request)
    text = query_fields(request)
    if target.id is not None:
        text["id"] = [target.id]
    return Incoming(
        target=target,
        principal=principal,
        method=request.method.decode("ascii"),
        address=address,
        preconditions=Preconditions.of(request),
        body=body,
        text=text,
        uri=request.uri.decode("utf-8", "replace"),
        wants_links=asks_for_links(request),
        idempotency_key=request.getHeader(IDEMPOTENCY_KEY),
    )


def name(request: ApidRequest, endpoint: Endpoint, kind: CallKind) -> None:
    """Name the request by the endpoint it reached, for the metrics and the access log: a
    call by the endpoint's path, a batch or chain by its kind; each with the API version."""
    request.endpoint_name = KIND_NAMES.get(kind, endpoint.path)
    request.api_version = endpoint.api_version


def request_cost(kind: CallKind, body: Mapping[str, Any]) -> int:
    """How many requests a call counts as: a batch one per element, a chain one per link."""
    if kind is CallKind.BATCH and isinstance(body.get("batch"), list):
        return max(1, len(body["batch"]))
    if kind is CallKind.CHAIN:
        return 1 + len(order_names(body.get("chain")))
    return 1


def endpoint_calls(
    resolve: Callable[[CallRequest], Endpoint], target: Target, body: Mapping[str, Any]
) -> list[tuple[Endpoint, int]]:
    """The endpoints a call will reach and how many calls each, for their RATELIMIT: a batch's
    elements all call its endpoint, a chain's links each call theirs. One that does not
    resolve is left out: the call then fails as it would anyway, before anything runs."""
    paths = [(target.controller, target.action)]
    if target.kind is CallKind.CHAIN:
        for name in order_names(body.get("chain")):
            link_controller, _, link_action = name.partition("/")
            paths.append((link_controller, link_action))
    count = request_cost(target.kind, body) if target.kind is CallKind.BATCH else 1
    calls: dict[tuple[str, str], tuple[Endpoint, int]] = {}
    for controller, action in paths:
        try:
            endpoint = resolve(
                CallRequest(controller=controller, action=action or None, api_version=target.api_version, method=None)
            )
        except Problem:
            continue
        key = (endpoint.api_version, endpoint.path)
        calls[key] = (endpoint, calls.get(key, (endpoint, 0))[1] + count)
    return list(calls.values())


def plugin_routes(controllers: Mapping[str, Controller], superuser_role: str) -> list[PublicRoute]:
    """The `@route` methods of the controllers, as public routes answering JSON."""
    routes = []
    for controller in controllers.values():
        for attr, (path, method) in type(controller).routes().items():
            routes.append(PublicRoute(path, method, _route_handler(getattr(controller, attr), superuser_role)))
    return routes


def _route_handler(method: Callable[[RouteCall], Any], superuser_role: str) -> Callable[..., Any]:
    async def handle(request: ApidRequest, principal: Principal | None) -> bytes:
        caller = (
            None
            if principal is None
            else principal.caller(roles=principal.roles, superuser_role=superuser_role, address=client_address(request))
        )
        output = method(RouteCall(query=query_fields(request), body=read_json_body(request), caller=caller))
        if inspect.isawaitable(output):
            output = await started(output)  # an asyncio task under the asyncio reactor, as actions
        return write_json(request, output)

    return handle
