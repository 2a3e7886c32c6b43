"""The output topics are checked before Spark starts (issue 46): a missing or unwritable verdicts,
alerts or DLQ topic stops ``run`` with one line naming it and the fix; ``--create-topics`` creates
them. The rule (``sinks.kafka_topics.topic_problem``) pure, then the check and ``run`` itself on
Apache Kafka, whose test broker does not auto-create topics (``streaming.brokers.kafka``)."""
from __future__ import annotations

import os
import subprocess
import sys
import uuid
from dataclasses import replace

import pytest

from fencewatch.sinks.kafka_topics import OutputTopic, OutputTopicError, TopicState, topic_problem
from fencewatch.streaming.config.settings import Config, SinksConfig, StreamingConfig
from fencewatch.streaming.runtime.output_topics import ensure_output_topics, output_topics

B = "b1:9092"
VERDICTS = OutputTopic("verdicts", "fw.verdicts")


# --------------------------------------------------------------------------- the rule


def test_a_missing_topic_is_named_with_both_ways_out():
    line = topic_problem(VERDICTS, TopicState(error="UNKNOWN_TOPIC_OR_PART"), B, partitions=6, replication_factor=3)
    assert "fw.verdicts" in line and "does not exist" in line and B in line
    assert "--partitions 6 --replication-factor 3" in line and "--create-topics" in line
    assert "\n" not in line


@pytest.mark.parametrize("ops, refused", [
    (frozenset({"READ"}), "Write"),
    (frozenset({"WRITE"}), "Read"),
    (frozenset({"DESCRIBE"}), "Write/Read"),
])
def test_a_topic_the_principal_may_not_write_or_read_back_names_the_grant(ops, refused):
    line = topic_problem(VERDICTS, TopicState(partitions=1, operations=ops), B, principal="User:fw")
    assert f"User:fw may not {refused} it" in line and "kafka-acls.sh" in line and "--topic fw.verdicts" in line


def test_a_topic_the_principal_may_not_describe_is_an_acl_problem_not_a_missing_topic():
    line = topic_problem(VERDICTS, TopicState(error="TOPIC_AUTHORIZATION_FAILED"), B, principal="User:fw")
    assert "may not even Describe" in line and "does not exist" not in line


def test_a_partition_without_a_leader_is_named():
    line = topic_problem(VERDICTS, TopicState(partitions=3, leaderless=(2,), operations=frozenset({"READ", "WRITE"})), B)
    assert "partition(s) 2 of 3 have no leader" in line


@pytest.mark.parametrize("state", [
    TopicState(partitions=3, operations=frozenset({"READ", "WRITE", "DESCRIBE"})),
    TopicState(partitions=1, operations=None),  # a broker that reports no operations: not known, not a problem
])
def test_a_writable_topic_is_no_problem(state):
    assert topic_problem(VERDICTS, state, B) is None


def test_the_output_topics_are_the_verdicts_alerts_and_dlq_once_each():
    cfg = Config(sinks=replace(SinksConfig(), verdicts_topic="v", alerts_topic="a", dlq_topic="a"))
    assert [(t.role, t.name) for t in output_topics(cfg)] == [("verdicts", "v"), ("alerts", "a")]
    assert [t.name for t in output_topics(Config(sinks=replace(SinksConfig(), verdicts_topic=None)))] == [
        SinksConfig().alerts_topic, SinksConfig().dlq_topic]


# --------------------------------------------------------------------------- on Apache Kafka


def _config(bootstrap: str, names: dict[str, str], **sinks) -> Config:
    return Config(streaming=replace(StreamingConfig(), bootstrap_servers=bootstrap),
                  sinks=replace(SinksConfig(), verdicts_topic=names["verdicts"], alerts_topic=names["alerts"],
                                dlq_topic=names["dlq"], **sinks))


def _names() -> dict[str, str]:
    tag = uuid.uuid4().hex[:10]
    return {role: f"fw-{role}-{tag}" for role in ("verdicts", "alerts", "dlq")}


@pytest.mark.broker
def test_missing_topics_are_refused_and_existing_ones_pass(kafka_broker, topic_factory):
    names = _names()
    with pytest.raises(OutputTopicError) as refused:
        ensure_output_topics(_config(kafka_broker.bootstrap, names))
    assert refused.value.topic == names["verdicts"]
    assert f"the same for {names['alerts']}, {names['dlq']}" in str(refused.value)
    present = {role: topic_factory() for role in names}
    ensure_output_topics(_config(kafka_broker.bootstrap, present))  # no error


@pytest.mark.broker
def test_create_topics_creates_the_missing_ones_with_the_configured_partitions(kafka_broker):
    from confluent_kafka.admin import AdminClient

    from fencewatch.streaming.brokers.common import delete_topics

    names = _names()
    client = {"bootstrap.servers": kafka_broker.bootstrap}
    try:
        ensure_output_topics(_config(kafka_broker.bootstrap, names, create_topics=True, topic_partitions=2))
        topics = AdminClient(client).list_topics(timeout=10).topics
        assert {n: len(topics[n].partitions) for n in names.values()} == {n: 2 for n in names.values()}
    finally:
        delete_topics(client, list(names.values()))


@pytest.mark.broker
def test_run_refuses_a_missing_verdicts_topic_in_one_line_before_spark_starts(kafka_broker, tmp_path):
    names = _names()
    done = subprocess.run(
        [sys.executable, "-m", "fencewatch.streaming.cli", "run", "--bootstrap-servers", kafka_broker.bootstrap,
         "--verdicts-topic", names["verdicts"], "--alerts-topic", names["alerts"], "--dlq-topic", names["dlq"],
         "--checkpoint", str(tmp_path / "cp")],
        capture_output=True, text=True, timeout=300, env={**os.environ, "PYSPARK_SUBMIT_ARGS": ""})
    assert done.returncode == 2, done.stderr
    errors = [line for line in done.stderr.splitlines() if names["verdicts"] in line]
    assert len(errors) == 1 and "does not exist" in errors[0] and "--create-topics" in errors[0], done.stderr
    assert "Traceback" not in done.stderr
    assert "SparkSession" not in done.stderr and not (tmp_path / "cp" / "offsets").exists()
