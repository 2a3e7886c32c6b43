"""``input_plan.InputPlan``: the query's inputs worked out once per start, and the topics' ranks
declared once. The plan's pure part from a config alone; its build and the query's start on a
real local Spark and broker (the reader resolved by the real ``sources.connector.choose``, only
counted)."""
from __future__ import annotations

import json
import time

import pytest

from fencewatch.streaming.config import settings as cfgmod
from fencewatch.streaming.runtime.input_plan import (OTHER, InputPlan, TopicRank, rank_column, source_column,
                                                     topic_ranks)
from fencewatch.streaming.sources.connector import SourceChoice

PYTHON = SourceChoice("python", "streaming.kafka_source is python")
CONNECTOR = SourceChoice("spark", "streaming.kafka_source is spark")


def _cfg(**streaming) -> cfgmod.Config:
    return cfgmod.load_config(environ={}, overrides={"streaming": streaming})


def test_the_plan_from_a_config_alone():
    """What each reader gets, from the config and the two facts the session gives (reader, cores)."""
    cfg = _cfg(source="events,request-log", heartbeats_topic="hb.t", offsets_topic="off.t")
    ours = InputPlan.from_facts(cfg, PYTHON, cores=3, topic_ids={"id": "orders"})
    assert ours.sources == ("events", "request-log") and ours.through_router == ("request-log",)
    assert ours.tasks == {"tasksPerTrigger": "3"} and ours.cores == 3 and ours.topic_ids == {"id": "orders"}
    assert set(ours.batch_limits) == {"maxOffsetsPerTrigger", "targetBatchDurationMs", "initialOffsetsPerTrigger"}
    assert ours.ranks == (TopicRank("hb.t", "heartbeats", 0), TopicRank("off.t", "offsets", 1))
    assert ours.read_by == PYTHON.describe() and not ours.connector
    theirs = InputPlan.from_facts(cfg, CONNECTOR, cores=3)
    assert theirs.through_router == ("events", "request-log") and theirs.tasks == {} and theirs.connector
    assert InputPlan.from_facts(cfg, CONNECTOR, cores=0).cores == 1  # at least one input task
    assert theirs.batch_limits == {"maxOffsetsPerTrigger": ours.batch_limits["initialOffsetsPerTrigger"]}
    fixed = InputPlan.from_facts(_cfg(max_offsets_per_trigger=700), PYTHON, cores=2, topic_ids={"id": "orders"})
    assert fixed.batch_limits == {"maxOffsetsPerTrigger": "700"}
    assert fixed.topic_ids is None  # the events source names topics by name


def _spark_ranks(spark, ranks, topics):
    """topic -> (source, rank, rank when only the ranked topics are read), as Spark computes them."""
    from pyspark.sql import functions as F

    topic = F.col("topic")
    rows = spark.createDataFrame([(t,) for t in topics], "topic string").select(
        "topic", source_column(ranks, topic).alias("source"), rank_column(ranks, topic).alias("rank"),
        rank_column(ranks, topic, only_these=True).alias("closed")).collect()
    return {r["topic"]: (r["source"], r["rank"], r["closed"]) for r in rows}


def _routed_in_read(spec, topic: str, offset: int, line: bytes) -> tuple[str, int]:
    """(source, seq) of one record routed by the routed source's router, as ``read`` hands it a
    topic-partition's batch (``sources.kafka.consumer.BatchBuilder``)."""
    from fencewatch.streaming.runtime.routed_source import _Router
    from fencewatch.streaming.runtime.routing import read_key_frame
    from fencewatch.streaming.sources.kafka.consumer import BatchBuilder

    builder = BatchBuilder(topic, 0, None, False, caught_up=True)
    builder.values, builder.offsets, builder.stamps = [line], [offset], [(1, 5_000)]
    (row,) = _Router(spec)(builder).to_pylist()
    (held,), _, _ = read_key_frame(row["payload"])
    return row["source"], held.seq


def _routed_from_connector(ranks, rank: int, offset: int, line: bytes) -> tuple[str, int]:
    """(source, seq) of one record of Spark's connector routed by the ``mapInArrow`` router from its
    rank column (``routing.make_router``'s ``kafka_topics``)."""
    import pyarrow as pa

    from fencewatch.streaming.runtime.routing import make_router, read_key_frame

    slim = pa.RecordBatch.from_pydict({"value": [line], "offset": [offset], "partition": [0], "rank": [rank],
                                       "record_ts": [5_000], "caught_up": [True]})
    (out,) = list(make_router(kafka_topics=ranks)([slim]))
    (row,) = out.to_pylist()
    (held,), _, _ = read_key_frame(row["payload"])
    return row["source"], held.seq


@pytest.mark.spark
def test_the_spark_rank_column_and_the_routers_ranks_come_from_one_declaration(spark):
    """The JVM's rank and source columns, the routed source's router and the ``mapInArrow``
    router fed the connector's rank all read ``topic_ranks``: each record gets the same source and
    ``seq = offset * 4 + rank`` on every path; a topic it does not name is :data:`OTHER`'s."""
    from fencewatch.streaming.runtime.routed_source import RouterSpec

    cfg = _cfg(heartbeats_topic="beats.x", offsets_topic="commits.x")
    plan = InputPlan.from_facts(cfg, PYTHON, cores=2)
    assert plan.ranks == topic_ranks(cfg.streaming)
    spec = RouterSpec.from_option(RouterSpec(plan.ranks).to_option())  # as it reaches the executors
    line = json.dumps({"type": "heartbeat", "ts": 5_000, "group_id": "g", "member_id": "m",
                       "request_epoch": 1, "response_epoch": 1}).encode()
    in_spark = _spark_ranks(spark, plan.ranks, ["beats.x", "commits.x", "elsewhere"])
    for topic, source, rank in plan.ranks:
        assert in_spark[topic] == (source, rank, rank)
        assert _routed_in_read(spec, topic, 7, line) == (source, 7 * 4 + rank)
        assert _routed_from_connector(plan.ranks, in_spark[topic][2], 7, line) == (source, 7 * 4 + rank)
    source, rank, _ = in_spark["elsewhere"]
    assert (source, rank) == OTHER
    assert _routed_in_read(spec, "elsewhere", 7, line) == (OTHER[0], 7 * 4 + OTHER[1])


@pytest.mark.spark
@pytest.mark.broker
def test_each_query_start_resolves_the_reader_once(spark, broker, topic_factory, tmp_path, monkeypatch):
    """``start_query`` works its inputs out once: one call of the real ``sources.connector.choose``
    per start for the inputs, the output batching and the connector's pacer together; a plan
    built after it resolves again (no cache across starts: it sees the reader the first start
    recorded); and a start handed the plan its caller built for the start-up line resolves
    nothing more."""
    from fencewatch.streaming.runtime.query import start_query, startup_line, stop_between_batches
    from fencewatch.streaming.runtime.stats import JobStats
    from fencewatch.streaming.runtime.writer import BatchWriter
    from fencewatch.streaming.sources import connector

    calls = []
    real = connector.choose

    def counted(*args, **kwargs):
        calls.append(kwargs.get("recorded"))
        return real(*args, **kwargs)

    monkeypatch.setattr(connector, "choose", counted)
    hb, off = topic_factory(prefix="hb"), topic_factory(prefix="off")
    cfg = _cfg(bootstrap_servers=broker, heartbeats_topic=hb, offsets_topic=off, starting_offsets="earliest",
               checkpoint_location=str(tmp_path / "cp"))

    def run(plan=None) -> None:
        writer = BatchWriter(cfg, stats=JobStats())
        query = start_query(spark, cfg, writer, trigger="200 milliseconds", plan=plan)
        deadline = time.monotonic() + 60
        while query.lastProgress is None and query.isActive and time.monotonic() < deadline:
            time.sleep(0.1)
        assert query.exception() is None and query.lastProgress is not None
        stop_between_batches(query, writer=writer)

    run()
    assert calls == [None]  # a new checkpoint: nothing recorded
    plan = InputPlan.build(spark, cfg)
    assert calls == [None, "python"] and "the checkpoint was written with it" in plan.read_by
    assert plan.read_by in startup_line(cfg, spark, plan)
    run(plan)
    assert calls == [None, "python"]
