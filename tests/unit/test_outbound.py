"""The HTTP client's connections (apid.http.client) against raw servers on loopback.

A connection outlives an answer exactly when RFC 9112 section 9.3 says so; the servers here
never close a connection themselves, so the number of connections they see is the client's
decision alone. A pooled connection found closed before any answer is replaced once, for a
body that can be sent again; a fresh connection's failure stands.
"""

from __future__ import annotations

import pytest
import pytest_twisted
import treq
from treq.client import HTTPClient
from twisted.internet import reactor
from twisted.web.client import ResponseNeverReceived

from apid.http.client import BytesBody, agent, connection_pool, keeps_connection
from receiver import RawReceiver

OK_11 = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


@pytest.mark.parametrize(
    "version, connection, kept",
    [
        ((b"HTTP", 1, 1), [], True),
        ((b"HTTP", 1, 1), [b"keep-alive"], True),
        ((b"HTTP", 1, 1), [b"close"], False),
        ((b"HTTP", 1, 1), [b"Close"], False),
        ((b"HTTP", 1, 1), [b"upgrade, close"], False),
        ((b"HTTP", 1, 0), [], False),
        ((b"HTTP", 1, 0), [b"Keep-Alive"], True),
        ((b"HTTP", 1, 0), [b"keep-alive", b"close"], False),
    ],
)
def test_the_persistence_rule_of_rfc_9112(version, connection, kept):
    assert keeps_connection(version, connection) is kept


class Client:
    def __init__(self) -> None:
        self.pool = connection_pool(reactor, per_host=2)
        self.http = HTTPClient(agent(reactor, self.pool, 5))

    async def post(self, url: str, body: bytes | BytesBody | None = None) -> tuple[int, bytes]:
        """POST `body` (by default `{}` as a body that can be sent again) and read the answer."""
        data = BytesBody(b"{}") if body is None else body
        response = await self.http.post(url, data=data, allow_redirects=False)
        return response.code, await treq.content(response)


@pytest.fixture
def client():
    client = Client()
    yield client
    pytest_twisted.blockon(client.pool.closeCachedConnections())


@pytest.mark.parametrize(
    "answer, connections",
    [
        (OK_11, 1),
        (b"HTTP/1.1 204 No Content\r\n\r\n", 1),
        (b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 2\r\n\r\nok", 1),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", 5),
        (b"HTTP/1.0 204 No Content\r\n\r\n", 5),  # Python's http.server, by default
        (b"HTTP/1.1 200 OK\r\nConnection: Close\r\nContent-Length: 2\r\n\r\nok", 5),
    ],
)
@pytest_twisted.ensureDeferred
async def test_a_connection_outlives_an_answer_exactly_when_http_says_so(client, answer, connections):
    server = RawReceiver(answer)
    try:
        for _ in range(5):
            assert (await client.post(server.origin + "/in"))[0] in (200, 204)
        assert (server.requests, server.connections) == (5, connections)
    finally:
        server.close()


@pytest_twisted.ensureDeferred
async def test_a_pooled_connection_closed_before_answering_is_replaced_once(client):
    server = RawReceiver(OK_11, answers_per_connection=1)  # a pooled connection is always stale
    try:
        for _ in range(20):
            assert await client.post(server.origin + "/in") == (200, b"ok")
        # the first on a fresh connection; each later one on a stale one, then on a fresh one
        assert (server.requests, server.connections) == (39, 20)
    finally:
        server.close()


@pytest_twisted.ensureDeferred
async def test_a_body_that_cannot_be_sent_again_is_not_resent(client):
    server = RawReceiver(OK_11, answers_per_connection=1)
    try:
        assert await client.post(server.origin + "/in", b"{}") == (200, b"ok")
        with pytest.raises(ResponseNeverReceived):
            await client.post(server.origin + "/in", b"{}")  # treq's FileBodyProducer reads once
        assert server.requests == 2
    finally:
        server.close()


@pytest_twisted.ensureDeferred
async def test_a_fresh_connection_closed_before_answering_is_a_failure(client):
    server = RawReceiver(OK_11, answers_per_connection=0)
    try:
        for _ in range(3):
            with pytest.raises(ResponseNeverReceived):
                await client.post(server.origin + "/in")
        assert (server.requests, server.connections) == (3, 3)  # none sent twice
    finally:
        server.close()
