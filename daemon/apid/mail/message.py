"""Outgoing mail: a message, and what sending one promises.

Mail is never sent from the request path: a change writes its mail into the durable outbox in
its own transaction, and the outbox's sender sends it after commit (`apid.mail.outbox`), trying
a failed send again after each of `RETRY_DELAYS`, but for a message no server can take
(`Undeliverable`), which is logged once as an error.

A recipient's address may be international (`jörg@example.com`: apid accepts any character
but ASCII's specials before the `@`). Such an address has no ASCII spelling: its message is
written with UTF-8 headers (RFC 6532) and sent with SMTPUTF8 (RFC 6531, `apid.mail.smtp`).

The two senders (a folder of `.eml` files, an SMTP server) are in `apid.mail.senders`: the
code that writes mail needs only this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from email import policy
from email.message import EmailMessage
from email.utils import format_datetime, make_msgid
from typing import Protocol

from twisted.internet.defer import Deferred

PRODUCT = "apid"  # what mails call the service
RETRY_DELAYS = (2.0, 10.0, 60.0, 300.0, 1800.0, 3600.0)  # seconds before each next try: ~1.5 h in all
UTF8_HEADERS = policy.default.clone(utf8=True)  # RFC 6532: header text, addresses included, as UTF-8


class Undeliverable(Exception):
    """No attempt can send this message as it is (the SMTP server cannot take its address):
    the outbox's sender logs it once as an error and does not try again."""


@dataclass(frozen=True)
class Message:
    to: str
    subject: str
    body: str

    @property
    def international(self) -> bool:
        """Whether the address is not ASCII: then the message needs SMTPUTF8 and UTF-8 headers.
        As an encoded word (`=?utf-8?q?j=C3=B6rg?=@example.com`, what ASCII headers would make
        of it) it is no address: servers refuse it, and no reader can answer it."""
        return not self.to.isascii()

    def render(self, sender: str) -> bytes:
        message = EmailMessage(policy=UTF8_HEADERS if self.international else policy.default)
        message["From"] = sender
        message["To"] = self.to
        message["Subject"] = self.subject
        message["Date"] = format_datetime(datetime.now(UTC))
        message["Message-ID"] = make_msgid(domain="apid")
        # ASCII text goes as it is (7bit): quoted-printable would break a long link across
        # lines and write its `=` as `=3D`, unreadable in an outbox file and to simple clients.
        message.set_content(self.body, cte="7bit" if self.body.isascii() else "quoted-printable")
        return message.as_bytes()


class Mailer(Protocol):
    def send(self, message: Message) -> Deferred[None]: ...


def rendered(message: Message, sender: str) -> bytes:
    """The message's bytes; one that cannot be written (a line break in a header: an
    injection that got this far) can never be sent, by any attempt."""
    try:
        return message.render(sender)
    except ValueError as error:
        raise Undeliverable(f"the message cannot be written: {error}") from error
