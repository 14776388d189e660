"""Outgoing mail (issue 3 item 1, DESIGN 4.12): RFC 5322 messages that refuse header
injection, and the `file` backend writing one whole .eml per message. The durable outbox that
sends them after commit, retrying, is tested in test_mail_outbox.py."""

from __future__ import annotations

import email
import os
from datetime import UTC, datetime, timedelta
from email import policy
from email.utils import parseaddr, parsedate_to_datetime
from pathlib import Path

import pytest
import pytest_twisted
from twisted.internet import defer
from twisted.internet.task import Clock

from apid.config.server import MailConfig
from apid.mail.message import Message, Undeliverable
from apid.mail.senders import FileMailer, SmtpMailer, make_mailer

SENDER = "apid <apid@example.com>"
NEWLINE_IN_HEADER = "may not contain linefeed or carriage return"  # the email package's refusal
LINK = "http://127.0.0.1:8080/validate?id=" + "Ab-_" * 11


def config(outbox: Path, backend: str = "file") -> MailConfig:
    return MailConfig(
        backend=backend,
        outbox=outbox,
        sender=SENDER,
        smtp_host="127.0.0.1",
        smtp_port=2525,
        smtp_username=None,
        smtp_password=None,
        smtp_starttls=False,
    )


def parse(raw: bytes) -> email.message.EmailMessage:
    return email.message_from_bytes(raw, policy=policy.default)


def welcome(to: str = "bob@example.com") -> Message:
    return Message(to, "apid: confirm your account", f"Hello bob,\n\nopen this link:\n\n{LINK}\n")


# --- Message.render --------------------------------------------------------------------------


def test_render_gives_an_rfc5322_message():
    before = datetime.now(UTC).replace(microsecond=0)
    raw = welcome().render(SENDER)
    after = datetime.now(UTC)
    assert isinstance(raw, bytes)
    message = parse(raw)
    assert message["From"] == SENDER
    assert parseaddr(message["From"]) == ("apid", "apid@example.com")
    assert message["To"] == "bob@example.com"
    assert message["Subject"] == "apid: confirm your account"
    assert before <= parsedate_to_datetime(message["Date"]) <= after
    assert parsedate_to_datetime(message["Date"]).utcoffset() == timedelta(0)
    message_id = message["Message-ID"]
    assert message_id.startswith("<") and message_id.endswith(">") and "@" in message_id
    assert message.get_content_type() == "text/plain"
    assert message.get_content() == f"Hello bob,\n\nopen this link:\n\n{LINK}\n"
    assert not message.defects
    # RFC 5322: a blank line between header and body, no line over 998 characters. Lines end
    # in LF here: Twisted's SMTP client turns LF into CRLF on the wire (a CRLF would double).
    head, _, body = raw.partition(b"\n\n")
    assert b"\r" not in raw
    assert b"Subject: apid: confirm your account" in head.split(b"\n")
    assert LINK.encode() in body
    assert all(len(line) <= 998 for line in raw.splitlines())


def test_each_message_gets_its_own_id():
    ids = {parse(welcome().render(SENDER))["Message-ID"] for _ in range(20)}
    assert len(ids) == 20


def test_the_link_survives_whole():
    """The link is found in the body as one unbroken string, as a mail reader shows it."""
    message = parse(welcome().render(SENDER))
    assert LINK in message.get_content().split()


def test_an_ascii_body_is_written_as_it_is_so_a_long_link_reads_whole_in_the_file():
    """An outbox .eml read with grep (README's tour) finds the link as the user will see it:
    quoted-printable would break a line past 76 characters and write `=` as `=3D`."""
    link = "http://127.0.0.1:8080/validate?id=" + "A1b2-C3d4_" * 5 + "="
    raw = Message("a@example.com", "subject", f"open this:\n\n{link}\n").render(SENDER)
    assert link.encode() in raw.split(b"\n") or link.encode() + b"\r" in raw.split(b"\n")
    assert b"Content-Transfer-Encoding: 7bit" in raw


def test_non_ascii_text_is_encoded_and_comes_back():
    message = parse(Message("bob@example.com", "Grüße von apid", "Héllo — ✓\n").render(SENDER))
    assert message["Subject"] == "Grüße von apid"
    assert message.get_content() == "Héllo — ✓\n"


def test_an_address_that_is_not_ascii_is_written_in_utf8_not_as_an_encoded_word():
    """RFC 6532: an encoded word (`=?utf-8?q?j=C3=B6rg?=@example.com`) is no address."""
    international = Message("jörg@example.com", "Grüße von apid", "Héllo\n")
    assert international.international
    raw = international.render(SENDER)
    head = raw.partition(b"\n\n")[0].split(b"\n")
    assert "To: jörg@example.com".encode() in head
    assert "Subject: Grüße von apid".encode() in head
    assert b"=?" not in raw
    message = email.message_from_bytes(raw, policy=policy.default.clone(utf8=True))
    assert (message["To"], message.get_content(), message.defects) == ("jörg@example.com", "Héllo\n", [])


def test_an_ascii_address_keeps_ascii_headers_for_servers_without_smtputf8():
    message = Message("bob@example.com", "Grüße von apid", "Héllo\n")
    assert not message.international
    assert message.render(SENDER).partition(b"\n\n")[0].isascii()


@pytest.mark.parametrize(
    "to",
    [
        "jörg@example.com\r\nBcc: eve@evil.example",
        "bob@example.com\r\nBcc: eve@evil.example",
        "bob@example.com\nBcc: eve@evil.example",
        "bob@example.com\rBcc: eve@evil.example",
        "bob@example.com\r\n\r\nInjected body",
    ],
)
def test_header_injection_in_to_is_refused(to):
    with pytest.raises(ValueError, match=NEWLINE_IN_HEADER):
        Message(to, "apid: confirm your account", "hello\n").render(SENDER)


@pytest.mark.parametrize(
    "subject",
    [
        "hello\r\nBcc: eve@evil.example",
        "hello\nBcc: eve@evil.example",
        "hello\rX-Injected: 1",
    ],
)
def test_header_injection_in_subject_is_refused(subject):
    with pytest.raises(ValueError, match=NEWLINE_IN_HEADER):
        Message("bob@example.com", subject, "hello\n").render(SENDER)


def test_a_header_lookalike_in_the_body_stays_body():
    raw = Message("bob@example.com", "hi", "Bcc: eve@evil.example\n\nmore\n").render(SENDER)
    message = parse(raw)
    assert message["Bcc"] is None
    assert message.get_content() == "Bcc: eve@evil.example\n\nmore\n"


# --- the file backend ------------------------------------------------------------------------


def names(folder: Path) -> list[str]:
    return sorted(os.listdir(folder)) if folder.exists() else []


def test_make_mailer_chooses_the_backend(tmp_path):
    assert isinstance(make_mailer(config(tmp_path), Clock()), FileMailer)
    assert isinstance(make_mailer(config(tmp_path, "smtp"), Clock()), SmtpMailer)


@pytest_twisted.ensureDeferred
async def test_file_mailer_writes_one_eml_per_message(tmp_path):
    outbox = tmp_path / "var" / "outbox"  # created on first use
    mailer = FileMailer(config(outbox))
    result = await mailer.send(welcome("one@example.com"))
    assert result is None
    (first,) = names(outbox)
    assert first.endswith(".eml") and not first.startswith(".")
    message = parse((outbox / first).read_bytes())
    assert message["To"] == "one@example.com"
    assert message["From"] == SENDER
    assert LINK in message.get_content()


@pytest_twisted.ensureDeferred
async def test_file_mailer_writes_an_address_that_is_not_ascii_as_it_is(tmp_path):
    await FileMailer(config(tmp_path)).send(welcome("jörg@example.com"))
    (written,) = names(tmp_path)
    raw = (tmp_path / written).read_bytes()
    assert "To: jörg@example.com\n".encode() in raw
    message = email.message_from_bytes(raw, policy=policy.default.clone(utf8=True))
    assert message["To"] == "jörg@example.com"
    assert LINK in message.get_content()


@pytest_twisted.ensureDeferred
async def test_file_mailer_leaves_no_partial_files(tmp_path):
    outbox = tmp_path / "outbox"
    mailer = FileMailer(config(outbox))
    recipients = [f"user{n}@example.com" for n in range(12)]
    await defer.gatherResults([mailer.send(welcome(to)) for to in recipients])
    files = names(outbox)
    assert len(files) == len(recipients)
    assert all(name.endswith(".eml") and not name.startswith(".") for name in files), files
    assert sorted(parse((outbox / name).read_bytes())["To"] for name in files) == sorted(recipients)


@pytest_twisted.ensureDeferred
async def test_file_mailer_fails_without_writing_when_the_message_is_bad(tmp_path):
    """A header injection that got this far can never be sent: Undeliverable, not tried again."""
    outbox = tmp_path / "outbox"
    mailer = FileMailer(config(outbox))
    with pytest.raises(Undeliverable, match=NEWLINE_IN_HEADER):
        await mailer.send(Message("bob@example.com\r\nBcc: eve@evil.example", "hi", "x\n"))
    assert names(outbox) == []
