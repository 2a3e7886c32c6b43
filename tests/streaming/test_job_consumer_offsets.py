"""``run --source consumer-offsets``: the job reading a cluster's ``__consumer_offsets`` directly.

Coordinator records (encoded by the bridge's test encoder from the schema tables) on a
topic of the embedded broker; the query decodes them with the bridge, keeps the groups'
state and decides expiry; a malformed record goes to the dead-letter topic with the
bridge's reason. A Kafka Streams capture's records (``tests/fixtures/kafka-streams/``) give the
job its streams members, their active tasks' partitions through the topology.
"""
import base64
import json
import re
import struct
import sys
from pathlib import Path

import pytest
from confluent_kafka import Producer

from fencewatch.sinks.kafka import KafkaOutputs
from fencewatch.streaming.config import settings as cfgmod
from fencewatch.streaming.runtime.writer import BatchWriter
from fencewatch.streaming.runtime.stats import JobStats
from fencewatch.streaming.runtime.query import drain, query_failure, start_query
from kafka_helpers import read_all

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bridge"))
from bridge_encoder import encode_record  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.broker]
DAY = 86_400_000


def test_consumer_offsets_source_decides_expiry_and_dead_letters(spark, broker, topic_factory, tmp_path):
    source, alerts_t, dlq_t = topic_factory(1, "coord"), topic_factory(1, "alerts"), topic_factory(1, "dlq")
    ts = 1_700_000_000_000
    records = []
    for record_type, key, version, value in [
        (5, {"groupId": "app", "memberId": "m1"}, 0, {
            "instanceId": None, "rackId": None, "clientId": "c", "clientHost": "h", "subscribedTopicNames": ["orders"],
            "subscribedTopicRegex": None, "rebalanceTimeoutMs": 1000, "serverAssignor": None}),
        (3, {"groupId": "app"}, 0, {"epoch": 1}),
        (8, {"groupId": "app", "memberId": "m1"}, 0, {
            "memberEpoch": 1, "previousMemberEpoch": 0, "state": 0,
            "assignedPartitions": [{"topicId": b"\x00" * 16, "partitions": [0], "assignmentEpochs": [1]}],
            "partitionsPendingRevocation": []}),
        # An idle simple group: its offset was committed 8 days ago (retention 7 days).
        (1, {"group": "idle", "topic": "orders", "partition": 0}, 3,
         {"offset": 3, "leaderEpoch": 0, "metadata": "", "commitTimestamp": ts - 8 * DAY}),
    ]:
        k, v = encode_record(record_type, key, version, value)
        records.append((k, v))
    records.insert(2, (struct.pack(">h", 1) + b"\x00", b"\x00\x03"))  # malformed OffsetCommit value
    p = Producer({"bootstrap.servers": broker, "batch.num.messages": 1})
    for i, (k, v) in enumerate(records):
        p.produce(source, key=k, value=v, timestamp=ts + i, partition=0)
        p.flush(10)
    cfg = cfgmod.load_config(environ={}, overrides={
        "streaming": {"bootstrap_servers": broker, "source": "consumer-offsets", "consumer_offsets_topic": source,
                      "starting_offsets": "earliest", "checkpoint_location": str(tmp_path / "cp")},
        "sinks": {"alerts_topic": alerts_t, "dlq_topic": dlq_t, "alerts_format": "json"}})
    kafka = KafkaOutputs({"bootstrap.servers": broker}, verdicts_topic=None, alerts_topic=alerts_t, dlq_topic=dlq_t,
                         alerts_format="json")
    writer = BatchWriter(cfg, kafka=kafka, stats=JobStats())
    query = start_query(spark, cfg, writer, trigger="200 milliseconds")
    assert drain(query, cfg, timeout_s=300, writer=writer)
    kafka.close()
    assert query_failure(query) is None
    alerts = [json.loads(m.value()) for m in read_all(broker, alerts_t)]
    expired = [a for a in alerts if a["kind"] == "OFFSETS_EXPIRED"]
    assert [a["group_id"] for a in expired] == ["idle"]
    assert expired[0]["details"]["expired_partitions"] == "orders-0"
    assert expired[0]["ts"] == ts - 8 * DAY + 7 * DAY  # stamped with the deadline
    (dead,) = read_all(broker, dlq_t)
    assert dict(dead.headers())["fencewatch.source"] == f"{source}[0]@2".encode()
    assert re.fullmatch(rb"[A-Z_]+\(detail=.+\)", dict(dead.headers())["fencewatch.reason"])
    assert writer.stats.events >= 2  # the member's assignment became an event of group "app"


STREAMS_CAPTURE = Path(__file__).resolve().parents[1] / "fixtures" / "kafka-streams" / "4.3.1"


def test_consumer_offsets_source_learns_streams_members_through_their_topology(spark, broker, topic_factory,
                                                                                 tmp_path):
    """The live job decodes each record alone (``decode_record``): a streams group's topology and
    its members' tasks reach the rules as events, and the group snapshot (``sinks.groups_topic``)
    shows each member holding its active tasks' partitions, member for member and partition for
    partition what the local engine holds over the stateful bridge's events. The capture's records
    up to its first member's removal (its members all in the group, two partitions each)."""
    from fencewatch.sinks.group_views import GroupViews
    from fencewatch.state.group_view import group_view
    from fencewatch.streaming.ingest.consumer_offsets.mapping import Bridge, map_records
    from fencewatch.streaming.ingest.consumer_offsets.records import decode
    from fencewatch.streaming.runtime.replay import judge_events

    source, groups_t = topic_factory(1, "coord"), topic_factory(1, "groups")
    raw = [json.loads(line) for line in (STREAMS_CAPTURE / "consumer-offsets.jsonl").read_text().splitlines()]
    records = [(base64.b64decode(r["key"]), None if r["value"] is None else base64.b64decode(r["value"]),
                r["timestamp"]) for r in raw]
    records = records[:next(i for i, (k, v, _) in enumerate(records) if v is None and decode(k, v).record_type == 22)]
    p = Producer({"bootstrap.servers": broker, "linger.ms": 5})
    for k, v, ts in records:
        p.produce(source, key=k, value=v, timestamp=ts, partition=0)
    p.flush(30)
    cfg = cfgmod.load_config(environ={}, overrides={
        "streaming": {"bootstrap_servers": broker, "source": "consumer-offsets", "consumer_offsets_topic": source,
                      "starting_offsets": "earliest", "checkpoint_location": str(tmp_path / "cp"),
                      "topic_ids_file": str(STREAMS_CAPTURE / "topic-ids.json")},
        "sinks": {"groups_topic": groups_t}})
    kafka = KafkaOutputs({"bootstrap.servers": broker}, verdicts_topic=None, alerts_topic=None, dlq_topic=None,
                         groups_topic=groups_t)
    writer = BatchWriter(cfg, kafka=kafka, stats=JobStats())
    query = start_query(spark, cfg, writer, trigger="200 milliseconds")
    assert drain(query, cfg, timeout_s=300, writer=writer)
    kafka.close()
    assert query_failure(query) is None
    views = GroupViews()
    snapshots = [json.loads(m.value()) for m in read_all(broker, groups_t) if m.value() is not None]
    views.apply((s["cluster"], s["group_id"], s) for s in snapshots)
    topic_ids = json.loads((STREAMS_CAPTURE / "topic-ids.json").read_text())
    events, problems = map_records([(k, v, ts, f"co-{n}") for n, (k, v, ts) in enumerate(records)], Bridge(topic_ids))
    assert problems == []
    (g,) = [g for g in judge_events(events).groups if g.group_type == "streams"]
    (view,) = [v for v in views.snapshot() if v["group_id"] == g.group_id]
    assert view["group_type"] == "streams" and view["members"] == group_view(g)["members"]
    held = [m for m in view["members"] if m["assigned_partitions"]]
    assert len(held) >= 2 and {m["protocol"] for m in held} == {"streams"}
    assert {p["topic"] for m in held for p in m["assigned_partitions"]} <= set(topic_ids.values())
