"""`GET /events` and `POST /events/ticket`: what a request may ask of the live event stream,
read and refused here, before any stream opens.

- `services` (`?services=person,team/update`): the controllers or endpoints to hear of; one
  that is not an event of the current API gets a 400 naming it, as a typo would hear nothing.
- `Last-Event-ID` (the header `EventSource` sends when it reconnects, or `?lastEventId=` for a
  page that kept it): the changes after it are sent first, while the log keeps them.
- `ticket` (`?ticket=`): a stream ticket (apid.events.tickets) instead of an Authorization
  header, for `EventSource`.
"""

from __future__ import annotations

from collections.abc import Callable

from twisted.internet.interfaces import IReactorTime

from apid.auth.admission import CallerCheck
from apid.auth.endpoints import PublicPath
from apid.auth.tokens import Principal
from apid.config.server import EventsConfig
from apid.events.feed import ChangeFeed
from apid.events.tickets import issue, redeem
from apid.http.answers import write_json
from apid.http.operations import FILLED_STRING, json_answer, problem_answers, query_parameter
from apid.http.requests import query_fields
from apid.http.site import ApidRequest
from apid.iostate import RuleSet
from apid.problems import BadRequest, Unauthorized
from apid.store.database import Database

EVENTS_PATH = "/events"
TICKET_PATH = "/events/ticket"
STREAM_MEDIA_TYPE = "text/event-stream"

EVENTS = PublicPath(
    EVENTS_PATH,
    "GET",
    {
        "summary": "The live event stream: the changes your roles may hear of, as Server-Sent Events",
        "description": (
            "Each change is one event: `id` its position (send it back as `Last-Event-ID` to get what you "
            "missed), `event` the service (`person/update`), `data` the message the same change's webhook "
            "delivers (this document's `webhooks`), with your own RESPONSE fields of the action, and only for "
            "records the action lets you see. `reset` (data `{}`): reload what you show and open a new stream "
            "(you were back too late, or read too slowly); `end` (data: a problem): your token or account no "
            "longer stands. Comment lines keep the stream alive. See docs/events.md."
        ),
        "parameters": [
            query_parameter(
                "services",
                "Comma-separated controllers or endpoints to hear of (`person,team/update`); default all",
                required=False,
            ),
            {
                **query_parameter(
                    "lastEventId", "As the `Last-Event-ID` header, for a client that cannot send it", False
                ),
                "schema": {"type": "string", "pattern": "^[0-9]{1,19}$"},
            },
            query_parameter(
                "ticket",
                "A ticket from POST /events/ticket instead of the Authorization header (for `EventSource`)",
                required=False,
            ),
            {
                "name": "Last-Event-ID",
                "in": "header",
                "required": False,
                "schema": {"type": "string", "pattern": "^[0-9]{1,19}$"},
                "description": "The id of the last event received: the changes after it are sent first",
            },
        ],
        "responses": {
            "200": {
                "description": "The stream, open until you close it or apid ends it",
                "content": {STREAM_MEDIA_TYPE: {"schema": {"type": "string"}}},
            },
            **problem_answers("400", "401", "429", "503"),
        },
    },
)
TICKET = PublicPath(
    TICKET_PATH,
    "POST",
    {
        "summary": "A single-use ticket opening your event stream without an Authorization header",
        "responses": {
            "201": json_answer(
                "The ticket: GET /events?ticket=... once, within expiresIn seconds",
                {
                    "type": "object",
                    "required": ["ticket", "expiresIn"],
                    "properties": {"ticket": FILLED_STRING, "expiresIn": {"type": "integer", "minimum": 1}},
                },
            ),
            **problem_answers("401", "429"),
        },
    },
)
EVENT_PATHS = (EVENTS, TICKET)


class LiveEvents:
    def __init__(
        self,
        *,
        reactor: IReactorTime,
        db: Database,
        rules: Callable[[], RuleSet],
        config: EventsConfig,
        check: CallerCheck,
    ) -> None:
        self._reactor = reactor
        self._db = db
        self._rules = rules
        self._config = config
        self._recheck = check.still
        self.feed = ChangeFeed(
            reactor=reactor, db=db, rules=rules, config=config, recheck=check.still, expired=check.expired
        )

    async def principal_of_ticket(self, request: ApidRequest) -> Principal | None:
        """The caller of the request's `?ticket=`, checked as their token would be now; None
        without one. A 401 for a ticket used, expired or never issued."""
        ticket = _one(query_fields(request), "ticket")
        if ticket is None:
            return None
        principal = await self._db.write(redeem, ticket, self._reactor.seconds())
        if principal is None:
            raise Unauthorized("the stream ticket was used already, has expired or was never issued; ask for another")
        return await self._recheck(principal)

    async def stream(self, request: ApidRequest, principal: Principal) -> bytes:
        """The stream, until it ends (the client leaves, or apid ends it)."""
        fields = query_fields(request)
        services = self._services(_one(fields, "services"))
        since = self._since(request.getHeader(b"last-event-id"), _one(fields, "lastEventId"))
        await self.feed.serve(request, principal, services, since)
        return b""

    async def ticket(self, request: ApidRequest, principal: Principal) -> bytes:
        lifetime = self._config.ticket_lifetime
        ticket = await self._db.write(issue, principal, lifetime, self._reactor.seconds())
        request.setHeader(b"Cache-Control", b"no-store")
        return write_json(request, {"ticket": ticket, "expiresIn": lifetime}, 201)

    def _services(self, asked: str | None) -> frozenset[str] | None:
        if asked is None:
            return None
        names = frozenset(name.strip() for name in asked.split(",") if name.strip())
        rules = self._rules()
        known = {
            name
            for state in rules.controllers.values()
            for version in state.versions.values()
            for endpoint in version.endpoints.values()
            if endpoint.emits_events
            for name in (endpoint.controller, endpoint.path)
        }
        unknown = sorted(names - known)
        if unknown or not names:
            raise BadRequest(
                f"services must name controllers or endpoints whose changes are events; {', '.join(unknown) or 'none'} "
                "is not one"
            )
        return names

    @staticmethod
    def _since(header: bytes | None, query: str | None) -> int | None:
        sent = header.decode("latin-1").strip() if header is not None else query
        if sent is None or sent == "":
            return None
        if not (sent.isascii() and sent.isdigit()) or len(sent) > 19:  # "²" is a digit to isdigit
            raise BadRequest("Last-Event-ID must be the id of an event this stream sent (a whole number)")
        return int(sent)


def _one(fields: dict[str, list[str]], name: str) -> str | None:
    """The value of a query parameter sent at most once (twice is a 400: which one counts?)."""
    values = fields.get(name)
    if values is None:
        return None
    if len(values) > 1:
        raise BadRequest(f"{name} is sent more than once")
    return values[0]
