"""Signing, URL checks, backoff and Retry-After: the rules of a delivery, without the network."""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from email.utils import format_datetime

import pytest
from standardwebhooks import Webhook, WebhookVerificationError

from apid.hooks.deliverer import backoff
from apid.hooks.delivery import retry_after
from apid.hooks.signing import new_secret, sign, signature_header
from apid.hooks.urls import UrlRefused, check_url

ALLOWED = ("http://127.0.0.1:9000", "https://hooks.example.com", "http://localhost:3000/")


def headers(message_id: str, timestamp: int, signature: str) -> dict[str, str]:
    return {"webhook-id": message_id, "webhook-timestamp": str(timestamp), "webhook-signature": signature}


def test_a_signature_verifies_with_the_standard_webhooks_library():
    secret, body, now = new_secret(), b'{"id":"msg_1","data":{"a":1}}', int(datetime.now(UTC).timestamp())
    assert secret.startswith("whsec_") and len(base64.b64decode(secret[6:])) == 32
    assert Webhook(secret).verify(body, headers("msg_1", now, sign(secret, "msg_1", now, body))) == {
        "id": "msg_1",
        "data": {"a": 1},
    }


def test_our_signature_is_the_reference_librarys():
    secret, body = new_secret(), b'{"x":1}'
    moment = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)
    assert sign(secret, "msg_2", int(moment.timestamp()), body) == Webhook(secret).sign("msg_2", moment, body.decode())


def test_a_changed_body_id_or_secret_fails_verification():
    secret, body, now = new_secret(), b'{"x":1}', int(datetime.now(UTC).timestamp())
    signature = sign(secret, "msg_3", now, body)
    for other_body, other_id, other_secret in (
        (b'{"x":2}', "msg_3", secret),
        (body, "msg_4", secret),
        (body, "msg_3", new_secret()),
    ):
        with pytest.raises(WebhookVerificationError):
            Webhook(other_secret).verify(other_body, headers(other_id, now, signature))


def test_during_a_rotation_either_secret_verifies():
    old, new, body, now = new_secret(), new_secret(), b"{}", int(datetime.now(UTC).timestamp())
    both = signature_header([new, old], "msg_5", now, body)
    assert len(both.split(" ")) == 2
    for secret in (old, new):
        Webhook(secret).verify(body, headers("msg_5", now, both))


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:9000/in",
        "http://127.0.0.1:9000",
        "HTTPS://Hooks.Example.com/a?b=c",
        "https://hooks.example.com:443/x",
        "http://localhost:3000/deep/path",
    ],
)
def test_urls_of_allowed_origins_pass(url):
    check_url(url, ALLOWED)


@pytest.mark.parametrize(
    "url, reason",
    [
        ("http://127.0.0.1:9001/in", "not in cors.allowedOrigins"),
        ("http://hooks.example.com/in", "not in cors.allowedOrigins"),  # http, not https
        ("https://hooks.example.com.evil.test/", "not in cors.allowedOrigins"),
        ("http://user:pw@127.0.0.1:9000/in", "user name or password"),
        ("http://user@127.0.0.1:9000/in", "user name or password"),
        ("ftp://127.0.0.1:9000/in", "http or https"),
        ("file:///etc/passwd", "http or https"),
        ("127.0.0.1:9000/in", "http or https"),
        ("http://127.0.0.1:9000/in\r\nX: y", "control characters"),
        ("http:///in", "names no host"),
        ("http://127.0.0.1:99999/in", "not a URL"),
    ],
)
def test_other_urls_are_refused_with_a_reason(url, reason):
    with pytest.raises(UrlRefused, match=reason):
        check_url(url, ALLOWED)


def test_backoff_grows_by_the_factor_up_to_the_ceiling_with_jitter_in_the_upper_half():
    assert [backoff(5, 6, 3600, n, lambda: 1.0) for n in (1, 2, 3, 4, 5)] == [5, 30, 180, 1080, 3600]
    assert [backoff(5, 6, 3600, n, lambda: 0.0) for n in (1, 2, 3)] == [2.5, 15, 90]
    assert backoff(5, 2, 3600, 30, lambda: 1.0) == 3600


def test_retry_after_reads_seconds_and_http_dates():
    now = 1_800_000_000.0
    assert retry_after(b"120", now) == 120
    date = format_datetime(datetime.fromtimestamp(now + 30, UTC), usegmt=True).encode()
    assert retry_after(date, now) == pytest.approx(30, abs=1)
    assert retry_after(format_datetime(datetime.fromtimestamp(now - 30, UTC), usegmt=True).encode(), now) == 0
    assert retry_after(None, now) is None
    assert retry_after(b"soon", now) is None
    assert retry_after(b"\xb2", now) is None  # "²", which str.isdigit() admits and float() refuses
    assert retry_after(b"9" * 5000, now) == float("inf")  # capped by the caller (RETRY_AFTER_CAP)
