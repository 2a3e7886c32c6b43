"""``fencewatch simulate`` into real Kafka topics (the embedded Tansu broker of tests/conftest.py)."""

from __future__ import annotations

import dataclasses
import json
import time

import pytest

from fencewatch.sim.run import run_simulation
from fencewatch.sim.world import SimConfig, simulate
from fencewatch.sim.profiles import profile
from fencewatch.sim.writers import murmur2_partition
from fencewatch.state.avro_codec import decode_avro

pytestmark = pytest.mark.broker

MEMBERSHIP = {"heartbeat", "member_assignment", "member_left", "group_state", "classic_join", "classic_sync"}


def consume_all(bootstrap: str, topic: str, partitions: int, expected: int) -> list:
    """Every record of ``topic`` from offset 0; stops at ``expected`` records (or a generous deadline)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"reader-{topic}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
    })
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    records = []
    deadline = time.monotonic() + 60
    try:
        while len(records) < expected and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=10_000, timeout=0.5):
                assert msg.error() is None, msg.error()
                records.append(msg)
    finally:
        consumer.close()
    return records


def high_watermarks(bootstrap: str, topic: str, partitions: int) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"wm-{topic}"})
    try:
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions))
    finally:
        consumer.close()


def config() -> SimConfig:
    knobs = dataclasses.replace(profile("mixed"), groups=8, eos_fraction=0.3, unclean_elections_per_hour=60.0)
    return SimConfig(knobs=knobs, seed=21, duration_ms=600_000)


def test_json_events_land_keyed_by_group_in_coordinator_order(broker, topic_factory):
    heartbeats, offsets = topic_factory(partitions=3, prefix="hb"), topic_factory(partitions=3, prefix="off")
    summary = run_simulation(config(), bootstrap_servers=broker, heartbeats_topic=heartbeats, offsets_topic=offsets)
    expected = simulate(config())
    assert summary["events"] == len(expected) > 10_000
    want = {
        heartbeats: [e for e in expected if e["type"] in MEMBERSHIP],
        offsets: [e for e in expected if e["type"] not in MEMBERSHIP],
    }
    for topic, events in want.items():
        records = consume_all(broker, topic, 3, len(events))
        assert len(records) == len(events)
        # Each partition holds its keys' events in emission order, on Java's murmur2 partition.
        by_partition: dict[int, list[dict]] = {}
        for msg in records:
            key = msg.key().decode()
            assert msg.partition() == murmur2_partition(msg.key(), 3)
            event = json.loads(msg.value())
            assert key == event.get("group_id", f"{event.get('topic')}-{event.get('partition')}")
            by_partition.setdefault(msg.partition(), []).append(event)
        for partition, got in by_partition.items():
            keys = {e.get("group_id", f"{e.get('topic')}-{e.get('partition')}") for e in got}
            assert got == [
                e for e in events if e.get("group_id", f"{e.get('topic')}-{e.get('partition')}") in keys
            ]
        # The writer sent each partition's last record alone: the watermark shows everything.
        assert high_watermarks(broker, topic, 3) == len(events)


def test_avro_events_in_the_confluent_wire_format(broker, topic_factory):
    heartbeats, offsets = topic_factory(partitions=2, prefix="hb"), topic_factory(partitions=2, prefix="off")
    cfg = dataclasses.replace(config(), max_events=5_000, duration_ms=None)
    run_simulation(cfg, fmt="avro", schema_id=7, bootstrap_servers=broker, heartbeats_topic=heartbeats,
                   offsets_topic=offsets)
    events = simulate(cfg)
    expected = {e["event_id"]: e for e in events}
    on_heartbeats = sum(1 for e in events if e["type"] in MEMBERSHIP)
    got = {}
    for topic, count in ((heartbeats, on_heartbeats), (offsets, len(events) - on_heartbeats)):
        for msg in consume_all(broker, topic, 2, count):
            event = decode_avro(msg.value(), expected_schema_id=7)
            got[event["event_id"]] = event
    assert got == expected


def test_topics_are_created_when_missing(broker, capsys):
    import uuid

    from fencewatch.streaming.brokers.common import delete_topics

    names = [f"sim-hb-{uuid.uuid4().hex[:8]}", f"sim-off-{uuid.uuid4().hex[:8]}"]
    try:
        summary = run_simulation(dataclasses.replace(config(), max_events=200, duration_ms=None),
                                 bootstrap_servers=broker, heartbeats_topic=names[0], offsets_topic=names[1],
                                 topic_partitions=2)
        assert summary["events"] == 200
        assert high_watermarks(broker, names[0], 2) + high_watermarks(broker, names[1], 2) == 200
    finally:
        delete_topics({"bootstrap.servers": broker}, names)


def test_a_paced_writer_sends_what_it_holds_when_the_simulation_waits(broker, topic_factory):
    """A held record reached the broker only with its partition's next record: paced in real time,
    seconds late on a quiet partition, while the same group's later events on the other topic were
    read already (the job applied them first: MODEL_DIVERGENCE on the demo's own traffic). The
    pacer's wait sends it (``release``), before the writer closes."""
    from fencewatch.sim.emit import HEARTBEATS
    from fencewatch.sim.writers import KafkaWriter, Pacer

    heartbeats, offsets = topic_factory(partitions=2, prefix="hb"), topic_factory(partitions=2, prefix="off")
    writer = KafkaWriter(broker, heartbeats_topic=heartbeats, offsets_topic=offsets, create_partitions=2)
    try:
        writer.write(HEARTBEATS, "group-1", '{"type":"heartbeat","n":1}')
        seen_while_waiting: list[int] = []
        pacer = Pacer(realtime_speed=1.0, start_ts=0, on_wait=writer.release,
                      sleep=lambda _s: seen_while_waiting.append(len(consume_all(broker, heartbeats, 2, 1))))
        pacer(1, 500)  # the next step is due in 0.5 s: the simulation waits
        assert seen_while_waiting == [1]  # the record is on the broker while nothing else was written
    finally:
        writer.close()
