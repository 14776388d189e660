"""The two ways to send a message: `file` writes one RFC 5322 `.eml` file per message into a
folder (the embedded default), `smtp` hands it to an SMTP server (`apid.mail.smtp`, imported at
the first mail sent, so that a daemon mailing to files never loads Twisted's SMTP code).
"""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime
from pathlib import Path

from twisted.internet.defer import Deferred
from twisted.internet.threads import deferToThread

from apid.config.server import MailConfig
from apid.mail.message import Mailer, Message, rendered
from apid.runtime.reactors import Reactor

SMTP_TIMEOUT = 30.0


def write_eml(outbox: Path, content: bytes) -> Path:
    """Write a message whole under a private name, then rename it into place, so a reader of
    the folder never sees half a message."""
    outbox.mkdir(parents=True, exist_ok=True)
    name = f"{datetime.now(UTC):%Y%m%dT%H%M%S%f}-{uuid.uuid4().hex[:12]}.eml"
    draft = outbox / f".{name}.part"
    draft.write_bytes(content)
    os.replace(draft, outbox / name)
    return outbox / name


class FileMailer:
    def __init__(self, config: MailConfig) -> None:
        self._config = config

    def send(self, message: Message) -> Deferred[None]:
        return deferToThread(write_eml, self._config.outbox, rendered(message, self._config.sender)).addCallback(
            lambda _: None
        )


class SmtpMailer:
    def __init__(self, config: MailConfig, reactor: Reactor) -> None:
        self._config = config
        self._reactor = reactor

    def send(self, message: Message) -> Deferred[None]:
        from apid.mail.smtp import send  # here: a daemon mailing to files never loads SMTP

        config = self._config
        sending = send(self._reactor, config, _address(config.sender), message.to, rendered(message, config.sender))
        sending.addTimeout(SMTP_TIMEOUT, self._reactor)
        return sending.addCallback(lambda _: None)


def _address(sender: str) -> str:
    """The bare address of `Name <address>`."""
    return sender.rsplit("<", 1)[-1].rstrip(">").strip()


def make_mailer(config: MailConfig, reactor: Reactor) -> Mailer:
    return SmtpMailer(config, reactor) if config.backend == "smtp" else FileMailer(config)
