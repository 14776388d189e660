"""A real OpenID provider for the tests: panva's `oidc-provider` from the npm registry, run with
node on loopback (tests/oidc_provider/server.mjs configures it; nothing of it is written here).

`npm ci` installs the version tests/oidc_provider/package-lock.json holds into
tests/output/oidc-provider/ (never committed), once, the first time a test needs it; node and
npm come from scripts/system-deps. The tests make the provider's signing keys (so they can
rotate them, and forge tokens with keys it does not publish) and read its request log (to
count what apid fetched from it). Tokens come from its token endpoint with the client
credentials grant, as JWT access tokens of a resource server.
"""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm

import npm_packages
from harness import REPO, free_port, wait_for

SOURCE = REPO / "tests" / "oidc_provider"
HOME = REPO / "tests" / "output" / "oidc-provider"
SECRET = "client-secret-of-the-tests-0123456789"


def installed() -> Path:
    """The provider's folder, its packages installed (`npm_packages.installed`)."""
    return npm_packages.installed(SOURCE, HOME, "server.mjs")


def signing_key(kind: str, kid: str) -> dict[str, Any]:
    """A new private JWK: `rsa` (RS256), `ec` (P-256, ES256) or `ed` (Ed25519, EdDSA)."""
    if kind == "rsa":
        text = RSAAlgorithm.to_jwk(rsa.generate_private_key(public_exponent=65537, key_size=2048))
    elif kind == "ec":
        text = ECAlgorithm.to_jwk(ec.generate_private_key(ec.SECP256R1()))
    else:
        text = OKPAlgorithm.to_jwk(ed25519.Ed25519PrivateKey.generate())
    return {**json.loads(text), "kid": kid, "use": "sig"}


def claims_of(token: str) -> dict[str, Any]:
    """A JWT's claims, unverified (what the provider put in)."""
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


@dataclass
class Provider:
    """oidc-provider running on a loopback port: `issuer` is its URL."""

    folder: Path
    keys: list[dict[str, Any]]
    clients: dict[str, dict[str, Any]]  # client id -> the claims its tokens carry
    resources: dict[str, dict[str, Any]]  # resource indicator -> {audience, alg[, key]}
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> str:
        path = self.folder / "provider.log"
        return path.read_text() if path.exists() else ""

    def _write_config(self) -> Path:
        path = self.folder / "provider.json"
        path.write_text(
            json.dumps(
                {
                    "issuer": self.issuer,
                    "keys": self.keys,
                    "clients": [{"id": id, "secret": SECRET, "claims": c} for id, c in self.clients.items()],
                    "resources": self.resources,
                }
            )
        )
        return path

    def start(self) -> Provider:
        self.folder.mkdir(parents=True, exist_ok=True)
        config = self._write_config()
        with open(self.folder / "provider.log", "ab") as log:
            self.process = subprocess.Popen(
                ["node", str(installed() / "server.mjs"), str(config), str(self.port)],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        if not wait_for(lambda: "provider ready" in self.log or self.process.poll() is not None, timeout=60):
            raise RuntimeError(f"the OpenID provider did not start:\n{self.log}")
        if self.process.poll() is not None:
            raise RuntimeError(f"the OpenID provider stopped:\n{self.log}")
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def rotate(self, keys: list[dict[str, Any]]) -> None:
        """Publish `keys` and sign with them from now on (the first of each type signs)."""
        done = self.log.count("reloaded ")
        self.keys = keys
        self._write_config()
        assert self.process is not None
        self.process.send_signal(signal.SIGHUP)
        assert wait_for(lambda: self.log.count("reloaded ") > done), self.log

    def requests(self, path: str) -> int:
        """How many GET requests for `path` the provider answered so far."""
        return self.log.count(f"request GET {path}\n")

    def token(self, client: str, resource: str) -> str:
        """An access token for `client` (client credentials grant), a JWT for `resource`."""
        body = urllib.parse.urlencode(
            {"grant_type": "client_credentials", "resource": resource, "scope": "api"}
        ).encode()
        credentials = base64.b64encode(f"{client}:{SECRET}".encode()).decode()
        request = urllib.request.Request(
            f"{self.issuer}/token", data=body, headers={"Authorization": f"Basic {credentials}"}
        )
        with urllib.request.urlopen(request, timeout=30) as answer:
            return json.loads(answer.read())["access_token"]
