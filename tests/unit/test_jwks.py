"""A provider's keys: which a JWKS gives, and how often apid asks for them (the clock driven,
the provider's answers given here; tests/integration/test_issuers.py asks a real provider);
and how long a slow provider may hold a request (the clock driven, then a real server on
loopback that never answers)."""

from __future__ import annotations

import json
import time

import pytest
import pytest_twisted
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm
from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.task import Clock
from twisted.web.resource import Resource
from twisted.web.server import NOT_DONE_YET, Site

from apid.auth.jwks import (
    WAIT_FOR_KEYS,
    ProviderClient,
    ProviderError,
    ProviderKeys,
    discovery_url,
    jwks_uri,
    signing_keys,
)
from apid.problems import ServiceUnavailable

ISSUER = "https://sso.example.com/realms/acme"
JWKS = "https://sso.example.com/realms/acme/protocol/openid-connect/certs"


def public(text: str, **members: str) -> dict:
    jwk = json.loads(text)
    jwk.pop("d", None)
    for private in ("p", "q", "dp", "dq", "qi"):
        jwk.pop(private, None)
    return {**jwk, **members}


RSA = public(RSAAlgorithm.to_jwk(rsa.generate_private_key(public_exponent=65537, key_size=2048)), kid="rsa")
P256 = public(ECAlgorithm.to_jwk(ec.generate_private_key(ec.SECP256R1())), kid="p256")
P384 = public(ECAlgorithm.to_jwk(ec.generate_private_key(ec.SECP384R1())), kid="p384")
ED = public(OKPAlgorithm.to_jwk(ed25519.Ed25519PrivateKey.generate()), kid="ed")


def test_a_jwks_gives_its_rsa_p256_and_ed25519_signing_keys_each_with_its_one_algorithm():
    oct_key = {"kty": "oct", "k": "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3JldA", "kid": "hmac"}
    keys = signing_keys(
        {
            "keys": [
                RSA,
                P256,
                ED,
                P384,  # ES384: not taken
                oct_key,  # a shared secret: never
                {**RSA, "kid": "enc", "use": "enc"},
                {**RSA, "kid": "ps256", "alg": "PS256"},
                {**RSA, "kid": None},
                {
                    **json.loads(RSAAlgorithm.to_jwk(rsa.generate_private_key(public_exponent=65537, key_size=2048))),
                    "kid": "private",
                },
                {"kty": "RSA", "kid": "broken", "n": "AQAB"},
                "not a key",
            ]
        }
    )
    assert {kid: key.algorithm for kid, key in keys.items()} == {"rsa": "RS256", "p256": "ES256", "ed": "EdDSA"}


@pytest.mark.parametrize("document", [{}, {"keys": "x"}, [], None])
def test_a_document_without_a_list_of_keys_is_no_jwks(document):
    with pytest.raises(ProviderError):
        signing_keys(document)


def test_the_discovery_document_must_name_the_issuer_and_a_secure_jwks_uri():
    assert discovery_url(ISSUER + "/") == ISSUER + "/.well-known/openid-configuration"
    assert jwks_uri(ISSUER, {"issuer": ISSUER, "jwks_uri": JWKS}) == JWKS
    for document in (
        {"issuer": "https://evil.example.com", "jwks_uri": JWKS},
        {"issuer": ISSUER},
        {"issuer": ISSUER, "jwks_uri": "http://sso.example.com/certs"},
    ):
        with pytest.raises(ProviderError):
            jwks_uri(ISSUER, document)


class Provider:
    """Answers the discovery document and the JWKS it holds now, counting the requests."""

    def __init__(self, keys: list[dict]) -> None:
        self.keys = keys
        self.down = False
        self.asked: list[str] = []

    def get_json(self, url: str) -> Deferred:
        self.asked.append(url)
        if self.down:
            return fail(ConnectionRefusedError("down"))
        if url == discovery_url(ISSUER):
            return succeed({"issuer": ISSUER, "jwks_uri": JWKS})
        return succeed({"keys": self.keys})


def key(keys: ProviderKeys, kid: str):
    result = []
    Deferred.fromCoroutine(keys.key(kid)).addCallback(result.append)
    return result[0]


def test_the_keys_are_fetched_once_and_a_new_kid_fetches_them_again_at_most_once_per_interval():
    clock, provider = Clock(), Provider([RSA])
    keys = ProviderKeys(issuer=ISSUER, get_json=provider.get_json, clock=clock, refresh=60, lifetime=3600)
    assert key(keys, "rsa").algorithm == "RS256"
    assert provider.asked == [discovery_url(ISSUER), JWKS]
    assert key(keys, "rsa") is not None and len(provider.asked) == 2  # held: nothing asked
    clock.advance(59)
    provider.keys = [P256, RSA]  # the provider rotated
    for _ in range(50):
        assert key(keys, "forged") is None
    assert key(keys, "p256") is None  # within the interval of the first fetch: not asked
    assert len(provider.asked) == 2
    clock.advance(1)
    assert key(keys, "p256").algorithm == "ES256"
    assert provider.asked[2:] == [JWKS]  # the discovery document is read once
    for _ in range(50):
        assert key(keys, "forged") is None
    assert len(provider.asked) == 3


def test_keys_past_their_lifetime_are_fetched_again_and_a_withdrawn_key_is_gone():
    clock, provider = Clock(), Provider([RSA, P256])
    keys = ProviderKeys(issuer=ISSUER, get_json=provider.get_json, clock=clock, refresh=60, lifetime=3600)
    assert key(keys, "rsa") is not None
    provider.keys = [P256]
    clock.advance(3600)
    assert key(keys, "rsa") is None
    assert key(keys, "p256") is not None
    assert len(provider.asked) == 3


def test_while_the_provider_is_down_the_keys_held_go_on_serving():
    clock, provider = Clock(), Provider([RSA])
    keys = ProviderKeys(issuer=ISSUER, get_json=provider.get_json, clock=clock, refresh=60, lifetime=3600)
    assert key(keys, "rsa") is not None
    provider.down = True
    clock.advance(3600)
    assert key(keys, "rsa") is not None  # stale, but the provider cannot be asked
    provider.down = False
    clock.advance(60)
    assert key(keys, "rsa") is not None
    assert provider.asked[-2:] == [discovery_url(ISSUER), JWKS]  # asked anew from discovery after a failure


# --- a slow provider holds no request beyond WAIT_FOR_KEYS (issue 33, item 7) ---------------------


class SlowProvider(Provider):
    """Answers only when told to (`answer`): a provider taking as long as the test likes."""

    def __init__(self, keys: list[dict]) -> None:
        super().__init__(keys)
        self.pending: list[tuple[str, Deferred]] = []

    def get_json(self, url: str) -> Deferred:
        self.asked.append(url)
        self.pending.append((url, Deferred()))
        return self.pending[-1][1]

    def answer(self) -> None:
        while self.pending:
            url, waiting = self.pending.pop(0)
            waiting.callback(
                {"issuer": ISSUER, "jwks_uri": JWKS} if url == discovery_url(ISSUER) else {"keys": self.keys}
            )


def asking(keys: ProviderKeys, kid: str) -> list:
    """What `keys.key(kid)` comes to, in a list that stays empty while it waits (a Failure on error)."""
    outcome: list = []
    Deferred.fromCoroutine(keys.key(kid)).addBoth(outcome.append)
    return outcome


def test_an_unknown_kid_waits_for_a_slow_fetch_at_most_the_bound_then_gets_a_503():
    clock, provider = Clock(), SlowProvider([RSA])
    keys = ProviderKeys(issuer=ISSUER, get_json=provider.get_json, clock=clock, refresh=60, lifetime=3600)
    first, second = asking(keys, "rsa"), asking(keys, "rsa")
    assert first == [] and second == [] and provider.asked == [discovery_url(ISSUER)]  # one fetch for both
    clock.advance(WAIT_FOR_KEYS - 0.5)
    late = asking(keys, "rsa")  # waits only what is left of the bound
    clock.advance(0.5)
    for outcome in (first, second, late):
        (failure,) = outcome
        assert failure.check(ServiceUnavailable) and failure.value.headers["Retry-After"] == "2"
    refused = asking(keys, "rsa")  # past the bound of the running fetch: at once
    assert refused[0].check(ServiceUnavailable)
    clock.advance(28)  # the provider answers after 30 s; nobody was waiting for it
    provider.answer()
    assert key(keys, "rsa").algorithm == "RS256"
    assert provider.asked == [discovery_url(ISSUER), JWKS]


def test_a_fetch_ending_within_the_bound_answers_the_requests_waiting():
    clock, provider = Clock(), SlowProvider([RSA])
    keys = ProviderKeys(issuer=ISSUER, get_json=provider.get_json, clock=clock, refresh=60, lifetime=3600)
    waiting = asking(keys, "rsa")
    clock.advance(1)
    provider.answer()  # the discovery document; the JWKS is asked next
    provider.answer()
    assert waiting[0].algorithm == "RS256"
    assert not clock.getDelayedCalls()  # the bound's timer is gone


def test_keys_past_their_lifetime_serve_while_a_slow_refresh_runs_in_the_background():
    clock, provider = Clock(), SlowProvider([RSA])
    keys = ProviderKeys(issuer=ISSUER, get_json=provider.get_json, clock=clock, refresh=60, lifetime=3600)
    first = asking(keys, "rsa")
    provider.answer()
    provider.answer()
    assert first[0] is not None
    clock.advance(3600)
    stale = asking(keys, "rsa")  # one refresh begins; the request waits for it within the bound
    assert stale == [] and provider.asked[-1] == JWKS and len(provider.asked) == 3
    clock.advance(WAIT_FOR_KEYS)
    assert stale[0].algorithm == "RS256"  # the key held, past its lifetime
    assert key(keys, "rsa").algorithm == "RS256" and len(provider.asked) == 3  # at once, no second fetch
    provider.keys = [P256]
    provider.answer()  # the refresh ends: the withdrawn key is gone
    assert key(keys, "rsa") is None and key(keys, "p256").algorithm == "ES256"


class Silent(Resource):
    """A provider that takes every request and never answers it (until the test ends)."""

    isLeaf = True

    def __init__(self) -> None:
        super().__init__()
        self.requests: list = []

    def render_GET(self, request):
        self.requests.append(request)
        return NOT_DONE_YET


@pytest_twisted.ensureDeferred
async def test_a_real_provider_that_never_answers_holds_a_request_at_most_the_bound():
    from twisted.internet import reactor

    silent = Silent()
    port = reactor.listenTCP(0, Site(silent), interface="127.0.0.1")
    issuer = f"http://127.0.0.1:{port.getHost().port}"
    keys = ProviderKeys(
        issuer=issuer, get_json=ProviderClient(reactor).get_json, clock=reactor, refresh=60, lifetime=3600
    )
    try:
        began = time.monotonic()
        with pytest.raises(ServiceUnavailable):
            await keys.key("rsa")
        took = time.monotonic() - began
        assert WAIT_FOR_KEYS <= took < WAIT_FOR_KEYS + 2, took  # not the fetch's own 10 s
        assert len(silent.requests) == 1
        began = time.monotonic()
        with pytest.raises(ServiceUnavailable):
            await keys.key("rsa")  # the same fetch still runs: refused at once
        assert time.monotonic() - began < 0.5
    finally:
        for request in silent.requests:
            request.channel.transport.abortConnection()
        await port.stopListening()
