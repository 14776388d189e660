"""API calls straight to their handler: their paths follow apid's own grammar (`apid.routing`),
so splitting the path into its segments is the whole of routing them.

Werkzeug's matching and Klein's per-request plumbing around it (a URL map bound per request,
the host and scheme worked out, two Deferreds) were a sixth of a call's time in the profile of
docs/benchmarks.md. `ApiDispatch` takes a path of two to four plain segments whose first is
an API prefix (`v0.1`, `b0.1-2`, ...) called with an API method, and hands every other request
to the Klein application unchanged: its answers to odd paths (an empty or encoded-slash
segment, too many segments, an unknown method) and the public and plugin routes stay Klein's.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Coroutine
from typing import Any

from twisted.internet.defer import CancelledError, Deferred
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.http import NO_BODY_CODES, Request
from twisted.web.resource import IResource, Resource
from twisted.web.server import NOT_DONE_YET

from apid.routing import PREFIX_BYTES

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
        handle: ApiHandler,
        failed: FailureRenderer,
        methods: Collection[str],
        routes: IResource,
        claimed: Collection[bytes],
    ) -> None:
        """`routes` answers what is not an API call, and every path whose first segment is
        `claimed` by one of its routes (a plugin may own `/v1.0/...`, and its route wins there
        as it would in Klein)."""
        super().__init__()
        self._handle = handle
        self._failed = failed
        self._methods = frozenset(method.encode("ascii") for method in methods)
        self._routes = routes
        self._claimed = frozenset(claimed)

    def render(self, request: Request) -> Any:
        segments = request.postpath  # unquoted, and UTF-8 (`TextPaths` refused any other)
        if segments and not segments[-1]:
            segments = segments[:-1]  # a trailing slash
        if (
            not 2 <= len(segments) <= 4
            or request.method not in self._methods
            or not PREFIX_BYTES.fullmatch(segments[0])
            or segments[0] in self._claimed
            or b"" in segments
            or ENCODED_SLASH.search(request.path)
        ):
            return self._routes.render(request)
        gone = request.notifyFinish()
        running = Deferred.fromCoroutine(self._handle(request, *(segment.decode() for segment in segments)))
        # a client that hangs up cancels its call (an asyncio action's task with it)
        gone.addErrback(lambda _: running.cancel())
        running.addCallbacks(_write, self._answer_failure, callbackArgs=(request, gone), errbackArgs=(request, gone))
        return NOT_DONE_YET

    def _answer_failure(self, failure: Failure, request: Request, gone: Deferred[None]) -> None:
        if gone.called:
            if not failure.check(CancelledError):
                log.failure("a call failed after its client hung up", failure=failure)
            return
        _write(self._failed(request, failure), request, gone)


def _write(body: bytes, request: Request, gone: Deferred[None]) -> None:
    if gone.called:
        return
    if request.code not in NO_BODY_CODES:
        request.setHeader(b"Content-Length", b"%d" % len(body))  # rather than chunked: one write
    request.write(body)
    request.finish()
