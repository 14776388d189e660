"""Sending one message over SMTP: Twisted's ESMTP client (STARTTLS, optional login), with
SMTPUTF8 (RFC 6531) for a recipient whose address is not ASCII.

Twisted writes envelope addresses in ASCII only (`quoteaddr`), and an address like
`jörg@example.com` has no ASCII spelling. For such a recipient the envelope is written here,
in UTF-8, with the SMTPUTF8 parameter on MAIL FROM, when the server offers SMTPUTF8 in its
answer to EHLO (the last one: after STARTTLS the client asks again). When it does not, the
message is not sent at all (RFC 6531 3.2: no downgrade) and the send fails with
`SmtpUtf8Unavailable`, before MAIL FROM: retrying cannot change the server's answer.

Imported at the first mail sent (`apid.mail.senders.SmtpMailer`): a daemon mailing to files never
loads Twisted's SMTP code.
"""

from __future__ import annotations

from io import BytesIO

from twisted.internet.defer import Deferred
from twisted.mail.smtp import ESMTPSender, ESMTPSenderFactory, SMTPClientError, quoteaddr

from apid.config.server import MailConfig
from apid.mail.message import Undeliverable
from apid.runtime.reactors import Reactor


class SmtpUtf8Unavailable(Undeliverable, SMTPClientError):
    """The recipient's address needs SMTPUTF8 and the server does not offer it. An error of
    Twisted's client too (not fatal, no retry): it ends the session with QUIT, does not connect
    again, and fails the send with it."""


class _Sender(ESMTPSender):
    """Twisted's sender of one message; for an international recipient, the envelope commands
    as RFC 6531 writes them. An ASCII recipient goes Twisted's own way, unchanged."""

    offers_smtputf8 = False

    @property
    def _international(self) -> bool:
        return not all(address.isascii() for address in self.getMailTo())

    def esmtpState_serverConfig(self, code: int, resp: bytes) -> None:
        """Note whether the EHLO answer lists SMTPUTF8, then go on as Twisted does."""
        self.offers_smtputf8 = any(line.split()[:1] == [b"SMTPUTF8"] for line in resp.upper().splitlines())
        super().esmtpState_serverConfig(code, resp)

    def smtpState_from(self, code: int, resp: bytes) -> None:
        """MAIL FROM with the SMTPUTF8 parameter, or the send refused when the server lacks it.
        Twisted's state but for that parameter; it also runs once the message is sent (after
        RSET), when there is no sender left and the session ends."""
        if not self._international:
            return super().smtpState_from(code, resp)
        if not self.offers_smtputf8:
            return self.sendError(
                SmtpUtf8Unavailable(
                    -1,
                    b"the SMTP server does not offer SMTPUTF8, which mail to an address that is not ASCII needs "
                    b"(RFC 6531)",
                )
            )
        self._from = self.getMailFrom()
        if self._from is None:
            return self._disconnectFromServer()
        self._failresponse = self.smtpTransferFailed
        self.sendLine(b"MAIL FROM:" + quoteaddr(self._from) + b" SMTPUTF8")
        self._expected = [250]
        self._okresponse = self.smtpState_to

    def smtpState_to(self, code: int, resp: bytes) -> None:
        """RCPT TO with the address in UTF-8 (quoteaddr would encode it as ASCII); Twisted's
        next state takes the answer, and sends DATA or fails the send."""
        if not self._international:
            return super().smtpState_to(code, resp)
        (self.lastAddress,) = self.getMailTo()
        self.toAddresses = iter(())
        self.toAddressesResult = []
        self.successAddresses = []
        self._okresponse = self.smtpState_toOrData
        self._expected = range(1000)  # type: ignore[assignment]  # as Twisted's state: any answer
        self.sendLine(b"RCPT TO:<" + self.lastAddress + b">")


class _SenderFactory(ESMTPSenderFactory):
    protocol = _Sender


def send(reactor: Reactor, config: MailConfig, sender: str, recipient: str, content: bytes) -> Deferred[object]:
    """Send `content` from the (ASCII) address `sender` to `recipient` through the configured
    server: Twisted's `sendmail` but with the sender above. Cancelling the Deferred (a
    timeout) ends the connection."""

    def cancel(_: Deferred[object]) -> None:
        factory.sendFinished = True
        if factory.currentProtocol is not None:
            factory.currentProtocol.transport.abortConnection()
        else:
            connector.disconnect()

    sending: Deferred[object] = Deferred(cancel)
    factory = _SenderFactory(
        config.smtp_username.encode() if config.smtp_username else None,
        config.smtp_password.encode() if config.smtp_password else None,
        sender,
        [recipient.encode("utf-8")],
        BytesIO(content),
        sending,
        heloFallback=True,
        requireAuthentication=bool(config.smtp_username),
        requireTransportSecurity=config.smtp_starttls,
        hostname=config.smtp_host,
    )
    connector = reactor.connectTCP(config.smtp_host, config.smtp_port, factory)
    return sending
