"""`tls: auto` (apid.runtime.tls): what in the settings uses TLS, and a process that goes
without it. Leaving TLS out lasts for the life of a process, so each such process here is a
child of the test; tests/integration/test_memory.py checks what a real daemon loads."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from apid.config.files import load
from apid.config.nodes import ConfigError
from apid.config.server import PeerServer
from apid.runtime.tls import uses

ETC = Path(__file__).resolve().parents[2] / "etc"


def test_the_shipped_development_and_test_settings_use_no_tls_and_leave_it_out():
    for environment in ("development", "test"):
        config = load(ETC, environment, {})
        assert (config.server.tls, uses(config)) == ("auto", [])
    production = load(ETC, "production", {})
    assert production.server.tls == "always" and uses(production) == ["mail goes by SMTP (STARTTLS)"]


def _with(server: dict | None = None, api: dict | None = None):
    """The shipped test settings, changed as given."""
    return replace(TEST, server=replace(TEST.server, **(server or {})), api=replace(TEST.api, **(api or {})))


TEST = load(ETC, "test", {})


@pytest.mark.parametrize(
    "server, api, reason",
    [
        ({"listen": "ssl:8443:privateKey=key.pem"}, {}, "`listen` is a TLS endpoint"),
        ({"listen": "haproxy:tls:8443"}, {}, "`listen` is a TLS endpoint"),
        ({"servers": (PeerServer(url="https://p.example", timeout=1.0),)}, {}, "a peer in `servers` is https"),
        ({}, {"allowed_origins": ("http://a.example", "https://b.example")}, "an https origin"),
        ({}, {"security": replace(TEST.api.security, issuers=(object(),))}, "identity providers"),
        ({"mail": replace(TEST.server.mail, backend="smtp")}, {}, "SMTP"),
        ({"redis_url": "redis://127.0.0.1:6379/0"}, {}, "txredisapi"),
    ],
    ids=["listen", "haproxy-listen", "peer", "origin", "issuers", "smtp", "redis"],
)
def test_each_setting_that_uses_tls_says_so(server, api, reason):
    found = uses(_with(server, api))
    assert len(found) == 1 and reason in found[0], found


def test_plain_listen_endpoints_and_http_peers_and_origins_use_none():
    for listen in ("tcp:8080", "tcp6:8080", "unix:/run/apid.sock", "systemd:domain=INET:index=0", "haproxy:tcp:80"):
        assert uses(_with({"listen": listen})) == [], listen
    peer = PeerServer(url="http://p.example", timeout=1.0)
    assert uses(_with({"servers": (peer,)}, {"allowed_origins": ("http://a.example",)})) == []


LEFT_OUT = """
import json, sys
from pathlib import Path
from apid.config.files import load
from apid.config.nodes import ConfigError
from apid.runtime import tls
config = load(Path(sys.argv[1]), "test", {})
if sys.argv[2] == "preloaded":
    import OpenSSL
left = tls.leave_out(config)
from apid.runtime.reactors import install
install("default")
import jwt, jwt.algorithms
from twisted.internet import endpoints, reactor, tcp
from twisted.internet.interfaces import IReactorSSL
try:
    import cryptography.fernet
    refusal = None
except ModuleNotFoundError as exc:
    refusal = str(exc)
print(json.dumps({
    "left_out": left,
    "tls_client": endpoints.TLSMemoryBIOFactory is not None,
    "start_tls": hasattr(tcp.Connection, "startTLS"),
    "tls_reactor": IReactorSSL.providedBy(reactor),
    "rs256": jwt.algorithms.has_crypto,
    "refusal": refusal,
}))
"""


def _process(tmp_path: Path, tls: str, mode: str = "") -> dict:
    etc = tmp_path / "etc"
    etc.mkdir()
    for name in ("service_server.yml", "service_api.yml"):
        (etc / name).write_text((ETC / name).read_text().replace("  tls: auto", f"  tls: {tls}"))
    done = subprocess.run([sys.executable, "-c", LEFT_OUT, str(etc), mode], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_process_left_without_tls_takes_twisteds_and_pyjwts_paths_without_it(tmp_path):
    found = _process(tmp_path, "auto")
    assert found["left_out"] is True
    assert not any(found[key] for key in ("tls_client", "start_tls", "tls_reactor", "rs256"))
    assert "cryptography is left out of this apid process" in found["refusal"]
    assert "set `tls: always` in service_server.yml" in found["refusal"]


def test_tls_always_loads_it_as_before(tmp_path):
    found = _process(tmp_path, "always")
    assert found["left_out"] is False and found["refusal"] is None
    assert all(found[key] for key in ("tls_client", "start_tls", "tls_reactor", "rs256"))


def test_nothing_is_left_out_once_something_imported_it(tmp_path):
    found = _process(tmp_path, "auto", "preloaded")
    assert found["left_out"] is False and found["refusal"] is None and found["tls_client"]


@pytest.mark.parametrize("value", ["sometimes", True, ""])
def test_a_tls_value_other_than_auto_or_always_is_refused_naming_file_and_key(tmp_path, value):
    etc = tmp_path / "etc"
    etc.mkdir()
    for name in ("service_server.yml", "service_api.yml"):
        (etc / name).write_text((ETC / name).read_text())
    server = yaml.safe_load((etc / "service_server.yml").read_text())
    server["test"]["tls"] = value
    (etc / "service_server.yml").write_text(yaml.safe_dump(server))
    with pytest.raises(ConfigError) as refused:
        load(etc, "test", {})
    assert str(etc / "service_server.yml") in str(refused.value) and "test.tls" in str(refused.value)
