"""One live event stream (apid.events.stream) on a real twisted.web request over Twisted's
in-memory transport: what a client that reads gets, what waits while it does not, and the
bound past which it is cut with `reset` rather than slowing anyone else."""

from __future__ import annotations

import pytest
from twisted.internet.testing import StringTransport
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request, Site

from apid.auth.tokens import Principal
from apid.events.copies import Subscriber
from apid.events.stream import Stream
from apid.problems import Unauthorized

ALICE = Principal(user_id=2, username="alice", roles=frozenset({"ROLE_USER"}), token_id="t", expires=0, issued_at=0)


@pytest.fixture
def sent() -> StringTransport:
    return StringTransport()


class Opening(Resource):
    """Opens a stream on the request it renders, as apid.events.feed does."""

    isLeaf = True

    def __init__(self, position: int, buffer: int) -> None:
        super().__init__()
        self.position, self.buffer = position, buffer
        self.opened: Stream | None = None

    def render_GET(self, request: Request) -> int:
        self.opened = Stream(request, Subscriber(ALICE), self.position, buffer=self.buffer, now=0.0)
        self.opened.start(3000, now=0.0)
        return NOT_DONE_YET


def opened(sent: StringTransport, position: int = 10, buffer: int = 3) -> Stream:
    """A stream on a real request: `GET /events` as a client's bytes, through twisted.web."""
    resource = Opening(position, buffer)
    channel = Site(resource).buildProtocol(None)
    channel.makeConnection(sent)
    channel.dataReceived(b"GET /events HTTP/1.1\r\nHost: apid\r\n\r\n")
    assert resource.opened is not None
    return resource.opened


@pytest.fixture
def stream(sent) -> Stream:
    made = opened(sent)
    made.replayed(now=0.0)
    return made


def body(sent: StringTransport) -> str:
    """The stream's text as the client reads it: the chunks of its chunked body, joined."""
    rest, text = sent.value().partition(b"\r\n\r\n")[2], b""
    while rest:
        size, _, rest = rest.partition(b"\r\n")
        length = int(size, 16)
        text, rest = text + rest[:length], rest[length + 2 :]
    return text.decode()


def test_events_go_out_in_order_each_once(stream, sent):
    stream.offer(11, "person/update", '{"a":1}', now=1.0)
    stream.offer(11, "person/update", '{"a":1}', now=1.0)  # again: not sent twice
    stream.offer(12, "person/update", None, now=1.0)  # not theirs: their position moves on
    stream.offer(13, "team/create", '{"b":2}', now=1.0)
    assert "retry: 3000\n\n" in body(sent)
    assert body(sent).count("event: ") == 2
    assert 'id: 11\nevent: person/update\ndata: {"a":1}\n\n' in body(sent)
    assert body(sent).index("id: 11") < body(sent).index("id: 13")
    assert stream.position == 13
    assert sent.value().startswith(b"HTTP/1.1 200")
    assert b"text/event-stream" in sent.value()


def test_what_waits_while_the_client_does_not_read_goes_when_it_does(stream, sent):
    stream.pauseProducing()
    before = body(sent)
    for position in (11, 12, 13):
        stream.offer(position, "person/update", f'{{"n":{position}}}', now=1.0)
    assert body(sent) == before  # held
    stream.resumeProducing()
    assert [line for line in body(sent).split("\n") if line.startswith("id: ")] == ["id: 11", "id: 12", "id: 13"]
    assert stream.open


def test_a_client_that_never_reads_is_cut_with_reset_past_the_buffer(stream, sent):
    stream.pauseProducing()
    for position in (11, 12, 13):
        stream.offer(position, "person/update", "{}", now=1.0)
    assert stream.open
    stream.offer(14, "person/update", "{}", now=1.0)  # a fourth: past the buffer of three
    assert not stream.open and stream.ended.called
    assert body(sent).endswith("event: reset\ndata: {}\n\n")
    assert "id: 11" not in body(sent)  # what was held is dropped: the client reloads instead


def test_an_ended_stream_says_why_as_a_problem(stream, sent):
    stream.end(Unauthorized("the access token was revoked; log in again"))
    assert not stream.open
    last = body(sent).rstrip("\n").split("\n")[-2:]
    assert last[0] == "event: end"
    assert '"status":401' in last[1] and "revoked" in last[1] and '"instance":"/events"' in last[1]
    stream.offer(11, "person/update", "{}", now=1.0)  # nothing more once over
    assert "id: 11" not in body(sent)


def test_live_changes_met_while_replaying_follow_the_replay(sent):
    stream = opened(sent, position=20, buffer=10)
    stream.position = 15  # Last-Event-ID: 15, the feed at 20
    stream.offer(21, "person/update", '{"live":21}', now=1.0)  # live, while replaying: waits
    for position in range(16, 21):
        stream.offer(position, "person/update", f'{{"n":{position}}}', now=1.0, live=False)
    stream.replayed(now=1.0)
    ids = [int(line[4:]) for line in body(sent).split("\n") if line.startswith("id: ")]
    assert ids == [16, 17, 18, 19, 20, 21]
