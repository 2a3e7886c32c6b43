"""Live bridge against the real test broker (Tansu).

Tansu does not write ``__consumer_offsets``, so the test produces encoded
coordinator records (as Kafka's coordinator would write them) to a uuid-named
source topic, runs the bridge with ``--stop-at-end``, and reads the events it
republished to the heartbeats and offsets topics. The member assignment
references the data topic by its real topic id, resolved through the broker's
metadata; the partition-facts poller asks the broker for log offsets.
"""

from __future__ import annotations

import json
import struct
import time

import pytest

from bridge_encoder import encode_record
from fencewatch.streaming.commands.bridge import register

pytestmark = [pytest.mark.broker]


def topic_id_of(bootstrap: str, topic: str) -> bytes:
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    tid = admin.describe_topics(TopicCollection([topic]))[topic].result(timeout=30).topic_id
    return struct.pack(">qq", tid.get_most_significant_bits(), tid.get_least_significant_bits())


def produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes | None, int]]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for key, value, ts in records[:-1]:
        producer.produce(topic, key=key, value=value, timestamp=ts, partition=0)
    producer.flush(30)
    # A last single-record batch: Tansu's high watermark then covers every record.
    key, value, ts = records[-1]
    producer.produce(topic, key=key, value=value, timestamp=ts, partition=0)
    assert producer.flush(30) == 0


def read_all(bootstrap: str, topic: str, expected: int, deadline_s: float = 60.0) -> list[tuple[str, dict]]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"read-{topic}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    out = []
    end = time.monotonic() + deadline_s
    try:
        while len(out) < expected and time.monotonic() < end:
            msg = consumer.poll(0.5)
            if msg is None or msg.error():
                continue
            out.append((msg.key().decode(), json.loads(msg.value())))
    finally:
        consumer.close()
    return out


def test_bridge_republishes_coordinator_records(broker, topic_factory):
    import argparse

    source = topic_factory(1, "coord")
    heartbeats = topic_factory(1, "hb")
    offsets = topic_factory(1, "off")
    data = topic_factory(1, "orders")

    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": broker})
    for i in range(5):
        p.produce(data, value=b"x%d" % i, partition=0)
    p.flush(30)
    p.produce(data, value=b"last", partition=0)
    p.flush(30)
    data_id = topic_id_of(broker, data)

    records = []
    ts = 1_700_000_000_000

    def add(record_type, key, version=None, value=None, batch=None):
        # Records of one coordinator batch share its timestamp.
        k, v = encode_record(record_type, key, version, value)
        records.append((k, v, ts + (batch if batch is not None else len(records))))

    add(5, {"groupId": "app", "memberId": "m1"}, 0, batch=0, value={
        "instanceId": "i1", "rackId": None, "clientId": "c", "clientHost": "h", "subscribedTopicNames": [data],
        "subscribedTopicRegex": None, "rebalanceTimeoutMs": 1000, "serverAssignor": None})
    add(3, {"groupId": "app"}, 0, {"epoch": 1}, batch=0)
    add(6, {"groupId": "app"}, 0, {"assignmentEpoch": 1}, batch=0)
    add(8, {"groupId": "app", "memberId": "m1"}, 0, batch=0, value={
        "memberEpoch": 1, "previousMemberEpoch": 0, "state": 0,
        "assignedPartitions": [{"topicId": data_id, "partitions": [0], "assignmentEpochs": [1]}],
        "partitionsPendingRevocation": []})
    records.append((struct.pack(">h", 1) + b"\x00", b"\x00\x03", ts + 50))  # malformed: skipped, not fatal
    add(1, {"group": "app", "topic": data, "partition": 0}, 4,
        {"offset": 3, "leaderEpoch": 0, "metadata": "", "commitTimestamp": ts, "topicId": data_id})
    add(1, {"group": "old", "topic": data, "partition": 0})
    produce(broker, source, records)

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["bridge", "--bootstrap-servers", broker, "--source-topic", source,
                              "--heartbeats-topic", heartbeats, "--offsets-topic", offsets, "--stop-at-end", "--metrics-port", "0",
                              "--partition-poll-interval", "3600", "-X", "client.id=bridge-test"])
    assert args.func(args) == 0

    hb = read_all(broker, heartbeats, expected=2)
    off = read_all(broker, offsets, expected=3)
    assert [e["type"] for _, e in hb] == ["member_assignment", "group_state"]
    key, assignment = hb[0]
    assert key == "app"
    assert assignment["assigned"] == [{"topic": data, "partitions": [0], "assignment_epochs": [1]}]
    assert assignment["instance_id"] == "i1" and assignment["event_id"] == f"{source}/0/3"
    assert hb[1][1]["state"] == "Stable"

    by_type = {e["type"]: (k, e) for k, e in off}
    assert set(by_type) == {"offset_committed", "offset_deleted", "partition_epochs"}
    k, committed = by_type["offset_committed"]
    assert k == "app" and committed["offset"] == 3 and committed["event_id"] == f"{source}/0/5"
    assert by_type["offset_deleted"][1]["group_id"] == "old"
    k, facts = by_type["partition_epochs"]
    assert k == data
    assert (facts["topic"], facts["partition"], facts["log_start_offset"], facts["log_end_offset"]) == (data, 0, 0, 6)
    assert facts["epochs"] == [{"epoch": 0, "start_offset": 0}]
