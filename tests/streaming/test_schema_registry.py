"""Schema Registry for Avro input and alerts, against confluent-kafka's own mock registry client
(``mock://`` URLs: the library's in-memory ``MockSchemaRegistryClient``; no registry server can
be installed here). The producer side of each round trip is the library's ``AvroSerializer``
and the consumer side its ``AvroDeserializer``: what Confluent clients in the field run."""
from __future__ import annotations

import copy
import json
import pickle
import socket
import uuid

import pytest

pytest.importorskip("confluent_kafka.schema_registry.avro")

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient  # noqa: E402
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer  # noqa: E402
from confluent_kafka.serialization import MessageField, SerializationContext  # noqa: E402

from fencewatch.streaming.ingest.events import DecodeError, decode_avro_record  # noqa: E402
from fencewatch.state.avro_codec import EVENT_SCHEMA, encode_avro  # noqa: E402
from fencewatch.streaming.ingest.schema_registry import (RegistryAlertEncoder, RegistryEventDecoder,  # noqa: E402
                                                  RegistryUnavailable, _schema_json)

EVENTS = [
    {"type": "offset_commit", "ts": 1_700_000_000_000, "cluster": "c1", "group_id": "orders", "event_id": "e-1",
     "member_id": "m-1", "member_epoch": 7, "offsets": [{"topic": "o", "partition": 1, "offset": 42}]},
    {"type": "member_assignment", "ts": 1_700_000_000_500, "group_id": "orders", "member_id": "m-1",
     "member_epoch": 8, "state": "STABLE", "assigned": [{"topic": "o", "partitions": [0, 1]}]},
]
ALERT = {"alert_id": "a-1", "ts": 1_700_000_001_000, "cluster": "c1", "group_id": "orders",
         "kind": "ZOMBIE_COMMIT", "severity": "critical", "summary": "fenced commit",
         "details": {"member_id": "m-1", "partition": "o-1"}}


@pytest.fixture
def registry():
    """A fresh in-memory registry, and the settings naming it."""
    url = f"mock://{uuid.uuid4().hex}"
    return SchemaRegistryClient.new_client({"url": url}), {"url": url}


def _produce_event(client, event: dict, topic: str = "fencewatch.offsets", schema: dict | None = None) -> bytes:
    serializer = AvroSerializer(client, _schema_json(schema or EVENT_SCHEMA))
    body = {f["name"]: event.get(f["name"]) for f in (schema or EVENT_SCHEMA)["fields"]}
    return serializer(body, SerializationContext(topic, MessageField.VALUE))


def _decode(data: bytes, decoder):
    return decode_avro_record(data, seq=0, default_event_id="0", coords="fencewatch.offsets[0]@0", registry=decoder)


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: e["type"])
def test_input_event_round_trip_through_the_registry(registry, event):
    client, settings = registry
    client.register_schema("unrelated-value", Schema(json.dumps({"type": "string"}), "AVRO"))  # ids move on
    data = _produce_event(client, event)
    schema_id = int.from_bytes(data[1:5], "big")
    assert schema_id == client.get_latest_version("fencewatch.offsets-value").schema_id != 1
    got = _decode(data, RegistryEventDecoder(settings, client=client))
    offline = decode_avro_record(encode_avro(event, schema_id=1), seq=0, default_event_id="0",
                                 coords="fencewatch.offsets[0]@0")
    assert not isinstance(got, DecodeError), got
    assert got == offline, "the registry path decodes the same event as the fixed-id path"


def test_fixed_ids_stay_the_offline_option(registry):
    """Without a registry the same registry-written record is refused by id, as before."""
    client, _ = registry
    data = _produce_event(client, EVENTS[0])
    got = decode_avro_record(data, seq=0, default_event_id="0", coords="c", schema_ids=frozenset({1}))
    if int.from_bytes(data[1:5], "big") != 1:
        assert isinstance(got, DecodeError) and got.code == "UNKNOWN_SCHEMA_ID"


def test_a_compatibly_evolved_producer_schema_still_decodes(registry):
    client, settings = registry
    evolved = copy.deepcopy(EVENT_SCHEMA)
    evolved["fields"].append({"name": "producer_host", "type": ["null", "string"], "default": None})
    data = _produce_event(client, {**EVENTS[0], "producer_host": "app-7"}, schema=evolved)
    got = _decode(data, RegistryEventDecoder(settings, client=client))
    assert not isinstance(got, DecodeError), got
    assert got.group_id == "orders" and got.member_epoch == 7


def test_an_id_the_registry_does_not_know_is_a_dead_letter(registry):
    client, settings = registry
    data = b"\x00" + (999).to_bytes(4, "big") + b"\x02x"
    got = _decode(data, RegistryEventDecoder(settings, client=client))
    assert isinstance(got, DecodeError) and got.code == "UNKNOWN_SCHEMA_ID"
    assert got.params["schema_id"] == "999"


def test_an_incompatible_schema_or_a_broken_body_is_a_dead_letter(registry):
    client, settings = registry
    other = {"type": "record", "name": "Other", "fields": [{"name": "n", "type": "int"}]}
    data = AvroSerializer(client, json.dumps(other))({"n": 3}, SerializationContext("t", MessageField.VALUE))
    decoder = RegistryEventDecoder(settings, client=client)
    got = _decode(data, decoder)
    assert isinstance(got, DecodeError) and got.code == "INVALID_AVRO", got
    assert "does not resolve" in got.params["problem"]
    truncated = _produce_event(client, EVENTS[0])[:12]
    got = _decode(truncated, decoder)
    assert isinstance(got, DecodeError) and got.code == "INVALID_AVRO", got


def test_plain_bodies_still_decode_without_the_registry(registry):
    client, settings = registry
    got = _decode(encode_avro(EVENTS[0], wire="plain"), RegistryEventDecoder(settings, client=client))
    assert not isinstance(got, DecodeError) and got.group_id == "orders"


def test_the_decoder_pickles_to_executors_without_its_client(registry):
    client, settings = registry
    decoder = RegistryEventDecoder(settings, client=client)
    data = _produce_event(client, EVENTS[0])
    assert not isinstance(_decode(data, decoder), DecodeError)
    copy_ = pickle.loads(pickle.dumps(decoder))
    assert copy_._client is None
    # the copy makes its own client from the settings: a new mock registry, which knows no schema
    got = _decode(data, copy_)
    assert isinstance(got, DecodeError) and got.code == "UNKNOWN_SCHEMA_ID"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_registry_fails_the_batch_instead_of_dead_lettering():
    decoder = RegistryEventDecoder({"url": f"http://127.0.0.1:{_closed_port()}", "max.retries": 0})
    data = b"\x00" + (5).to_bytes(4, "big") + b"\x02x"
    with pytest.raises(RegistryUnavailable):
        _decode(data, decoder)


def test_alerts_round_trip_to_a_confluent_consumer(registry):
    client, settings = registry
    for n, kind in enumerate(("string", "long")):  # ids 1 and 2 taken: the alerts' id is the registry's
        client.register_schema(f"unrelated-{n}-value", Schema(json.dumps({"type": kind}), "AVRO"))
    encode = RegistryAlertEncoder(settings, client=client)
    data = encode(ALERT, "fencewatch.alerts")
    registered = client.get_latest_version("fencewatch.alerts-value")
    assert data[0] == 0 and int.from_bytes(data[1:5], "big") == registered.schema_id != 2
    consumer = AvroDeserializer(client)  # a Confluent consumer: writer schema looked up by id
    assert consumer(data, SerializationContext("fencewatch.alerts", MessageField.VALUE)) == ALERT
    assert encode(ALERT, "fencewatch.alerts") == data, "the id is cached, the bytes stable"


def test_alerts_with_auto_registration_off_use_the_registered_schema(registry):
    client, settings = registry
    with pytest.raises(RegistryUnavailable, match="fencewatch.alerts-value"):
        RegistryAlertEncoder({**settings, "auto.register.schemas": "false"}, client=client)(ALERT, "fencewatch.alerts")
    RegistryAlertEncoder(settings, client=client)(ALERT, "fencewatch.alerts")  # registers it
    data = RegistryAlertEncoder({**settings, "auto.register.schemas": "false"}, client=client)(ALERT, "fencewatch.alerts")
    assert AvroDeserializer(client)(data, SerializationContext("fencewatch.alerts", MessageField.VALUE)) == ALERT


@pytest.mark.broker
def test_kafka_outputs_write_registry_encoded_alerts(registry, broker, topic_factory):
    from confluent_kafka import Consumer, TopicPartition

    from fencewatch.sinks.kafka import KafkaOutputs

    client, settings = registry
    topic = topic_factory(partitions=1, prefix="alerts")
    out = KafkaOutputs({"bootstrap.servers": broker}, verdicts_topic=None, alerts_topic=topic, dlq_topic=None,
                       alert_serializer=RegistryAlertEncoder(settings, client=client))
    assert out.write_batch(0, alerts=[ALERT])
    out.close()
    consumer = Consumer({"bootstrap.servers": broker, "group.id": uuid.uuid4().hex, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    try:
        msg = None
        for _ in range(50):
            msg = consumer.poll(0.5)
            if msg is not None and not msg.error():
                break
        assert msg is not None and not msg.error()
    finally:
        consumer.close()
    assert msg.key() == b"a-1"
    assert AvroDeserializer(client)(msg.value(), SerializationContext(topic, MessageField.VALUE)) == ALERT


def test_settings_come_from_the_config_and_the_secret_is_redacted():
    from fencewatch.streaming.config import settings as cfgmod
    from fencewatch.streaming.runtime.inputs import event_decoder
    from fencewatch.streaming.runtime.query import alert_encoder

    cfg = cfgmod.load_config(environ={"FENCEWATCH_STREAMING__SCHEMA_REGISTRY__URL": "mock://cfg",
                                      "FENCEWATCH_STREAMING__SCHEMA_REGISTRY__BASIC_AUTH_USER_INFO": "u:s3cret"})
    assert cfg.streaming.schema_registry == {"url": "mock://cfg", "basic.auth.user.info": "u:s3cret"}
    shown = json.dumps(cfgmod.redacted(cfg))
    assert "s3cret" not in shown and "mock://cfg" in shown
    assert isinstance(event_decoder(cfg), RegistryEventDecoder)
    assert isinstance(alert_encoder(cfg), RegistryAlertEncoder)
    assert event_decoder(cfgmod.Config()) is None and alert_encoder(cfgmod.Config()) is None
