"""Loading etc/service_server.yml and etc/service_api.yml (DESIGN 4.3, SPEC Limits)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from apid.config.api import AbuseLimit
from apid.config.files import load, load_api, load_server
from apid.config.kinds import API_FILE, SERVER_FILE
from apid.config.nodes import ConfigError
from apid.config.server import ConnectionLimits, PasswordsConfig

REPO = Path(__file__).resolve().parents[2]
ETC = REPO / "etc"
NO_ENV: dict[str, str] = {}


def repo_yaml(name: str) -> dict:
    return yaml.safe_load((ETC / name).read_text(encoding="utf-8"))


@pytest.fixture
def config_dir(tmp_path: Path) -> Path:
    """A copy of the repository's etc/ under tmp_path/deploy/etc."""
    target = tmp_path / "deploy" / "etc"
    target.mkdir(parents=True)
    for name in (SERVER_FILE, API_FILE):
        shutil.copy(ETC / name, target / name)
    return target


def write(config_dir: Path, name: str, data: object) -> Path:
    path = config_dir / name
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def server_error(config_dir: Path, data: dict, environment: str = "development") -> str:
    path = write(config_dir, SERVER_FILE, data)
    with pytest.raises(ConfigError) as info:
        load_server(path, environment, config_dir.parent, NO_ENV)
    message = str(info.value)
    assert str(path) in message
    return message


def api_error(config_dir: Path, data: dict) -> str:
    path = write(config_dir, API_FILE, data)
    with pytest.raises(ConfigError) as info:
        load_api(path, config_dir.parent)
    message = str(info.value)
    assert str(path) in message
    return message


# --- the repository's files -----------------------------------------------------------------


@pytest.mark.parametrize("environment", ["development", "test", "production"])
def test_repository_etc_loads_for_each_environment(environment):
    config = load(ETC, environment, NO_ENV)
    assert config.server.environment == environment
    assert config.root == REPO


def test_environment_defaults_to_development_and_apid_env_selects_another():
    assert load(ETC, None, NO_ENV).server.environment == "development"
    assert load(ETC, None, {"APID_ENV": "production"}).server.environment == "production"


def test_sample_throttle_values_of_the_spec():
    throttle = load(ETC, "development", NO_ENV).api.throttle
    assert dict(throttle.rate_limit) == {"ROLE_USER": 1000, "ROLE_ADMIN": 10000}
    assert dict(throttle.data_limit) == {"ROLE_USER": 1000000, "ROLE_ADMIN": 1000000}
    assert throttle.expires == 3600


def test_sample_attempts_and_proc_cores():
    api = load(ETC, "development", NO_ENV).api
    assert api.attempts == 5
    assert api.proc_cores == 8


def test_reserved_uris_include_refresh_token_and_health():
    reserved = load(ETC, "development", NO_ENV).api.reserved_uris
    assert {"/authenticate", "/register", "/refreshToken", "/health"} <= reserved


def test_security_roles_from_the_repository_file():
    security = load(ETC, "development", NO_ENV).api.security
    assert security.superuser_role == "ROLE_ADMIN"
    assert security.user_role == "ROLE_USER"
    assert security.network_roles["public"] == {"ROLE_ADMIN", "ROLE_USER"}
    assert security.all_roles == {"ROLE_ADMIN", "ROLE_USER", "ROLE_ANONYMOUS"}


def test_production_turns_throttle_on_and_uses_smtp():
    server = load(ETC, "production", NO_ENV).server
    assert server.api_throttle is True
    assert server.webhook_active is False
    assert server.mail.backend == "smtp"
    assert (server.mail.smtp_host, server.mail.smtp_port) == ("smtp.example.com", 587)


def test_test_environment_listens_on_an_ephemeral_port_without_access_log():
    server = load(ETC, "test", NO_ENV).server
    assert server.listen == "tcp:0:interface=127.0.0.1"
    assert server.access_log is False


def test_the_reactor_is_the_default_one_unless_asyncio_is_asked_for(config_dir):
    assert load(ETC, "production", NO_ENV).server.reactor == "default"
    data = repo_yaml(SERVER_FILE)
    data["development"]["reactor"] = "asyncio"
    write(config_dir, SERVER_FILE, data)
    assert load(config_dir, "development", NO_ENV).server.reactor == "asyncio"


@pytest.mark.parametrize(
    "value, reason",
    [("trio", "must be default, asyncio or uvloop, got 'trio'"), (True, "expected a non-empty string, got bool True")],
)
def test_an_unknown_reactor_is_refused(config_dir, value, reason):
    data = repo_yaml(SERVER_FILE)
    data["production"]["reactor"] = value
    assert server_error(config_dir, data).endswith(f"production.reactor: {reason}")


# --- metrics and logs -------------------------------------------------------------------------


def test_no_metrics_and_text_logs_unless_asked_for():
    server = load(ETC, "production", NO_ENV).server
    assert (server.metrics.listen, server.metrics.role, server.log_format) == (None, None, "text")


def test_metrics_and_json_logs_as_asked_for(config_dir):
    data = repo_yaml(SERVER_FILE)
    data["production"].update(metrics={"listen": 9464, "role": "ROLE_ADMIN"}, logFormat="json")
    write(config_dir, SERVER_FILE, data)
    server = load(config_dir, "production", NO_ENV).server
    assert (server.metrics.listen, server.metrics.role) == ("tcp:9464:interface=127.0.0.1", "ROLE_ADMIN")
    assert server.log_format == "json"


@pytest.mark.parametrize(
    "metrics, reason",
    [
        (
            {"listen": "tcp:nine"},
            "production.metrics.listen: invalid literal for int() with base 10: 'nine'; give a port",
        ),
        (
            {"listen": "carrier-pigeon:1"},
            "production.metrics.listen: Unknown endpoint type: 'carrier-pigeon'; give a port",
        ),
        (
            {"listen": "systemd:domain=INET:index=0"},
            "production.metrics.listen: systemd sockets are for the API's listen",
        ),
        ({"role": ""}, "production.metrics.role: expected a non-empty string, got str ''"),
        ({"path": "/m"}, "production.metrics.path: unknown key; allowed here: listen, role"),
    ],
)
def test_bad_metrics_settings_are_refused(config_dir, metrics, reason):
    data = repo_yaml(SERVER_FILE)
    data["production"]["metrics"] = metrics
    assert reason in server_error(config_dir, data)


def test_a_metrics_role_must_be_a_declared_role(config_dir):
    data = repo_yaml(SERVER_FILE)
    data["development"]["metrics"] = {"role": "ROLE_MONITOR"}
    write(config_dir, SERVER_FILE, data)
    with pytest.raises(ConfigError, match=r"development\.metrics\.role: role 'ROLE_MONITOR' is not in security"):
        load(config_dir, "development", NO_ENV)


def test_an_unknown_log_format_is_refused(config_dir):
    data = repo_yaml(SERVER_FILE)
    data["test"]["logFormat"] = "xml"
    assert server_error(config_dir, data).endswith("test.logFormat: must be text or json, got 'xml'")


# --- paths ------------------------------------------------------------------------------------


def test_relative_paths_resolve_against_the_parent_of_the_config_dir(config_dir):
    root = config_dir.parent
    config = load(config_dir, "development", NO_ENV)
    assert config.root == root
    assert config.api.iostate_dir == root / "iostate"
    assert config.server.mail.outbox == root / "var" / "outbox"
    assert config.server.jwt.secret_file == root / "var" / "jwt.secret"
    assert config.server.database_url == f"sqlite:///{root / 'var' / 'apid.db'}"


def test_absolute_paths_are_kept(config_dir):
    server = load(config_dir, "production", NO_ENV).server
    assert server.database_url == "sqlite:////var/lib/apid/apid.db"
    assert server.jwt.secret_file == Path("/var/lib/apid/jwt.secret")


def test_relative_config_dir_is_resolved(config_dir, monkeypatch):
    monkeypatch.chdir(config_dir.parent)
    assert load(Path("etc"), "development", NO_ENV).root == config_dir.parent


def test_apid_config_dir_chooses_the_folder(config_dir):
    config = load(None, "development", {"APID_CONFIG_DIR": str(config_dir)})
    assert config.root == config_dir.parent


# --- environment overrides ----------------------------------------------------------------------


def test_apid_listen_beats_the_file():
    server = load(ETC, "development", {"APID_LISTEN": "tcp:9999"}).server
    assert server.listen == "tcp:9999"


def test_apid_database_url_beats_the_file():
    url = "postgresql://apid@db/apid"
    assert load(ETC, "development", {"APID_DATABASE_URL": url}).server.database_url == url


def test_relative_sqlite_database_url_from_the_environment_resolves_against_root(config_dir):
    env = {"APID_DATABASE_URL": "sqlite:///var/other.db"}
    server = load(config_dir, "development", env).server
    assert server.database_url == f"sqlite:///{config_dir.parent / 'var' / 'other.db'}"


def test_apid_redis_url_beats_the_file(config_dir):
    data = repo_yaml(SERVER_FILE)
    data["development"]["redis"] = {"url": "redis://file:6379/0"}
    write(config_dir, SERVER_FILE, data)
    env = {"APID_REDIS_URL": "redis://env:6379/1"}
    assert load(config_dir, "development", env).server.redis_url == "redis://env:6379/1"
    assert load(config_dir, "development", NO_ENV).server.redis_url == "redis://file:6379/0"


def test_redis_absent_means_in_process():
    assert load(ETC, "development", NO_ENV).server.redis_url is None


# --- defaults ----------------------------------------------------------------------------------


def test_an_empty_environment_section_takes_the_documented_defaults(config_dir):
    data = repo_yaml(SERVER_FILE)
    data["development"] = None
    path = write(config_dir, SERVER_FILE, data)
    server = load_server(path, "development", config_dir.parent, NO_ENV)
    assert server.webhook_active is False
    assert server.api_throttle is False
    assert server.listen == "tcp:8080:interface=127.0.0.1"
    assert server.redis_url is None
    assert server.database_url == f"sqlite:///{config_dir.parent / 'var' / 'apid.db'}"


def test_peer_servers_take_the_ping_timeout_unless_they_set_their_own(config_dir):
    data = repo_yaml(SERVER_FILE)
    data["development"]["pingTimeout"] = 3
    data["development"]["servers"] = ["http://a:8080/", {"url": "http://b:8080", "timeout": 0.5}]
    path = write(config_dir, SERVER_FILE, data)
    servers = load_server(path, "development", config_dir.parent, NO_ENV).servers
    assert [(p.url, p.timeout) for p in servers] == [("http://a:8080", 3.0), ("http://b:8080", 0.5)]


def test_a_jwt_secret_of_exactly_32_bytes_is_accepted(config_dir):
    data = repo_yaml(SERVER_FILE)
    data["development"]["jwt"]["secret"] = "s" * 32
    path = write(config_dir, SERVER_FILE, data)
    assert load_server(path, "development", config_dir.parent, NO_ENV).jwt.secret == b"s" * 32


def test_api_version_is_reduced_to_major_minor(config_dir):
    data = repo_yaml(API_FILE)
    data["api"] = {"version": "2.3.7"}
    path = write(config_dir, API_FILE, data)
    assert load_api(path, config_dir.parent).version == "2.3"


# --- bad inputs: each names the file and the dotted key ------------------------------------------


def test_unknown_top_level_server_key_is_refused(config_dir):
    data = repo_yaml(SERVER_FILE)
    data["staging"] = {}
    message = server_error(config_dir, data)
    assert "staging: unknown key" in message


def test_unknown_top_level_api_key_is_refused(config_dir):
    data = repo_yaml(API_FILE)
    data["procCore"] = 8
    message = api_error(config_dir, data)
    assert "procCore: unknown key" in message


def test_unknown_key_in_an_environment_section_is_refused(config_dir):
    data = repo_yaml(SERVER_FILE)
    data["test"]["webhookActiv"] = True
    message = server_error(config_dir, data, "test")
    assert "test.webhookActiv: unknown key" in message


def test_unknown_nested_key_is_refused(config_dir):
    data = repo_yaml(SERVER_FILE)
    data["development"]["jwt"]["foo"] = 1
    message = server_error(config_dir, data)
    assert "development.jwt.foo: unknown key" in message


def test_unknown_key_in_another_environment_is_refused_too(config_dir):
    data = repo_yaml(SERVER_FILE)
    data["production"]["mail"]["smtp"]["tls"] = True
    message = server_error(config_dir, data, "development")
    assert "production.mail.smtp.tls: unknown key" in message


def test_unknown_nested_api_key_is_refused(config_dir):
    data = repo_yaml(API_FILE)
    data["throttle"]["limit"] = 5
    message = api_error(config_dir, data)
    assert "throttle.limit: unknown key" in message


def test_string_for_a_boolean_is_refused(config_dir):
    data = repo_yaml(SERVER_FILE)
    data["development"]["webhookActive"] = "false"
    message = server_error(config_dir, data)
    assert "development.webhookActive: expected true or false" in message


def test_boolean_for_an_integer_is_refused(config_dir):
    data = repo_yaml(API_FILE)
    data["attempts"] = True
    message = api_error(config_dir, data)
    assert "attempts: expected a whole number" in message


def test_string_for_a_nested_integer_is_refused(config_dir):
    data = repo_yaml(SERVER_FILE)
    data["production"]["mail"]["smtp"]["port"] = "587"
    message = server_error(config_dir, data, "production")
    assert "production.mail.smtp.port: expected a whole number" in message


def test_integer_below_its_minimum_is_refused(config_dir):
    data = repo_yaml(API_FILE)
    data["procCores"] = 0
    message = api_error(config_dir, data)
    assert "procCores: must be at least 1" in message


def test_missing_network_roles_is_refused(config_dir):
    data = repo_yaml(API_FILE)
    del data["security"]["networkRoles"]
    message = api_error(config_dir, data)
    assert "security.networkRoles: is required" in message


def test_missing_security_section_is_refused(config_dir):
    data = repo_yaml(API_FILE)
    del data["security"]
    message = api_error(config_dir, data)
    assert "security: is required" in message


def test_short_jwt_secret_is_refused(config_dir):
    data = repo_yaml(SERVER_FILE)
    data["development"]["jwt"]["secret"] = "s" * 31
    message = server_error(config_dir, data)
    assert "development.jwt.secret: must be at least 32 bytes" in message


def test_unknown_environment_is_refused(config_dir):
    path = config_dir / SERVER_FILE
    with pytest.raises(ConfigError) as info:
        load_server(path, "staging", config_dir.parent, NO_ENV)
    assert str(path) in str(info.value)
    assert "unknown environment 'staging'" in str(info.value)


def test_unknown_environment_from_apid_env_is_refused(config_dir):
    with pytest.raises(ConfigError, match="unknown environment 'prod'"):
        load(config_dir, None, {"APID_ENV": "prod"})


def test_mail_backend_other_than_file_or_smtp_is_refused(config_dir):
    data = repo_yaml(SERVER_FILE)
    data["development"]["mail"]["backend"] = "sendmail"
    message = server_error(config_dir, data)
    assert "development.mail.backend: must be file or smtp" in message


def test_rate_limit_role_not_in_network_roles_is_refused(config_dir):
    data = repo_yaml(API_FILE)
    data["throttle"]["rateLimit"]["ROLE_GHOST"] = 5
    message = api_error(config_dir, data)
    assert "throttle.rateLimit.ROLE_GHOST" in message
    assert "not in security.networkRoles" in message


def test_data_limit_role_not_in_network_roles_is_refused(config_dir):
    data = repo_yaml(API_FILE)
    data["throttle"]["dataLimit"]["ROLE_GHOST"] = 5
    message = api_error(config_dir, data)
    assert "throttle.dataLimit.ROLE_GHOST" in message


def test_network_role_group_not_in_network_groups_is_refused(config_dir):
    data = repo_yaml(API_FILE)
    data["security"]["networkRoles"]["internal"] = ["ROLE_ADMIN"]
    message = api_error(config_dir, data)
    assert "security.networkRoles.internal" in message


def test_user_role_in_no_group_is_refused(config_dir):
    data = repo_yaml(API_FILE)
    data["security"]["userRole"] = "ROLE_MEMBER"
    message = api_error(config_dir, data)
    assert "security.userRole: role 'ROLE_MEMBER' is in no group" in message


def test_the_anonymous_role_defaults_to_role_anonymous_and_may_be_renamed(config_dir):
    assert load(ETC, "development", NO_ENV).api.security.anonymous_role == "ROLE_ANONYMOUS"
    data = repo_yaml(API_FILE)
    data["security"]["networkRoles"]["open"] = ["ROLE_ADMIN", "ROLE_USER", "ROLE_GUEST"]
    data["security"]["anonymousRole"] = "ROLE_GUEST"
    path = write(config_dir, API_FILE, data)
    assert load_api(path, config_dir.parent).security.anonymous_role == "ROLE_GUEST"


def test_an_anonymous_role_in_no_group_is_refused(config_dir):
    data = repo_yaml(API_FILE)
    data["security"]["anonymousRole"] = "ROLE_GUEST"
    message = api_error(config_dir, data)
    assert "security.anonymousRole: role 'ROLE_GUEST' is in no group" in message


def test_the_user_role_may_not_be_the_anonymous_role(config_dir):
    data = repo_yaml(API_FILE)
    data["security"]["anonymousRole"] = "ROLE_USER"
    message = api_error(config_dir, data)
    assert "security.userRole: role 'ROLE_USER' is the anonymous role" in message


def test_reserved_uri_without_leading_slash_is_refused(config_dir):
    data = repo_yaml(API_FILE)
    data["reservedUris"].append("health")
    message = api_error(config_dir, data)
    assert f"reservedUris[{len(data['reservedUris']) - 1}]: must start with /" in message


@pytest.mark.parametrize("version", ["1", "x.y", "1.x", "v1.0", "2"])
def test_api_version_not_major_minor_is_refused(config_dir, version):
    data = repo_yaml(API_FILE)
    data["api"] = {"version": version}
    message = api_error(config_dir, data)
    assert "api.version: must look like MAJOR.MINOR" in message


def test_api_version_with_non_ascii_digits_is_refused(config_dir):
    data = repo_yaml(API_FILE)
    data["api"] = {"version": "1.²"}
    message = api_error(config_dir, data)
    assert "api.version" in message


def test_unquoted_api_version_1_10_is_not_silently_served_as_1_1(config_dir):
    path = config_dir / API_FILE
    path.write_text(path.read_text(encoding="utf-8") + "\napi:\n  version: 1.10\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"api\.version"):
        load_api(path, config_dir.parent)


def test_servers_not_a_list_is_refused(config_dir):
    data = repo_yaml(SERVER_FILE)
    data["development"]["servers"] = "http://peer:8080"
    message = server_error(config_dir, data)
    assert "development.servers: expected a list of peers" in message


def test_environment_section_not_a_mapping_is_refused(config_dir):
    data = repo_yaml(SERVER_FILE)
    data["development"] = ["listen"]
    message = server_error(config_dir, data)
    assert "development: expected a mapping" in message


def test_invalid_yaml_is_refused(config_dir):
    path = config_dir / API_FILE
    path.write_text("throttle: [unclosed\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_api(path, config_dir.parent)
    assert str(info.value).startswith(f"{path}: not valid YAML")


def test_missing_server_file_is_refused(config_dir):
    (config_dir / SERVER_FILE).unlink()
    with pytest.raises(ConfigError) as info:
        load(config_dir, "development", NO_ENV)
    assert str(info.value).startswith(f"{config_dir / SERVER_FILE}: cannot read")


def test_missing_api_file_is_refused(config_dir):
    (config_dir / API_FILE).unlink()
    with pytest.raises(ConfigError) as info:
        load(config_dir, "development", NO_ENV)
    assert str(info.value).startswith(f"{config_dir / API_FILE}: cannot read")


def test_file_that_is_not_utf8_is_refused_naming_it(config_dir):
    path = config_dir / API_FILE
    path.write_bytes(b"attempts: 5\nprocCores: \xff\n")
    with pytest.raises(ConfigError) as info:
        load_api(path, config_dir.parent)
    assert str(path) in str(info.value)


# --- webhooks ---------------------------------------------------------------------------------


def test_webhook_delivery_defaults(config_dir):
    data = repo_yaml(SERVER_FILE)
    path = write(config_dir, SERVER_FILE, data)
    hooks = load_server(path, "development", config_dir.parent, NO_ENV).webhooks
    assert (
        hooks.timeout,
        hooks.per_host,
        hooks.retry_base,
        hooks.retry_factor,
        hooks.retry_max,
        hooks.lease,
        hooks.poll,
        hooks.retention_days,
    ) == (10.0, 8, 5.0, 6.0, 3600.0, 60.0, 1.0, 30)


@pytest.mark.parametrize(
    "webhooks, key, reason",
    [
        ({"lease": 20}, "webhooks.lease", "at least three times webhooks.timeout"),
        ({"timeout": 30}, "webhooks.timeout", "at least three times webhooks.timeout"),
        ({"retryBase": 10, "retryMax": 5}, "webhooks.retryMax", "at least retryBase"),
        ({"perHost": 0}, "webhooks.perHost", "at least 1"),
        ({"retryFactor": 1}, "webhooks.retryFactor", "greater than 1"),
        ({"timeout": "soon"}, "webhooks.timeout", "expected a number"),
        ({"retries": 3}, "webhooks.retries", "unknown key"),
    ],
)
def test_webhook_settings_are_checked(config_dir, webhooks, key, reason):
    data = repo_yaml(SERVER_FILE)
    data["test"]["webhooks"] = webhooks
    message = server_error(config_dir, data)  # a mistake in another environment stops this one too
    assert "test.webhooks" in message and key.split(".")[1] in message and reason in message


# --- passwords ---------------------------------------------------------------------------------


def test_the_defaults_are_argon2_cffi_s(config_dir):
    """RFC 9106's second recommendation, as argon2-cffi's own `PasswordHasher()`."""
    data = repo_yaml(SERVER_FILE)
    path = write(config_dir, SERVER_FILE, data)
    assert load_server(path, "production", config_dir.parent, NO_ENV).passwords == PasswordsConfig(
        time_cost=3, memory_cost=65536, parallelism=4
    )
    assert load_server(path, "test", config_dir.parent, NO_ENV).passwords == PasswordsConfig(
        time_cost=1, memory_cost=1024, parallelism=1
    )


@pytest.mark.parametrize(
    "passwords, key, reason",
    [
        ({"memoryCost": 16, "parallelism": 4}, "passwords.memoryCost", "at least 8 × parallelism (32 KiB)"),
        ({"memoryCost": 4}, "passwords.memoryCost", "at least 8"),
        ({"timeCost": 0}, "passwords.timeCost", "at least 1"),
        ({"parallelism": 0}, "passwords.parallelism", "at least 1"),
        ({"timeCost": "slow"}, "passwords.timeCost", "expected a whole number"),
        ({"rounds": 3}, "passwords.rounds", "unknown key"),
    ],
)
def test_costs_argon2_refuses_are_refused_at_start(config_dir, passwords, key, reason):
    data = repo_yaml(SERVER_FILE)
    data["production"]["passwords"] = passwords
    message = server_error(config_dir, data)
    assert f"production.{key}" in message and reason in message, message


# --- abuseLimits ------------------------------------------------------------------------------


def abuse_of(config_dir: Path, limits: dict | None) -> dict:
    data = repo_yaml(API_FILE)
    if limits is None:
        del data["abuseLimits"]
    else:
        data["abuseLimits"] = limits
    return load_api(write(config_dir, API_FILE, data), config_dir.parent).abuse


def test_abuse_limits_of_the_repository_file_are_the_defaults(config_dir):
    defaults = abuse_of(config_dir, None)
    assert load(ETC, "development", NO_ENV).api.abuse == defaults
    assert defaults["login"] == AbuseLimit(per_account_address=5, per_account=100, per_address=50, window=900)
    for kind in ("register", "reset"):
        assert defaults[kind] == AbuseLimit(per_address=20, per_account=5, window=900, per_account_address=None)


def test_abuse_limits_keys_left_out_take_their_kinds_defaults(config_dir):
    limits = abuse_of(config_dir, {"login": {"perAddress": 6, "perAccount": 3}, "reset": {"window": 60}})
    assert limits["login"] == AbuseLimit(per_address=6, per_account=3, window=900, per_account_address=5)
    assert limits["reset"] == AbuseLimit(per_address=20, per_account=5, window=60)
    assert limits["register"] == AbuseLimit(per_address=20, per_account=5, window=900)


@pytest.mark.parametrize(
    "limits, error",
    [
        ({"login": {"perAccountAddress": 0}}, "abuseLimits.login.perAccountAddress: must be at least 1"),
        ({"login": {"perAccountAddress": "5"}}, "abuseLimits.login.perAccountAddress: expected a whole number"),
        ({"login": {"perAccount": 2.5}}, "abuseLimits.login.perAccount: expected a whole number"),
        (
            {"register": {"perAccountAddress": 5}},
            "abuseLimits.register.perAccountAddress: unknown key; allowed here: perAddress, perAccount, window",
        ),
        ({"signup": {"perAddress": 5}}, "abuseLimits.signup: unknown key; allowed here: login, register, reset"),
        ({"login": 5}, "abuseLimits.login: expected a mapping"),
    ],
)
def test_bad_abuse_limits_are_refused_naming_the_key(config_dir, limits, error):
    data = repo_yaml(API_FILE)
    data["abuseLimits"] = limits
    assert error in api_error(config_dir, data)


# --- connections ------------------------------------------------------------------------------


def test_connection_limits_default_to_the_documented_values(config_dir):
    data = repo_yaml(SERVER_FILE)
    path = write(config_dir, SERVER_FILE, data)
    limits = load_server(path, "development", config_dir.parent, NO_ENV).connections
    assert limits == ConnectionLimits(header_timeout=10.0, body_timeout=10.0, body_rate=65536, per_address=128)
    assert limits.body_seconds(1048576) == 26.0  # the largest body by default: 10 s + 16 s


def test_connection_limits_as_set(config_dir):
    data = repo_yaml(SERVER_FILE)
    data["development"]["connections"] = {"headerTimeout": 2.5, "bodyTimeout": 5, "bodyRate": 1024, "perAddress": 8}
    path = write(config_dir, SERVER_FILE, data)
    limits = load_server(path, "development", config_dir.parent, NO_ENV).connections
    assert limits == ConnectionLimits(header_timeout=2.5, body_timeout=5.0, body_rate=1024, per_address=8)


@pytest.mark.parametrize(
    "connections, error",
    [
        ({"headerTimeout": 0}, "test.connections.headerTimeout: must be greater than 0"),
        ({"bodyTimeout": "soon"}, "test.connections.bodyTimeout: expected a number"),
        ({"bodyRate": 100}, "test.connections.bodyRate: must be at least 1024"),
        ({"bodyRate": 1.5e6}, "test.connections.bodyRate: expected a whole number"),
        ({"perAddress": 0}, "test.connections.perAddress: must be at least 1"),
        (
            {"idleTimeout": 5},
            "test.connections.idleTimeout: unknown key; allowed here: headerTimeout, bodyTimeout, bodyRate, perAddress",
        ),
    ],
)
def test_bad_connection_limits_are_refused_naming_the_file_and_key(config_dir, connections, error):
    data = repo_yaml(SERVER_FILE)
    data["test"]["connections"] = connections
    assert error in server_error(config_dir, data)  # a mistake in another environment stops this one too


# --- listen -----------------------------------------------------------------------------------


@pytest.mark.parametrize("value", [18236, "18236"])
def test_a_bare_port_listens_on_loopback(config_dir, value):
    data = repo_yaml(SERVER_FILE)
    data["development"]["listen"] = value
    write(config_dir, SERVER_FILE, data)
    assert load(config_dir, "development", NO_ENV).server.listen == "tcp:18236:interface=127.0.0.1"


def test_a_bare_port_in_apid_listen_listens_on_loopback():
    assert load(ETC, "development", {"APID_LISTEN": "18236"}).server.listen == "tcp:18236:interface=127.0.0.1"


def test_an_endpoint_string_is_kept_as_written():
    listen = "systemd:domain=INET:name=http"
    assert load(ETC, "development", {"APID_LISTEN": listen}).server.listen == listen


def test_a_port_out_of_range_is_refused_naming_the_key_or_the_variable(config_dir):
    data = repo_yaml(SERVER_FILE)
    data["production"]["listen"] = 70000
    assert "production.listen: port 70000 is out of range 0-65535" in server_error(config_dir, data)
    with pytest.raises(ConfigError, match=r"^APID_LISTEN \(or --listen\): port 99999 is out of range"):
        load(ETC, "development", {"APID_LISTEN": "99999"})


# --- URLs -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key, value, named",
    [
        ("baseUrl", "api.example.com", "development.baseUrl"),
        ("baseUrl", "//api.example.com", "development.baseUrl"),
        ("baseUrl", "ftp://api.example.com", "development.baseUrl"),
        ("baseUrl", "https://api.example.com:port", "development.baseUrl"),
        ("homeUrl", "www.example.com/", "development.homeUrl"),
        ("accounts", {"resetUrl": "www.example.com/reset-password"}, "development.accounts.resetUrl"),
        ("servers", ["10.0.0.12:8080"], "development.servers[0]"),
        ("servers", [{"url": "peer"}], "development.servers[0].url"),
    ],
)
def test_a_url_without_a_scheme_or_host_is_refused_naming_the_key(config_dir, key, value, named):
    data = repo_yaml(SERVER_FILE)
    data["development"][key] = value
    message = server_error(config_dir, data)
    assert f"{named}: must be an absolute http:// or https:// URL such as https://api.example.com" in message


def test_a_base_url_with_a_query_is_refused(config_dir):
    data = repo_yaml(SERVER_FILE)
    data["development"]["baseUrl"] = "https://api.example.com/?x=1"
    assert "development.baseUrl: must have no query or fragment" in server_error(config_dir, data)


def test_urls_keep_their_paths_and_the_base_url_loses_its_trailing_slash(config_dir):
    data = repo_yaml(SERVER_FILE)
    data["development"].update(
        baseUrl="https://example.com/api/",
        homeUrl="https://www.example.com/",
        accounts={"resetUrl": "http://127.0.0.1:3000/reset"},
    )
    server = load_server(write(config_dir, SERVER_FILE, data), "development", config_dir.parent, NO_ENV)
    assert (server.base_url, server.home_url, server.accounts.reset_url) == (
        "https://example.com/api",
        "https://www.example.com/",
        "http://127.0.0.1:3000/reset",
    )


# --- where the files are ----------------------------------------------------------------------


def test_a_missing_config_folder_names_the_option_and_the_variable(tmp_path):
    with pytest.raises(ConfigError) as info:
        load(tmp_path / "etc", "development", NO_ENV)
    message = str(info.value)
    assert message.startswith(f"{tmp_path / 'etc' / SERVER_FILE}: cannot read: No such file or directory")
    assert "--config-dir" in message and "APID_CONFIG_DIR" in message
    assert "\n" not in message


# --- numbers that mean nothing -----------------------------------------------------------------

HUGE = 10**400


@pytest.mark.parametrize(
    "section, key, value, reason",
    [
        ("shutdown", "drain", ".nan", "must be a finite number, got float nan"),
        ("shutdown", "drain", ".inf", "must be a finite number, got float inf"),
        ("shutdown", "healthDrain", "-.inf", "must be a finite number, got float -inf"),
        ("shutdown", "drain", str(HUGE), "must be a finite number, got an integer of 401 digits"),
        ("shutdown", "drain", "-1", "must be at least 0, got -1"),
        ("webhooks", "timeout", ".nan", "must be a finite number, got float nan"),
        ("webhooks", "timeout", str(HUGE), "must be a finite number, got an integer of 401 digits"),
        ("webhooks", "perHost", str(HUGE), "must be at most 9223372036854775807, got an integer of 401 digits"),
        ("connections", "perAddress", str(2**63), "must be at most 9223372036854775807, got int 9223372036854775808"),
    ],
)
def test_a_number_that_cannot_mean_a_duration_a_rate_or_a_size_names_the_file_the_line_and_the_key(
    config_dir, section, key, value, reason
):
    """YAML reads `.nan`, `.inf` and an integer of any length as numbers: each is refused where
    the file says it, not later as a stuck drain or "int too large to convert to float"."""
    path = config_dir / SERVER_FILE
    path.write_text(f"development:\n  {section}:\n    {key}: {value}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_server(path, "development", config_dir.parent, NO_ENV)
    assert str(info.value) == f"{path}:3: development.{section}.{key}: {reason}"
