"""``run --source consumer-offsets``: the job reading a cluster's ``__consumer_offsets`` directly.

Coordinator records (encoded by the bridge's test encoder from the schema tables) on a
topic of the embedded broker; the query decodes them with the bridge, keeps the groups'
state and decides expiry; a malformed record goes to the dead-letter topic with the
bridge's reason.
"""
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
