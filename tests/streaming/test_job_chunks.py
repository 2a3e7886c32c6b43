"""The batch writer's row iterator on a real local Spark session: chunking, and no Spark job
left registered after the iteration (the soak's heap leak)."""
from __future__ import annotations

import pytest

from fencewatch.streaming.job import _chunks

pytestmark = pytest.mark.spark


def _tracked_executions(spark) -> int:
    """SQL executions for which Spark 4's DAG scheduler still tracks jobs."""
    return spark.sparkContext._jsc.sc().dagScheduler().activeQueryToJobs().size()


def test_chunks_split_rows_and_keep_every_row(spark):
    df = spark.range(0, 2_500, numPartitions=3).selectExpr("id", "cast(id * 2 as string) as doubled")
    frames = list(_chunks(df, 1_000))
    assert [len(f) for f in frames] == [1_000, 1_000, 500]
    assert list(frames[0].columns) == ["id", "doubled"]
    got = sorted(int(i) for f in frames for i in f["id"])
    assert got == list(range(2_500))
    assert all(f["doubled"].tolist() == [str(2 * int(i)) for i in f["id"]] for f in frames)


def test_chunks_leave_no_job_tracked_after_the_iteration(spark):
    """``DataFrame.toLocalIterator`` registered its per-partition jobs under a SQL execution that
    had already ended, so Spark kept every job and its collected partition forever: the driver's
    heap grew with each micro-batch until the soak ran out of it."""
    df = spark.range(0, 3_000, numPartitions=4).selectExpr("id", "repeat('x', 200) as pad")
    before = _tracked_executions(spark)
    for _ in range(3):
        assert sum(len(f) for f in _chunks(df, 500)) == 3_000
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


def test_chunks_also_end_at_a_size_in_bytes(spark, monkeypatch):
    """The stream's verdicts rows are few and large (up to ~1 MB): a chunk ends at CHUNK_BYTES too
    (or the Arrow batch that passes it), so the driver holds a bounded part of a batch whatever
    its rows weigh."""
    df = spark.range(0, 64, numPartitions=4).selectExpr("id", "repeat('x', 100000) as pad")  # 6.4 MB
    assert [len(f) for f in _chunks(df, 1_000)] == [64]  # under 1,000 rows and 64 MB: one chunk
    monkeypatch.setattr("fencewatch.streaming.job.CHUNK_BYTES", 1 << 20)
    frames = list(_chunks(df, 1_000))  # each partition's Arrow batch (1.6 MB) ends a chunk
    assert [len(f) for f in frames] == [16, 16, 16, 16]
    assert sorted(int(i) for f in frames for i in f["id"]) == list(range(64))
