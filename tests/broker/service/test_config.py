from __future__ import annotations

from pathlib import Path

import pytest

from broker.core.throttle import Policy
from broker.service.config import ConfigError, Settings, load_settings, mqtt_address
from broker.service.throttling import policy


@pytest.fixture(autouse=True)
def elsewhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Run in an empty directory, so that no ./broker.toml of the developer's is read."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


def write(path: Path, content: str) -> Path:
    path.write_text(content, encoding="utf-8")
    return path


def test_defaults_run_qm1_on_a_sqlite_file_here():
    settings = load_settings(environ={})
    assert settings == Settings()
    assert settings.database_url == "sqlite:///broker.db"
    assert settings.qmgr_name == "QM1"
    assert settings.sqlite_synchronous == "FULL"
    assert settings.batch_size == 500
    assert settings.stream_queues == ("SYSTEM.BROKER.DEFAULT.STREAM",)
    assert (settings.api_host, settings.api_port) == ("127.0.0.1", 8080)
    assert settings.sources == ()


def test_flags_beat_environment_beat_file(elsewhere):
    config = write(elsewhere / "b.toml", 'qmgr_name = "FILE"\nbatch_size = 10\nlog_level = "DEBUG"\n')
    environ = {"BROKER_QMGR_NAME": "ENV", "BROKER_BATCH_SIZE": "20"}
    settings = load_settings({"qmgr_name": "FLAG"}, environ, config)
    assert (settings.qmgr_name, settings.batch_size, settings.log_level) == ("FLAG", 20, "DEBUG")
    assert dict(settings.sources) == {
        "qmgr_name": "flags",
        "batch_size": "environment",
        "log_level": f"file {config}",
    }
    assert load_settings({"qmgr_name": None}, environ, config).qmgr_name == "ENV"
    assert load_settings({}, {}, config).qmgr_name == "FILE"


def test_none_flags_and_flags_that_are_not_settings_are_ignored():
    settings = load_settings({"qmgr_name": None, "verbose": True}, environ={})
    assert settings == Settings()
    assert settings.sources == ()


def test_a_broker_table_in_the_file(elsewhere):
    config = write(elsewhere / "b.toml", '[broker]\nqmgr_name = "TABLE"\napi_port = 9000\n')
    settings = load_settings(environ={}, config_file=config)
    assert (settings.qmgr_name, settings.api_port) == ("TABLE", 9000)


def test_top_level_keys_in_the_file(elsewhere):
    config = write(elsewhere / "b.toml", 'qmgr_name = "TOP"\ndefault_policy = "deny"\n')
    settings = load_settings(environ={}, config_file=config)
    assert (settings.qmgr_name, settings.default_policy) == ("TOP", "deny")


@pytest.mark.parametrize(
    ("content", "unknown"),
    [
        ('colour = "blue"\n', "colour"),
        ('[broker]\nqmgr_name = "X"\ncolour = "blue"\nsize = 1\n', "colour, size"),
        ("sources = []\n", "sources"),
    ],
)
def test_an_unknown_key_in_the_file_is_a_config_error(elsewhere, content, unknown):
    config = write(elsewhere / "b.toml", content)
    with pytest.raises(ConfigError) as caught:
        load_settings(environ={}, config_file=config)
    assert str(caught.value) == f"unknown settings in {config}: {unknown}"


def test_a_missing_or_malformed_file_is_a_config_error(elsewhere):
    with pytest.raises(ConfigError, match="cannot read configuration file"):
        load_settings(environ={}, config_file=elsewhere / "missing.toml")
    with pytest.raises(ConfigError, match="cannot read configuration file"):
        load_settings(environ={}, config_file=write(elsewhere / "bad.toml", "qmgr_name = \n"))


def test_environment_values_are_coerced_to_the_settings_types():
    settings = load_settings(
        environ={
            "BROKER_BATCH_SIZE": "250",
            "BROKER_API_PORT": " 9090 ",
            "BROKER_STREAM_QUEUES": "A.STREAM, B.STREAM,,C.STREAM=Sub ",
            "BROKER_DATABASE_URL": "postgresql://db/broker",
        }
    )
    assert settings.batch_size == 250
    assert settings.api_port == 9090
    assert settings.stream_queues == ("A.STREAM", "B.STREAM", "C.STREAM=Sub")
    assert settings.database_url == "postgresql://db/broker"


def test_file_values_are_coerced_too(elsewhere):
    config = write(elsewhere / "b.toml", 'stream_queues = ["X", " Y "]\nqmgr_name = 7\nbatch_size = "30"\n')
    settings = load_settings(environ={}, config_file=config)
    assert settings.stream_queues == ("X", "Y")
    assert settings.qmgr_name == "7"
    assert settings.batch_size == 30


@pytest.mark.parametrize(("name", "value"), [("BROKER_BATCH_SIZE", "many"), ("BROKER_API_PORT", "8o8o")])
def test_a_value_of_the_wrong_type_is_a_config_error(name, value):
    with pytest.raises(ConfigError, match=f"setting {name[7:].lower()}={value!r} is not valid"):
        load_settings(environ={name: value})


@pytest.mark.parametrize(
    ("name", "value", "rule"),
    [
        ("BROKER_NODE_TIMEOUT", "0", "more than 0"),
        ("BROKER_NODE_TIMEOUT", "-5", "more than 0"),
        ("BROKER_NODE_TIMEOUT", "nan", "more than 0"),
        ("BROKER_ROUTERS", "0", "more than 0"),
        ("BROKER_MQTT_MAX_INFLIGHT", "0", "more than 0"),
        ("BROKER_MQTT_SESSION_EXPIRY", "-1", "0 or more"),
        ("BROKER_AUTH_THROTTLE_DELAY", "-0.5", "0 or more"),
    ],
)
def test_a_number_out_of_range_is_a_config_error(name, value, rule):
    with pytest.raises(ConfigError, match=f"setting {name[7:].lower()}=.* is not valid: it must be {rule}"):
        load_settings(environ={name: value})


def test_zero_keeps_its_meaning_where_it_has_one():
    settings = load_settings(environ={"BROKER_MQTT_SESSION_EXPIRY": "0", "BROKER_AUTH_THROTTLE_DELAY": "0"})
    assert (settings.mqtt_session_expiry, settings.auth_throttle_delay) == (0, 0.0)
    assert load_settings({"node_timeout": "0.5"}, environ={}).node_timeout == 0.5


def test_a_wrongly_typed_flag_is_a_config_error():
    with pytest.raises(ConfigError):
        load_settings({"batch_size": "lots"}, environ={})


def test_environment_variables_that_are_not_settings_are_ignored():
    assert load_settings(environ={"BROKER_COLOUR": "blue", "BROKER_SOURCES": "x"}) == Settings()


def test_broker_config_names_the_file(elsewhere):
    config = write(elsewhere / "named.toml", 'qmgr_name = "NAMED"\n')
    settings = load_settings(environ={"BROKER_CONFIG": str(config)})
    assert settings.qmgr_name == "NAMED"
    assert dict(settings.sources) == {"qmgr_name": f"file {config}"}


def test_an_explicit_file_beats_broker_config(elsewhere):
    named = write(elsewhere / "named.toml", 'qmgr_name = "NAMED"\n')
    explicit = write(elsewhere / "explicit.toml", 'qmgr_name = "EXPLICIT"\n')
    settings = load_settings(environ={"BROKER_CONFIG": str(named)}, config_file=explicit)
    assert settings.qmgr_name == "EXPLICIT"


def test_broker_toml_in_the_working_directory_is_read_by_default(elsewhere):
    write(elsewhere / "broker.toml", 'qmgr_name = "LOCAL"\n')
    settings = load_settings(environ={})
    assert settings.qmgr_name == "LOCAL"
    assert dict(settings.sources) == {"qmgr_name": "file broker.toml"}


def test_the_process_environment_is_the_default(monkeypatch):
    monkeypatch.setenv("BROKER_QMGR_NAME", "FROM.OS")
    assert load_settings().qmgr_name == "FROM.OS"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("default_policy", "alow"),
        ("log_format", "xml"),
        ("log_level", "LOUD"),
        ("sqlite_synchronous", "2"),
        ("allocator", "tcmalloc"),
        ("event_loop", "trio"),
    ],
)
def test_a_word_setting_takes_only_its_words(name, value):
    """A misspelt default policy would otherwise have meant "deny" everywhere, silently."""
    with pytest.raises(ConfigError, match=f"{name}={value!r} is not valid: use one of"):
        load_settings(environ={f"BROKER_{name.upper()}": value})


def test_word_settings_are_read_whatever_their_case():
    settings = load_settings(environ={"BROKER_LOG_LEVEL": "debug", "BROKER_DEFAULT_POLICY": "DENY"})
    assert (settings.log_level, settings.default_policy) == ("DEBUG", "deny")


@pytest.mark.parametrize(
    ("text", "address"),
    [("1883", ("127.0.0.1", 1883)), ("0.0.0.0:1883", ("0.0.0.0", 1883)), ("[::1]:8883", ("::1", 8883))],
)
def test_mqtt_listen_is_host_and_port_with_loopback_by_default(text: str, address: tuple[str, int]) -> None:
    assert mqtt_address(text) == address
    assert load_settings({"mqtt_listen": text}, environ={}).mqtt_listen == text


@pytest.mark.parametrize("text", ["", "host:", "1883x", "0", "70000"])
def test_a_bad_mqtt_address_is_a_configuration_error(text: str) -> None:
    with pytest.raises(ConfigError):
        mqtt_address(text)


def test_tls_settings_come_from_the_file_the_environment_and_the_flags(elsewhere):
    config = write(
        elsewhere / "b.toml",
        '[broker]\ntls_cert = "server.pem"\ntls_key = "server.key"\napi_tls = true\n'
        'mqtt_tls_listen = "0.0.0.0:8883"\nmqtt_ws_listen = "9001"\n',
    )
    settings = load_settings({"mqtt_wss_listen": "8081"}, {"BROKER_TLS_CLIENT_CA": "ca.pem"}, config)
    assert (settings.tls_cert, settings.tls_key, settings.tls_client_ca) == (
        "server.pem",
        "server.key",
        "ca.pem",
    )
    assert settings.api_tls is True
    listeners = (settings.mqtt_tls_listen, settings.mqtt_ws_listen, settings.mqtt_wss_listen)
    assert listeners == ("0.0.0.0:8883", "9001", "8081")
    assert load_settings({}, {"BROKER_API_TLS": "no"}, config).api_tls is False


def test_the_sign_in_throttle_settings_make_its_policy(elsewhere):
    config = write(elsewhere / "b.toml", "auth_throttle_free = 3\nauth_throttle_max_delay = 120\n")
    environ = {"BROKER_AUTH_THROTTLE_DELAY": "0.5", "BROKER_AUTH_THROTTLE_KEYS": "100"}
    settings = load_settings({}, environ, config)
    assert policy(settings) == Policy(free=3, delay=0.5, max_delay=120.0, forget=900.0, keys=100)
    assert policy(Settings()) == Policy()  # the core's defaults are the settings' defaults
