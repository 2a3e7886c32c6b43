"""The decision-latency sample behind the job's p50/p99 (progress line, closing table, benchmarks)."""
from fencewatch.streaming.runtime.stats import JobStats


def test_the_sample_covers_the_whole_run_not_its_start():
    """A run whose decisions grow slower: the sample must see the slow end. Keeping the first
    values (as before) reported the start's latency for the whole run."""
    s = JobStats()
    s.MAX_LATENCY_SAMPLES = 1_000
    for batch in range(100):  # 100 batches of 500 decisions, batch b at 100 * b ms
        s.add_latencies([100.0 * batch] * 500)
    assert len(s.latencies_ms) == 1_000 and s.latency_seen == 50_000
    # uniform over 100 batches: the median near batch 50's, p99 near batch 99's
    assert 4_000 <= s.percentile(s.latencies_ms, 0.5) <= 6_000
    assert s.percentile(s.latencies_ms, 0.99) >= 9_500
    late = sum(1 for v in s.latencies_ms if v >= 5_000)
    assert 400 <= late <= 600


def test_a_short_run_keeps_every_value():
    s = JobStats()
    s.add_latencies([3.0, 1.0, 2.0])
    s.add_latencies([])
    s.add_latencies([5.0])
    assert s.latencies_ms == [3.0, 1.0, 2.0, 5.0] and s.latency_seen == 4


def test_decisions_on_events_from_before_the_first_batch_are_start_up():
    """The first batch's decisions, and later ones on events produced before it ended, waited for
    the query to start: their own line; the steady p50/p99 are the rest's (issue 46: a p99 of
    17.6 s that was the start-up's)."""
    from fencewatch.streaming.runtime.stats import latency_rows

    s = JobStats(started_wall_ms=0)
    s.add_decisions([9_000.0, 8_000.0], [1_000, 2_000], batch_end_ms=11_000)  # the first batch
    s.add_decisions([3_000.0, 500.0, 400.0], [10_000, 12_600, 12_700], batch_end_ms=13_000)
    s.add_decisions([], [], batch_end_ms=14_000)
    assert sorted(s.startup_ms) == [3_000.0, 8_000.0, 9_000.0] and s.startup_seen == 3
    assert sorted(s.steady_ms) == [400.0, 500.0] and s.steady_seen == 2
    assert s.latency_seen == 5  # the whole run's sample still has every decision
    rows = dict(latency_rows(s))
    assert rows["decision latency p99, steady"] == "0.50 s"
    assert rows["decision latency, start-up"].startswith("p50 8.00 s, p99 9.00 s (3 decisions")


def test_decisions_on_events_from_before_the_job_are_backlog_not_latency():
    """A job started on a backlog (here a 2023 trace) decides on events older than itself: their
    age is no latency of the job's, so neither figure takes them; they are counted, with the
    oldest one's age. (A 2023 trace read "start-up p99 60,617,749 s" before.)"""
    from fencewatch.streaming.runtime.stats import latency_rows, progress_line

    started = 1_700_000_000_000 + 86_400_000 * 600
    s = JobStats(started_wall_ms=started)
    old = [1_700_000_000_000, 1_700_000_000_000 + 1_000]  # 2023-11-14, 600 days before the start
    s.add_decisions([started - old[0] + 900.0, started - old[1] + 900.0, 700.0], old + [started + 200],
                    batch_end_ms=started + 900)
    s.add_decisions([300.0], [started + 1_700], batch_end_ms=started + 2_000)
    assert s.backlog_seen == 2 and s.backlog_oldest_ms == old[0]
    assert s.startup_ms == [700.0] and s.steady_ms == [300.0]
    rows = dict(latency_rows(s))
    assert rows["decision latency, start-up"].startswith("p50 0.70 s, p99 0.70 s (1 decisions")
    assert rows["decisions on a backlog"].startswith("2 (events produced before the job started, the oldest 600.0 days")
    assert "(backlog 2)" in progress_line(s)
