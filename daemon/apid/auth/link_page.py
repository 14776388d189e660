"""What a mailed link that changes state answers to GET and HEAD: a page, changing nothing, that
carries the change out with a POST to the same link.

Mail scanners and link previews open every link in a message (GET, often HEAD first): an
address change's revert link acted on that, so a scanner put the old address back and signed
the owner out, and a confirmation link confirmed an address nobody had looked at. The page is
minimal HTML, no script, under a Content-Security-Policy that lets its one form post back to
this origin only; a client asking for `application/json` gets the same facts as JSON.
"""

from __future__ import annotations

from datetime import datetime
from html import escape
from urllib.parse import urlencode

from twisted.web.http import Request

from apid.auth import onetime
from apid.http.answers import write_json
from apid.mail.message import PRODUCT

CONTENT_SECURITY_POLICY = "default-src 'none'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
# purpose -> (title, what the POST does, button)
WHAT = {
    onetime.EMAIL_CONFIRM: (
        "Confirm your new e-mail address",
        f"Confirming makes this address the e-mail address of your {PRODUCT} account.",
        "Confirm this address",
    ),
    onetime.EMAIL_REVERT: (
        "Put your e-mail address back",
        f"This puts your old address back on your {PRODUCT} account, signs the account out everywhere "
        "and then lets you choose a new password. Do it only if you did not change the address yourself.",
        "Put my address back",
    ),
}


def _private(request: Request) -> None:
    """The id is in the URL: never cached, never sent on as a referrer, never framed."""
    request.setHeader(b"Cache-Control", b"no-store")
    request.setHeader(b"Referrer-Policy", b"no-referrer")


def wants_json(request: Request) -> bool:
    accept = (request.getHeader(b"accept") or b"").decode("latin-1").lower()
    return "application/json" in accept and "text/html" not in accept


def confirmation_page(request: Request, secret: str, purpose: str, expires: datetime) -> bytes:
    """The answer to GET or HEAD of the link of an id of `purpose` (one of WHAT): nothing is done."""
    _private(request)
    title, effect, button = WHAT[purpose]
    if wants_json(request):
        return write_json(
            request, {"purpose": purpose, "effect": effect, "method": "POST", "expires": expires.isoformat()}
        )
    request.setHeader(b"Content-Type", b"text/html; charset=utf-8")
    request.setHeader(b"Content-Security-Policy", CONTENT_SECURITY_POLICY.encode("ascii"))
    action = escape("?" + urlencode({"id": secret}))
    return (
        "<!DOCTYPE html>\n"
        f'<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title></head>\n'
        f"<body><h1>{escape(title)}</h1>\n<p>{escape(effect)}</p>\n"
        f"<p>This link works once, until {escape(expires.strftime('%Y-%m-%d %H:%M UTC'))}.</p>\n"
        f'<form method="post" action="{action}"><button type="submit">{escape(button)}</button></form>\n'
        "</body></html>\n"
    ).encode()


def followed(request: Request, purpose: str, location: str) -> bytes:
    """The answer to the POST that carried the link out: 303 to where the owner goes next, or
    for JSON, that place as `location`."""
    _private(request)
    if wants_json(request):
        return write_json(request, {"purpose": purpose, "done": True, "location": location})
    request.setResponseCode(303)
    request.setHeader(b"Location", location.encode("utf-8"))
    return b""
