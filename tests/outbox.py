"""A deployment's file outbox as tests read it: the mail that arrived, and the links in it."""

from __future__ import annotations

import email
import email.policy
import re
from email.message import EmailMessage
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from harness import Deployment, wait_for


class Outbox:
    """The deployment's mail folder, from the moment this was made: what arrived since."""

    def __init__(self, deployment: Deployment) -> None:
        self.folder = deployment.root / "var" / "test-outbox"
        self.seen = {path.name for path in self._paths()}

    def _paths(self) -> list[Path]:
        return sorted(self.folder.glob("*.eml")) if self.folder.exists() else []

    def new(self) -> list[EmailMessage]:
        """Read as text: an address that is not ASCII is UTF-8 in the header (RFC 6532), which
        the bytes parser leaves as surrogate escapes in `addresses`."""
        return [
            email.message_from_string(path.read_text(encoding="utf-8"), policy=email.policy.default)
            for path in self._paths()
            if path.name not in self.seen
        ]

    def to(self, address: str) -> list[EmailMessage]:
        return [message for message in self.new() if str(message["To"]) == address]

    def wait(self, address: str, count: int = 1, timeout: float = 10) -> list[EmailMessage]:
        assert wait_for(lambda: len(self.to(address)) >= count, timeout=timeout), (
            f"expected {count} mail(s) to {address}; new: {[str(m['To']) for m in self.new()]}"
        )
        return self.to(address)


LINK = re.compile(r"\S+/validate\?id=\S+")


def link_at(message: EmailMessage, base_url: str) -> str:
    """The path and query of the one /validate link in a mail, checked to start with baseUrl."""
    links = LINK.findall(message.get_content())
    assert len(links) == 1, message.get_content()
    assert links[0].startswith(f"{base_url}/validate?id="), links[0]
    parts = urlsplit(links[0])
    return f"{parts.path}?{parts.query}"


def id_of(link: str) -> str:
    (value,) = parse_qs(urlsplit(link).query)["id"]
    return value
