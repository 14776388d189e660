"""The SMTP mail backend against a real local SMTP server (issue 3, "Done when"): the real
daemon registers an account, the validation mail arrives over SMTP, and its link validates
the account. With the SMTP server down, /register answers exactly as before, the failure is
logged, and the send is tried again (the mail arrives once the server is up). An address that
is not ASCII gets its mail with SMTPUTF8 from a server that offers it (as the module's does),
and from one that does not, none: a logged error, no retries.

The SMTP server is aiosmtpd's Controller, in a thread of this process; the daemon runs as a
subprocess (tests/harness.py)."""

from __future__ import annotations

import queue
from email import policy
from email.message import EmailMessage
from email.parser import BytesParser
from email.utils import parseaddr
from urllib.parse import parse_qs, urlsplit

import pytest

aiosmtpd = pytest.importorskip("aiosmtpd.controller")

from apid.auth.registration import SENT  # noqa: E402
from assertions import assert_problem  # noqa: E402
from harness import Daemon, Deployment, deployment_with_accounts, free_port, wait_for  # noqa: E402

SENDER = "apid <apid@example.com>"
BASE_URL = "http://apid.test:8080"
HOME_URL = "http://apid.test/home"
PASSWORD = "correct-horse-battery"


class Sink:
    """aiosmtpd handler: every accepted envelope goes into a queue."""

    def __init__(self) -> None:
        self.received: queue.Queue = queue.Queue()
        self.mail_options: list[list[str]] = []  # the MAIL FROM parameters of each envelope received

    async def handle_DATA(self, server, session, envelope):
        self.mail_options.append(list(envelope.mail_options))
        self.received.put((envelope.mail_from, list(envelope.rcpt_tos), bytes(envelope.original_content)))
        return "250 Message accepted for delivery"

    def next(self, timeout: float = 30) -> tuple[str, list[str], EmailMessage]:
        mail_from, rcpt_tos, content = self.received.get(timeout=timeout)
        return mail_from, rcpt_tos, BytesParser(policy=policy.default).parsebytes(content)

    def nothing_more(self) -> bool:
        return self.received.empty()


class SmtpServer:
    def __init__(self, port: int, smtputf8: bool = True) -> None:
        self.port = port
        self.sink = Sink()
        self.controller = aiosmtpd.Controller(self.sink, hostname="127.0.0.1", port=port, enable_SMTPUTF8=smtputf8)

    def start(self) -> SmtpServer:
        self.controller.start()
        return self

    def stop(self) -> None:
        self.controller.stop()


def deployment_for(root, smtp_port: int, accounts: tuple[tuple[str, ...], ...] = ()) -> Deployment:
    return deployment_with_accounts(
        root,
        server={
            "baseUrl": BASE_URL,
            "homeUrl": HOME_URL,
            "mail": {
                "backend": "smtp",
                "from": SENDER,
                "smtp": {"host": "127.0.0.1", "port": smtp_port, "starttls": False},
            },
        },
        accounts=accounts,
    )


@pytest.fixture(scope="module")
def smtp():
    server = SmtpServer(free_port()).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def deployment(tmp_path_factory, smtp) -> Deployment:
    return deployment_for(
        tmp_path_factory.mktemp("apid-smtp"),
        smtp.port,
        accounts=(("carol", "carol-password-1", "carol@example.com", "ROLE_USER"),),
    )


def register(daemon: Daemon, username: str, email: str, password: str = PASSWORD):
    return daemon.request("POST", "/register", {"username": username, "password": password, "email": email})


def assert_sent_answer(reply) -> None:
    assert reply.status == 200, reply.body
    assert reply.content_type.startswith("text/plain")
    assert reply.body == SENT.encode()


def validation_link(message: EmailMessage) -> str:
    links = [word for word in message.get_content().split() if "/validate?id=" in word]
    assert len(links) == 1, message.get_content()
    return links[0]


# --- the server is up ----------------------------------------------------------------------------


def test_the_validation_mail_arrives_over_smtp_and_its_link_validates(daemon, smtp):
    assert_sent_answer(register(daemon, "dave", "dave@example.com"))
    mail_from, rcpt_tos, message = smtp.sink.next()

    assert mail_from == "apid@example.com"
    assert rcpt_tos == ["dave@example.com"]
    assert message["From"] == SENDER
    assert parseaddr(message["To"])[1] == "dave@example.com"
    assert message["Subject"] == "apid: confirm your account"
    assert message["Date"] and message["Message-ID"]
    assert "apid" in message.get_content() and "dave" in message.get_content()

    link = validation_link(message)
    parts = urlsplit(link)
    assert f"{parts.scheme}://{parts.netloc}" == BASE_URL
    assert parts.path == "/validate"
    (secret,) = parse_qs(parts.query)["id"]
    assert len(secret) * 6 >= 128

    # not validated yet: no login
    assert daemon.request("POST", "/authenticate", {"username": "dave", "password": PASSWORD}).status == 401

    reply = daemon.request("GET", f"{parts.path}?{parts.query}")
    assert reply.status == 302, reply.body
    assert reply.headers["Location"] == HOME_URL
    assert daemon.login("dave", PASSWORD)

    # the link works once
    assert_problem(daemon.request("GET", f"{parts.path}?{parts.query}"), 400)


def test_a_taken_address_gets_a_notice_and_the_same_answer(daemon, smtp):
    assert_sent_answer(register(daemon, "carol-two", "carol@example.com"))
    _, rcpt_tos, message = smtp.sink.next()
    assert rcpt_tos == ["carol@example.com"]
    assert message["From"] == SENDER
    assert message["Subject"] != "apid: confirm your account"
    assert "/validate?id=" not in message.get_content()
    # nothing was created
    assert daemon.request("POST", "/authenticate", {"username": "carol-two", "password": PASSWORD}).status == 401


def test_header_injection_in_the_email_gets_no_mail(daemon, smtp):
    reply = register(daemon, "mallory", "mallory@example.com\r\nBcc: eve@evil.example")
    assert [e["field"] for e in assert_problem(reply, 400)["errors"]] == ["email"]
    # a normal registration after it is the next mail: nothing went to eve
    assert_sent_answer(register(daemon, "erin", "erin@example.com"))
    _, rcpt_tos, _ = smtp.sink.next()
    assert rcpt_tos == ["erin@example.com"]


def test_an_address_that_is_not_ascii_gets_its_mail_with_smtputf8(daemon, smtp):
    """The address goes unencoded in the envelope (MAIL FROM with SMTPUTF8) and in the To
    header (UTF-8, RFC 6532), and the link in that mail validates the account."""
    assert_sent_answer(register(daemon, "joerg", "jörg@example.com"))
    mail_from, rcpt_tos, message = smtp.sink.next()
    assert (mail_from, rcpt_tos) == ("apid@example.com", ["jörg@example.com"])
    assert smtp.sink.mail_options[-1] == ["SMTPUTF8"]
    # as sent: the header's bytes are the address in UTF-8 (an encoded word would decode alike)
    assert dict(message.raw_items())["To"].encode("ascii", "surrogateescape") == "jörg@example.com".encode()
    assert not message.defects
    link = urlsplit(validation_link(message))
    assert daemon.request("GET", f"{link.path}?{link.query}").status == 302
    assert daemon.login("joerg", PASSWORD)


def test_ascii_mail_goes_without_smtputf8_to_a_server_that_offers_it(daemon, smtp):
    assert_sent_answer(register(daemon, "ascii-only", "ascii-only@example.com"))
    _, rcpt_tos, _ = smtp.sink.next()
    assert rcpt_tos == ["ascii-only@example.com"]
    assert smtp.sink.mail_options[-1] == []


def test_a_server_without_smtputf8_gets_no_mail_for_such_an_address_and_the_error_is_logged_once(tmp_path):
    """No downgrade exists for an address (RFC 6531): the message is not sent, and the daemon
    logs one error naming the reason and the address, without the warnings of a send it would
    try again; /register answers as always, and mail to ASCII addresses still goes."""
    server = SmtpServer(free_port(), smtputf8=False).start()
    daemon = Daemon(deployment_for(tmp_path, server.port)).start()
    try:
        assert_sent_answer(register(daemon, "joerg", "jörg@example.com"))
        assert wait_for(lambda: "does not offer SMTPUTF8" in daemon.stderr, timeout=20), daemon.stderr
        assert_sent_answer(register(daemon, "karl", "karl@example.com"))
        _, rcpt_tos, _ = server.sink.next()
        assert rcpt_tos == ["karl@example.com"]  # the first mail never reached the server
    finally:
        daemon.stop()
        server.stop()
    (refused,) = [line for line in daemon.stderr.splitlines() if "SMTPUTF8" in line]
    assert "mail ('apid: confirm your account') to jörg@example.com cannot be sent, and is dropped" in refused
    assert "failed, attempt" not in daemon.stderr
    assert "Traceback" not in daemon.stderr, daemon.stderr


# --- the server is down --------------------------------------------------------------------------


def test_with_the_smtp_server_down_register_answers_the_same_and_retries(tmp_path):
    port = free_port()  # nothing listens here
    deployment = deployment_for(tmp_path, port)
    daemon = Daemon(deployment).start()
    server = None
    try:
        reply = register(daemon, "frank", "frank@example.com")
        assert_sent_answer(reply)
        assert "Retry-After" not in reply.headers
        # the failed send is logged (bounded wait for the daemon's log, not a timing check)
        assert wait_for(
            lambda: "sending mail ('apid: confirm your account') failed, attempt 1" in daemon.stderr, timeout=20
        ), daemon.stderr
        # a second registration answers the same while mail is failing
        assert_sent_answer(register(daemon, "grace", "grace@example.com"))

        # the server comes up: the retries deliver both mails
        server = SmtpServer(port).start()
        received = {}
        for _ in range(2):
            _, rcpt_tos, message = server.sink.next(timeout=60)
            received[tuple(rcpt_tos)] = message
        assert set(received) == {("frank@example.com",), ("grace@example.com",)}
        link = urlsplit(validation_link(received[("frank@example.com",)]))
        assert daemon.request("GET", f"{link.path}?{link.query}").status == 302
        assert daemon.login("frank", PASSWORD)
    finally:
        daemon.stop()
        if server is not None:
            server.stop()
    assert "Traceback" not in daemon.stderr, daemon.stderr
