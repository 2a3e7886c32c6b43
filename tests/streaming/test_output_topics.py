"""The output topics are checked before Spark starts (issue 46): a missing or unwritable verdicts,
alerts or DLQ topic stops ``run`` with one line naming it and the fix; ``--create-topics`` creates
them. The rule (``sinks.kafka_topics.topic_problem``) pure, then the check and ``run`` itself on
Apache Kafka, whose test broker does not auto-create topics (``streaming.brokers.kafka``). Last, a
topic deleted while the job runs: the sink's decision (``KafkaOutputs``) and ``run`` ending on it."""
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


# --------------------------------------------------------------------------- deleted while the job runs


def _wait_leaders(bootstrap: str, names: list[str], timeout_s: float = 20.0) -> None:
    """Until every partition of ``names`` has a leader (a producer made next writes at once)."""
    import time

    from confluent_kafka.admin import AdminClient

    admin, deadline = AdminClient({"bootstrap.servers": bootstrap}), time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        md = admin.list_topics(timeout=5).topics
        if all(n in md and md[n].partitions and all(p.leader >= 0 for p in md[n].partitions.values()) for n in names):
            return
        time.sleep(0.2)


@pytest.mark.broker
def test_a_topic_deleted_under_the_writer_stops_it_with_one_line_and_the_batch_pending(
        kafka_broker, topic_factory, tmp_path, caplog):
    """KafkaOutputs on Apache Kafka: the verdicts topic deleted between two batches. The second
    batch raises the start check's line (not "dead letters refused repeatedly"), nothing is
    rerouted to the DLQ, the sink log keeps the batch pending, and one warning at most is logged."""
    import logging
    import time

    from fencewatch.sinks.kafka import BatchMarker, KafkaOutputs, parse_log
    from fencewatch.streaming.brokers.common import delete_topics

    b = kafka_broker.bootstrap
    names = {role: topic_factory(1, role) for role in ("verdicts", "alerts", "dlq")}
    _wait_leaders(b, list(names.values()))
    marker = BatchMarker(tmp_path / "sink.json")
    out = KafkaOutputs({"bootstrap.servers": b}, verdicts_topic=names["verdicts"], alerts_topic=names["alerts"],
                       dlq_topic=names["dlq"], marker=marker)
    try:
        assert out.write_batch(0, verdict_lines=[f'{{"n":{i}}}' for i in range(200)])
        delete_topics({"bootstrap.servers": b}, [names["verdicts"]])
        caplog.clear()
        t0 = time.monotonic()
        with caplog.at_level(logging.WARNING), pytest.raises(OutputTopicError) as stopped:
            out.write_batch(1, verdict_lines=[f'{{"n":{i}}}' for i in range(200)],
                            dead_letters=[(b"junk", "NOT_JSON", "in[0]@1")])
        took = time.monotonic() - t0
    finally:
        out.close()
    line = str(stopped.value)
    assert stopped.value.topic == names["verdicts"] and "\n" not in line
    assert "was deleted while the job ran" in line and "--create-topics" in line and "micro-batch 1" in line
    assert took < 30, took  # librdkafka's 30 s grace for new topics is cut to TOPIC_GONE_AFTER_MS
    assert out.stats["rerouted"] == 0
    assert parse_log(marker.read())["status"] == "pending" and parse_log(marker.read())["batch"] == 1
    ours = [r for r in caplog.records if r.name.startswith("fencewatch.sinks")]
    assert len(ours) <= 1, [r.getMessage() for r in ours]

    # The topic created again, the next start writes batch 1 once: its verdicts in the new topic,
    # its dead letter (delivered by the failed attempt) not a second time.
    from fencewatch.streaming.brokers.common import create_topics
    from reliability_harness import read_topic

    create_topics({"bootstrap.servers": b}, [names["verdicts"]], 1)
    _wait_leaders(b, [names["verdicts"]])
    # ... and a start that wrote half of it to the new topic before it died, the log still pending
    # with the old topic's offsets (200, past the new topic's end): that half is found, not repeated.
    from confluent_kafka import Producer

    early = Producer({"bootstrap.servers": b})
    for i in range(100):
        early.produce(names["verdicts"], f'{{"n":{i}}}'.encode())
    assert early.flush(10) == 0
    again = KafkaOutputs({"bootstrap.servers": b}, verdicts_topic=names["verdicts"], alerts_topic=names["alerts"],
                         dlq_topic=names["dlq"], marker=marker)
    try:
        assert again.write_batch(1, verdict_lines=[f'{{"n":{i}}}' for i in range(200)],
                                 dead_letters=[(b"junk", "NOT_JSON", "in[0]@1")])
    finally:
        again.close()
    assert again.stats["skipped"] == 100 + 1  # the early half, and the dead letter of the failed attempt
    assert sorted(m.value() for m in read_topic(b, names["verdicts"])) == sorted(
        f'{{"n":{i}}}'.encode() for i in range(200))
    assert [m.value() for m in read_topic(b, names["dlq"])] == [b"junk"]
    assert parse_log(marker.read()) == {"batch": 1, "status": "done", "start": {}}


@pytest.mark.broker
def test_every_topic_gone_is_named_in_the_one_line(kafka_broker, topic_factory, tmp_path):
    """Alerts and dead-letter topics deleted together: one error, the first named, the other after it."""
    from fencewatch.sinks.kafka import KafkaOutputs
    from fencewatch.streaming.brokers.common import delete_topics

    b = kafka_broker.bootstrap
    names = {role: topic_factory(1, role) for role in ("alerts", "dlq")}
    _wait_leaders(b, list(names.values()))
    out = KafkaOutputs({"bootstrap.servers": b}, verdicts_topic=None, alerts_topic=names["alerts"],
                       dlq_topic=names["dlq"], alerts_format="json")
    alert = {"alert_id": "a1", "kind": "ZOMBIE_COMMIT", "severity": "warning", "cluster": "c", "group_id": "g",
             "ts": 1, "summary": "s", "details": {}}
    try:
        out.write_batch(0, alerts=[alert])
        delete_topics({"bootstrap.servers": b}, list(names.values()))
        with pytest.raises(OutputTopicError) as stopped:
            out.write_batch(1, alerts=[alert], dead_letters=[(b"junk", "NOT_JSON", "in[0]@1")])
    finally:
        out.close()
    first, other = sorted(names.values())
    assert stopped.value.topic == first
    assert str(stopped.value).startswith(f"output topic {first} was deleted") and f"(the same for {other})" in str(
        stopped.value)
    assert out.stats["rerouted"] == 0 and out.stats["dropped"] == 0


@pytest.mark.broker
def test_the_job_line_says_a_start_recreates_the_topic_with_create_topics(kafka_broker):
    from fencewatch.streaming.runtime.output_topics import topics_gone

    names = _names()
    gone = topics_gone(_config(kafka_broker.bootstrap, names, create_topics=True, topic_partitions=3))(
        [names["verdicts"]])
    assert list(gone) == [names["verdicts"]]
    assert "start the job again, --create-topics (sinks.create_topics) recreates it" in gone[names["verdicts"]]
    assert "--partitions 3" in gone[names["verdicts"]]


@pytest.mark.spark
@pytest.mark.broker
def test_run_stops_in_one_line_when_its_verdicts_topic_is_deleted(kafka_broker, topic_factory, tmp_path,
                                                                  kafka_source):
    """``fencewatch run`` judges a first trace, its verdicts topic is deleted, a second trace comes:
    the job ends by itself, exit 2 (the start check's), with one line naming the topic and the
    fix; no stack trace, no restart, no warning per record; the failed batch is not committed."""
    import re
    import time

    from reliability_harness import RunProcess, produce_clock, produce_events, run_args, verdict_keys, wait_for

    from fencewatch.sim.profiles import profile
    from fencewatch.sim.world import SimConfig, simulate
    from fencewatch.streaming.brokers.common import delete_topics

    b = kafka_broker.bootstrap
    topics = {"hb": topic_factory(1, "hb"), "off": topic_factory(1, "off"), "verdicts": topic_factory(1, "verdicts"),
              "alerts": topic_factory(1, "alerts"), "dlq": topic_factory(1, "dlq")}
    events = simulate(SimConfig(knobs=replace(profile("zombie-storm"), groups=2), seed=5, duration_ms=None,
                                max_events=600, event_id_prefix="e-", labels=False))
    first, second = events[:300], events[300:]
    produce_events(b, topics["hb"], topics["off"], first)
    produce_clock(b, [topics["hb"], topics["off"]], first[-1]["ts"] + 5_000)
    run = RunProcess(run_args(b, topics, tmp_path / "cp", source=kafka_source), tmp_path / "run.log")
    try:
        assert wait_for(lambda: sum(verdict_keys(b, topics["verdicts"]).values()), timeout=120, every=1, proc=run), \
            run.log()[-3000:]
        delete_topics({"bootstrap.servers": b}, [topics["verdicts"]])
        t0 = time.monotonic()
        produce_events(b, topics["hb"], topics["off"], second)
        produce_clock(b, [topics["hb"], topics["off"]], second[-1]["ts"] + 5_000)
        code = run.wait(45)
        took = time.monotonic() - t0
    finally:
        run.kill()
    log = run.log()
    assert code == 2, log[-3000:]
    named = [line for line in log.splitlines() if topics["verdicts"] in line and "deleted" in line]
    assert len(named) == 1, named
    assert named[0].startswith("fencewatch: output topic ") and "--create-topics" in named[0], named[0]
    assert "Traceback" not in log and "\tat " not in log and "Exception" not in log, log[-3000:]
    assert "restarting the query" not in log and "dead letters refused" not in log, log[-3000:]
    warnings = [line for line in log.splitlines() if re.search(r"\bWARN(ING)?\b", line)]
    assert len(warnings) < 5, warnings
    batch = int(re.search(r"micro-batch (\d+) is not committed", named[0]).group(1))
    assert not (tmp_path / "cp" / "commits" / str(batch)).exists()  # Spark runs it again at the next start
    assert took < 45, took
    if kafka_source != "python":
        return  # the restart is the sink's and the checkpoint's, the same with either reader

    # The topic created again, the next start writes the failed batch and the rest once each.
    from fencewatch.streaming.brokers.common import create_topics

    create_topics({"bootstrap.servers": b}, [topics["verdicts"]], 1)
    _wait_leaders(b, [topics["verdicts"]])
    expected = {(e["event_id"], o["topic"], o["partition"]) for e in second
                if e["type"] in ("offset_commit", "txn_offset_commit") for o in e["offsets"]}
    assert expected
    run = RunProcess(run_args(b, topics, tmp_path / "cp", source=kafka_source), tmp_path / "run2.log")
    try:
        got = wait_for(lambda: (lambda k: k if set(k) >= expected else None)(verdict_keys(b, topics["verdicts"])),
                       timeout=120, every=2, proc=run)
        assert got, run.log()[-3000:]
        assert run.alive(), run.log()[-3000:]
    finally:
        run.kill()
    assert max(verdict_keys(b, topics["verdicts"]).values()) == 1  # nothing written twice
