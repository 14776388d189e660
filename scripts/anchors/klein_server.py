"""A hand-written Klein server doing what apid's `GET /v0.1/person/show/<id>` does, as a user
would write it: the anchor scripts/bench measures apid against (issue 16).

It verifies the HS256 bearer token with PyJWT (apid's secret file, issuer and audience), reads
the person row and its roles by id from apid's SQLite file with the stdlib sqlite3 in
Twisted's thread pool (one connection per thread), and answers the fields the token's roles
may see: 401 without a valid token, 403 for another's record unless admin, 404 for no row.

    python scripts/anchors/klein_server.py --db PATH --secret-file PATH --port N
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import threading
from datetime import UTC, datetime
from pathlib import Path

import jwt
from klein import Klein
from twisted.internet import reactor
from twisted.internet.threads import deferToThread
from twisted.web.server import Site

PUBLIC = ("id", "version", "username", "email")
ADMIN = (
    *PUBLIC,
    "enabled",
    "accountLocked",
    "accountExpired",
    "passwordExpired",
    "roles",
    "dateCreated",
    "lastUpdated",
)
QUERY = """
    select p.id, p.version, p.username, p.email, p.enabled, p.account_locked, p.account_expired,
           p.password_expired, p.date_created, p.last_updated, group_concat(r.authority)
    from person p left join person_role pr on pr.person_id = p.id left join role r on r.id = pr.role_id
    where p.id = ? group by p.id
"""

app = Klein()
local = threading.local()
settings = argparse.Namespace()


class QuietSite(Site):
    def log(self, request) -> None:
        """No access log, as apid runs in the benchmark (`accessLog: false`)."""


def iso(stored: str) -> str:
    return datetime.fromisoformat(stored).replace(tzinfo=UTC).isoformat()


def read_person(person_id: int) -> dict | None:
    if not hasattr(local, "db"):
        local.db = sqlite3.connect(settings.db)
    row = local.db.execute(QUERY, (person_id,)).fetchone()
    return None if row is None else person_of(row)


def person_of(row: tuple) -> dict:
    """A row of QUERY as apid answers the person."""
    return {
        "id": row[0],
        "version": row[1],
        "username": row[2],
        "email": row[3],
        "enabled": bool(row[4]),
        "accountLocked": bool(row[5]),
        "accountExpired": bool(row[6]),
        "passwordExpired": bool(row[7]),
        "roles": sorted(row[10].split(",")) if row[10] else [],
        "dateCreated": iso(row[8]),
        "lastUpdated": iso(row[9]),
    }


def verified(authorization: bytes | None) -> dict | None:
    if not authorization or not authorization.startswith(b"Bearer "):
        return None
    try:
        return jwt.decode(
            authorization[7:],
            settings.secret,
            algorithms=["HS256"],
            audience="apid",
            issuer="apid",
            leeway=30,
            options={"require": ["iss", "aud", "sub", "roles", "iat", "exp", "jti"]},
        )
    except jwt.InvalidTokenError:
        return None


def answer(request, status: int, body: dict) -> bytes:
    request.setResponseCode(status)
    request.setHeader("Content-Type", "application/json")
    return json.dumps(body).encode()


@app.route("/v0.1/person/show/<int:person_id>", methods=["GET"])
async def show(request, person_id: int) -> bytes:
    claims = verified(request.getHeader(b"Authorization"))
    if claims is None:
        return answer(request, 401, {"detail": "a valid bearer token is needed"})
    admin = "ROLE_ADMIN" in claims["roles"]
    if not admin and str(person_id) != claims["sub"]:
        return answer(request, 403, {"detail": "you may only reach your own person record"})
    person = await deferToThread(read_person, person_id)
    if person is None:
        return answer(request, 404, {"detail": f"no person with id {person_id}"})
    return answer(request, 200, {name: person[name] for name in (ADMIN if admin else PUBLIC)})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", required=True)
    parser.add_argument("--secret-file", type=Path, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.parse_args(namespace=settings)
    settings.secret = settings.secret_file.read_text().strip()
    reactor.listenTCP(settings.port, QuietSite(app.resource()), interface="127.0.0.1")
    reactor.run()


if __name__ == "__main__":
    main()
