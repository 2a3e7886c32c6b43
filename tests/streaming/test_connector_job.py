"""``fencewatch run`` on each Kafka reader (``kafka_source``: fencewatch-kafka, Spark's own
connector), as a process on the test broker with real Spark: the same verdicts as the engine, the
adaptive limit on a backlog, the caught-up mark on live input, and a checkpoint that refuses the
other reader.

Spark's connector has neither an adaptive limit nor a caught-up mark of its own: the job adds both
from the driver (``sources.connector.ConnectorBatches``), and these tests check that they work."""
from __future__ import annotations

import json
import signal
import subprocess
import time

import pytest

from reliability_harness import (FENCEWATCH, RunProcess, parity, produce_clock, produce_events, read_outputs,
                                 run_args, verdict_keys, wait_for)
from test_reliability import assert_parity, assert_read_by, covering, expected_verdicts, make_topics, sim_events

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.slow]


def batch_sizes(cp) -> list[int]:
    """Offsets planned per micro-batch, from the checkpoint's offsets log (without the marks the
    Python source keeps beside them, ``fencewatch:caught_up``)."""
    ends = []
    for n in sorted(int(p.name) for p in (cp / "offsets").glob("[0-9]*")):
        line = (cp / "offsets" / str(n)).read_text().split("\n")[2]
        ends.append({(t, p): int(o) for t, ps in json.loads(line).items() if isinstance(ps, dict)
                     for p, o in ps.items()})
    sizes, before = [], {}
    for end in ends:
        sizes.append(sum(o - before.get(tp, 0) for tp, o in end.items()))
        before = end
    return sizes


def test_a_backlog_is_read_in_growing_batches_with_the_engines_verdicts(broker, topic_factory, tmp_path,
                                                                        kafka_source):
    """The adaptive limit: the first batch reads run's first limit (5,000 offsets on local[2] with a
    500 ms trigger), the next ones more, as the batches end well before ``catch_up_batch_ms``
    (300 s here: a batch of the loaded host's first minute still ends before it).
    Then a start with the other reader on the same checkpoint is refused."""
    topics = make_topics(topic_factory)
    events = sim_events(groups=3, n=24_000, seed=17)
    produce_events(broker, topics["hb"], topics["off"], events)
    produce_clock(broker, [topics["hb"], topics["off"]], events[-1]["ts"] + 5_000)
    cp = tmp_path / "cp"
    run = RunProcess(run_args(broker, topics, cp, source=kafka_source), tmp_path / "run.log",
                     env={"FENCEWATCH_STREAMING__CATCH_UP_BATCH_MS": "300s"})
    try:
        wait_for(lambda: covering(verdict_keys(broker, topics["verdicts"]), expected_verdicts(events)),
                 timeout=300, every=3, proc=run)
        run.signal(signal.SIGTERM)
        code = run.wait(30)
    finally:
        run.kill()
    verdicts, alerts = read_outputs(broker, topics)
    assert_parity(parity(broker, topics, verdicts, alerts))
    assert code == 0, run.log()[-3000:]
    assert_read_by(run, kafka_source)
    sizes = [s for s in batch_sizes(cp) if s]
    # (Spark's connector rounds each partition's share: a few offsets either way, 4 partitions here)
    assert abs(sizes[0] - 5_000) <= 4 and max(sizes) > 1.5 * 5_000, sizes

    other = "python" if kafka_source == "spark" else "spark"
    refused = subprocess.run(FENCEWATCH + ["run", *run_args(broker, topics, cp, source=other)],
                             capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert "the checkpoint was written reading Kafka with" in refused.stderr
    assert f"--kafka-source {kafka_source}" in refused.stderr


def test_live_input_is_decided_without_waiting_max_skew(broker, topic_factory, tmp_path, kafka_source):
    """The caught-up mark: a micro-batch that read every partition to the end offsets found when it
    was planned releases the groups' held events at once. Without it, a group's newest events wait
    ``--max-skew`` of wall time (60 s here) for the other topic; with it, they are decided within
    a few micro-batches of being produced."""
    topics = make_topics(topic_factory)
    cp = tmp_path / "cp"
    run = RunProcess([*run_args(broker, topics, cp, source=kafka_source), "--max-skew", "60s"], tmp_path / "run.log")
    try:
        # Warm up (the query's start, Python workers) on one trace, then time a second one.
        for seed, label in ((31, "warm-up"), (37, "timed")):
            events = sim_events(groups=2, n=1_500, seed=seed)
            shift = int(time.time() * 1000) - events[0]["ts"]
            for e in events:  # groups of their own, whose events are read live (within LIVE_LAG_MS of ts)
                e["event_id"], e["ts"] = f"{label}-{e['event_id']}", e["ts"] + shift
                if e.get("group_id"):
                    e["group_id"] = f"{label}-{e['group_id']}"
            expected = expected_verdicts(events)
            started = time.monotonic()
            produce_events(broker, topics["hb"], topics["off"], events)
            produce_clock(broker, [topics["hb"], topics["off"]], events[-1]["ts"])
            got = wait_for(lambda: covering(verdict_keys(broker, topics["verdicts"]), expected), timeout=180,
                           every=0.5, proc=run)
            elapsed = time.monotonic() - started
            assert got, run.log()[-3000:]
        run.signal(signal.SIGTERM)
        assert run.wait(30) == 0, run.log()[-3000:]
    finally:
        run.kill()
    assert_read_by(run, kafka_source)
    assert elapsed < 45, f"{elapsed:.1f} s: the held events waited for --max-skew (no caught-up mark?)"
