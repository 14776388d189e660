"""Events: for every change, one message per subscribed hook, written before the call answers.

Each message's `data` is the change's record as the hook's **owner** would see it: filtered by
the RESPONSE fields of the owner's roles, never the caller's. An owner whose roles are not in
the endpoint's HOOK list gets nothing, and neither does one the action's own per-record check
does not let see the record (`apid.plugin_host.record_access`: person's, the owner and administrators).

Each change is also logged once (`apid.store.changes`), every field of its record, for the live
event stream (apid.events), which filters it for each subscriber when it sends it; the log is
written whenever `events.enabled`, whether or not any hook listens.

Where possible the messages and the log are written in the change's own transaction (the outbox
pattern), so that a crash never leaves a change without its events or events without their
change: a plugin's unit of work (`Call.write`) and apid's own account changes outside IO State
endpoints (sign-up, validation, password reset, `apid user add`: `AccountEvents`). A call
whose action writes some other way gets its events after it returns, in a transaction of
their own.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy import Connection
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from apid.hooks.queue import NewMessage, Subscriber, insert_messages, subscribers
from apid.http.answers import dumps
from apid.iostate import Endpoint, RuleSet
from apid.iostate.types import Conversion
from apid.plugin_host.record_access import may_receive, receiver
from apid.problems import InternalError
from apid.store.changes import append
from apid.store.database import Database, DatabaseUnavailable

log = Logger(namespace="apid.hooks")
T = TypeVar("T")
# The pipeline's `filter_output`: a record as RESPONSE fields show it, its values in their types' form
OutputFilter = Callable[[Any, frozenset[str], Mapping[str, Conversion]], Any]


def message_id() -> str:
    return "msg_" + uuid.uuid4().hex


def payload(message: str, type_: str, moment: float, data: Any) -> str:
    """The JSON body delivered: `{id, type, timestamp, data}`, as exact text to store and sign."""
    timestamp = datetime.fromtimestamp(moment, UTC).isoformat(timespec="milliseconds")
    return dumps({"id": message, "type": type_, "timestamp": timestamp, "data": data}).decode("utf-8")


def event_data(result: Any) -> Any:
    """A change's record as events carry it: an object with `to_dict()` (an `Account`) as that."""
    to_dict = getattr(result, "to_dict", None)
    return to_dict() if callable(to_dict) else result


def receiving(found: Iterable[Subscriber], endpoint: Endpoint, record: Any) -> list[Subscriber]:
    """The subscribers whose owner's roles the endpoint's HOOK list admits and whom the action's
    check lets see `record`, the change's record as events carry it (`event_data`)."""
    return [
        subscriber
        for subscriber in found
        if endpoint.hook_roles & subscriber.roles
        and may_receive(endpoint, receiver(endpoint, subscriber.user_id, subscriber.username, subscriber.roles), record)
    ]


def event_messages(
    found: Iterable[Subscriber],
    endpoint: Endpoint,
    record: Any,
    now: float,
    filter_output: OutputFilter,
) -> list[NewMessage]:
    """The messages of `endpoint`'s event: one per subscriber that may receive `record`."""
    data = event_data(record)
    return messages_for(receiving(found, endpoint, data), endpoint, data, now, filter_output)


def messages_for(
    found: Iterable[Subscriber],
    endpoint: Endpoint,
    record: Any,
    now: float,
    filter_output: OutputFilter,
) -> list[NewMessage]:
    """One message of `endpoint`'s event for each of `found` whose owner's roles the endpoint's
    HOOK list admits, carrying `record` as that owner may see it. It checks no record: `found`
    are the subscribers `receiving` let see it (`event_messages`)."""
    data = event_data(record)
    messages = []
    for subscriber in found:
        if endpoint.hook_roles & subscriber.roles:
            mid = message_id()
            allowed = endpoint.response_fields(endpoint.granted(subscriber.roles))
            shown = filter_output(data, allowed, endpoint.conversions)
            messages.append(NewMessage(mid, subscriber.hook_id, endpoint.path, payload(mid, endpoint.path, now, shown)))
    return messages


def every_key(data: Any) -> frozenset[str]:
    """The keys of a record, or of every record of a list: what the log keeps of it."""
    if isinstance(data, dict):
        return frozenset(data)
    if isinstance(data, (list, tuple)):
        return frozenset(key for item in data if isinstance(item, dict) for key in item)
    return frozenset()


def log_change(
    connection: Connection, endpoint: Endpoint, record: Any, now: float, filter_output: OutputFilter
) -> None:
    """In the caller's transaction: the change in the log the live event stream reads, every
    field of its record in its answer's form."""
    data = event_data(record)
    kept = dumps(filter_output(data, every_key(data), endpoint.conversions)).decode("utf-8")
    append(connection, message_id(), endpoint.path, kept, now)


@dataclass(frozen=True)
class Recording:
    """What a change writes: webhook messages (`webhookActive`), the log of changes
    (`events.enabled`), or both."""

    hooks: bool = True
    changes: bool = False


def record_events(
    connection: Connection,
    endpoint: Endpoint,
    record: Any,
    now: float,
    filter_output: OutputFilter,
    recording: Recording = Recording(),
) -> int:
    """In the caller's transaction: the messages of `endpoint`'s event, and the change in the
    log; how many messages were written."""
    if recording.changes:
        log_change(connection, endpoint, record, now, filter_output)
    if not recording.hooks:
        return 0
    messages = event_messages(
        subscribers(connection, endpoint.controller, endpoint.action), endpoint, record, now, filter_output
    )
    if messages:
        insert_messages(connection, messages, now)
    return len(messages)


class EventRecorder:
    """Called by the pipeline after every successful non-safe call of a hookable endpoint.
    `wake` tells the webhooks' delivery that messages wait, `changed` the live event stream
    that a change is logged (each after the commit)."""

    def __init__(
        self,
        *,
        reactor: IReactorTime,
        db: Database,
        filter_output: OutputFilter,
        wake: Callable[[], None],
        recording: Recording = Recording(),
        changed: Callable[[], None] = lambda: None,
    ) -> None:
        self._reactor = reactor
        self._db = db
        self._filter = filter_output
        self._wake = wake
        self._recording = recording
        self._changed = changed

    async def record(self, endpoint: Endpoint, output: Any) -> None:
        """Look the subscribers up (a read: most calls have none), then write their messages."""
        now = self._reactor.seconds()
        recording = self._recording
        messages: list[NewMessage] = []
        try:
            if recording.hooks:
                found = await self._db.read(subscribers, endpoint.controller, endpoint.action)
                messages = event_messages(found, endpoint, output, now, self._filter)
            if messages or recording.changes:
                await self._db.write(self._written, endpoint, output, messages, now)
        except Exception as error:
            # A 500, not the outage's 503: the call was carried out, and must not be sent again
            if isinstance(error, DatabaseUnavailable):  # the outage's own lines tell why
                log.error("the webhook events of {endpoint} could not be recorded", endpoint=endpoint.path)
            else:
                log.failure("the webhook events of {endpoint} could not be recorded", endpoint=endpoint.path)
            raise InternalError(
                f"{endpoint.path} was carried out, but its webhook events could not be recorded; the error was logged"
            ) from None
        if messages:
            self._wake()
        if recording.changes:
            self._changed()

    def _written(
        self, connection: Connection, endpoint: Endpoint, output: Any, messages: list[NewMessage], now: float
    ) -> None:
        if messages:
            insert_messages(connection, messages, now)
        if self._recording.changes:
            log_change(connection, endpoint, output, now, self._filter)

    def write(self, endpoint: Endpoint, work: Callable[..., T], *args: Any) -> Deferred[T]:
        """Run `work(connection, *args)` and record the endpoint's events from what it returns,
        in one transaction: both commit or neither does."""
        now = self._reactor.seconds()

        def unit(connection: Connection) -> tuple[T, int]:
            result = work(connection, *args)
            if result is None:  # nothing changed (no such record): nothing to tell anyone
                return result, 0
            return result, record_events(connection, endpoint, result, now, self._filter, self._recording)

        def woken(outcome: tuple[T, int]) -> T:
            result, written = outcome
            if written:
                self._wake()
            if self._recording.changes and result is not None:
                self._changed()
            return result

        return self._db.write(unit).addCallback(woken)


class AccountEvents:
    """The `person` events of changes made outside IO State endpoints (sign-up, validation,
    password reset, `apid user add`), recorded in the change's transaction exactly as
    `person/create` and `person/update` record theirs. Called in a database thread."""

    def __init__(
        self,
        *,
        rules: Callable[[], RuleSet],
        filter_output: OutputFilter,
        clock: Callable[[], float],
        wake: Callable[[], None] = lambda: None,
        recording: Recording = Recording(),
        changed: Callable[[], None] = lambda: None,
    ) -> None:
        self._rules = rules
        self._filter = filter_output
        self._clock = clock
        self._wake = wake  # thread-safe: called in the database thread
        self._recording = recording
        self._changed = changed  # thread-safe too

    def record(self, connection: Connection, action: str, account: Any) -> None:
        """The events of `person/{action}` (create or update) for the account as it is now."""
        endpoint = current_endpoint(self._rules(), "person", action)
        if endpoint is None or not endpoint.emits_events:
            return
        if record_events(connection, endpoint, account, self._clock(), self._filter, self._recording):
            self._wake()
        if self._recording.changes:
            self._changed()


def current_endpoint(rules: RuleSet, controller: str, action: str) -> Endpoint | None:
    """The endpoint of the controller's current stable API version, if it has that action."""
    state = rules.controller(controller)
    version = state.versions.get(state.current_stable) if state is not None else None
    return version.endpoints.get(action) if version is not None else None
