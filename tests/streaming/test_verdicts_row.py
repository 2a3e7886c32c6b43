"""The stream's verdicts row (one per state function call) and how the driver reads it (no Spark).

The state function ships all verdict lines of a key's micro-batch in one row, with each line's
commit ts packed in ``raw`` for the decision-latency samples: per-row costs (pandas, Arrow, the
JVM, the collect) then follow keys, not commit requests (docs/benchmarks.md, issue 14).
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

from fencewatch.sim.world import SimConfig, simulate
from fencewatch.sim.profiles import profile
from fencewatch.streaming.config import settings as cfgmod
from fencewatch.streaming.runtime.writer import BatchWriter, _BatchTotals
from fencewatch.streaming.runtime.stats import JobStats
from fencewatch.streaming.runtime.replay import judge_events
from fencewatch.sinks.jsonl import alert_json, commit_verdicts_block
from fencewatch.streaming.runtime.outputs import read_frame, unpack_lines
from reliability_harness import stream_events

NOW_MS = 4_000_000_000_000


def _frames(events, batch: int = 700):
    return stream_events(events, batch=batch, now_ms=NOW_MS)


def test_one_verdicts_row_per_call_carries_every_line_and_its_commit_ts(monkeypatch):
    events = simulate(SimConfig(knobs=replace(profile("mixed"), groups=4), seed=7, duration_ms=None,
                                max_events=3_000, event_id_prefix="e-", labels=False))
    frames = _frames(events)
    rows = [r for f in frames for r in read_frame(f) if r.record in ("verdicts", "verdict")]
    assert rows and {r.record for r in rows} == {"verdicts"}
    per_call = Counter((id(f), r.group_id) for f in frames for r in read_frame(f) if r.record == "verdicts")
    assert set(per_call.values()) == {1}  # one row per call
    lines = [line for r in rows for line in unpack_lines(r.raw).decode().split("\n")[:-1]]
    for r in rows:
        assert r.json is None and unpack_lines(r.raw).endswith(b"\n")  # the producer's bytes, each line ending in "\n"
        text_lines = unpack_lines(r.raw).decode().split("\n")[:-1]
        stamps = np.frombuffer(r.stamps, dtype="<i8").tolist()
        assert r.ord == len(text_lines) == len(stamps)
        assert stamps == [json.loads(line)["ts"] for line in text_lines]
        assert r.ts == max(stamps)
    # The lines are the local engine's, each once, in its order within a group.
    expected = [line for cv in judge_events(events).commit_verdicts if cv.parts
                for line in commit_verdicts_block(cv).split("\n")]
    assert Counter(lines) == Counter(expected) and len(lines) > 1_000
    by_group = lambda ls: [x for x in ls if json.loads(x)["group_id"] == "group-00001"]  # noqa: E731
    assert by_group(lines) == by_group(expected)

    # The driver: every line produced, one latency sample per line from its commit's ts.
    monkeypatch.setattr("fencewatch.streaming.runtime.writer.time.time", lambda: NOW_MS / 1000)
    writer = BatchWriter(cfgmod.load_config(environ={}), stats=JobStats())
    acc = _BatchTotals()
    for f in frames:
        writer._chunk(f, acc)
    want = sorted((NOW_MS - json.loads(line)["ts"]) / 1000.0 for line in lines)
    alerts = [a["ts"] for a in acc.alerts]
    assert sorted(acc.latencies_s().tolist()) == sorted(want + [(NOW_MS - t) / 1000.0 for t in alerts])
    assert acc.last_ts == max(int(r.ts) for f in frames for r in read_frame(f)
                              if r.record in ("verdicts", "alert", "status") and r.ts is not None)
    assert acc.last_ts >= max(json.loads(line)["ts"] for line in lines)


def test_a_large_call_splits_its_verdicts_into_rows_of_bounded_lines(monkeypatch):
    """A key with many commits in one micro-batch (a backlog, a large maxOffsetsPerTrigger) ships
    several rows, each at most VERDICT_ROW_LINES lines (~1 MB): the same lines, in order."""
    monkeypatch.setattr("fencewatch.streaming.runtime.state_fn.VERDICT_ROW_LINES", 50)
    events = simulate(SimConfig(knobs=replace(profile("steady"), groups=1), seed=5, duration_ms=None,
                                max_events=2_000, event_id_prefix="e-", labels=False))
    frames = _frames(events, batch=2_000)
    rows = [r for f in frames for r in read_frame(f) if r.record == "verdicts"]
    commits = [cv for cv in judge_events(events).commit_verdicts if cv.parts]
    widest = max(len(cv.parts) for cv in commits)
    # A row closes once it reaches the bound, with whole commits.
    assert len(rows) > 5 and max(r.ord for r in rows) < 50 + widest
    lines = [line for r in rows for line in unpack_lines(r.raw).decode().split("\n")[:-1]]
    expected = [line for cv in commits for line in commit_verdicts_block(cv).split("\n")]
    assert lines == expected


def test_every_input_event_is_counted_once_partition_scoped_ones_with_no_group():
    """``fencewatch_events_total`` counts what was read: group events from their group's status
    row, partition-scoped ones (``partition_epochs``, routed to topic keys only) from the topic
    key's ``counts`` row with group="" (the operator trial of 2026-11-25 found them uncounted), and
    unknown types the same way from the dead-letter key."""
    events = simulate(SimConfig(knobs=replace(profile("mixed"), groups=3), seed=3, duration_ms=None,
                                max_events=1_500, event_id_prefix="e-", labels=False))
    t = events[len(events) // 2]["ts"]
    epochs = [{"type": "partition_epochs", "ts": t + i, "event_id": f"pe-{i}", "topic": "topic-0", "partition": i,
               "log_start_offset": 0, "log_end_offset": 100, "epochs": [{"epoch": 0, "start_offset": 0}]}
              for i in range(3)]
    # SPEC 1: unknown types are counted and skipped (the stream's driver dropped them uncounted)
    unknown = [{"type": "share_group_heartbeat", "ts": t + 10 + i, "group_id": "g-share"} for i in range(2)]
    events = sorted(events + epochs + unknown, key=lambda e: e["ts"])
    writer = BatchWriter(cfgmod.load_config(environ={}), stats=JobStats())
    acc = _BatchTotals()
    for f in _frames(events):
        writer._chunk(f, acc)
    assert acc.steps.events_read() == len(events)
    assert {k: n for k, n in acc.steps.events.items() if k[1] == ""} == {("default", "", "partition_epochs", "offsets"): 3,
                                                                          ("default", "", "unknown", "offsets"): 2}
    assert acc.dead == 0  # an unknown type is not a dead letter


@pytest.mark.parametrize("buckets", [1, 3])
def test_topics_sharing_a_bucket_keep_their_own_truncation_watch(monkeypatch, buckets):
    """Topic keys share TOPIC_BUCKETS keys per cluster in the stream; squeezed into one or three
    buckets, the topics of a trace with unclean leader elections raise exactly the local engine's
    truncation alerts (each topic's watch is its own, in (ts, seq) order)."""
    from fencewatch.streaming.runtime import routing

    monkeypatch.setattr(routing, "TOPIC_BUCKETS", buckets)
    routing.topic_bucket.cache_clear()
    events = simulate(SimConfig(knobs=replace(profile("unclean-election"), groups=4, topics=6), seed=11,
                                duration_ms=None, max_events=4_000, event_id_prefix="e-", labels=False))
    try:
        frames = _frames(events)
    finally:
        routing.topic_bucket.cache_clear()
    keys = {r.cluster for f in frames for r in read_frame(f) if r.record == "counts"}
    assert keys == {"default"}  # partition-scoped events were counted from the buckets
    got = sorted(r.json for f in frames for r in read_frame(f) if r.record == "alert")
    want = sorted(alert_json(a) for a in judge_events(events).alert_records)
    truncations = [a for a in got if "LOG_TRUNCATION" in a or "OFFSET_OUT_OF_RANGE" in a]
    assert truncations and got == want
