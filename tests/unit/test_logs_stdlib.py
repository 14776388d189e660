"""Records of the standard library's `logging` (SQLAlchemy's pool during a database outage)
follow `logFormat`: each one event of the daemon's log, its traceback a field (issue 39)."""

from __future__ import annotations

import io
import json
import logging

from twisted.logger import globalLogPublisher

from apid.server.logs import log_observer


def logged(log_format: str, emit) -> str:
    """What the daemon's log says of what `emit` logs with `logging`, through the observer
    apid installs (which bridges `logging` as it is made)."""
    out = io.StringIO()
    observer = log_observer(log_format, out)
    globalLogPublisher.addObserver(observer)
    try:
        emit()
    finally:
        globalLogPublisher.removeObserver(observer)
    return out.getvalue()


def library_error(logger: str, text: str) -> None:
    try:
        raise ConnectionRefusedError(text)
    except ConnectionRefusedError:
        logging.getLogger(logger).exception("Exception during reset or similar")


def test_a_logging_record_with_a_traceback_is_one_json_line():
    text = logged("json", lambda: library_error("some.library", "connection to server at 127.0.0.1 failed"))
    assert text.count("\n") == 1
    line = json.loads(text)
    assert line["level"] == "error"
    assert line["namespace"] == "some.library"
    assert line["message"] == "Exception during reset or similar"
    assert "ConnectionRefusedError: connection to server at 127.0.0.1" in line["failure"]


def test_the_pools_error_in_an_outage_is_one_warning_without_a_traceback():
    """The pool recovers from a broken connection by itself, and apid.store reports the outage."""
    text = logged("json", lambda: library_error("sqlalchemy.pool.impl.QueuePool", "server closed\n\tdetail"))
    line = json.loads(text)
    assert (line["level"], line["error"]) == ("warn", "server closed")
    assert "failure" not in line


def test_a_warning_keeps_its_level_and_its_arguments():
    text = logged("json", lambda: logging.getLogger("txredisapi").warning("lost %s after %d s", "redis", 2))
    line = json.loads(text)
    assert (line["level"], line["namespace"], line["message"]) == ("warn", "txredisapi", "lost redis after 2 s")
    assert "failure" not in line


def test_text_format_writes_the_record_as_a_text_event():
    text = logged("text", lambda: logging.getLogger("sqlalchemy.pool").critical("gone"))
    assert text.count("\n") == 1 and "[sqlalchemy.pool#critical] gone" in text


def test_info_records_stay_below_the_root_level():
    assert logged("json", lambda: logging.getLogger("txredisapi").info("connected")) == ""


def test_the_bridge_is_installed_once():
    logged("json", lambda: None)
    logged("json", lambda: None)
    assert [type(handler).__name__ for handler in logging.getLogger().handlers].count("TwistedHandler") == 1
