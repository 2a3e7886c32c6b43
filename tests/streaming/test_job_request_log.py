"""``run --source request-log``: the job reading broker request-log lines from a topic.

Lines as a broker writes them (built from Kafka's message specs, ``tests/bridge/request_log_lines``)
on a topic of the embedded broker, one per record as a log shipper writes them; the query
decodes them (stateless mapper), derives membership in the group state, judges the commits:
a commit the broker fenced with STALE_MEMBER_EPOCH is judged (avoidable: KIP-1251 would have
accepted it) and raises AVOIDABLE_FENCING; a broken line goes to the dead-letter topic.
"""
import json
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
from test_request_log_judged import ORDERS, scenario  # noqa: E402

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.slow]


def _judge_lines(spark, broker, tmp_path, streaming, topics):
    """Runs the job over the topics already filled, to the end of its input; returns the verdicts."""
    lines_t, alerts_t, dlq_t, verdicts_t = topics
    ids = tmp_path / "topic-ids.json"
    ids.write_text(json.dumps({ORDERS: "orders"}))
    cfg = cfgmod.load_config(environ={}, overrides={
        "streaming": {"bootstrap_servers": broker, "request_log_topic": lines_t, "topic_ids_file": str(ids),
                      "starting_offsets": "earliest", "checkpoint_location": str(tmp_path / "cp"), **streaming},
        "sinks": {"alerts_topic": alerts_t, "dlq_topic": dlq_t, "alerts_format": "json", "verdicts_topic": verdicts_t}})
    kafka = KafkaOutputs({"bootstrap.servers": broker}, verdicts_topic=verdicts_t, alerts_topic=alerts_t,
                         dlq_topic=dlq_t, alerts_format="json")
    writer = BatchWriter(cfg, kafka=kafka, stats=JobStats())
    query = start_query(spark, cfg, writer, trigger="200 milliseconds")
    assert drain(query, cfg, timeout_s=300, writer=writer)
    kafka.close()
    assert query_failure(query) is None
    return [json.loads(line) for m in read_all(broker, verdicts_t) for line in m.value().decode().splitlines()]


def test_request_log_source_judges_fenced_commit(spark, broker, topic_factory, tmp_path):
    lines_t, alerts_t, dlq_t, verdicts_t = (topic_factory(1, "reqlog"), topic_factory(1, "alerts"),
                                            topic_factory(1, "dlq"), topic_factory(1, "verdicts"))
    lines = scenario()
    lines.insert(3, "[2026-11-20 09:00:12,500] DEBUG Completed request:{\"requestHeader\": (kafka.request.logger)")
    p = Producer({"bootstrap.servers": broker, "batch.num.messages": 1})
    for line in lines:
        p.produce(lines_t, value=line.encode(), partition=0)
        p.flush(10)
    verdicts = _judge_lines(spark, broker, tmp_path, {"source": "request-log"},
                            (lines_t, alerts_t, dlq_t, verdicts_t))
    fenced = [v for v in verdicts if v["broker_error"] == "STALE_MEMBER_EPOCH"]
    assert len(fenced) == 1
    assert (fenced[0]["member_id"], fenced[0]["client_epoch"], fenced[0]["broker_epoch"], fenced[0]["class"],
            fenced[0]["model_agrees"]) == ("m-1", 1, 2, "avoidable", True)
    assert fenced[0]["event_id"] == f"{lines_t}/0/8"
    assert len(verdicts) == 10 and all(v["model_agrees"] for v in verdicts)
    alerts = [json.loads(m.value()) for m in read_all(broker, alerts_t)]
    assert [a["kind"] for a in alerts] == ["AVOIDABLE_FENCING"]
    (dead,) = read_all(broker, dlq_t)
    headers = dict(dead.headers())
    assert headers["fencewatch.source"] == f"{lines_t}[0]@3".encode()
    assert headers["fencewatch.reason"].startswith(b"BAD_JSON(detail=")


def test_request_log_with_consumer_offsets_takes_membership_from_the_coordinator(spark, broker, topic_factory,
                                                                                  tmp_path):
    """``--source request-log,consumer-offsets``: the members' assignments (with KIP-1251 epochs)
    from ``__consumer_offsets`` records, the commits and their answers from the request log; the
    same verdicts as the request log alone gives for this scenario."""
    import uuid

    from bridge_encoder import encode_record

    lines_t, coord_t, alerts_t, dlq_t, verdicts_t = (
        topic_factory(1, "reqlog"), topic_factory(1, "coord"), topic_factory(1, "alerts"), topic_factory(1, "dlq"),
        topic_factory(1, "verdicts"))
    orders = uuid.UUID(int=0xA1).bytes
    base = 1795165200000  # 2026-11-20 09:00:00 UTC, the scenario's minute

    def assignment(member, epoch, prev, state, assigned, epochs, pending=(), pending_epochs=()):
        return encode_record(8, {"groupId": "g", "memberId": member}, 0, {
            "memberEpoch": epoch, "previousMemberEpoch": prev, "state": state,
            "assignedPartitions": [{"topicId": orders, "partitions": list(assigned), "assignmentEpochs": list(epochs)}]
            if assigned else [],
            "partitionsPendingRevocation": [{"topicId": orders, "partitions": list(pending),
                                             "assignmentEpochs": list(pending_epochs)}] if pending else []})

    records = [(10, assignment("m-1", 1, 0, 0, [0, 1, 2, 3], [1, 1, 1, 1])),
               (13, assignment("m-2", 2, 0, 0, [], [])),
               (14, assignment("m-1", 1, 1, 1, [0, 1], [1, 1], [2, 3], [1, 1])),
               (15, assignment("m-1", 2, 1, 0, [0, 1], [1, 1])),
               (16, assignment("m-2", 2, 2, 0, [2, 3], [2, 2])),
               (20, assignment("m-1", 3, 2, 0, [0, 1], [1, 1]))]
    p = Producer({"bootstrap.servers": broker, "batch.num.messages": 1})
    for sec, (k, v) in records:
        p.produce(coord_t, key=k, value=v, timestamp=base + sec * 1000, partition=0)
        p.flush(10)
    for line in scenario():
        p.produce(lines_t, value=line.encode(), partition=0)
        p.flush(10)
    # streaming.cluster names the events of both sources: one group, its membership and commits together
    verdicts = _judge_lines(spark, broker, tmp_path, {"source": "request-log,consumer-offsets",
                                                      "consumer_offsets_topic": coord_t, "cluster": "eu-1"},
                            (lines_t, alerts_t, dlq_t, verdicts_t))
    assert len(verdicts) == 10 and all(v["model_agrees"] for v in verdicts)
    assert {v["cluster"] for v in verdicts} == {"eu-1"}
    (fenced,) = [v for v in verdicts if v["broker_error"] == "STALE_MEMBER_EPOCH"]
    assert (fenced["class"], fenced["assignment_epoch"], fenced["revocation_epoch"]) == ("avoidable", 1, 1)
    alerts = [json.loads(m.value()) for m in read_all(broker, alerts_t)]
    assert [(a["kind"], a["cluster"]) for a in alerts] == [("AVOIDABLE_FENCING", "eu-1")]
    assert read_all(broker, dlq_t) == []
