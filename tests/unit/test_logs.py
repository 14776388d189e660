"""apid.server.logs: the JSON lines `logFormat: json` writes, from real twisted.logger events."""

from __future__ import annotations

import io
import json

from twisted.logger import Logger, LogLevel, LogPublisher

from apid.server.logs import json_line, log_observer


def logged(log_format: str, emit) -> str:
    out = io.StringIO()
    publisher = LogPublisher(log_observer(log_format, out))
    emit(Logger(namespace="apid.access", observer=publisher))
    return out.getvalue()


def access(log: Logger) -> None:
    log.info(
        '{client} "{method} {uri}" {status} {length} {requestId}',
        client="127.0.0.1",
        method="GET",
        uri="/v0.1/person/show/1?fields=a",
        path="/v0.1/person/show/1",
        endpoint="person/show",
        status=200,
        length=57,
        requestId="abc-123",
        duration=0.0042,
        peer=object(),
    )


def test_an_access_event_is_one_json_object_on_one_line_with_its_fields():
    text = logged("json", access)
    assert text.endswith("\n") and text.count("\n") == 1
    line = json.loads(text)
    assert line["level"] == "info" and line["namespace"] == "apid.access"
    assert line["message"] == '127.0.0.1 "GET /v0.1/person/show/1?fields=a" 200 57 abc-123'
    assert (line["requestId"], line["method"], line["path"], line["endpoint"], line["status"], line["duration"]) == (
        "abc-123",
        "GET",
        "/v0.1/person/show/1",
        "person/show",
        200,
        0.0042,
    )
    assert "peer" not in line and not any(key.startswith("log_") for key in line)  # objects stay out
    assert line["time"].endswith("Z") and line["time"][10] == "T"


def test_text_keeps_the_access_line_with_the_request_id():
    assert (
        logged("text", access)
        .rstrip()
        .endswith('[apid.access#info] 127.0.0.1 "GET /v0.1/person/show/1?fields=a" 200 57 abc-123')
    )


def test_a_failure_carries_its_traceback_and_its_level():
    def fail(log: Logger) -> None:
        try:
            raise ZeroDivisionError("division by zero")
        except ZeroDivisionError:
            log.failure("answering {path} failed", path="/v0.1/x/y")

    line = json.loads(logged("json", fail))
    assert line["level"] == "critical" and line["message"] == "answering /v0.1/x/y failed"
    assert "ZeroDivisionError" in line["failure"] and line["path"] == "/v0.1/x/y"


def test_fields_cannot_replace_the_line_keys_and_bad_text_still_makes_a_line():
    line = json.loads(
        json_line(
            {
                "log_level": LogLevel.warn,
                "log_time": 0.0,
                "log_namespace": "apid.hooks",
                "log_format": "{level} \udcff",
                "level": "forged",
                "time": 1,
                "message": ("legacy",),
                "system": "-",
            }
        )
    )
    assert (line["level"], line["time"], line["namespace"]) == ("warn", "1970-01-01T00:00:00.000Z", "apid.hooks")
    assert line["message"] == "forged \\udcff" and line["system"] == "-"
