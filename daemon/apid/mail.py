"""Outgoing mail: a message, two ways to send it, and an outbox that sends off the request path.

`file` writes one RFC 5322 `.eml` file per message into a folder (the embedded default);
`smtp` hands it to an SMTP server with Twisted's ESMTP client (STARTTLS, optional login).
`Outbox.post` returns at once: the HTTP answer never waits for mail, nor changes when a send
fails; failures are logged and tried again a few times.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from email.message import EmailMessage
from email.utils import format_datetime, make_msgid
from datetime import datetime, timezone
from pathlib import Path
from typing import Protocol

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import deferLater
from twisted.internet.threads import deferToThread
from twisted.logger import Logger

from apid.config import MailConfig

log = Logger(namespace="apid.mail")

RETRY_DELAYS = (2.0, 10.0, 60.0)
SMTP_TIMEOUT = 30.0


@dataclass(frozen=True)
class Message:
    to: str
    subject: str
    body: str

    def render(self, sender: str) -> bytes:
        message = EmailMessage()
        message["From"] = sender
        message["To"] = self.to
        message["Subject"] = self.subject
        message["Date"] = format_datetime(datetime.now(timezone.utc))
        message["Message-ID"] = make_msgid(domain="apid")
        # ASCII text goes as it is (7bit): quoted-printable would break a long link across
        # lines and write its `=` as `=3D`, unreadable in an outbox file and to simple clients.
        message.set_content(self.body, cte="7bit" if self.body.isascii() else "quoted-printable")
        return message.as_bytes()


class Mailer(Protocol):
    def send(self, message: Message) -> Deferred[None]: ...


def write_eml(outbox: Path, content: bytes) -> Path:
    """Write a message whole under a private name, then rename it into place, so a reader of
    the folder never sees half a message."""
    outbox.mkdir(parents=True, exist_ok=True)
    name = f"{datetime.now(timezone.utc):%Y%m%dT%H%M%S%f}-{uuid.uuid4().hex[:12]}.eml"
    draft = outbox / f".{name}.part"
    draft.write_bytes(content)
    os.replace(draft, outbox / name)
    return outbox / name


class FileMailer:
    def __init__(self, config: MailConfig) -> None:
        self._config = config

    def send(self, message: Message) -> Deferred[None]:
        return deferToThread(write_eml, self._config.outbox, message.render(self._config.sender)).addCallback(
            lambda _: None
        )


class SmtpMailer:
    def __init__(self, config: MailConfig, reactor: IReactorTime) -> None:
        self._config = config
        self._reactor = reactor

    def send(self, message: Message) -> Deferred[None]:
        from twisted.mail.smtp import sendmail  # here: a daemon mailing to files never loads SMTP

        config = self._config
        sending = sendmail(
            config.smtp_host,
            _address(config.sender),
            [message.to],
            message.render(config.sender),
            port=config.smtp_port,
            username=config.smtp_username.encode() if config.smtp_username else None,
            password=config.smtp_password.encode() if config.smtp_password else None,
            requireAuthentication=bool(config.smtp_username),
            requireTransportSecurity=config.smtp_starttls,
            reactor=self._reactor,
        )
        sending.addTimeout(SMTP_TIMEOUT, self._reactor)
        return sending.addCallback(lambda _: None)


def _address(sender: str) -> str:
    """The bare address of `Name <address>`."""
    return sender.rsplit("<", 1)[-1].rstrip(">").strip()


def make_mailer(config: MailConfig, reactor: IReactorTime) -> Mailer:
    return SmtpMailer(config, reactor) if config.backend == "smtp" else FileMailer(config)


class Outbox:
    """Sends in the background, retrying a few times; `post` never fails and never waits."""

    def __init__(self, mailer: Mailer, reactor: IReactorTime, delays: tuple[float, ...] = RETRY_DELAYS) -> None:
        self._mailer = mailer
        self._reactor = reactor
        self._delays = delays
        self.pending: set[Deferred[None]] = set()

    def post(self, message: Message) -> None:
        sending = Deferred.fromCoroutine(self._deliver(message))
        self.pending.add(sending)
        sending.addBoth(lambda _: self.pending.discard(sending))

    async def _deliver(self, message: Message) -> None:
        for attempt, delay in enumerate((*self._delays, None), start=1):
            try:
                await self._mailer.send(message)
                return
            except Exception as error:
                log.warn("sending mail ({subject!r}) failed, attempt {attempt}: {error}",
                         subject=message.subject, attempt=attempt, error=str(error) or type(error).__name__)
                if delay is None:
                    log.error("giving up on mail ({subject!r}) after {attempt} attempts",
                              subject=message.subject, attempt=attempt)
                    return
                await deferLater(self._reactor, delay, lambda: None)
