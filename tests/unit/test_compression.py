"""Gzip for the answers worth it, on apid's site in memory: whole bodies compressed in one go
with their Content-Length, streamed ones chunked; small, binary, encoded and bodiless answers
plain; ETags of compressed answers marked `-gzip`, and read back as the plain tag."""

from __future__ import annotations

import gzip
import zlib

import pytest
from twisted.web.http import Request
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET

from apid.http.compression import (
    FAST_ABOVE,
    MAX_BYTES,
    MIN_BYTES,
    compressible,
    compressing,
    gzip_tag,
    window_bits,
)
from apid.http.site import TextPaths
from http_in_memory import Connection

LARGE = b'{"records": [' + b",".join(b'{"id": %d, "name": "record %d"}' % (n, n) for n in range(200)) + b"]}"
SMALL = b'{"id": 1}'
TAG = b'"0123abcd"'


class Answers(Resource):
    """Answers `body` as the daemon does (`/whole`: NOT_DONE_YET, then Content-Length and one
    write; `/streamed`: two writes without a length; `/sync`: returned from render), with a
    strong ETag and 304 for If-None-Match naming it. Records the conditions it was sent."""

    isLeaf = True

    def __init__(
        self,
        body: bytes,
        content_type: bytes = b"application/json",
        encoding: bytes | None = None,
        cookie: bool = False,
    ) -> None:
        super().__init__()
        self.body = body
        self.content_type = content_type
        self.encoding = encoding
        self.cookie = cookie
        self.seen: dict[str, bytes | None] = {}

    def render(self, request: Request) -> bytes | int:
        self.seen = {name: request.getHeader(name.encode()) for name in ("if-none-match", "if-match")}
        request.setHeader(b"Content-Type", self.content_type)
        request.setHeader(b"ETag", TAG)
        if self.encoding is not None:
            request.setHeader(b"Content-Encoding", self.encoding)
        if self.cookie:
            request.addCookie(b"refresh", b"secret", httpOnly=True)
        body = self.body
        if self.seen["if-none-match"] == TAG:
            request.setResponseCode(304)
            body = b""
        if request.path == b"/sync":
            return body
        if request.path == b"/streamed":
            half = len(body) // 2
            request.write(body[:half])
            request.write(body[half:])
        else:
            if request.code != 304:
                request.setHeader(b"Content-Length", b"%d" % len(body))
            request.write(body)
        request.finish()
        return NOT_DONE_YET


def serve(resource: Answers, path: str = "/whole", method: str = "GET", **headers: str):
    connection = Connection()
    connection.site.resource = compressing(TextPaths(resource))
    lines = "".join(f"{name.replace('_', '-')}: {value}\r\n" for name, value in headers.items())
    connection.send(f"{method} {path} HTTP/1.1\r\nHost: x\r\n{lines}\r\n".encode())
    return connection


def test_a_large_json_answer_is_compressed_whole_with_its_length_and_a_gzip_tag():
    answer = serve(Answers(LARGE), accept_encoding="gzip, deflate, br").only_answer()
    assert answer.status == 200
    assert answer.headers["Content-Encoding"] == "gzip"
    assert int(answer.headers["Content-Length"]) == len(answer.body) < len(LARGE) / 4
    assert gzip.decompress(answer.body) == LARGE
    assert answer.headers["ETag"] == '"0123abcd-gzip"'
    assert "Accept-Encoding" in answer.headers.get_all("Vary")


def test_a_large_answer_is_compressed_at_the_faster_level():
    body = LARGE * (FAST_ABOVE // len(LARGE) + 1)
    answer = serve(Answers(body), accept_encoding="gzip").only_answer()
    assert answer.headers["Content-Encoding"] == "gzip"
    assert gzip.decompress(answer.body) == body
    assert answer.body[8] == 4  # the gzip header's XFL: 4 for the fastest levels, 0 for level 6


def test_an_answer_returned_from_render_is_compressed_too():
    answer = serve(Answers(LARGE), "/sync", accept_encoding="gzip").only_answer()
    assert answer.headers["Content-Encoding"] == "gzip"
    assert gzip.decompress(answer.body) == LARGE


@pytest.mark.parametrize("accept", [None, "identity", "deflate, br", "gzip;q=0", "br, gzip; q=0.0"])
def test_a_client_that_does_not_take_gzip_gets_the_plain_answer(accept):
    headers = {} if accept is None else {"accept_encoding": accept}
    answer = serve(Answers(LARGE), **headers).only_answer()
    assert (answer.body, answer.headers["ETag"]) == (LARGE, TAG.decode())
    assert "Content-Encoding" not in answer.headers


@pytest.mark.parametrize(
    "resource",
    [
        Answers(SMALL),
        Answers(b"x" * (MIN_BYTES - 1)),
        Answers(b"x" * (MAX_BYTES + 1)),
        Answers(LARGE, b"image/png"),
        Answers(LARGE, b"application/octet-stream"),
        Answers(LARGE, cookie=True),
    ],
    ids=["small", "just-below-the-threshold", "over-the-bound", "binary", "octet-stream", "setting-a-cookie"],
)
def test_small_huge_and_binary_answers_stay_plain(resource):
    answer = serve(resource, accept_encoding="gzip").only_answer()
    assert answer.body == resource.body
    assert "Content-Encoding" not in answer.headers
    assert answer.headers["ETag"] == TAG.decode()


def test_an_answer_encoded_already_is_left_alone():
    precompressed = gzip.compress(LARGE)
    answer = serve(Answers(precompressed, encoding=b"gzip"), accept_encoding="gzip").only_answer()
    assert answer.body == precompressed and answer.headers["ETag"] == TAG.decode()


def test_problems_and_text_are_compressed():
    for content_type in (b"application/problem+json", b"text/plain; version=0.0.4; charset=utf-8"):
        answer = serve(Answers(LARGE, content_type), accept_encoding="gzip").only_answer()
        assert gzip.decompress(answer.body) == LARGE, content_type


def test_a_head_request_gets_the_headers_of_the_get():
    get = serve(Answers(LARGE), accept_encoding="gzip").only_answer()
    connection = serve(Answers(LARGE), method="HEAD", accept_encoding="gzip")
    head = connection.transport.value().partition(b"\r\n\r\n")
    assert head[2] == b""  # no body
    assert b"Content-Encoding: gzip" in head[0]
    assert b"Content-Length: %d" % len(get.body) in head[0]
    assert b'ETag: "0123abcd-gzip"' in head[0]


def test_a_streamed_answer_is_compressed_as_it_is_written():
    raw = serve(Answers(LARGE), "/streamed", accept_encoding="gzip").transport.value()
    head, _, chunked = raw.partition(b"\r\n\r\n")
    assert b"Transfer-Encoding: chunked" in head and b"Content-Encoding: gzip" in head
    body = b""
    while True:
        size, _, chunked = chunked.partition(b"\r\n")
        if int(size, 16) == 0:
            break
        body, chunked = body + chunked[: int(size, 16)], chunked[int(size, 16) + 2 :]
    assert gzip.decompress(body) == LARGE


def test_a_gzip_tag_sent_back_is_read_as_the_plain_tag_and_the_304_names_what_the_client_holds():
    resource = Answers(LARGE)
    answer = serve(resource, accept_encoding="gzip", if_none_match='"0123abcd-gzip"').only_answer()
    assert resource.seen["if-none-match"] == TAG
    assert (answer.status, answer.body, answer.headers["ETag"]) == (304, b"", '"0123abcd-gzip"')
    assert "Accept-Encoding" in answer.headers.get_all("Vary")

    plain = serve(resource, accept_encoding="gzip", if_none_match=TAG.decode()).only_answer()
    assert (plain.status, plain.headers["ETag"]) == (304, TAG.decode())


def test_if_match_is_read_as_the_plain_tag_whatever_the_client_accepts():
    resource = Answers(SMALL)
    serve(resource, if_match='"0123abcd-gzip", W/"other-gzip", "third"')
    assert resource.seen["if-match"] == b'"0123abcd", W/"other", "third"'
    serve(resource, if_match='"0123abcd"')
    assert resource.seen["if-match"] == TAG


def test_tags_and_types():
    assert gzip_tag(b'"abc"') == b'"abc-gzip"'
    assert gzip_tag(b'W/"abc"') == b'W/"abc"'
    assert compressible(b"application/json") and compressible(b"Application/Problem+JSON; charset=utf-8")
    assert compressible(b"text/html; charset=utf-8") and not compressible(None)
    assert not compressible(b"application/octet-stream") and not compressible(b"image/svg")


@pytest.mark.parametrize("size", [MIN_BYTES, 5000, 40_000, MAX_BYTES])
def test_the_window_holds_the_body_and_any_gzip_reader_takes_it(size):
    body = bytes(range(256)) * (size // 256)
    bits = window_bits(len(body))
    assert 2**bits >= min(len(body), 2**15) and 9 <= bits <= 15
    compressor = zlib.compressobj(6, zlib.DEFLATED, 16 + bits)
    assert gzip.decompress(compressor.compress(body) + compressor.flush()) == body
