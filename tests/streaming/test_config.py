"""The one configuration: reference file, precedence, strictness, redaction."""
import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from fencewatch.streaming.config import settings as cfgmod

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "reference-config.yaml"


def test_reference_config_lists_every_setting_with_its_default():
    data = yaml.safe_load(REFERENCE.read_text())
    cfg = cfgmod.Config()
    assert set(data) == {f.name for f in dataclasses.fields(cfg)}
    for section in dataclasses.fields(cfg):
        names = {f.name for f in dataclasses.fields(getattr(cfg, section.name))}
        assert set(data[section.name]) == names, section.name
    # Loading it strictly gives exactly the defaults.
    assert cfgmod.load_config(file=REFERENCE, environ={}) == cfg


def test_precedence_flags_over_env_over_file(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("sinks: {alerts_topic: from-file, metrics_port: 1111}\nstate: {warmup_ms: 10s}\n")
    env = {"FENCEWATCH_SINKS__ALERTS_TOPIC": "from-env", "FENCEWATCH_STATE__EXPIRY_WARNING_MS": "5m"}
    cfg = cfgmod.load_config(file=f, environ=env, overrides={"sinks": {"alerts_topic": "from-flag"}})
    assert cfg.sinks.alerts_topic == "from-flag"
    assert cfg.sinks.metrics_port == 1111 and cfg.state.warmup_ms == 10_000 and cfg.state.expiry_warning_ms == 300_000


def test_file_is_strict_env_is_lenient(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("sinks: {alert_topic: typo}\n")
    with pytest.raises(cfgmod.ConfigError, match="unknown setting sinks.alert_topic; valid: .*alerts_topic"):
        cfgmod.load_config(file=f, environ={})
    assert cfgmod.load_config(environ={"FENCEWATCH_SINKS__ALERT_TOPIC": "typo"}) == cfgmod.Config()


def test_secrets_are_redacted():
    env = {"FENCEWATCH_STREAMING__KAFKA__SASL_PASSWORD": "hunter2", "FENCEWATCH_SINKS__GRAFANA_TOKEN": "glsa_x",
           "FENCEWATCH_STREAMING__KAFKA__SASL_USERNAME": "svc",
           "FENCEWATCH_STREAMING__KAFKA__SECURITY_PROTOCOL": "SASL_SSL",
           "FENCEWATCH_STREAMING__KAFKA__SASL_MECHANISM": "PLAIN"}  # librdkafka's default, GSSAPI, is not built here
    cfg = cfgmod.load_config(environ=env)
    assert cfg.streaming.kafka["sasl.password"] == "hunter2"
    shown = json.dumps(cfgmod.redacted(cfg))
    assert "hunter2" not in shown and "glsa_x" not in shown and "SASL_SSL" in shown


def test_invalid_values_list_the_valid_ones():
    with pytest.raises(cfgmod.ConfigError, match="unknown streaming.input_format 'xml'; valid: json, avro"):
        cfgmod.load_config(environ={}, overrides={"streaming": {"input_format": "xml"}})


def test_alerts_are_json_without_a_registry_and_avro_with_one():
    """sinks.alerts_format auto (the default): Avro only through a Schema Registry (docs/decisions.md)."""
    assert cfgmod.Config().sinks.alerts_format == "auto"
    assert cfgmod.alerts_format(cfgmod.load_config(environ={})) == "json"
    with_registry = cfgmod.load_config(environ={"FENCEWATCH_STREAMING__SCHEMA_REGISTRY__URL": "http://registry:8081"})
    assert cfgmod.alerts_format(with_registry) == "avro"
    forced = cfgmod.load_config(environ={"FENCEWATCH_STREAMING__SCHEMA_REGISTRY__URL": "http://registry:8081"},
                                overrides={"sinks": {"alerts_format": "json"}})
    assert cfgmod.alerts_format(forced) == "json"


def test_avro_alerts_without_a_registry_are_refused_naming_both_ways_out():
    with pytest.raises(cfgmod.ConfigError) as err:
        cfgmod.load_config(environ={}, overrides={"sinks": {"alerts_format": "avro"}})
    message = str(err.value)
    assert "no Schema Registry is configured" in message
    assert "streaming.schema_registry.url" in message and "sinks.alerts_format: json" in message
    # A registry given as settings but without its URL is no registry either.
    with pytest.raises(cfgmod.ConfigError, match="no Schema Registry"):
        cfgmod.load_config(environ={"FENCEWATCH_STREAMING__SCHEMA_REGISTRY__BASIC_AUTH_USER_INFO": "u:p"},
                           overrides={"sinks": {"alerts_format": "avro"}})
    cfg = cfgmod.load_config(environ={"FENCEWATCH_STREAMING__SCHEMA_REGISTRY__URL": "mock://alerts"},
                             overrides={"sinks": {"alerts_format": "avro"}})
    assert cfgmod.alerts_format(cfg) == "avro"


@pytest.mark.parametrize("env, expected", [
    ({}, "alerts to fencewatch.alerts as JSON (sinks.alerts_format auto: no Schema Registry is configured)"),
    ({"FENCEWATCH_STREAMING__SCHEMA_REGISTRY__URL": "mock://start"},
     "alerts to fencewatch.alerts as Avro (sinks.alerts_format auto: a Schema Registry is configured)"),
])
def test_the_job_logs_the_alerts_format_it_chose(env, expected, tmp_path, caplog):
    """``make_sinks`` (what `run` and `demo` call at start) says the format and why; a local
    checkpoint needs no Spark session for the sink log."""
    import logging

    from fencewatch.streaming.runtime.query import make_sinks

    cfg = cfgmod.load_config(environ=env, overrides={"streaming": {"checkpoint_location": str(tmp_path / "cp")}})
    caplog.set_level(logging.INFO, logger="fencewatch.streaming.runtime.query")
    kafka, metrics = make_sinks(cfg, None)
    try:
        assert expected in caplog.text
        assert kafka.alerts_format == cfgmod.alerts_format(cfg)
    finally:
        kafka.close()
        metrics.close()


def test_streams_broker_policy_from_the_environment_and_a_bad_one_named():
    """state.streams_broker_policy (the streams groups' check, kip1251 by default: Kafka 4.2+) is read
    and refused like broker_policy, the error naming which of the two."""
    from fencewatch.state.model import Policy
    from fencewatch.streaming.config import settings as cfgmod

    assert cfgmod.load_config().state.streams_broker_policy is Policy.KIP1251
    cfg = cfgmod.load_config(environ={"FENCEWATCH_STATE__STREAMS_BROKER_POLICY": "strict"})
    assert (cfg.state.broker_policy, cfg.state.streams_broker_policy) == (Policy.STRICT, Policy.STRICT)
    with pytest.raises(cfgmod.ConfigError, match=r"^state.streams_broker_policy: unknown policy 'lax'; valid: strict"):
        cfgmod.load_config(overrides={"state": {"streams_broker_policy": "lax"}})
