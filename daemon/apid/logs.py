"""The daemon's log on standard error: twisted.logger events as text lines (`logFormat: text`,
the default) or as one JSON object per line (`logFormat: json`) for journald, Loki or
Elasticsearch, whose fields are the event's own: apid logs events with fields, not
formatted strings, so the access log's request id, endpoint and status arrive as values.
Every event of a worker process carries `worker`, its index, so that its lines are told apart.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import IO, Any

from twisted.logger import (
    FileLogObserver,
    FilteringLogObserver,
    ILogObserver,
    LogLevel,
    LogLevelFilterPredicate,
    formatEvent,
    textFileLogObserver,
)
from zope.interface import implementer

from apid.http import dumps

# What every JSON line starts with; an event's own field of the same name does not replace it.
LINE_KEYS = ("level", "time", "namespace", "message", "failure")
PLAIN = (str, int, float, bool, type(None))


# Namespaces whose info events say nothing an operator acts on: AMP logs each connection it
# makes, and the parent of the worker processes makes one per worker it starts.
QUIET = ("twisted.protocols.amp",)


def log_observer(log_format: str, out: IO[str], worker: int | None = None) -> ILogObserver:
    """The observer writing `log_format` (`text` or `json`, config.LOG_FORMATS) lines to `out`;
    in worker process `worker`, each event with that index as its `worker` field."""
    observer = FileLogObserver(out, json_line) if log_format == "json" else textFileLogObserver(out)
    levels = LogLevelFilterPredicate()
    for namespace in QUIET:
        levels.setLogLevelForNamespace(namespace, LogLevel.warn)
    filtered = FilteringLogObserver(observer, [levels])
    return filtered if worker is None else WorkerEvents(filtered, worker)


@implementer(ILogObserver)
class WorkerEvents:
    """Passes each event on with `worker` set to this process's index (an event's own stays)."""

    def __init__(self, observer: ILogObserver, index: int) -> None:
        self._observer = observer
        self._index = index

    def __call__(self, event: dict[str, Any]) -> None:
        event.setdefault("worker", self._index)
        self._observer(event)


def json_line(event: dict[str, Any]) -> str:
    """One event as one line of JSON: `level`, `time` (ISO 8601, UTC), `namespace`, `message`
    (the text line's message), the traceback of a failure as `failure`, then every field of
    the event that is a plain value (a string, number, boolean or null), such as the access
    log's `requestId`, `method`, `path`, `endpoint`, `status` and `duration`."""
    level = event.get("log_level", LogLevel.info)
    line: dict[str, Any] = {
        "level": level.name,
        "time": iso_time(event.get("log_time", time.time())),
        "namespace": event.get("log_namespace") or "-",
        "message": formatEvent(event),
    }
    failure = event.get("log_failure")
    if failure is not None:
        line["failure"] = failure.getTraceback()
    for key, value in event.items():
        if isinstance(value, PLAIN) and not key.startswith("log_") and key not in LINE_KEYS:
            line[key] = value
    try:
        return dumps(line).decode("utf-8") + "\n"
    except TypeError:  # a string that is not Unicode (a lone surrogate, from a file name perhaps)
        line = {key: _text(value) for key, value in line.items()}
        return dumps(line).decode("utf-8") + "\n"


def _text(value: Any) -> Any:
    return value.encode("utf-8", "backslashreplace").decode("utf-8") if isinstance(value, str) else value


def iso_time(seconds: float) -> str:
    """`2025-01-31T12:00:00.123Z`: UTC, to the millisecond."""
    moment = datetime.fromtimestamp(seconds, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
