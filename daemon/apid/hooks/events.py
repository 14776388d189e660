"""Events: after a successful non-safe call, one message per subscribed hook, written before
the call answers.

Each message's `data` is the call's output as the hook's **owner** would see it: filtered by
the RESPONSE fields of the owner's roles, never the caller's. An owner whose roles are not in
the endpoint's HOOK list gets nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from apid.http import dumps
from apid.iostate import Endpoint
from apid.problems import InternalError
from apid.store.database import Database
from apid.hooks.store import NewMessage, insert_messages, subscribers

log = Logger(namespace="apid.hooks")


def message_id() -> str:
    return "msg_" + uuid.uuid4().hex


def payload(message: str, type_: str, moment: float, data: Any) -> str:
    """The JSON body delivered: `{id, type, timestamp, data}`, as exact text to store and sign."""
    timestamp = datetime.fromtimestamp(moment, timezone.utc).isoformat(timespec="milliseconds")
    return dumps({"id": message, "type": type_, "timestamp": timestamp, "data": data}).decode("utf-8")


class EventRecorder:
    """Called by the pipeline after every successful non-safe call of a hookable endpoint."""

    def __init__(
        self,
        reactor: IReactorTime,
        db: Database,
        filter_output: Callable[[Any, frozenset[str]], Any],
        wake: Callable[[], None],
    ) -> None:
        self._reactor = reactor
        self._db = db
        self._filter = filter_output
        self._wake = wake

    async def record(self, endpoint: Endpoint, output: Any) -> None:
        """Look the subscribers up (a read: most calls have none), then write their messages."""
        now = self._reactor.seconds()
        type_ = endpoint.path
        try:
            found = await self._db.read(subscribers, endpoint.controller, endpoint.action)
            messages = []
            for subscriber in found:
                if endpoint.hook_roles & subscriber.roles:
                    data = self._filter(output, endpoint.response_fields(endpoint.granted(subscriber.roles)))
                    mid = message_id()
                    messages.append(NewMessage(mid, subscriber.hook_id, type_, payload(mid, type_, now, data)))
            if messages:
                await self._db.write(insert_messages, messages, now)
        except Exception:
            log.failure("the webhook events of {endpoint} could not be recorded", endpoint=type_)
            raise InternalError(
                f"{type_} was carried out, but its webhook events could not be recorded; the error was logged"
            ) from None
        if messages:
            self._wake()
