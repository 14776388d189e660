"""Klein for the paths that are not API calls, and the one way every listener's errors leave.

API calls are routed by `apid.server.dispatch`; Klein routes the public endpoints, plugins' `@route`
paths and the metrics port's `/metrics`. Whatever any of them raises is answered here as an
RFC 9457 problem: a problem as it is, Klein's (werkzeug's) routing errors as the 404 or 405
they mean, never Klein's HTML pages; anything else is logged and answered a 500.
"""

from __future__ import annotations

from typing import Any

from klein import Klein
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.http import Request
from werkzeug.exceptions import HTTPException
from werkzeug.exceptions import MethodNotAllowed as RoutingMethodNotAllowed
from werkzeug.exceptions import NotFound as RoutingNotFound
from werkzeug.routing import RequestRedirect

from apid.http.answers import request_id, write_problem
from apid.problems import BadRequest, InternalError, MethodNotAllowed, NotFound, Problem

log = Logger(namespace="apid.routes")


def problem_of(request: Request, failure: Failure) -> Problem:
    """The problem that answers a request whose handling or routing failed with `failure`."""
    error = failure.value
    if isinstance(error, Problem):
        return error
    if isinstance(error, RoutingMethodNotAllowed):
        return MethodNotAllowed(
            f"{request.path.decode('utf-8', 'replace')} is not called with {request.method.decode('ascii', 'replace')}",
            allow=sorted(error.valid_methods or []),
        )
    if isinstance(error, RequestRedirect | RoutingNotFound):
        # werkzeug would redirect `//v0.1//person` to its tidy form, naming the URL built from
        # the client's Host header: a path apid does not serve is simply not found
        return NotFound(f"no resource at {request.path.decode('utf-8', 'replace')}")
    if isinstance(error, HTTPException):
        return BadRequest(error.description or "the request could not be routed")
    log.failure(
        "unexpected error answering {path}",
        failure=failure,
        path=request.path.decode("utf-8", "replace"),
        requestId=request_id(request),
        endpoint=getattr(request, "endpoint_name", None),
    )
    return InternalError("the request failed; the error was logged")


def answer_failure(request: Request, failure: Failure) -> bytes:
    """The body of the problem that answers `failure` (its status and headers set)."""
    return write_problem(request, problem_of(request, failure))


def klein_routes() -> Klein:
    """A Klein application whose every error leaves as a problem (`problem_of`)."""
    app = Klein()

    def answer(request: Any, failure: Failure) -> bytes:
        # Klein types the request it hands an error handler as an IRequest: it is the site's Request
        return answer_failure(request, failure)

    app.handle_errors(Exception)(answer)
    return app
