"""The composition root: every part of a daemon built in one place, each handed the settings
it uses, from the configuration and what was read from outside.

`apid.server.daemon.start` and the testing kit (`apid.testing`) both build here, so what a
plugin's tests call is what the daemon serves. What touches the outside stays with the
caller: reading the secret and the viewer's files, migrating, binding the plugins, opening the
engine, and listening. Nothing is started here; the caller starts the parts (`Assembly` says
which) and stops them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from sqlalchemy import Engine
from twisted.python.threadpool import ThreadPool
from twisted.web.resource import IResource

from apid.auth.account_service import Accounts
from apid.auth.address_change import AddressChanges
from apid.auth.admission import CallerCheck
from apid.auth.identities import ExternalIdentities
from apid.auth.issuers import PASSWORD_PATHS, external_issuers
from apid.auth.key_service import ApiKeys
from apid.auth.key_verifier import KeyVerifier
from apid.auth.limits import AbuseLimiter, MemoryWindows, RedisWindows, WindowStore
from apid.auth.login import SessionEndpoints
from apid.auth.passwords import Hashing, Passwords, hasher
from apid.auth.registration import AccountEndpoints
from apid.auth.sessions import Revocations
from apid.auth.standing import Standings
from apid.auth.tokens import TokenService
from apid.calls.batch import BatchRunner
from apid.calls.caching import AnswerCache
from apid.calls.chain import ChainRunner
from apid.calls.idempotency import Idempotency
from apid.calls.pipeline import Events, Pipeline, filter_output
from apid.calls.rate_limits import CounterStore, MemoryCounters, RateLimiter, RedisCounters
from apid.config.files import Config
from apid.events.endpoint import LiveEvents
from apid.hooks.events import AccountEvents, EventRecorder, Recording
from apid.hooks.service import Hooks
from apid.http.compression import compressing
from apid.http.cors import Cors
from apid.http.site import TextPaths
from apid.mail.outbox import MailSender
from apid.mail.senders import make_mailer
from apid.openapi.docs_page import DocsPage
from apid.openapi.document import OpenApiDocuments, document_settings
from apid.openapi.view import views_of
from apid.plugin import Services
from apid.plugin_host.discovery import Bound
from apid.plugin_host.lifecycle import PluginLifecycle
from apid.plugin_host.rules import RuleBook
from apid.runtime.reactors import Reactor
from apid.server.application import Application, plugin_routes
from apid.server.peers import PeerPinger
from apid.server.reloading import RulesWatcher, process_name
from apid.server.service_endpoints import ServiceEndpoints, public_paths
from apid.store.database import Database
from apid.store.redis import RedisCircuit, redis_pool
from apid.telemetry.health import Health

if TYPE_CHECKING:
    from apid.hooks.deliverer import DeliveryWorker
    from apid.server.workers.worker import WorkerLink


@dataclass(frozen=True)
class Assembly:
    """What `assemble` built, nothing of it started: the resource to serve, and the parts
    that are started, stopped or asked for later (by the daemon, or by the testing kit)."""

    application: Application
    resource: IResource  # what the daemon's site serves: `serving_stack`
    db: Database  # its thread pool to start and stop
    passwords: Passwords  # its thread pool to start and stop
    rule_book: RuleBook
    rules_watcher: RulesWatcher  # follows the reloads other processes announce; to start and stop
    accounts: Accounts
    tokens: TokenService
    revocations: Revocations
    mail: MailSender  # sends the mail outbox's messages once started
    pinger: PeerPinger
    redis: RedisCircuit | None  # the Redis pool, rebuilt after an outage; stopped on shutdown
    health: Health  # what /health answers: conditions reported by the parts that hold them
    plugins: PluginLifecycle  # the controllers' start-up and shutdown hooks, to run
    deliveries: DeliveryWorker | None  # sends the webhook outbox's messages once started
    events: LiveEvents | None  # the live event streams (`events.enabled`), ended when the daemon stops


def assemble(
    reactor: Reactor,
    config: Config,
    *,
    secret: bytes,
    docs_page: DocsPage,
    bound: Bound,
    engine: Engine,
    pool: ThreadPool | None = None,
    deliver: bool = True,
    wrap_events: Callable[[EventRecorder], Events] | None = None,
    shared: WorkerLink | None = None,
    hooks_class: type[Hooks] = Hooks,
) -> Assembly:
    """Build every part of a daemon over the bound plugins and the (migrated) database `engine`.

    `pool`, if given, runs the database's and the passwords' work in the place of their own
    thread pools (the testing kit runs it inline). Under `webhookActive` the events are recorded
    and, with `deliver`, sent by a delivery worker; the testing kit keeps them in the outbox.
    `wrap_events`, if given, wraps the recorder each call reports its events to (the testing kit
    collects them this way). `shared` is a worker process's link to its parent, which keeps the
    counts of every worker when Redis does not. `hooks_class` makes the webhooks lent to the
    controllers (`services.hooks`): the testing kit's allow a receiver on loopback."""
    server, api = config.server, config.api
    db = Database(reactor=reactor, engine=engine, threads=server.database_pool_size, pool=pool)
    passwords = Passwords(reactor, Hashing(hasher(server.passwords)), threads=max(1, os.cpu_count() or 1), pool=pool)
    deliveries = webhook_delivery(reactor, config, db) if deliver else None
    wake = _wake(deliveries, server.webhook_active)
    # each controller's own settings, first: the file's mistakes stop the start before anything is made
    plugin_settings = server.plugins.read(
        {name: loaded.cls.settings_class for name, loaded in bound.controllers.items()}
    )
    health = Health()
    db.outage.report_to(health, "database")  # /health fails while the database cannot be reached
    rule_book = RuleBook(bound, api.iostate_dir, api.security)
    standings = Standings(
        reactor=reactor,
        db=db,
        local_logins=api.security.local_logins,
        vouched_for={issuer.issuer: issuer.keys_lifetime for issuer in api.security.issuers},
    )
    revocations = Revocations(
        reactor=reactor, db=db, standings=standings, access_lifetime=server.jwt.access_lifetime + server.jwt.leeway
    )
    # one circuit, owning the pool, shared: one outage of Redis is one, whichever limits meet it
    circuit = None
    if server.redis_url:
        url = server.redis_url
        circuit = RedisCircuit(connect=lambda: redis_pool(url), clock=reactor, fail_open=server.redis_fail_open)
        if not server.redis_fail_open:  # a hard dependency: /health fails while Redis cannot be reached
            circuit.outage.report_to(health, "redis")
    limiter = abuse_limiting(reactor, config, circuit, shared)
    mail = MailSender(reactor=reactor, db=db, mailer=make_mailer(server.mail, reactor))
    tokens = TokenService(server.jwt, secret, time.time)
    live = (
        LiveEvents(
            reactor=reactor,
            db=db,
            rules=lambda: rule_book.current,
            config=server.events,
            check=CallerCheck(tokens=tokens, revocations=revocations, standings=standings),
        )
        if server.events.enabled
        else None
    )
    if live is not None:
        revocations.listen(live.feed.affected)
    recording = Recording(hooks=wake is not None, changes=live is not None)
    changed = live.feed.wake if live is not None else _nothing
    account_events = (
        AccountEvents(
            rules=lambda: rule_book.current,
            filter_output=filter_output,
            clock=time.time,
            wake=lambda: reactor.callFromThread(wake or _nothing),
            recording=recording,
            changed=lambda: reactor.callFromThread(changed),
        )
        if recording.hooks or recording.changes
        else None
    )
    addresses = AddressChanges(
        db=db,
        revocations=revocations,
        config=server.accounts,
        base_url=server.base_url,
        home_url=server.home_url,
        events=account_events,
    )
    accounts = Accounts(
        reactor=reactor,
        db=db,
        passwords=passwords,
        revocations=revocations,
        limiter=limiter,
        addresses=addresses,
        superuser_role=api.security.superuser_role,
    )
    pinger = PeerPinger(reactor, server.servers)
    hooks = hooks_class(db=db, allowed_origins=api.allowed_origins, rules=lambda: rule_book.current, wake=wake)
    services = Services(
        db=db,
        accounts=accounts,
        security=api.security,
        pinger=pinger,
        hooks=hooks,
        rules=lambda: rule_book.current,
        version=api.version,
        api_view=views_of(lambda: rule_book.current, api.version),
        keys=ApiKeys(db=db, accounts=accounts, security=api.security, rules=lambda: rule_book.current),
    )
    controllers = {
        name: loaded.cls(replace(services, settings=plugin_settings.get(name)))
        for name, loaded in bound.controllers.items()
    }
    labels = {name: loaded.plugin.label for name, loaded in bound.controllers.items()}
    recorder = (
        EventRecorder(
            reactor=reactor,
            db=db,
            filter_output=filter_output,
            wake=wake or _nothing,
            recording=recording,
            changed=changed,
        )
        if recording.hooks or recording.changes
        else None
    )
    events = wrap_events(recorder) if recorder and wrap_events else recorder
    cache = AnswerCache(clock=reactor, db=db, siblings=shared.siblings() if shared is not None else None)
    pipeline = Pipeline(
        rules=lambda: rule_book.current,
        controllers=controllers,
        superuser_role=api.security.superuser_role,
        events=events,
        db=db,
        changed=cache.changed,
    )
    public_routes = [
        *ServiceEndpoints(api.version, health, server.metrics.role).routes(),
        *docs_page.routes(),
        *SessionEndpoints(
            accounts=accounts,
            tokens=tokens,
            db=db,
            revocations=revocations,
            standings=standings,
            limiter=limiter,
            jwt=server.jwt,
            secure_cookies=server.secure_cookies,
        ).routes(),
        *AccountEndpoints(
            db=db,
            passwords=passwords,
            revocations=revocations,
            limiter=limiter,
            accounts=server.accounts,
            base_url=server.base_url,
            home_url=server.home_url,
            user_role=api.security.user_role,
            events=account_events,
            addresses=addresses,
        ).routes(),
        *plugin_routes(controllers, api.security.superuser_role),
    ]
    if not api.security.local_logins:  # password accounts switched off: callers sign in with a provider
        public_routes = [route for route in public_routes if route.path not in PASSWORD_PATHS]
    rate_limiter = rate_limiting(reactor, config, circuit, shared)
    application = Application(
        version=api.version,
        reserved_uris=api.reserved_uris,
        tokens=tokens,
        keys=KeyVerifier(reactor, db, limiter),
        check=CallerCheck(tokens=tokens, revocations=revocations, standings=standings),
        pipeline=pipeline,
        batch=BatchRunner(pipeline, api.batch_limit),
        chain=ChainRunner(pipeline, api.chain_limit),
        public_routes=public_routes,
        clock=reactor,
        rate_limiter=rate_limiter,
        anonymous_role=api.security.anonymous_role,
        cache=cache,
        idempotency=Idempotency(db),
        events=live,
        issuers=external_issuers(
            reactor,
            api.security.issuers,
            ExternalIdentities(db=db, revocations=revocations, events=account_events, clock=time.time),
            server.jwt.leeway,
        ),
        openapi=OpenApiDocuments(
            lambda: rule_book.current,
            document_settings(
                config,
                bound.controllers.values(),
                fixed=public_paths(config),
            ),
        ).document,
    )
    return Assembly(
        application=application,
        resource=serving_stack(application, api.allowed_origins),
        db=db,
        passwords=passwords,
        rule_book=rule_book,
        rules_watcher=RulesWatcher(reactor=reactor, db=db, rule_book=rule_book, who=process_name()),
        accounts=accounts,
        tokens=tokens,
        revocations=revocations,
        mail=mail,
        pinger=pinger,
        redis=circuit,
        health=health,
        plugins=PluginLifecycle(clock=reactor, controllers=controllers, labels=labels, drain=server.shutdown.drain),
        deliveries=deliveries,
        events=live,
    )


def webhook_delivery(reactor: Reactor, config: Config, db: Database) -> DeliveryWorker | None:
    """The delivery worker when webhookActive is on; without it nothing is recorded or sent."""
    if not config.server.webhook_active:
        return None
    # here, not at the top: treq and Twisted's HTTP client stay out of a daemon without webhooks
    from apid.hooks.deliverer import DeliveryWorker
    from apid.hooks.delivery import Deliverer

    settings = config.server.webhooks
    deliverer = Deliverer(
        reactor=reactor,
        allowed_origins=config.api.allowed_origins,
        timeout=settings.timeout,
        per_host=settings.per_host,
    )
    return DeliveryWorker(
        reactor=reactor, db=db, deliverer=deliverer, config=settings, max_attempts=config.api.attempts
    )


def _wake(deliveries: DeliveryWorker | None, recording: bool) -> Callable[[], None] | None:
    """What tells the delivery worker that messages wait: None when no events are recorded; a
    call that does nothing when they are kept in the outbox, unsent (the testing kit's)."""
    if deliveries is not None:
        return deliveries.wake
    return _kept_unsent if recording else None


def _kept_unsent() -> None:
    """Messages wait in the outbox table, never sent."""


def _nothing() -> None:
    """Nobody to tell: that part is off."""


def serving_stack(application: Application, allowed_origins: Iterable[str]) -> IResource:
    """Every layer a request passes before its handler, outermost first: answers are
    compressed for clients that ask when worth it (`compressing`), paths that are not
    text are refused (`TextPaths`), CORS answers preflights and marks answers to allowed
    origins (`Cors`), API calls go to their handler by apid's grammar and every other path to
    the Klein routes (`ApiDispatch`, `Application.resource`)."""
    return compressing(TextPaths(Cors(application.resource(), allowed_origins)))


def rate_limiting(
    reactor: Reactor, config: Config, circuit: RedisCircuit | None, shared: WorkerLink | None = None
) -> RateLimiter | None:
    """The rate limiter when apiThrottle is on: counting in Redis when redis.url is set, else
    in the parent of the worker processes, else in this process."""
    if not config.server.api_throttle:
        return None
    store: CounterStore
    if circuit is not None:
        store = RedisCounters(pool=circuit.pool, clock=reactor, circuit=circuit)
    else:
        store = shared.counters() if shared is not None else MemoryCounters(reactor)
    throttle = config.api.throttle
    return RateLimiter(
        store=store, rate_limits=throttle.rate_limit, expires=throttle.expires, fail_open=config.server.redis_fail_open
    )


def abuse_limiting(
    reactor: Reactor, config: Config, circuit: RedisCircuit | None, shared: WorkerLink | None = None
) -> AbuseLimiter:
    """The limits on logins, registrations and reset requests: counting in Redis when
    redis.url is set (whatever apiThrottle says), so that every daemon shares them, else as
    the rate limits are."""
    store: WindowStore
    if circuit is not None:
        store = RedisWindows(pool=circuit.pool, clock=reactor, circuit=circuit)
    else:
        store = shared.windows() if shared is not None else MemoryWindows(reactor)
    return AbuseLimiter(
        store=store,
        limits=config.api.abuse,
        fail_open=config.server.redis_fail_open,
        ipv6_prefix=config.api.security.ipv6_prefix,
    )
