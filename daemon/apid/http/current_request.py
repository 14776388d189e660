"""Which request the code running now serves, for the error events logged far from it.

The pipeline (`apid.calls.pipeline`) logs a controller's failure, and it is handed a call's fields,
not the HTTP request: it runs alike for a call, each element of a batch and each link of a
chain. The dispatcher (`apid.server.dispatch`) starts each API call's coroutine in a context that
holds the request's id, so that the pipeline's error events carry `requestId` and the
X-Request-ID a client got finds its traceback. A Deferred's errback runs in the context of
whatever fired it (a database thread's answer, say), so the pipeline reads the id when a call
starts, not when it fails.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, TypeVar

T = TypeVar("T")

REQUEST_ID: ContextVar[str | None] = ContextVar("apid_request_id", default=None)


def serving(request_id: str, start: Callable[..., T], *args: Any) -> T:
    """`start(*args)` with `request_id` as the request served: a coroutine it starts (Twisted's
    driver copies the context then) keeps it to the end; the caller's context is left as it was."""
    token = REQUEST_ID.set(request_id)
    try:
        return start(*args)
    finally:
        REQUEST_ID.reset(token)
