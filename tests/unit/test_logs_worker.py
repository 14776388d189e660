"""apid.server.logs in a worker process: every event carries the worker's index."""

from __future__ import annotations

import io
import json

from twisted.logger import Logger, LogPublisher

from apid.server.logs import log_observer


def test_every_json_line_of_a_worker_names_it_and_an_events_own_field_stays():
    out = io.StringIO()
    log = Logger(namespace="apid.daemon", observer=LogPublisher(log_observer("json", out, worker=1)))
    log.error("apid: cannot start: {error}", error="broken")
    log.info("about another worker", worker=0)
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert (first["worker"], first["error"], first["message"]) == (1, "broken", "apid: cannot start: broken")
    assert second["worker"] == 0


def test_a_single_process_names_no_worker():
    out = io.StringIO()
    Logger(namespace="apid.daemon", observer=LogPublisher(log_observer("json", out))).info("apid stopped")
    assert "worker" not in json.loads(out.getvalue())
