"""Benchmark: the whole streaming query in local[2] (streaming-job issue).

1. Sustained throughput: a backlog of simulator events on the embedded broker, read by
   ``start_query`` until consumed; events/s over the run (Spark start-up excluded).
2. Decision latency at a fixed load: the simulator paced in real time (event ts = wall
   clock) at about ``--rate`` events/s; p50/p99 of (time written - event ts) for verdicts
   and alerts, 1 s trigger.
3. The engine-only rate on the same events (``replay --engine local`` work) and the ratio.
4. Where the time goes: Spark's per-batch duration breakdown, and the Python stages timed
   outside Spark (router, state function).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import threading
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.report import write_section  # noqa: E402

logging.basicConfig(level=logging.WARNING)


def _cfg(bootstrap, checkpoint, **streaming):
    from fencewatch.streaming import config as cfgmod

    return cfgmod.load_config(environ={}, overrides={"streaming": {
        "bootstrap_servers": bootstrap, "starting_offsets": "earliest", "checkpoint_location": checkpoint,
        **streaming}, "sinks": {"verdicts_topic": "fencewatch.verdicts"}})


def sustained(spark, broker, n_events: int, groups: int, max_per_trigger: int) -> dict:
    from fencewatch.sim.command import run_simulation
    from fencewatch.sim.engine import SimConfig
    from fencewatch.sim.profiles import profile
    from fencewatch.sinks.kafka import KafkaOutputs
    from fencewatch.streaming.job import BatchWriter, JobStats, drain, start_query

    hb, off = f"hb-{time.time_ns()}", f"off-{time.time_ns()}"
    broker.create_topics([hb, off, "fencewatch.verdicts", "fencewatch.alerts", "fencewatch.dlq"], partitions=4,
                         exist_ok=True)
    sim = SimConfig(knobs=replace(profile("mixed"), groups=groups), seed=5, duration_ms=None, max_events=n_events,
                    labels=False)
    run_simulation(sim, bootstrap_servers=broker.bootstrap, heartbeats_topic=hb, offsets_topic=off)
    cfg = _cfg(broker.bootstrap, tempfile.mkdtemp() + "/cp", heartbeats_topic=hb, offsets_topic=off,
               max_offsets_per_trigger=max_per_trigger)
    kafka = KafkaOutputs({"bootstrap.servers": broker.bootstrap}, verdicts_topic="fencewatch.verdicts",
                         alerts_topic="fencewatch.alerts", dlq_topic="fencewatch.dlq")
    writer = BatchWriter(cfg, kafka=kafka, stats=JobStats())
    query = start_query(spark, cfg, writer, trigger="100 milliseconds")
    drain(query, cfg, timeout_s=3600)
    kafka.close()
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    rows = sum(p["numInputRows"] for p in progress)
    # exclude the first batch (query planning, Python worker start-up)
    steady = progress[1:] or progress
    steady_rows = sum(p["numInputRows"] for p in steady)
    steady_ms = sum(p["durationMs"]["triggerExecution"] for p in steady)
    phases: dict = {}
    for p in steady:
        for k, v in p["durationMs"].items():
            phases[k] = phases.get(k, 0) + v
    return {"events": rows, "batches": len(progress), "events_per_s": steady_rows / (steady_ms / 1000),
            "verdicts": writer.stats.verdicts, "phases_ms": phases, "steady_ms": steady_ms}


def latency(spark, broker, seconds: int, groups: int) -> dict:
    from fencewatch.sim.command import run_simulation
    from fencewatch.sim.engine import SimConfig
    from fencewatch.sim.profiles import profile
    from fencewatch.streaming.job import BatchWriter, JobStats, start_query, stop_between_batches

    hb, off = f"hbl-{time.time_ns()}", f"offl-{time.time_ns()}"
    broker.create_topics([hb, off], partitions=4, exist_ok=True)
    cfg = _cfg(broker.bootstrap, tempfile.mkdtemp() + "/cp", heartbeats_topic=hb, offsets_topic=off,
               trigger_interval="1s")
    writer = BatchWriter(cfg, stats=JobStats())
    query = start_query(spark, cfg, writer)
    while writer.stats.batches < 1:  # let the query start before the load does
        time.sleep(0.5)
    writer.stats = JobStats()
    sim = SimConfig(knobs=replace(profile("mixed"), groups=groups), seed=9, start_ts=int(time.time() * 1000),
                    duration_ms=seconds * 1000, labels=False)
    result = {}
    t = threading.Thread(target=lambda: result.update(run_simulation(
        sim, bootstrap_servers=broker.bootstrap, heartbeats_topic=hb, offsets_topic=off, pace=("realtime", 1.0))))
    t.start()
    t.join()
    time.sleep(5)
    stop_between_batches(query)
    s = writer.stats
    return {"rate": result.get("events", 0) / max(result.get("seconds", 1), 1e-9), "events": s.events,
            "p50": s.percentile(s.latencies_ms, 0.5), "p99": s.percentile(s.latencies_ms, 0.99),
            "batch_p50": s.percentile(s.batch_seconds, 0.5), "samples": len(s.latencies_ms)}


def python_stages(n_events: int, groups: int) -> dict:
    """The Python work per event outside Spark: router and state function, and the local engine."""
    import pandas as pd

    from fencewatch.sim.engine import SimConfig, simulate
    from fencewatch.sim.profiles import profile
    from fencewatch.state.config import RulesConfig
    from fencewatch.streaming.replay import judge, decode_lines
    from fencewatch.streaming.state_fn import make_router, make_stream_fn

    events = simulate(SimConfig(knobs=replace(profile("mixed"), groups=groups), seed=5, duration_ms=None,
                                max_events=n_events, labels=False))
    lines = [json.dumps(e).encode() for e in events]
    t = time.process_time()
    typed = decode_lines(lines, [], {})
    judge(typed, RulesConfig())
    engine_s = time.process_time() - t
    pdf = pd.DataFrame({"value": lines, "seq": range(len(lines)), "event_id": [str(i) for i in range(len(lines))],
                        "coords": [""] * len(lines), "source": ["offsets"] * len(lines), "record_ts": [0] * len(lines)})
    t = time.process_time()
    routed = pd.concat(list(make_router()([pdf])))
    router_s = time.process_time() - t

    class _State:
        exists, hasTimedOut, value = False, False, None

        @property
        def get(self):
            return self.value

        def update(self, v):
            self.value, self.exists = v, True

        def setTimeoutDuration(self, ms):
            pass

    fn = make_stream_fn(RulesConfig(), emit_verdicts=True)
    t = time.process_time()
    for key, frame in routed.groupby("key"):
        list(fn((key,), iter([frame]), _State()))
    state_s = time.process_time() - t
    n = len(lines)
    return {"engine_events_per_s": n / engine_s, "router_us": router_s / n * 1e6, "state_us": state_s / n * 1e6,
            "engine_us": engine_s / n * 1e6}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--events", type=int, default=60_000)
    ap.add_argument("--groups", type=int, default=50)
    ap.add_argument("--max-offsets-per-trigger", type=int, default=20_000)
    ap.add_argument("--latency-seconds", type=int, default=60)
    ap.add_argument("--latency-groups", type=int, default=40)
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args(argv)
    from fencewatch.streaming.broker import EmbeddedBroker
    from fencewatch.streaming.spark import spark_session

    py = python_stages(min(args.events, 30_000), args.groups)
    print(f"python stages: {py}", file=sys.stderr)
    with EmbeddedBroker() as broker:
        spark = spark_session("local[2]", shuffle_partitions=4)
        sus = sustained(spark, broker, args.events, args.groups, args.max_offsets_per_trigger)
        print(f"sustained: {sus}", file=sys.stderr)
        lat = latency(spark, broker, args.latency_seconds, args.latency_groups)
        print(f"latency: {lat}", file=sys.stderr)
        spark.stop()
    phases = ", ".join(f"{k} {v / 1000:.1f}s" for k, v in sorted(sus["phases_ms"].items(), key=lambda kv: -kv[1]))
    text = "\n".join([
        f"sustained, local[2], backlog of {sus['events']:,} events ({sus['verdicts']:,} verdicts, "
        f"{sus['batches']} micro-batches of <= {args.max_offsets_per_trigger:,}):",
        f"  {sus['events_per_s']:,.0f} events/s (first batch excluded)   target: >= 100,000 events/s",
        f"  Spark time by phase: {phases}",
        f"latency at a real-time load of {lat['rate']:,.0f} events/s, 1 s trigger ({lat['samples']:,} decisions):",
        f"  p50 {lat['p50'] / 1000 if lat['p50'] is not None else float('nan'):.2f} s, "
        f"p99 {lat['p99'] / 1000 if lat['p99'] is not None else float('nan'):.2f} s, "
        f"micro-batch p50 {lat['batch_p50'] or float('nan'):.2f} s   target: p99 < 3 s at 20,000 events/s",
        f"engine only (decode + judge, one core): {py['engine_events_per_s']:,.0f} events/s; "
        f"Spark pipeline / engine = {sus['events_per_s'] / py['engine_events_per_s']:.2f}",
        f"Python work per event outside Spark (CPU): router {py['router_us']:.0f} us, state function "
        f"{py['state_us']:.0f} us, local engine {py['engine_us']:.0f} us",
    ])
    print(text)
    if args.write_docs:
        write_section("streaming query (local[2])", "make bench  (python bench/bench_pipeline.py --write-docs)",
                      "```\n" + text + "\n```")
    return 0


if __name__ == "__main__":
    sys.exit(main())
