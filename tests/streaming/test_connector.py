"""Spark's own Kafka connector without Spark: where its jars are found, which reader a job uses
and why, a checkpoint's reader, and the facts the job reads from a planned micro-batch.
(``test_connector_job.py`` runs the connector for real.)"""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from fencewatch.streaming.runtime.checkpoint import record_source, recorded_source
from fencewatch.streaming.runtime.checkpoint import CONNECTOR_MARK, sink_log
from fencewatch.streaming.sources.connector import (ARTIFACTS, ConnectorBatches, ConnectorMissing, InternalTopic,
                                                    SourceMismatch, choose, classpath_conf, connector_dir, connector_jars,
                                                    planned_batch)
from fencewatch.streaming.sources.pacing import BatchPacer

V = "4.2.0"


@pytest.fixture
def jars_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("FENCEWATCH_JARS_DIR", str(tmp_path))
    return tmp_path


def fetched(root, version=V, *, complete=True, artifacts=ARTIFACTS):
    folder = root / f"spark-kafka-{version}"
    folder.mkdir(parents=True)
    for a in artifacts:
        (folder / f"{a}-{version if a.startswith('spark') else '1.0'}.jar").write_bytes(b"PK")
    if complete:
        (folder / ".complete").touch()
    return folder


# --------------------------------------------------------------------------- the jars


def test_the_jars_are_found_where_make_puts_them_once_the_fetch_completed(jars_dir):
    assert connector_jars(V) is None
    folder = fetched(jars_dir, complete=False)
    assert connector_jars(V) is None, "a fetch cut short is not used"
    (folder / ".complete").touch()
    assert [j.split("/")[-1].rsplit("-", 1)[0] for j in connector_jars(V)] == sorted(ARTIFACTS)
    assert connector_jars("4.3.0") is None, "another Spark version's jars are never used"


def test_a_folder_missing_an_artifact_is_not_used(jars_dir):
    fetched(jars_dir, artifacts=ARTIFACTS[:-1])
    assert connector_jars(V) is None


def test_the_session_gets_the_jars_unless_python_is_asked_or_the_user_brings_the_connector(jars_dir):
    fetched(jars_dir)
    conf = classpath_conf("auto", V, {})
    assert conf["spark.jars"].split(",") == connector_jars(V)
    assert classpath_conf("spark", V, {"spark.jars": "/opt/x.jar"})["spark.jars"].split(",")[0] == "/opt/x.jar"
    assert classpath_conf("python", V, {}) == {}
    assert classpath_conf("auto", V, {"spark.jars.packages": "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"}) == {}
    assert classpath_conf("auto", "9.9.9", {}) == {}, "not fetched for this version"


# --------------------------------------------------------------------------- the choice


def test_auto_takes_the_connector_when_it_loads_and_says_why(jars_dir):
    c = choose("auto", loadable=True, spark_version=V, jars_added=True)
    assert c.connector and c.fmt == "kafka"
    assert str(connector_dir(V)) in c.reason and "auto" in c.reason
    c = choose("auto", loadable=True, spark_version=V, jars_added=False)
    assert "Spark's own classpath" in c.reason
    c = choose("auto", loadable=False, spark_version=V, jars_added=False)
    assert c.source == "python" and c.fmt == "fencewatch-kafka" and "make connector-jars" in c.reason
    assert c.describe().startswith("fencewatch-kafka (Python): streaming.kafka_source is auto")


def test_spark_asked_and_missing_is_an_error_that_says_how_to_fetch_it(jars_dir):
    with pytest.raises(ConnectorMissing, match=r"make connector-jars.*spark-sql-kafka-0-10_2\.13:4\.2\.0"):
        choose("spark", loadable=False, spark_version=V, jars_added=False)
    assert choose("python", loadable=True, spark_version=V, jars_added=True).source == "python"


def test_an_internal_topic_is_read_by_the_python_reader_only(jars_dir):
    """Spark's connector reads no record of ``__consumer_offsets`` (seen on Spark 4.2 against Kafka
    4.2, docs/kafka-source.md): ``auto`` takes the Python reader and says why; ``spark`` is refused."""
    c = choose("auto", loadable=True, spark_version=V, jars_added=True, internal_topic="__consumer_offsets")
    assert c.source == "python" and "__consumer_offsets" in c.reason
    with pytest.raises(InternalTopic, match="--kafka-source python"):
        choose("spark", loadable=True, spark_version=V, jars_added=True, internal_topic="__consumer_offsets")
    with pytest.raises(InternalTopic, match="new checkpoint"):
        choose("auto", loadable=True, spark_version=V, jars_added=True, recorded="spark",
               internal_topic="__consumer_offsets")
    assert choose("auto", loadable=True, spark_version=V, jars_added=True).source == "spark"


def test_a_checkpoint_keeps_its_reader_under_auto_and_refuses_the_other_one_by_name():
    assert choose("auto", loadable=True, spark_version=V, jars_added=True, recorded="python").source == "python"
    assert choose("auto", loadable=False, spark_version=V, jars_added=False, recorded="python").source == "python"
    assert choose("auto", loadable=True, spark_version=V, jars_added=True, recorded="spark").source == "spark"
    with pytest.raises(ConnectorMissing, match="checkpoint was written with it"):
        choose("auto", loadable=False, spark_version=V, jars_added=False, recorded="spark")
    with pytest.raises(SourceMismatch, match=r"written reading Kafka with fencewatch-kafka .*--kafka-source python"):
        choose("spark", loadable=True, spark_version=V, jars_added=True, recorded="python")
    with pytest.raises(SourceMismatch, match=r"written reading Kafka with Spark's Kafka connector"):
        choose("python", loadable=True, spark_version=V, jars_added=True, recorded="spark")
    assert choose("spark", loadable=True, spark_version=V, jars_added=True, recorded="spark").connector


# --------------------------------------------------------------------------- a checkpoint's reader


def test_a_checkpoint_records_its_reader_once(tmp_path):
    cp = tmp_path / "cp"
    assert recorded_source(None, str(cp)) is None
    record_source(None, str(cp), "spark")
    record_source(None, str(cp), "python")  # never rewritten
    assert recorded_source(None, str(cp)) == "spark"
    assert json.loads((cp / "fencewatch-source.json").read_text()) == {"kafka_source": "spark"}


def test_a_checkpoint_from_before_the_mark_is_known_by_its_files(tmp_path):
    """Only Spark's connector writes its starting offsets in ``sources/N/0``."""
    python, spark = tmp_path / "p", tmp_path / "s"
    for cp in (python, spark):
        (cp / "offsets").mkdir(parents=True)
        (cp / "offsets" / "0").write_text('v1\n{}\n{"t":{"0":1}}')
    (spark / "sources" / "0").mkdir(parents=True)
    (spark / "sources" / "0" / "0").write_text('v1\n{"t":{"0":0}}')
    assert recorded_source(None, str(python)) == "python"
    assert recorded_source(None, str(spark)) == "spark"
    assert recorded_source(None, f"file://{spark}") == "spark"


# --------------------------------------------------------------------------- a planned micro-batch


def test_a_batch_that_reached_the_offsets_found_at_planning_is_caught_up():
    b = planned_batch([({"t": {"0": 5, "1": 0}}, {"t": {"0": 9, "1": 3}}, {"t": {"0": 9, "1": 3}})], 7, 1_000)
    assert (b.batch_id, b.records, b.caught_up, b.limited) == (7, 7, True, False)


def test_a_batch_the_limit_cut_is_neither_caught_up_nor_unlimited():
    b = planned_batch([({"t": {"0": 0}}, {"t": {"0": 4}}, {"t": {"0": 9}}),
                       ({"u": {"0": 0}}, {"u": {"0": 2}}, {"u": {"0": 2}})], 1, 0)
    assert (b.records, b.caught_up, b.limited) == (6, False, True)


def test_a_batch_planned_before_a_restart_is_not_known_to_be_caught_up():
    b = planned_batch([({"t": {"0": 0}}, {"t": {"0": 4}}, None)], 3, 0)
    assert not b.caught_up and not b.limited
    assert not planned_batch([], 0, 0).caught_up, "no Kafka source, no mark"


def test_a_rerun_after_a_restart_keeps_the_mark_its_first_attempt_had(tmp_path):
    """Issue 33 on the connector: a rerun has no latest offsets in Spark, so without the mark its
    first attempt kept in the checkpoint it would hold the events that attempt had released."""
    first = planned_batch([({"t": {"0": 0}}, {"t": {"0": 4}}, {"t": {"0": 4}})], 3, 0)
    rerun = planned_batch([({"t": {"0": 0}}, {"t": {"0": 4}}, None)], 3, 0)
    assert first.caught_up and not first.rerun and rerun.rerun and not rerun.caught_up

    def batches():  # each start of the job makes its own, on the same checkpoint's log
        return ConnectorBatches(None, None, None, marks=sink_log(None, str(tmp_path), CONNECTOR_MARK))

    assert not batches().mark(rerun), "nothing kept: not caught up"
    assert batches().mark(first) and (tmp_path / CONNECTOR_MARK).exists()
    assert batches().mark(rerun)
    cut = planned_batch([({"t": {"0": 0}}, {"t": {"0": 2}}, None)], 3, 0)
    assert not batches().mark(cut), "cut by `checkpoint bound` since: no longer to the ends"
    assert not batches().mark(planned_batch([({"t": {"0": 4}}, {"t": {"0": 4}}, None)], 4, 0)), "another batch's"
    assert not ConnectorBatches(None, None, None).mark(rerun), "no log: no mark"


def test_a_first_attempt_not_caught_up_leaves_the_kept_mark_alone(tmp_path):
    marks = sink_log(None, str(tmp_path), CONNECTOR_MARK)
    caught_up = planned_batch([({"t": {"0": 0}}, {"t": {"0": 4}}, {"t": {"0": 4}})], 3, 0)
    ConnectorBatches(None, None, None, marks=marks).mark(caught_up)
    kept = marks.read()
    cut = planned_batch([({"t": {"0": 4}}, {"t": {"0": 6}}, {"t": {"0": 9}})], 4, 0)
    assert not ConnectorBatches(None, None, None, marks=marks).mark(cut) and marks.read() == kept
    assert not ConnectorBatches(None, None, None, marks=marks).mark(replace(cut, caught_up=False, rerun=True))


def test_an_unreadable_kept_mark_is_no_mark(tmp_path):
    (tmp_path / CONNECTOR_MARK).write_text("{not json")
    rerun = planned_batch([({"t": {"0": 0}}, {"t": {"0": 4}}, None)], 3, 0)
    assert not ConnectorBatches(None, None, None, marks=sink_log(None, str(tmp_path), CONNECTOR_MARK)).mark(rerun)


def test_a_new_partition_counts_from_where_the_batch_starts_it():
    b = planned_batch([({"t": {"0": 3}}, {"t": {"0": 3, "1": 8}}, {"t": {"0": 3, "1": 8}})], 0, 0)
    assert b.caught_up and b.records == 0  # its start is not in the batch's offsets: not counted


def test_the_pacer_observes_a_batch_timed_from_outside_as_it_times_one_itself():
    """``observe`` (the connector's path) and ``plan`` (the Python source's) move the limit alike."""
    a = BatchPacer(target_ms=8_000, floor=1_000, cap=500_000, limit=10_000)
    b = BatchPacer(target_ms=8_000, floor=1_000, cap=500_000, limit=10_000)
    a.plan(0.0, 1_000_000)
    assert a.plan(2.0, 1_000_000) == b.observe(2_000, 10_000, 10_000) == 40_000
    assert b.observe(16_000, 40_000, 40_000) == 20_000
    assert b.observe(100, 5_000, 20_000) == 20_000, "a caught-up batch says nothing about speed"
