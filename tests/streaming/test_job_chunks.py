"""The batch writer's row iterator on a real local Spark session: chunking, and no Spark job
left registered after the iteration (the soak's heap leak)."""
from __future__ import annotations

import time

import pytest

from fencewatch.streaming.runtime.writer import _chunks

pytestmark = pytest.mark.spark


def _tracked_executions(spark) -> int:
    """SQL executions for which Spark 4's DAG scheduler still tracks jobs."""
    return spark.sparkContext._jsc.sc().dagScheduler().activeQueryToJobs().size()


def test_chunks_split_rows_and_keep_every_row(spark):
    df = spark.range(0, 2_500, numPartitions=1).selectExpr("id", "cast(id * 2 as string) as doubled")
    frames = list(_chunks(df, 1_000))
    assert [len(f) for f in frames] == [1_000, 1_000, 500]  # one partition's batch, cut at 1,000 rows
    assert list(frames[0].columns) == ["id", "doubled"]
    got = sorted(int(i) for f in frames for i in f["id"])
    assert got == list(range(2_500))
    assert all(f["doubled"].tolist() == [str(2 * int(i)) for i in f["id"]] for f in frames)


def test_chunks_are_partitions_as_they_end_not_merged(spark):
    frames = list(_chunks(spark.range(0, 2_500, numPartitions=3), 1_000))
    assert sorted(len(f) for f in frames) == [833, 833, 834]
    assert sorted(int(i) for f in frames for i in f["id"]) == list(range(2_500))


def test_chunks_leave_no_job_tracked_after_the_iteration(spark):
    """``DataFrame.toLocalIterator`` registered its per-partition jobs under a SQL execution that
    had already ended, so Spark kept every job and its collected partition forever: the driver's
    heap grew with each micro-batch until the soak ran out of it."""
    df = spark.range(0, 3_000, numPartitions=4).selectExpr("id", "repeat('x', 200) as pad")
    before = _tracked_executions(spark)
    for _ in range(3):
        assert sum(len(f) for f in _chunks(df, 500)) == 3_000
    # Spark forgets an ended execution's jobs asynchronously, a moment after the collect returns
    # (a clean-clone run once read 1 right away): a leak never gets back to ``before``.
    deadline = time.monotonic() + 10
    while _tracked_executions(spark) != before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _tracked_executions(spark) == before


def test_chunks_keep_each_partitions_order_and_nulls_as_none(spark):
    """The sinks rely on a key's records arriving in the order the state function emitted them
    (a key lives in one partition), and on null numbers staying None (not NaN)."""
    df = spark.range(0, 4_000, numPartitions=4).selectExpr(
        "id", "spark_partition_id() as part", "if(id % 3 = 0, null, id) as maybe")
    frames = list(_chunks(df, 700))
    assert max(len(f) for f in frames) <= 700
    ids = [int(i) for f in frames for i in f["id"]]
    parts = [int(p) for f in frames for p in f["part"]]
    assert sorted(ids) == list(range(4_000))
    for p in set(parts):
        mine = [i for i, q in zip(ids, parts) if q == p]
        assert mine == sorted(mine)
    maybe = [m for f in frames for m in f["maybe"]]
    assert sum(m is None for m in maybe) == len(range(0, 4_000, 3))
    assert all(m is None or type(m) is int for m in maybe)


def test_a_partition_is_handed_on_while_a_slower_one_still_runs(spark, tmp_path):
    """The driver writes the outputs of tasks that ended while others compute: partition 2 waits
    (up to 60 s) for a flag the test sets when it receives its first chunk, and says whether it
    saw it. Merged up to a row count, the first chunk came only after that wait. (The JVM's
    socket buffer keeps the last bytes of a partition's batch until the next partition's are
    written: two fast partitions, so the first is whole while the slow one runs.)"""
    import pandas as pd

    flag = tmp_path / "first-chunk"

    def wait_or_pass(batches):
        import os
        import time

        for pdf in batches:
            saw = True
            if len(pdf) and int(pdf["id"].iloc[0]) >= 20:  # partition 2: ids 20..29
                deadline = time.monotonic() + 60
                while not os.path.exists(flag) and time.monotonic() < deadline:
                    time.sleep(0.05)
                saw = os.path.exists(flag)
            # ~1 MB a partition, as a batch's verdicts are: small batches would all sit in that buffer
            yield pd.DataFrame({"id": pdf["id"], "saw_flag": [saw] * len(pdf), "pad": ["x" * 100_000] * len(pdf)})

    df = spark.range(0, 30, numPartitions=3).mapInPandas(wait_or_pass, "id long, saw_flag boolean, pad string")
    frames = []
    for f in _chunks(df, 1_000):
        frames.append(f)
        flag.touch()
    assert len(frames) == 3
    assert sorted(int(f["id"].iloc[0]) for f in frames[:2]) == [0, 10]  # the fast partitions first
    assert frames[2]["id"].tolist() == list(range(20, 30))
    assert frames[2]["saw_flag"].all()


def test_the_events_query_gets_small_output_batches_and_the_session_keeps_its_own(spark, tmp_path):
    """With one state partition per core the driver could read a finished partition's outputs only
    once the last partition's arrived (one Arrow batch each, the socket buffer holding its tail):
    the events query starts with 40-row Arrow batches, which its own copy of the session keeps,
    while the session itself gets its value back; a query with a ``mapInPandas`` (here
    consumer-offsets) and a ``spark_conf`` value are left alone."""
    from fencewatch.streaming.config import settings as cfgmod
    from fencewatch.streaming.runtime.input_plan import InputPlan, resolve_reader
    from fencewatch.streaming.runtime.query import COLLECT_BATCH_ROWS, _collect_batching

    def plan(cfg):  # the start's plan, without the cluster's topic ids (no broker here)
        return InputPlan.from_facts(cfg, resolve_reader(spark, cfg), spark.sparkContext.defaultParallelism)

    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    before = spark.conf.get(key)
    seen: list = []

    def start(cfg):
        with _collect_batching(spark, cfg, plan(cfg)):
            inside = spark.conf.get(key)
            q = (spark.readStream.format("rate").option("rowsPerSecond", 5).load().writeStream
                 .foreachBatch(lambda df, _: seen.append(df.sparkSession.conf.get(key)))
                 .option("checkpointLocation", str(tmp_path / f"cp{len(seen)}-{time.monotonic_ns()}"))
                 .trigger(processingTime="0.5 second").start())
        try:
            deadline = time.monotonic() + 30
            while not seen and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            q.stop()
        return inside

    events = cfgmod.load_config(environ={})
    assert start(events) == str(COLLECT_BATCH_ROWS)
    assert seen and set(seen) == {str(COLLECT_BATCH_ROWS)}
    assert spark.conf.get(key) == before
    seen.clear()
    offsets = cfgmod.load_config(environ={}, overrides={"streaming": {"source": "consumer-offsets"}})
    assert start(offsets) == before and set(seen) == {before}
    chosen = cfgmod.load_config(environ={}, overrides={"streaming": {"spark_conf": {key: "500"}}})
    with _collect_batching(spark, chosen, plan(chosen)):
        assert spark.conf.get(key) == before


def test_router_sources_name_the_sources_the_mapinpandas_router_decodes(spark):
    """One decision for both the query's assembly and its output batching: the events source
    routes inside ``read`` unless a Schema Registry decoder is configured; every other source goes
    through the router."""
    from fencewatch.streaming.config import settings as cfgmod
    from fencewatch.streaming.runtime.input_plan import InputPlan, resolve_reader

    def chosen(**streaming):
        cfg = cfgmod.load_config(environ={}, overrides={"streaming": streaming})
        return InputPlan.from_facts(cfg, resolve_reader(spark, cfg), 2).through_router

    assert chosen() == ()
    assert chosen(source="consumer-offsets") == ("consumer-offsets",)
    assert chosen(source="events,request-log") == ("request-log",)
    assert chosen(source="request-log,consumer-offsets") == ("request-log", "consumer-offsets")
    assert chosen(schema_registry={"url": "http://127.0.0.1:1"}) == ("events",)
