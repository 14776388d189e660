"""One delivery attempt: check the URL again, sign, POST with treq, and say what came of it.

The whole exchange (connecting, sending, the status line and the body) is bounded by one
timeout; redirects are not followed (a 3xx is a failure, as Standard Webhooks says); at most
`per_host` deliveries are in flight to one host. The receiver's body is read (to keep the
connection reusable) but at most `BODY_LIMIT` bytes of it. Connections are kept or closed as
HTTP says, and a delivery that finds a pooled connection closed before any answer is sent once
more on a fresh one (apid.http.client), within the same timeout.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from email.utils import parsedate_to_datetime

from treq.client import HTTPClient
from treq.content import collect
from twisted.internet.defer import Deferred, DeferredSemaphore, TimeoutError
from twisted.internet.interfaces import IReactorTime
from twisted.python.failure import Failure
from twisted.web.client import ResponseNeverReceived
from twisted.web.iweb import IResponse

from apid.hooks.queue import Attempt, Claimed, Outcome
from apid.hooks.signing import signature_header
from apid.hooks.urls import UrlRefused, check_url
from apid.http.client import BytesBody, agent, connection_pool

BODY_LIMIT = 64 * 1024
THROTTLING = (429, 503)
RETRY_AFTER_CAP = 86400.0  # a receiver may ask for a pause, not for the hook to stop for good


class _BodyTooLarge(Exception):
    pass


def retry_after(value: bytes | None, now: float) -> float | None:
    """Seconds to wait from a Retry-After header (delay-seconds or an HTTP date); None for
    anything else. Delay-seconds are ASCII digits: str.isdigit() alone also admits "²"."""
    if value is None:
        return None
    text = value.decode("latin-1").strip()
    if text.isascii() and text.isdigit():
        return float(text)
    try:
        return max(0.0, parsedate_to_datetime(text).timestamp() - now)
    except (TypeError, ValueError):
        return None


class Deliverer:
    def __init__(self, *, reactor: IReactorTime, allowed_origins: Iterable[str], timeout: float, per_host: int) -> None:
        self._reactor = reactor
        self._allowed = tuple(allowed_origins)
        self._timeout = timeout
        self._per_host = per_host
        self._pool = connection_pool(reactor, per_host)
        self._client = HTTPClient(agent(reactor, self._pool, timeout))
        self._slots: dict[str, DeferredSemaphore] = {}
        self._refusals: dict[str, str | None] = {}  # url -> why it may not be contacted

    def _refusal(self, url: str) -> str | None:
        """Why `url` may not be contacted, or None; the answer for a URL cannot change while
        the daemon runs (allowedOrigins is read at start), so it is worked out once per URL."""
        if url not in self._refusals:
            try:
                check_url(url, self._allowed)
                self._refusals[url] = None
            except UrlRefused as refused:
                self._refusals[url] = f"not contacted: {refused}"
        return self._refusals[url]

    def close(self) -> Deferred[None]:
        return self._pool.closeCachedConnections()

    def busy(self, host: str) -> int:
        """Deliveries to `host` in flight or waiting for a slot."""
        slot = self._slots.get(host)
        return 0 if slot is None else (slot.limit - slot.tokens) + len(slot.waiting)

    async def deliver(self, message: Claimed) -> Attempt:
        slot = self._slots.get(message.host)
        if slot is None:
            slot = self._slots[message.host] = DeferredSemaphore(self._per_host)
        await slot.acquire()
        try:
            return await self._attempt(message)
        finally:
            slot.release()
            if slot.tokens == slot.limit and not slot.waiting:
                del self._slots[message.host]

    async def _attempt(self, message: Claimed) -> Attempt:
        started, started_at = self._reactor.seconds(), time.time()

        def attempt(
            outcome: Outcome, status: int | None = None, error: str | None = None, wait: float | None = None
        ) -> Attempt:
            return Attempt(
                message.id,
                message.hook_id,
                outcome,
                started_at,
                (self._reactor.seconds() - started) * 1000,
                status,
                error,
                wait,
            )

        refusal = self._refusal(message.url)
        if refusal is not None:
            return attempt(Outcome.REFUSED, error=refusal)
        exchange = Deferred.fromCoroutine(self._post(message))
        # cancelling the request surfaces as whatever the connection saw; say what it was
        exchange.addTimeout(self._timeout, self._reactor, onTimeoutCancel=lambda *_: Failure(TimeoutError()))
        try:
            response = await exchange
        except TimeoutError:
            return attempt(Outcome.FAILED, error=f"no complete answer within {self._timeout:g} s")
        except ResponseNeverReceived:
            return attempt(Outcome.FAILED, error="the connection closed without an answer")
        except _BodyTooLarge:
            return attempt(Outcome.FAILED, error=f"the answer's body exceeded {BODY_LIMIT} bytes")
        except Exception as failure:
            return attempt(Outcome.FAILED, error=f"{type(failure).__name__}: {failure}".strip().rstrip(":"))
        code = response.code
        if 200 <= code < 300:
            return attempt(Outcome.DELIVERED, code)
        if code == 410:
            return attempt(Outcome.GONE, code, "the receiver answered 410 Gone: the hook was disabled")
        wait = retry_after(response.headers.getRawHeaders(b"retry-after", [None])[0], time.time())
        if code in THROTTLING and wait is not None:
            wait = min(wait, RETRY_AFTER_CAP)
            return attempt(Outcome.DEFERRED, code, f"the receiver asked to retry after {wait:g} s", wait)
        return attempt(Outcome.FAILED, code, f"the receiver answered HTTP {code}")

    async def _post(self, message: Claimed) -> IResponse:
        timestamp = int(time.time())
        headers: dict[bytes | str, bytes | str] = {  # the type treq takes
            "Content-Type": "application/json",
            "User-Agent": "apid-webhooks",
            "webhook-id": message.id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": signature_header(list(message.secrets), message.id, timestamp, message.payload),
        }
        response = await self._client.post(
            message.url,
            data=BytesBody(message.payload),  # can be sent again if a pooled connection was dead
            headers=headers,
            allow_redirects=False,
            unbuffered=True,  # the body is read below, within the timeout and the size limit
        )
        received = 0

        def count(chunk: bytes) -> None:
            nonlocal received
            received += len(chunk)
            if received > BODY_LIMIT:
                raise _BodyTooLarge()

        await collect(response, count)
        return response
