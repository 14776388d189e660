"""A daemon loads only what its configuration uses (issues 16 and 37): on the embedded
configuration (SQLite, no Redis, mail to files, no metrics read, webhooks off, one process,
`tls: auto`) a ready daemon has imported neither Alembic nor Redis's client, SMTP,
prometheus_client, the HTTP client, PostgreSQL's dialect, the workers' channel nor TLS; a
daemon configured for metrics and webhooks loads theirs, and still none of the others.

The daemon is `apid serve` as the harness starts it, with a `sitecustomize` module on
PYTHONPATH that writes the process's `sys.modules` to a file when sent SIGUSR1: the daemon
has no debug route or flag for this. (Its memory and start-up time are measured by
scripts/bench, not here.)
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from harness import ADMIN_ACCOUNT, Daemon, deployment_with_accounts, wait_for

SITECUSTOMIZE = """
import os, signal, sys


def _write_modules(*_):
    path = os.environ["APID_TEST_MODULES"]
    with open(path + ".part", "w") as out:
        out.write("\\n".join(sorted(sys.modules)))
    os.replace(path + ".part", path)


signal.signal(signal.SIGUSR1, _write_modules)
"""

# module -> the setting that would load it
UNUSED_WHEN_EMBEDDED = {
    "alembic": "none: the migration at start runs in a child process",
    "mako": "none: Alembic's templates, loaded with Alembic",
    "apid.store.migrate": "none: the migration at start runs in a child process",
    "txredisapi": "redis.url",
    "twisted.mail.smtp": "mail.backend: smtp, at the first mail sent",
    "apid.mail.smtp": "mail.backend: smtp, at the first mail sent",
    "prometheus_client": "metrics.listen or metrics.role",
    "apid.hooks.delivery": "webhookActive",
    "treq": "webhookActive, or the first pingServers",
    "twisted.web.client": "webhookActive, or the first pingServers",
    "sqlalchemy.dialects.postgresql": "a postgresql:// database.url",
    "twisted.protocols.amp": "procCores above 1 (in its workers)",
    "OpenSSL": "tls: always, or a setting using TLS (apid.runtime.tls)",
    "cryptography": "tls: always, or a setting using TLS (apid.runtime.tls)",
}
TLS = {"OpenSSL", "cryptography", "twisted.protocols.tls"}


def modules_of(root: Path, server: dict) -> set[str]:
    """The modules a daemon on a deployment with these `server` settings holds once ready."""
    site = root / "site"
    site.mkdir(parents=True)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    written = root / "modules.txt"
    deployment = deployment_with_accounts(root / "deployment", server=server, accounts=(ADMIN_ACCOUNT,))
    daemon = Daemon(deployment, env={"PYTHONPATH": str(site), "APID_TEST_MODULES": str(written)}).start()
    try:
        daemon.process.send_signal(signal.SIGUSR1)
        assert wait_for(written.exists), daemon.stderr
    finally:
        assert daemon.stop() == 0, daemon.stderr
    return set(written.read_text().split())


@pytest.fixture(scope="module")
def embedded(tmp_path_factory) -> set[str]:
    return modules_of(tmp_path_factory.mktemp("embedded"), {})


def test_the_embedded_daemon_serves_with_its_own_modules_loaded(embedded):
    assert {
        "apid.server.daemon",
        "apid.server.assembly",
        "sqlalchemy.dialects.sqlite",
        "apid.mail.message",
        "apid.server.peers",
    } <= embedded


@pytest.mark.parametrize("module", sorted(UNUSED_WHEN_EMBEDDED))
def test_the_embedded_daemon_has_not_loaded_what_only_other_settings_use(embedded, module):
    assert module not in embedded, f"{module} is loaded without {UNUSED_WHEN_EMBEDDED[module]}"


def test_metrics_and_webhooks_load_their_modules_and_nothing_else_more(tmp_path):
    loaded = modules_of(tmp_path, {"metrics": {"role": "ROLE_ADMIN"}, "webhookActive": True})
    assert {"prometheus_client", "apid.hooks.delivery", "treq", "twisted.web.client"} <= loaded
    assert not loaded & {
        "alembic",
        "apid.store.migrate",
        "txredisapi",
        "twisted.mail.smtp",
        "sqlalchemy.dialects.postgresql",
        *TLS,  # webhooks to plain http origins: the HTTP client without TLS
    }


def test_tls_always_and_a_setting_using_tls_load_it(tmp_path):
    assert modules_of(tmp_path / "always", {"tls": "always"}) >= TLS
    assert modules_of(tmp_path / "peer", {"servers": ["https://peer.example.com"]}) >= TLS


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="worker processes need two CPUs")
def test_the_parent_and_its_workers_leave_tls_out_alike(tmp_path):
    """With `procCores` above 1 each process decides for itself (`apid serve` and `apid
    worker`): none maps cryptography's library."""
    deployment = deployment_with_accounts(tmp_path, api={"procCores": 2}, accounts=(ADMIN_ACCOUNT,))
    daemon = Daemon(deployment).start()
    try:
        processes = [daemon.process.pid, *daemon.workers()]
        assert len(processes) == 3
        for pid in processes:
            maps = Path(f"/proc/{pid}/maps").read_text()
            assert "/cryptography/" not in maps and "/OpenSSL/" not in maps, pid
        assert daemon.request("GET", "/health").status == 200
    finally:
        assert daemon.stop() == 0, daemon.stderr
