"""The one router of API calls: their paths follow apid's own grammar (`apid.calls.paths`), so
splitting the path into its segments is the whole of routing them.

Werkzeug's matching and Klein's per-request plumbing around it (a URL map bound per request,
the host and scheme worked out, two Deferreds) were a sixth of a call's time in the profile of
docs/benchmarks.md. `ApiDispatch` answers every path whose first segment is an API prefix
(`v0.1`, `b0.1-2`, ...) itself: two to four plain segments called with an API method reach the
handler; any other such path is a 404 (an empty or encoded-slash segment, too few or too many
segments) or a 405 (a method no API call is made with). Every other path goes to the Klein
routes unchanged: the public endpoints and plugins' `@route` paths, a plugin's route owning a
first segment that looks like a prefix (`claimed`) included.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Coroutine
from typing import Any

from twisted.internet.defer import CancelledError, Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.http import NO_BODY_CODES
from twisted.web.resource import IResource, Resource
from twisted.web.server import NOT_DONE_YET, Request

from apid.calls.paths import PREFIX_BYTES
from apid.http.answers import request_id
from apid.http.current_request import serving
from apid.problems import MethodNotAllowed, NotFound, Problem

log = Logger(namespace="apid.dispatch")

ENCODED_SLASH = re.compile(rb"%2f", re.IGNORECASE)  # a slash inside a segment, once decoded

# The handler of an API call: the request and its prefix, controller, action and id.
ApiHandler = Callable[..., Coroutine[Any, Any, bytes]]
# What answers a failed call: the body of its problem.
FailureRenderer = Callable[[Request, Failure], bytes]


class ApiDispatch(Resource):
    isLeaf = True

    def __init__(
        self,
        *,
        handle: ApiHandler,
        failed: FailureRenderer,
        methods: Collection[str],
        routes: IResource,
        claimed: Collection[bytes],
    ) -> None:
        """`routes` answers what is not an API call, and every path whose first segment is
        `claimed` by one of its routes (a plugin may own `/v1.0/...`, and its route wins there)."""
        super().__init__()
        self._handle = handle
        self._failed = failed
        self._methods = frozenset(method.encode("ascii") for method in methods)
        self._allow = sorted(methods)
        self._routes = routes
        self._claimed = frozenset(claimed)

    def render(self, request: Request) -> Any:
        segments = request.postpath  # unquoted, and UTF-8 (`TextPaths` refused any other)
        if not segments or not PREFIX_BYTES.fullmatch(segments[0]) or segments[0] in self._claimed:
            return self._routes.render(request)
        if segments[-1] == b"":
            segments = segments[:-1]  # a trailing slash
        if (
            not 2 <= len(segments) <= 4
            or request.method not in self._methods
            or b"" in segments
            or ENCODED_SLASH.search(request.path)
        ):
            return self._failed(request, Failure(self._odd(request, segments)))
        gone = request.notifyFinish()
        # its errors are logged with its id (`apid.http.current_request`)
        running = serving(
            request_id(request),
            Deferred.fromCoroutine,
            self._handle(request, *(segment.decode() for segment in segments)),
        )
        # a client that hangs up cancels its call (an asyncio action's task with it)
        gone.addErrback(lambda _: running.cancel())
        running.addCallbacks(_write, self._answer_failure, callbackArgs=(request, gone), errbackArgs=(request, gone))
        return NOT_DONE_YET

    def _odd(self, request: Request, segments: list[bytes]) -> Problem:
        """The problem of an API path no call can be made on: its shape (404), else its method (405)."""
        if not 2 <= len(segments) <= 4 or b"" in segments or ENCODED_SLASH.search(request.path):
            return NotFound(f"no resource at {request.path.decode('utf-8', 'replace')}")
        path, method = request.path.decode("utf-8", "replace"), request.method.decode("ascii", "replace")
        return MethodNotAllowed(f"{path} is not called with {method}", allow=self._allow)

    def _answer_failure(self, failure: Failure, request: Request, gone: Deferred[None]) -> None:
        if gone.called:
            if not failure.check(CancelledError):
                log.failure(
                    "a call failed after its client hung up",
                    failure=failure,
                    requestId=request_id(request),
                    endpoint=getattr(request, "endpoint_name", None),
                )
            return
        _write(self._failed(request, failure), request, gone)


def _write(body: bytes, request: Request, gone: Deferred[None]) -> None:
    if gone.called:
        return
    if request.code not in NO_BODY_CODES:
        request.setHeader(b"Content-Length", b"%d" % len(body))  # rather than chunked: one write
    request.write(body)
    request.finish()
