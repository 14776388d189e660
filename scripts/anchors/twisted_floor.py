"""The floor of apid's `GET /v0.1/person/show/<id>` on twisted.web (issue 37): the same work with
nothing else, the least any server on Twisted's HTTP layer can spend on it.

One twisted.web resource, no routing library: the bearer token verified by PyJWT once, then
kept (only its expiry checked again, as apid keeps a verified principal); the person row and
its roles read from apid's SQLite file; the fields of the token's roles answered with orjson.
The read goes through Twisted's thread pool, as apid's does, or with `--inline` on the reactor
thread itself, which apid refuses (a read that waits on the disk or a lock would stall every
request) and which shows what the hop costs. No request id, CORS, rate limit, account check,
revocation, IO State, metrics or compression: every feature apid keeps on is left out.

    python scripts/anchors/twisted_floor.py --db PATH --secret-file PATH --port N [--inline]
"""

from __future__ import annotations

import argparse
import sqlite3
import threading
import time
from pathlib import Path

import jwt
import orjson
from klein_server import ADMIN, PUBLIC, QUERY, QuietSite, person_of
from twisted.internet import reactor
from twisted.internet.threads import deferToThread
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Request

LEEWAY = 30


class PersonShow(Resource):
    isLeaf = True

    def __init__(self, db: str, secret: str, inline: bool) -> None:
        super().__init__()
        self._db = db
        self._secret = secret
        self._inline = inline
        self._local = threading.local()
        self._verified: dict[bytes, dict] = {}

    def _claims(self, authorization: bytes | None) -> dict | None:
        if not authorization or not authorization.startswith(b"Bearer "):
            return None
        claims = self._verified.get(authorization)
        if claims is None:
            try:
                claims = jwt.decode(
                    authorization[7:], self._secret, algorithms=["HS256"], audience="apid", issuer="apid", leeway=LEEWAY
                )
            except jwt.InvalidTokenError:
                return None
            self._verified[authorization] = claims
        return claims if claims["exp"] + LEEWAY > time.time() else None

    def _read(self, person_id: int) -> dict | None:
        connection = getattr(self._local, "db", None)
        if connection is None:
            connection = self._local.db = sqlite3.connect(self._db, check_same_thread=False)
        row = connection.execute(QUERY, (person_id,)).fetchone()
        return None if row is None else person_of(row)

    def render_GET(self, request: Request) -> bytes | int:
        request.setHeader(b"content-type", b"application/json")
        claims = self._claims(request.getHeader(b"authorization"))
        if claims is None:
            request.setResponseCode(401)
            return b'{"detail":"a valid bearer token is needed"}'
        admin = "ROLE_ADMIN" in claims["roles"]
        person_id = int(request.postpath[-1])
        if not admin and str(person_id) != claims["sub"]:
            request.setResponseCode(403)
            return b'{"detail":"you may only reach your own person record"}'
        fields = ADMIN if admin else PUBLIC

        def answer(person: dict | None) -> bytes:
            if person is None:
                request.setResponseCode(404)
                return b'{"detail":"no such person"}'
            return orjson.dumps({name: person[name] for name in fields})

        if self._inline:
            return answer(self._read(person_id))

        def send(person: dict | None) -> None:
            if not request.finished and not request._disconnected:
                request.write(answer(person))
                request.finish()

        deferToThread(self._read, person_id).addCallback(send)
        return NOT_DONE_YET


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", required=True)
    parser.add_argument("--secret-file", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--inline", action="store_true", help="read on the reactor thread (apid never does)")
    args = parser.parse_args()
    resource = PersonShow(args.db, args.secret_file.read_text().strip(), args.inline)
    reactor.listenTCP(args.port, QuietSite(resource), interface="127.0.0.1")
    reactor.run()


if __name__ == "__main__":
    main()
