"""A session as a client holds one against the real daemon: log in for a token and the refresh
cookie, refresh, log out, read a token's claims, reset a password through the mailed link."""

from __future__ import annotations

from http.cookies import Morsel, SimpleCookie
from urllib.parse import quote

import jwt

from harness import Daemon, Deployment, Response
from outbox import LINK, Outbox, id_of


def refresh_cookie(reply: Response) -> Morsel:
    """The apid_refresh cookie the answer sets (exactly one Set-Cookie for it)."""
    values = [v for v in reply.headers.get_all("Set-Cookie") or [] if v.startswith("apid_refresh=")]
    assert len(values) == 1, reply.headers
    jar = SimpleCookie()
    jar.load(values[0])
    return jar["apid_refresh"]


def log_in(daemon: Daemon, name: str, password: str) -> tuple[str, str]:
    """The access token and the refresh cookie's value of a login."""
    reply = daemon.request("POST", "/authenticate", {"username": name, "password": password})
    assert reply.status == 200, reply.body
    return reply.json["token"], refresh_cookie(reply).value


def refresh(daemon: Daemon, name: str, token: str | None, cookie: str | None) -> Response:
    headers = {} if cookie is None else {"Cookie": f"apid_refresh={cookie}"}
    return daemon.request("GET", f"/refreshToken?name={quote(name)}", token=token, headers=headers)


def log_out(daemon: Daemon, token: str, cookie: str | None) -> Response:
    headers = {} if cookie is None else {"Cookie": f"apid_refresh={cookie}"}
    return daemon.request("POST", "/logout", token=token, headers=headers)


def claims_of(token: str) -> dict:
    return jwt.decode(token, options={"verify_signature": False})


def whoami(daemon: Daemon, token: str) -> Response:
    """A private call (one's own account) with the token."""
    return daemon.request("GET", f"/v0.1/person/show/{claims_of(token)['sub']}", token=token)


def reset_id(daemon: Daemon, deployment: Deployment, address: str) -> str:
    """Ask for a password reset and read the id from the mail in the outbox."""
    outbox = Outbox(deployment)
    reply = daemon.request("POST", "/forgotPassword", {"email": address})
    assert reply.status == 200, reply.body
    (link,) = LINK.findall(outbox.wait(address)[0].get_content())
    return id_of(link)


def reset_password(daemon: Daemon, deployment: Deployment, address: str, password: str) -> None:
    reply = daemon.request(
        "POST", "/resetPassword", {"id": reset_id(daemon, deployment, address), "password": password}
    )
    assert reply.status == 200, reply.body
