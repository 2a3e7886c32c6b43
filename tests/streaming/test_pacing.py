"""The adaptive per-batch record limit (``sources.pacing.BatchPacer``), against simulated jobs."""
from __future__ import annotations

from fencewatch.streaming.sources.pacing import MAX_GROWTH, BatchPacer


def run(pacer: BatchPacer, backlog: int, fixed_s: float, per_record_s: float, batches: int) -> list[tuple]:
    """(limit, records, seconds) of each batch of a job that costs ``fixed_s`` + ``per_record_s``
    per record, reading a backlog of ``backlog`` records."""
    now, out = 1_000.0, []
    for _ in range(batches):
        limit = pacer.plan(now, backlog)  # Spark plans a batch when the one before has ended
        records = min(limit, backlog)
        took = fixed_s + per_record_s * records
        now += took
        backlog -= records
        out.append((limit, records, took))
    pacer.plan(now, backlog)  # the next planning times the last batch
    return out


def test_a_backlog_settles_near_the_target_batch_time_from_a_small_start():
    pacer = BatchPacer(target_ms=4_000, floor=1_000, cap=1_000_000, limit=10_000)
    batches = run(pacer, backlog=10_000_000, fixed_s=0.4, per_record_s=50e-6, batches=12)
    limits = [b[0] for b in batches]
    assert limits[1] == 4 * limits[0]  # 0.9 s of a 4 s target: grows four times, at most
    assert all(b <= MAX_GROWTH * a for a, b in zip(limits, limits[1:]))
    # ~72,000 records in ~4 s from the third batch on (doubling, the fifth: a restart's backlog
    # read in small batches for half a minute longer)
    assert all(3.6 <= took <= 4.4 for _, _, took in batches[2:])


def test_a_slower_job_reads_less_per_batch():
    pacer = BatchPacer(target_ms=4_000, floor=1_000, cap=1_000_000, limit=200_000)
    batches = run(pacer, backlog=10_000_000, fixed_s=0.4, per_record_s=200e-6, batches=10)
    assert batches[0][2] > 40  # the first batch, too large for this job, took 40 s
    assert batches[1][0] == 50_000  # so the next reads a quarter at most
    assert all(3.6 <= took <= 4.4 for _, _, took in batches[-3:])


def test_caught_up_batches_do_not_move_the_limit():
    pacer = BatchPacer(target_ms=4_000, floor=1_000, cap=1_000_000, limit=20_000)
    for now in range(10):  # a batch a second, fast, but only 300 records: says nothing of a full one
        assert pacer.plan(float(now), backlog=300) == 20_000
    assert pacer.limit == 20_000


def test_the_limit_stays_within_floor_and_cap():
    pacer = BatchPacer(target_ms=1_000, floor=5_000, cap=50_000, limit=1)
    assert pacer.limit == 5_000
    run(pacer, backlog=10**9, fixed_s=0.0, per_record_s=1e-7, batches=20)  # very fast: grows to the cap
    assert pacer.limit == 50_000
    run(pacer, backlog=10**9, fixed_s=30.0, per_record_s=1e-3, batches=20)  # very slow: down to the floor
    assert pacer.limit == 5_000


def test_the_first_batch_after_a_start_keeps_the_initial_limit():
    pacer = BatchPacer(target_ms=1_000, floor=1_000, cap=100_000, limit=4_000)
    assert pacer.plan(100.0, 10**6) == 4_000  # nothing timed yet
    assert pacer.plan(100.1, 10**6) == 16_000  # the batch before took 0.1 s: four times as much, at most
