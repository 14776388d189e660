"""An OpenID provider's signing keys: fetched from the provider, kept by `kid`.

The provider's discovery document (`{issuer}/.well-known/openid-configuration`) names its JWKS;
both are fetched with apid's HTTP client (`apid.http.client`; no redirect followed, each fetch
bounded in time and size), never on the path of a request whose key is known. A token naming a
`kid` apid does not hold makes it fetch the JWKS again (the provider rotated its keys), but at
most once per `refresh` seconds: a stream of tokens with forged `kid`s costs the provider one
request per interval and each of those tokens a 401 at once. The keys are fetched again after
`lifetime` seconds too, so a key the provider withdrew stops being trusted; while the provider
cannot be reached, the keys held go on serving.

A slow provider never holds a request more than `WAIT_FOR_KEYS` (2 s): one fetch runs at a
time, in the background, and a request waits for it only within 2 s of its start. Past that, a
request whose key is held (past its lifetime) is served with it, and one whose `kid` is not
held gets a 503 with Retry-After (the token may be good: the client tries again once the fetch
has ended) instead of a 401 that would end its login. A provider answering after 30 s used to
keep every new token of the time waiting, fetch after fetch.

Only RSA, P-256 and Ed25519 keys are kept, each with the one algorithm of its type (RS256,
ES256, EdDSA): the token's header never chooses how it is checked, so `none` and the HMAC
algorithms (whose "secret" would be the public key) have no key to be checked with.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import jwt
from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger

from apid.config.kinds import provider_url
from apid.problems import ServiceUnavailable

if TYPE_CHECKING:
    from treq.client import HTTPClient
    from twisted.web.iweb import IResponse

log = Logger(namespace="apid.auth.jwks")

# The algorithm of each key type (and curve): pinned by the key, whatever a token's header says.
ALGORITHMS: Mapping[tuple[Any, Any], str] = {
    ("RSA", None): "RS256",
    ("EC", "P-256"): "ES256",
    ("OKP", "Ed25519"): "EdDSA",
}
FETCH_TIMEOUT = 10.0  # seconds for one document, connecting included
MOST_BYTES = 512 * 1024  # a JWKS of a few dozen keys is a few KiB; more is a broken or hostile answer
# Seconds a request waits, at most, for a fetch of the keys: a provider answers in tens of
# milliseconds; one that takes longer is in trouble, and its clients should not wait with it.
WAIT_FOR_KEYS = 2.0
SLOW_PROVIDER = "the identity provider is slow to publish its signing keys; try again in a few seconds"


class ProviderError(Exception):
    """A provider's discovery document or JWKS could not be fetched or read."""


@dataclass(frozen=True)
class SigningKey:
    algorithm: str
    key: Any  # the public key PyJWT verifies with (a `cryptography` key object)


def discovery_url(issuer: str) -> str:
    """Where the issuer's discovery document is (OpenID Connect Discovery 1.0, section 4)."""
    return issuer.rstrip("/") + "/.well-known/openid-configuration"


def jwks_uri(issuer: str, discovery: Any) -> str:
    """The JWKS address of a discovery document, which must name the issuer exactly (section 4.3)."""
    if not isinstance(discovery, dict) or discovery.get("issuer") != issuer:
        raise ProviderError("the discovery document names another issuer")
    uri = discovery.get("jwks_uri")
    if not isinstance(uri, str):
        raise ProviderError("the discovery document has no jwks_uri")
    try:
        return provider_url(uri)
    except ValueError as error:
        raise ProviderError(f"jwks_uri {error}") from None


def signing_keys(document: Any) -> dict[str, SigningKey]:
    """The keys of a JWKS that apid verifies with, by `kid`: public signing keys of a type it
    takes, whose `alg`, when given, is that type's. Any other key is left out, not an error: a
    JWKS also holds encryption keys, and keys of other kinds during a rotation."""
    keys = document.get("keys") if isinstance(document, dict) else None
    if not isinstance(keys, list):
        raise ProviderError("the JWKS holds no list of keys")
    found = {}
    for jwk in keys:
        if not isinstance(jwk, dict) or not isinstance(jwk.get("kid"), str) or "d" in jwk:
            continue
        algorithm = ALGORITHMS.get((jwk.get("kty"), jwk.get("crv")))
        if algorithm is None or jwk.get("use", "sig") != "sig" or jwk.get("alg", algorithm) != algorithm:
            continue
        try:
            found[jwk["kid"]] = SigningKey(algorithm, jwt.PyJWK(jwk, algorithm).key)
        except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, TypeError, KeyError):
            continue
    return found


class ProviderKeys:
    """One provider's signing keys, fetched through `get_json` when a token needs one."""

    def __init__(
        self,
        *,
        issuer: str,
        get_json: Callable[[str], Deferred[Any]],
        clock: IReactorTime,
        refresh: float,
        lifetime: float,
        wait: float = WAIT_FOR_KEYS,
    ) -> None:
        self._issuer = issuer
        self._get_json = get_json
        self._clock = clock
        self._refresh = refresh
        self._lifetime = lifetime
        self._wait = wait
        self._keys: dict[str, SigningKey] = {}
        self._jwks_uri: str | None = None
        self._fetched = -math.inf  # when the keys held came
        self._tried = -math.inf  # when the last fetch began
        self._fetching: Deferred[None] | None = None  # the one fetch running, that requests may wait for

    def held(self, kid: str) -> SigningKey | None:
        """The key `kid` while the keys are fresh; None once they are older than `lifetime`."""
        if self._clock.seconds() - self._fetched < self._lifetime:
            return self._keys.get(kid)
        return None

    async def key(self, kid: str) -> SigningKey | None:
        """The key `kid`: held, or fetched if the last fetch began `refresh` seconds ago or more;
        None when the provider does not publish it (or could not be asked again yet). Never
        waits for a fetch beyond `wait` seconds from its start: then a held key past its
        lifetime is served, and for a `kid` not held, a 503 (`ServiceUnavailable`)."""
        found = self.held(kid)
        if found is not None:
            return found
        fetching = self._fetch()
        if fetching is not None and not await self._within_wait(fetching):
            if kid in self._keys:
                return self._keys[kid]  # past its lifetime, while the provider is slow to answer
            raise ServiceUnavailable(SLOW_PROVIDER, retry_after=self._wait)
        return self._keys.get(kid)  # past `lifetime` too, while the provider cannot be reached

    def _fetch(self) -> Deferred[None] | None:
        """The fetch running, or a new one if the last began `refresh` seconds ago or more; None
        when neither (the keys held are all there is for now)."""
        if self._fetching is not None:
            return self._fetching
        if self._clock.seconds() - self._tried < self._refresh:
            return None
        self._tried = self._clock.seconds()
        fetching = Deferred.fromCoroutine(self._fetch_keys())
        if fetching.called:  # answered at once: nothing to wait for
            return fetching
        self._fetching = fetching

        def ended(_: object) -> None:
            self._fetching = None

        fetching.addCallback(ended)
        return fetching

    async def _within_wait(self, fetching: Deferred[None]) -> bool:
        """Whether the fetch ends within `wait` seconds of its start; it goes on either way."""
        if fetching.called:
            return True
        left = self._wait - (self._clock.seconds() - self._tried)
        if left <= 0:
            return False
        outcome: Deferred[bool] = Deferred()

        def settle(in_time: bool) -> None:
            if not outcome.called:
                outcome.callback(in_time)

        def ended(result: object) -> object:
            settle(True)
            return result

        timer = self._clock.callLater(left, settle, False)
        fetching.addBoth(ended)
        ended_in_time = await outcome
        if timer.active():
            timer.cancel()
        return ended_in_time

    async def _fetch_keys(self) -> None:
        try:
            if self._jwks_uri is None:
                self._jwks_uri = jwks_uri(self._issuer, await self._get_json(discovery_url(self._issuer)))
            self._keys = signing_keys(await self._get_json(self._jwks_uri))
            self._fetched = self._clock.seconds()
        except Exception as error:  # the provider's trouble, not the request's: keep the keys held
            self._jwks_uri = None  # asked again next time, in case the JWKS moved
            log.warn(
                "the signing keys of {issuer} could not be fetched ({reason}); keeping the {count} held",
                issuer=self._issuer,
                reason=describe(error),
                count=len(self._keys),
            )


def describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}".strip().rstrip(":")


class ProviderClient:
    """Fetches a provider's JSON documents with apid's HTTP client: a new connection each time
    (fetches are rare; nothing is left open to close at shutdown), no redirect followed, the
    whole exchange within `FETCH_TIMEOUT`, the body at most `MOST_BYTES`."""

    def __init__(self, reactor: IReactorTime) -> None:
        self._reactor = reactor
        self._client: HTTPClient | None = None

    def _http(self) -> HTTPClient:
        if self._client is None:  # a daemon that never sees a provider's token never loads treq
            from treq.client import HTTPClient

            from apid.http.client import agent, single_use_pool

            self._client = HTTPClient(agent(self._reactor, single_use_pool(self._reactor), FETCH_TIMEOUT))
        return self._client

    def get_json(self, url: str) -> Deferred[Any]:
        exchange = Deferred.fromCoroutine(self._get(url))
        exchange.addTimeout(FETCH_TIMEOUT, self._reactor)
        return exchange

    async def _get(self, url: str) -> Any:
        response = await self._http().get(url, allow_redirects=False)
        if response.code != 200:
            raise ProviderError(f"{url} answered {response.code}")
        try:
            return json.loads(await _bounded_body(response))
        except ValueError:
            raise ProviderError(f"{url} answered no JSON") from None


def _bounded_body(response: IResponse) -> Deferred[bytes]:
    import treq

    chunks: list[bytes] = []
    size = 0

    def collect(data: bytes) -> None:
        nonlocal size
        size += len(data)
        if size > MOST_BYTES:
            raise ProviderError(f"the answer is longer than {MOST_BYTES} bytes")
        chunks.append(data)

    return treq.collect(response, collect).addCallback(lambda _: b"".join(chunks))
