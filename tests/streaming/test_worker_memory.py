"""What a reused Python worker keeps from one task to the next (issue 15; no Spark).

The job's Python workers grew ~+570 MB/h in the soak. Sampled after each task inside the workers
(``bench/worker_memprobe.py``): Arrow's pool was empty between tasks; CPython's live blocks grew
steadily, and of fencewatch's memo tables only the verdict layout memo (``sinks.jsonl._LAYOUTS``)
grew with time, ~24 entries/s per worker. It is keyed by ``id(parts)`` and keeps ``parts`` alive;
the state function decodes a group's state anew in every call, so an entry could never hit
again. The state function now empties it after rendering.
"""
from __future__ import annotations

import json
from dataclasses import replace

from fencewatch.sim.world import SimConfig, simulate
from fencewatch.sim.profiles import profile
from fencewatch.sinks import jsonl
from fencewatch.state.config import RulesConfig
from fencewatch.streaming.ingest.events import MEMBERSHIP_TYPES
from fencewatch.streaming.runtime.inputs import group_sources
from fencewatch.streaming.runtime.outputs import read_frame
from fencewatch.streaming.runtime.routing import make_router
from fencewatch.streaming.runtime.state_fn import make_stream_fn
from reliability_harness import SparkGroupStateStub, micro_batch


def test_the_state_function_keeps_no_verdict_layouts_between_calls():
    events = simulate(SimConfig(knobs=replace(profile("mixed"), groups=5), seed=3, duration_ms=None,
                                max_events=4_000, event_id_prefix="e-", labels=False))
    router = make_router()
    wall = [1_000_000.0]
    fn = make_stream_fn(RulesConfig(), max_skew_ms=1_000, wall_clock=lambda: wall[0],
                        sources=group_sources("events"))
    states: dict[str, SparkGroupStateStub] = {}
    jsonl._LAYOUTS.clear()
    verdicts, left = 0, []
    for start in range(0, len(events), 500):  # micro-batches of 500 events, 1 s of wall time each
        rows = []
        for off, e in enumerate(events[start:start + 500], start):
            src = "heartbeats" if e["type"] in MEMBERSHIP_TYPES else "offsets"
            rows.append((json.dumps(e).encode(), off, f"{src}/0/{off}", "", src, e["ts"]))
        for _, frame in micro_batch(router, fn, states, rows):
            verdicts += sum(r.ord for r in read_frame(frame) if r.record == "verdicts")
        left.append(len(jsonl._LAYOUTS))
        wall[0] += 1.0
    assert verdicts > 500  # verdict lines were rendered (through the layout memo)
    assert max(left) == 0  # before the fix: one entry per rendered request, growing with the calls
