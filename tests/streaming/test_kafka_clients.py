"""One Kafka client configuration for every client, merged across file, environment and -X.

Mirrors the issue's operator story: the README's SASL example (mechanism in the
file, password in the environment, user name with -X) must reach the Spark
source, the producer and the admin client alike; Java names translate or stop
the command before anything starts.
"""
from __future__ import annotations

import logging

import pytest

from fencewatch.streaming.config import settings as cfgmod
from fencewatch.streaming.cli import build_parser
from fencewatch.streaming.commands.common import build_config
from fencewatch.streaming.commands.run import _streaming_overrides
from fencewatch.streaming.sources.kafka import parse_options
from fencewatch.streaming.config.kafka import to_java

PASSWORD = "pw-from-env-7f3a"
CA_FILE = "/etc/ssl/certs/ca-certificates.crt"  # a real PEM bundle: librdkafka loads it
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"


def run_config(argv: list[str], monkeypatch, env: dict[str, str] | None = None):
    for k, v in (env or {}).items():
        monkeypatch.setenv(k, v)
    args = build_parser(["run", *argv]).parse_args(["run", *argv])
    return build_config(args, _streaming_overrides(args))


@pytest.fixture
def sasl_cfg(tmp_path, monkeypatch):
    f = tmp_path / "fencewatch.yaml"
    f.write_text("streaming:\n  kafka: {security.protocol: SASL_PLAINTEXT, sasl.mechanism: SCRAM-SHA-512}\n")
    return run_config(["--config", str(f), "--bootstrap-servers", "127.0.0.1:1", "--checkpoint", str(tmp_path / "ck"),
                       "-X", "sasl.username=fencewatch", "-X", "debug=conf"],
                      monkeypatch, {"FENCEWATCH_STREAMING__KAFKA__SASL_PASSWORD": PASSWORD})


def test_x_adds_to_the_file_and_the_environment_instead_of_replacing_them(sasl_cfg):
    assert dict(sasl_cfg.streaming.kafka) == {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
                                              "sasl.password": PASSWORD, "sasl.username": "fencewatch",
                                              "debug": "conf"}


def test_flags_win_key_by_key(tmp_path, monkeypatch):
    f = tmp_path / "c.yaml"
    f.write_text("streaming:\n  kafka: {sasl.username: from-file, client.id: file}\n")
    cfg = run_config(["--config", str(f), "-X", "sasl.username=from-flag"], monkeypatch,
                     {"FENCEWATCH_STREAMING__KAFKA__SASL_USERNAME": "from-env"})
    assert dict(cfg.streaming.kafka) == {"sasl.username": "from-flag", "client.id": "file"}


def test_every_client_gets_the_three_layers(sasl_cfg):
    expected = {"bootstrap.servers": "127.0.0.1:1", "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "fencewatch", "sasl.password": PASSWORD}
    for role in ("producer", "admin", "consumer"):
        client = cfgmod.kafka_client_config(sasl_cfg, role)
        assert {k: client[k] for k in expected} == expected, role
        assert client["logger"].name == f"fencewatch.kafka.{role}"
    # The Spark source: the options handed to Spark, as the Python source reads them ...
    options = cfgmod.kafka_client_config(sasl_cfg, "source")
    assert all(k.startswith("kafka.") for k in options) and "logger" not in str(options)
    source = parse_options({**options, "subscribe": "fencewatch.offsets"})
    assert {k: v for k, v in source.client_config if k in expected} == expected
    # ... and as Spark's JVM connector gets them: Java's names and a JAAS line.
    java = to_java({k[len("kafka."):]: v for k, v in options.items()})
    assert java["sasl.mechanism"] == "SCRAM-SHA-512" and java["security.protocol"] == "SASL_PLAINTEXT"
    assert java["sasl.jaas.config"] == f'{SCRAM} required username="fencewatch" password="{PASSWORD}";'


def test_librdkafka_itself_sees_the_settings_of_producer_and_admin(sasl_cfg, caplog):
    """librdkafka's own configuration dump (``debug=conf``, given with -X) from the clients the job
    builds (the sinks' producer as ``job.make_sinks`` makes it, an admin client), through logging."""
    from confluent_kafka.admin import AdminClient

    from fencewatch.sinks.kafka import KafkaOutputs

    caplog.set_level(logging.DEBUG, logger="fencewatch.kafka")
    kafka = KafkaOutputs(cfgmod.kafka_client_config(sasl_cfg, "producer"), verdicts_topic=None,
                         alerts_topic="fencewatch.alerts", dlq_topic="fencewatch.dlq")
    kafka._producer.poll(0.1)
    admin = AdminClient(cfgmod.kafka_client_config(sasl_cfg, "admin"))
    admin.poll(0.1)
    for role in ("producer", "admin"):
        dump = "\n".join(r.getMessage() for r in caplog.records if r.name == f"fencewatch.kafka.{role}")
        assert "security.protocol = sasl_plaintext" in dump, role
        assert "sasl.mechanisms = SCRAM-SHA-512" in dump, role
        # librdkafka redacts both in its dump; that it lists them means they are set.
        assert "sasl.username = [redacted]" in dump and "sasl.password = [redacted]" in dump, role
    assert PASSWORD not in caplog.text


@pytest.mark.parametrize("kafka, message", [
    pytest.param({"sasl.jaas.config": "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true;"},
                 "Krb5LoginModule cannot be translated for librdkafka; for GSSAPI set", id="kerberos-jaas"),
    pytest.param({"ssl.truststore.location": "/etc/kafka/truststore.jks"},
                 "librdkafka reads CA certificates from PEM files", id="jks-truststore"),
    pytest.param({"auto.offset.reset": "earliest"}, "startingOffsets", id="source-owned"),
    pytest.param({"bootstrap.servers": "b:9092"}, "streaming.bootstrap_servers", id="bootstrap-twice"),
    pytest.param({"sasl.login.callback.handler.class": "com.example.Handler"}, "Java callback classes",
                 id="java-class"),
])
def test_what_cannot_work_is_refused_before_anything_starts(kafka, message):
    with pytest.raises(cfgmod.ConfigError, match=message):
        cfgmod.load_config(environ={}, overrides={"streaming": {"kafka": kafka}})


def test_a_java_jaas_line_translates_for_every_client_and_never_shows():
    jaas = f'{SCRAM} required username="svc" password="{PASSWORD}";'
    cfg = cfgmod.load_config(environ={}, overrides={"streaming": {"kafka": {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256", "sasl.jaas.config": jaas,
        "ssl.truststore.location": CA_FILE, "ssl.truststore.type": "PEM"}}})
    producer = cfgmod.kafka_client_config(cfg, "producer")
    assert producer["sasl.username"] == "svc" and producer["sasl.password"] == PASSWORD
    assert producer["ssl.ca.location"] == CA_FILE and "sasl.jaas.config" not in producer
    from confluent_kafka import Producer

    Producer(producer)  # librdkafka accepts the translated settings (it refused the Java ones)
    assert PASSWORD not in str(cfgmod.redacted(cfg))


def test_pem_keystore_round_trips_to_java():
    java = to_java({"ssl.certificate.location": "/k/client.pem", "ssl.key.location": "/k/client.pem"})
    assert java == {"ssl.keystore.type": "PEM", "ssl.keystore.location": "/k/client.pem"}
    with pytest.raises(ValueError, match="one file"):
        to_java({"ssl.certificate.location": "/k/cert.pem", "ssl.key.location": "/k/key.pem"})


def test_the_bridge_and_the_simulator_get_the_same_translation(tmp_path, monkeypatch, capsys):
    from fencewatch.streaming.commands.bridge import _translated_client_config, parse_client_config

    monkeypatch.setenv("FENCEWATCH_STREAMING__KAFKA__SECURITY_PROTOCOL", "SASL_SSL")
    props = tmp_path / "client.properties"  # Kafka's --command-config, Java names
    props.write_text(f'sasl.mechanism=SCRAM-SHA-512\nsasl.jaas.config={SCRAM} required username="br" '
                     f'password="{PASSWORD}";\n')
    conf = _translated_client_config("b:9092", parse_client_config(["client.id=bridge-1"], str(props)))
    assert {k: conf[k] for k in ("bootstrap.servers", "security.protocol", "sasl.mechanisms", "sasl.username",
                                 "sasl.password", "client.id")} == {
        "bootstrap.servers": "b:9092", "security.protocol": "SASL_SSL", "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "br", "sasl.password": PASSWORD, "client.id": "bridge-1"}
    from fencewatch.streaming.cli import main

    # The simulator refuses what cannot work, as a one-line error before producing anything.
    assert main(["simulate", "--events", "1", "--bootstrap-servers", "127.0.0.1:1",
                 "--producer-config", "ssl.keystore.location=/k.jks"]) == 2
    assert "librdkafka reads PKCS#12 keystores or PEM files" in capsys.readouterr().err


def test_settings_renamed_for_librdkafka_get_their_java_names_back():
    """``fetch.max.wait.ms`` is ``fetch.wait.max.ms`` to librdkafka: Spark's connector (Java) must
    get Java's name, or its consumer ignores the setting (an unknown config) and keeps 500 ms."""
    from fencewatch.streaming.config.kafka import to_librdkafka

    rd, _ = to_librdkafka({"fetch.max.wait.ms": "10", "receive.buffer.bytes": "65536",
                           "send.buffer.bytes": "131072", "client.id": "fw"})
    assert rd["fetch.wait.max.ms"] == "10"
    java = to_java(rd)
    assert (java["fetch.max.wait.ms"], java["receive.buffer.bytes"], java["send.buffer.bytes"], java["client.id"]) == (
        "10", "65536", "131072", "fw")
    assert not {"fetch.wait.max.ms", "socket.receive.buffer.bytes", "socket.send.buffer.bytes"} & set(java)
