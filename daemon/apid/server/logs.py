"""The daemon's log on standard error: twisted.logger events as text lines (`logFormat: text`,
the default) or as one JSON object per line (`logFormat: json`) for journald, Loki or
Elasticsearch, whose fields are the event's own: apid logs events with fields, not
formatted strings, so the access log's request id, endpoint and status arrive as values.
Every event of a worker process carries `worker`, its index, so that its lines are told apart.
Libraries that log with the standard library's `logging` (SQLAlchemy's pool, during a database
outage) are bridged into twisted.logger, so their records follow `logFormat` too: one event
each, a traceback as its failure, rather than plain lines from `logging`'s last-resort handler.
A plugin's own loggers (those under its package's name) are heard from `info` up, as the
daemon's own events are; libraries keep `logging`'s default, warnings and above.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import IO, Any

from twisted.logger import (
    FileLogObserver,
    FilteringLogObserver,
    ILogObserver,
    Logger,
    LogLevel,
    LogLevelFilterPredicate,
    formatEvent,
    textFileLogObserver,
)
from twisted.python.failure import Failure
from zope.interface import implementer

from apid.http.answers import dumps

# What every JSON line starts with; an event's own field of the same name does not replace it.
LINE_KEYS = ("level", "time", "namespace", "message", "failure")
PLAIN = (str, int, float, bool, type(None))


# Namespaces whose info events say nothing an operator acts on: AMP logs each connection it
# makes, and the parent of the worker processes makes one per worker it starts.
# ClientService (txredisapi's pools) logs each reconnection attempt at info; the Redis circuit
# logs an outage once (apid.store.redis)
QUIET = ("twisted.protocols.amp", "twisted.application._client_service")


def log_observer(log_format: str, out: IO[str], worker: int | None = None) -> ILogObserver:
    """The observer writing `log_format` (`text` or `json`, config.LOG_FORMATS) lines to `out`;
    in worker process `worker`, each event with that index as its `worker` field."""
    observer = FileLogObserver(out, json_line) if log_format == "json" else textFileLogObserver(out)
    levels = LogLevelFilterPredicate()
    for namespace in QUIET:
        levels.setLogLevelForNamespace(namespace, LogLevel.warn)
    filtered = FilteringLogObserver(observer, [levels])
    bridge_stdlib_logging()
    return filtered if worker is None else WorkerEvents(filtered, worker)


# logging's levels as twisted.logger's: a record at or above each threshold, at its level.
STDLIB_LEVELS = (
    (logging.CRITICAL, LogLevel.critical),
    (logging.ERROR, LogLevel.error),
    (logging.WARNING, LogLevel.warn),
    (logging.INFO, LogLevel.info),
)


# Loggers whose exceptions are worth a line, not a traceback: SQLAlchemy's pool logs one when it
# throws away a connection broken by a database outage, which it recovers from by itself and
# which apid.store already reports once.
LINE_ONLY = ("sqlalchemy.pool",)


class TwistedHandler(logging.Handler):
    """The standard library's records as twisted.logger events (STDLibLogObserver the other way
    round): namespace the logger's name, message the record's, its exception as `log_failure`."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # arguments that do not fit the message: log it as written
            message = str(record.msg)
        fields: dict[str, Any] = {"message": message}
        level = next((mapped for threshold, mapped in STDLIB_LEVELS if record.levelno >= threshold), LogLevel.debug)
        if record.exc_info and record.exc_info[1] is not None:
            _, value, traceback = record.exc_info
            if record.name.startswith(LINE_ONLY):
                fields["error"] = str(value).splitlines()[0] if str(value) else type(value).__name__
                level = LogLevel.warn if level in (LogLevel.error, LogLevel.critical) else level
            else:
                fields["log_failure"] = Failure(value, type(value), traceback)
        Logger(namespace=record.name).emit(level, "{message}", **fields)


def bridge_stdlib_logging() -> None:
    """Route the root `logging` logger (warnings and above, its default level) into
    twisted.logger (the daemon gives it no handler, so `logging` would print plain lines):
    once, however often the log begins."""
    root = logging.getLogger()
    if not any(isinstance(handler, TwistedHandler) for handler in root.handlers):
        root.addHandler(TwistedHandler())


def hear_plugins(modules: Iterable[str]) -> None:
    """Let the loggers of these plugins' packages pass their `info` records on (the root logger
    stops them below warnings): `logging.getLogger(__name__).info(...)` in a plugin is an event
    of the daemon's log, as its twisted.logger events are. A level the plugin set stays."""
    for package in {module.partition(".")[0] for module in modules}:
        logger = logging.getLogger(package)
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.INFO)


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
