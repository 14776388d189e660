"""Every private name of Twisted and CPython that apid relies on, each under a public name here.

Twisted and CPython promise nothing about a name that starts with an underscore: a release may
rename it, change what it does or drop it, and the first sign would be apid misbehaving. So
the rest of apid reaches them only through this module, one small function or subclass per
reliance, each saying why apid needs it; tests/unit/test_private_apis.py exercises each one
for real. `scripts/twisted-range` runs that test and the HTTP layer's against the lowest and
the highest Twisted the pin in pyproject.toml allows: the thing to run before raising the pin
(README.md, Upgrading Twisted). The Twisted reliances were checked against 25.5.0 and 26.10.0,
the CPython ones against 3.11.

One name here is not private, only undocumented: `tcp.Port.numberAccepts`. Setting it fails
silently once Twisted stops reading it, so it is fenced and tested the same way.

The hooks cost the hot path nothing: `HTTPChannelHooks.dataReceived` replaces the override
`ApidChannel` had (its test of Twisted's state is the same), the other hooks run only when a
request is refused or closed early, and `running_loop` is CPython's own function, bound once.
twisted.web's client side is in `apid.private_apis.client`, imported only where apid makes
outgoing requests, so the embedded daemon does not load twisted.web.client for nothing; the
epoll reactor's private state in `apid.private_apis.reactor`, imported before any reactor is.
"""

from __future__ import annotations

import asyncio
import functools
import socket
from collections.abc import Callable
from typing import TypeVar, cast

from twisted.internet import tcp
from twisted.internet.interfaces import IConsumer, IProtocolFactory, IReactorSocket
from twisted.web.http import HTTPChannel

__all__ = [
    "HTTPChannelHooks",
    "OneAcceptPerRead",
    "adopt_listening_port",
    "asyncio_without_loop_messages",
    "running_loop",
]

PortT = TypeVar("PortT", bound=tcp.Port)


# twisted.web's server side (twisted.web.http, and twisted.protocols.basic under it)


class HTTPChannelHooks(HTTPChannel):
    """twisted.web's HTTP/1.1 connection, with what apid needs of its private state and its
    private hook under public names. Checked against Twisted 25.5.0 and 26.10.0."""

    def dataReceived(self, data: bytes) -> None:
        """After each chunk of bytes: `request_unfinished` when the chunk left a request begun
        and not whole while none is being answered. `_handlingRequest` is HTTPChannel's flag for
        a request being answered (it buffers what follows meanwhile); `_buffer` is
        LineReceiver's partial line, a request line or header not yet ended; `requests` holds
        a request whose headers or body are arriving."""
        super().dataReceived(data)
        if not self._handlingRequest and (self._buffer or self.requests):
            self.request_unfinished()

    def request_unfinished(self) -> None:
        """A chunk left a request begun and not whole (see `dataReceived`); nothing by default."""

    def _respondToBadRequestAndDisconnect(self) -> None:
        # HTTPChannel's one answer to anything it cannot parse (a request line, a header, a
        # Content-Length or Transfer-Encoding, a chunk of a chunked body) and to headers over
        # `maxHeaders` or `totalHeadersSize`: it calls this private method, which writes a bare
        # 400 and closes. No public hook exists for it.
        self.unparseable_request(
            headers_over_limits=self._receivedHeaderCount > self.maxHeaders
            or self._receivedHeaderSize > self.totalHeadersSize
        )

    def unparseable_request(self, headers_over_limits: bool) -> None:
        """twisted.web gave up parsing the request being received; `headers_over_limits` when
        it is because its headers are more than `maxHeaders` or `totalHeadersSize` bytes
        (HTTPChannel counts them in `_receivedHeaderCount` and `_receivedHeaderSize`, before it
        compares). By default Twisted's own answer: a bare 400, and the connection closed."""
        super()._respondToBadRequestAndDisconnect()

    def writes_paused(self) -> bool:
        """Whether the transport has paused the channel (`_waitingForTransport`): its write
        buffer is full, so the client is not reading what it was sent."""
        return bool(self._waitingForTransport)

    def unregister_from_transport(self) -> None:
        """Stop being the transport's producer, as `HTTPChannel.loseConnection` does before it
        closes (through `_networkProducer`, the transport or a stand-in): what a half close
        needs first too."""
        # Twisted types `_networkProducer` as an IPushProducer; it is the transport (a consumer
        # too) or Twisted's `_NoPushProducer`, and both have `unregisterProducer`.
        cast(IConsumer, self._networkProducer).unregisterProducer()

    def request_line(self) -> tuple[bytes, bytes, bytes] | None:
        """The method, path and version of the request being received, as HTTPChannel parsed
        its request line into `_command`, `_path` and `_version`; None before that line is
        parsed, when it could not be, and once the request is whole (HTTPChannel deletes them)."""
        try:
            return self._command, self._path, self._version
        except AttributeError:
            return None


# twisted.internet's TCP ports


def adopt_listening_port(
    port_class: type[PortT], reactor: IReactorSocket, fd: int, family: socket.AddressFamily, factory: IProtocolFactory
) -> PortT:
    """A `port_class` (a tcp.Port) serving the listening socket `fd`, ready to startListening.
    `IReactorSocket.adoptStreamPort` adopts a socket into a plain tcp.Port only; the
    classmethod it uses, `Port._fromListeningDescriptor`, builds any subclass. Checked against
    Twisted 25.5.0 and 26.10.0."""
    return port_class._fromListeningDescriptor(reactor, fd, family, factory)


class OneAcceptPerRead(tcp.Port):
    """A TCP port that accepts one connection each time the reactor finds it readable.
    tcp.Port.doRead accepts up to `numberAccepts` connections a time (100 at first, more each
    time it took them all), an attribute documented nowhere; set before each read, it is one.
    Checked against Twisted 25.5.0 and 26.10.0."""

    def doRead(self) -> None:
        self.numberAccepts = 1
        super().doRead()


# CPython's asyncio

# The loop running in this thread, or None: asyncio.get_running_loop() without the exception
# where none runs (the default reactor, on every plugin call). Private in name, yet listed in
# asyncio.events.__all__ for event loops written outside CPython (uvloop calls it). Bound once:
# calling it costs what calling asyncio's own does. Checked against CPython 3.11.
running_loop: Callable[[], asyncio.AbstractEventLoop | None] = asyncio._get_running_loop


@functools.cache
def asyncio_without_loop_messages() -> frozenset[str]:
    """What CPython's RuntimeError says when a coroutine awaits asyncio where no asyncio loop
    runs (a coroutine Twisted's default reactor steps): `asyncio.get_running_loop()` raising (in
    asyncio.sleep, locks, most libraries), and a future awaited under a driver that is not
    asyncio's, which hands the future back unfinished. CPython gives neither error a type of its
    own, only the message, so the messages are learned here from CPython itself, once, instead
    of being copied: a reworded message is still recognised. Call it where no asyncio loop runs.
    Checked against CPython 3.11."""
    if running_loop() is not None:
        raise RuntimeError("asyncio_without_loop_messages() learns what is raised where no asyncio loop runs")
    messages: set[str] = set()
    try:
        asyncio.get_running_loop()
    except RuntimeError as error:
        messages.add(str(error))
    loop = asyncio.new_event_loop()
    try:
        awaiting = loop.create_future().__await__()
        next(awaiting)  # the future, yielded to the driver
        awaiting.send(None)  # which hands it back before it is done, as Twisted's driver does
    except RuntimeError as error:
        messages.add(str(error))
    finally:
        loop.close()
    return frozenset(messages)
