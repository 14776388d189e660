"""A plugin's settings: declared by its controller (`settings_class`, `@settings` of
`setting(...)` fields, from apid.plugin), written under `plugins.<controller>` in
service_server.yml, read by apid's own reader once the controllers are known: a wrong key or
value names the file, the line and the key."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from apid.config.files import load_server
from apid.config.nodes import ConfigError
from apid.plugin import setting, settings


@settings
class AuditSettings:
    url: str | None = setting("url", default=None, doc="Where audits go.")
    timeout: float = setting("timeout", default=5.0, doc="Seconds an audit may take.")
    retries: int = setting("client.retries", default=1, doc="Tries after the first.")


@settings
class MailerSettings:
    sender: str = setting("sender", doc="Required: who sends.")


DECLARED = {"audit": AuditSettings, "mailer": MailerSettings, "person": None}


def server(tmp_path: Path, text: str, environment: str = "development"):
    path = tmp_path / "service_server.yml"
    path.write_text(text)
    return load_server(path, environment, tmp_path, {})


def test_each_controller_gets_its_settings_and_the_defaults_of_those_left_out(tmp_path):
    config = server(
        tmp_path,
        "development:\n"
        "  plugins:\n"
        "    audit:\n"
        "      url: https://audit.example.com\n"
        "      client:\n"
        "        retries: 3\n"
        "    mailer: {sender: apid@example.com}\n",
    )
    read = config.plugins.read(DECLARED)
    assert read == {
        "audit": AuditSettings(url="https://audit.example.com", timeout=5.0, retries=3),
        "mailer": MailerSettings(sender="apid@example.com"),
    }


MAILER = "    mailer: {sender: apid@example.com}\n"


@pytest.mark.parametrize(
    ("plugins", "message"),
    [
        (
            "    audit:\n      timeot: 3\n" + MAILER,
            r"service_server.yml:4: development.plugins.audit.timeot: unknown key; allowed here: url, timeout, client",
        ),
        (
            "    audit:\n      timeout: soon\n" + MAILER,
            r"service_server.yml:4: development.plugins.audit.timeout: expected a number, got str 'soon'",
        ),
        ("    mailer: {}\n", r"service_server.yml:3: development.plugins.mailer.sender: is required"),
        (
            "    billing: {currency: EUR}\n" + MAILER,
            r"service_server.yml:3: development.plugins.billing: no plugin installed provides a controller named "
            r"'billing'",
        ),
        (
            "    person: {x: 1}\n" + MAILER,
            r"service_server.yml:3: development.plugins.person: controller 'person' declares no settings",
        ),
    ],
)
def test_a_wrong_key_or_value_names_the_file_the_line_and_the_key(tmp_path, plugins, message):
    config = server(tmp_path, f"development:\n  plugins:\n{plugins}")
    with pytest.raises(ConfigError, match=message):
        config.plugins.read(DECLARED)


def test_a_required_setting_without_a_plugins_section_is_named_where_it_belongs(tmp_path):
    config = server(tmp_path, "development:\n  webhookActive: false\n")
    with pytest.raises(ConfigError, match=r"service_server.yml:1: development.plugins.mailer.sender: is required"):
        config.plugins.read(DECLARED)


def test_a_section_that_is_no_mapping_is_refused_when_the_file_is_read(tmp_path):
    with pytest.raises(ConfigError, match=r":3: production.plugins.audit: expected the controller's settings"):
        server(tmp_path, "production:\n  plugins:\n    audit: [1]\n")


def test_the_lines_survive_a_worker_process(tmp_path):
    """A worker reads its configuration from its parent, pickled: errors still name the line."""
    config = server(tmp_path, "development:\n  plugins:\n    audit:\n      url: 7\n")
    copy = pickle.loads(pickle.dumps(config))
    with pytest.raises(ConfigError, match=r"service_server.yml:4: development.plugins.audit.url: expected a non-empty"):
        copy.plugins.read(DECLARED)


@settings
class UpstreamSettings:
    url: str = setting("url", kind="url", doc="The upstream service.")
    wait: float = setting("wait", kind="seconds", default=0.0, doc="Seconds to wait first; 0 does not.")
    mode: str = setting("mode", choices=("fast", "safe"), default="safe", doc="How to call it.")
    tries: int = setting("tries", default=1, doc="How often.")


def upstream(tmp_path: Path, lines: str):
    return server(tmp_path, f"development:\n  plugins:\n    upstream:\n{lines}").plugins.read(
        {"upstream": UpstreamSettings}
    )["upstream"]


def test_a_plugin_declares_the_kinds_apids_own_settings_have(tmp_path):
    read = upstream(tmp_path, "      url: https://up.example.com/v1\n      wait: 0\n      mode: fast\n")
    assert read == UpstreamSettings(url="https://up.example.com/v1", wait=0.0, mode="fast", tries=1)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("url: up.example.com", "url: must be an absolute http:// or https:// URL"),
        ("wait: -1", "wait: must be at least 0, got -1"),
        ("wait: .nan", "wait: must be a finite number, got float nan"),
        ("wait: .inf", "wait: must be a finite number, got float inf"),
        (f"wait: {10**400}", "wait: must be a finite number, got an integer of 401 digits"),
        (f"tries: {10**400}", "tries: must be at most 9223372036854775807, got an integer of 401 digits"),
        ("mode: quick", "mode: must be fast or safe, got 'quick'"),
    ],
)
def test_a_value_a_plugins_kind_refuses_names_the_file_the_line_and_the_key(tmp_path, line, message):
    given = f"      {line}\n" if line.startswith("url") else f"      url: https://up.example.com\n      {line}\n"
    with pytest.raises(ConfigError) as info:
        upstream(tmp_path, given)
    where = 4 if line.startswith("url") else 5
    assert f"service_server.yml:{where}: development.plugins.upstream.{message}" in str(info.value)


def test_a_kind_is_declared_once_and_by_a_name_apid_knows():
    with pytest.raises(TypeError, match="kind= or choices=, not both"):
        setting("x", kind="url", choices=("a",), doc="")
    with pytest.raises(ValueError, match="kind must be one of url, seconds, not 'duration'"):
        setting("x", kind="duration", doc="")  # type: ignore[arg-type]
