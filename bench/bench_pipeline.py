"""Benchmark: the whole streaming query in local[2] (streaming-job issue).

1. Sustained throughput: a backlog of simulator events on the embedded broker, read by
   ``start_query`` in micro-batches of ``--max-offsets-per-trigger``; events/s over the
   batches after the first ``--warmup-batches`` (query planning, Python workers, JIT),
   and the CPU time per event of each process kind (Spark's JVM, the Python workers, the
   driver's Python) over the same batches, so the number can be read on a shared machine.
2. Decision latency at a fixed load: the simulator paced in real time (event ts = wall
   clock); p50/p99 of (time written - event ts) for verdicts and alerts, 1 s trigger; once
   with the default skew tolerance (2 s) and once with none, whose difference is the time
   events wait for the other topic; and at a higher load (``--latency-groups-high``).
3. The engine-only rate on the same events (``replay --engine local`` work) and the ratio.
4. Where the time goes: Spark's per-batch duration breakdown, and the Python stages timed
   outside Spark (router, state function).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.report import write_section  # noqa: E402

logging.basicConfig(level=logging.WARNING)


def _cfg(bootstrap, checkpoint, **streaming):
    from fencewatch.streaming.config import settings as cfgmod

    return cfgmod.load_config(environ={}, overrides={"streaming": {
        "bootstrap_servers": bootstrap, "starting_offsets": "earliest", "checkpoint_location": checkpoint,
        **streaming}, "sinks": {"verdicts_topic": "fencewatch.verdicts"}})


def cpu_seconds() -> dict[str, float]:
    """CPU seconds (user + system, reaped children included) of this process tree by kind:
    ``jvm`` (Spark), ``python_workers`` (pyspark daemon, workers, source runner), ``driver``."""
    tick = os.sysconf("SC_CLK_TCK")
    procs: dict[int, tuple[int, float, str]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
            cmd = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        procs[int(name)] = (int(fields[1]), sum(int(x) for x in fields[11:15]) / tick, cmd[0].decode(errors="replace"))
    out = {"jvm": 0.0, "python_workers": 0.0, "driver": 0.0}
    tree, todo = set(), [os.getpid()]
    while todo:
        pid = todo.pop()
        tree.add(pid)
        todo += [p for p, (ppid, _, _) in procs.items() if ppid == pid and p not in tree]
    for pid in tree:
        _, secs, exe = procs.get(pid, (0, 0.0, ""))
        kind = "driver" if pid == os.getpid() else "jvm" if exe.endswith("java") else (
            "python_workers" if "python" in exe else None)
        if kind:
            out[kind] += secs
    return out


def records_read(progress: dict) -> int:
    """Kafka records a micro-batch read, from its sources' offsets. ``numInputRows`` counts the
    source's rows, and the job's own source emits routed rows (one per key), not records. A first
    batch has no start offsets: the benches read new topics from offset 0."""
    n = 0
    for src in progress.get("sources", []):
        def offsets(name):
            text = src.get(name)
            return (json.loads(text) if isinstance(text, str) else text) or {}
        start, end = offsets("startOffset"), offsets("endOffset")
        for topic, parts in end.items():
            if not isinstance(parts, dict):  # a source's mark beside the offsets (fencewatch:caught_up)
                continue
            for p, off in parts.items():
                n += max(0, int(off) - int((start.get(topic) or {}).get(p, 0)))
    return n


def _follow(query, until, poll_s: float = 0.02) -> list:
    """(batchId, records read, wall time, CPU by kind, trigger ms) at the end of each micro-batch."""
    marks, seen = [], None
    while True:
        if not query.isActive:
            raise RuntimeError(f"query stopped: {query.exception()}")
        p = query.lastProgress
        if p and p["batchId"] != seen:
            seen = p["batchId"]
            marks.append((seen, records_read(p), time.monotonic(), cpu_seconds(), p["durationMs"]))
            if until(marks):
                return marks
        time.sleep(poll_s)


def sustained(spark, broker, n_events: int, groups: int, max_per_trigger: int, warmup_batches: int) -> dict:
    from fencewatch.sim.run import run_simulation
    from fencewatch.sim.world import SimConfig
    from fencewatch.sim.profiles import profile
    from fencewatch.sinks.kafka import KafkaOutputs
    from fencewatch.streaming.runtime.writer import BatchWriter
    from fencewatch.streaming.runtime.stats import JobStats
    from fencewatch.streaming.runtime.query import start_query, stop_between_batches

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
    load_start = os.getloadavg()[0]
    query = start_query(spark, cfg, writer, trigger="100 milliseconds")
    # Until the backlog is read (the broker may hide the last producer batch per partition,
    # see NOTES.md: stop at the first empty batch after most of it).
    marks = _follow(query, lambda m: sum(x[1] for x in m) >= 0.9 * n_events and m[-1][1] == 0)
    stop_between_batches(query, timeout_s=10)
    kafka.close()
    data = [m for m in marks if m[1]]
    steady = data[warmup_batches:] if len(data) > warmup_batches + 1 else data[1:]
    first = data[data.index(steady[0]) - 1]
    last = steady[-1]
    rows = sum(m[1] for m in steady)
    wall = last[2] - first[2]
    cpu = {k: last[3][k] - first[3][k] for k in last[3]}
    phases: dict = {}
    for m in steady:
        for k, v in m[4].items():
            phases[k] = phases.get(k, 0) + v
    return {"events": sum(m[1] for m in data), "batches": len(data), "steady_batches": len(steady),
            "steady_events": rows, "events_per_s": rows / wall, "cpu_us_per_event": {k: v / rows * 1e6 for k, v in cpu.items()},
            "cpu_s": sum(cpu.values()), "wall_s": wall, "verdicts": writer.stats.verdicts, "phases_ms": phases,
            "load": (load_start, os.getloadavg()[0])}


WARMUP_S = 10
"""Seconds of a live load after which its decisions count for the sustained latency."""


def latency(spark, broker, seconds: int, groups: int, max_skew: str = "2s", kafka_source: str = "auto",
            warmup_s: float = WARMUP_S) -> dict:
    """Decision latency at a real-time load: ``fencewatch simulate --rate realtime`` (``groups`` of
    the ``mixed`` profile) in a process of its own on the same host, as an operator tries it, while
    the job runs with a 1 s trigger. (It ran as a thread of this process before: its producer then
    shared the driver's interpreter lock with the batch writer.)

    ``p50``/``p99``: every decision of the run; ``p50_steady``/``p99_steady``: those written once
    the load has run ``warmup_s`` (the sustained latency: the load's first seconds bring every
    group at once, their first commits, and Python workers that have not run the job yet)."""
    from fencewatch.streaming.runtime.writer import BatchWriter
    from fencewatch.streaming.runtime.stats import JobStats
    from fencewatch.streaming.runtime.query import start_query, stop_between_batches

    class SteadyStats(JobStats):
        """The job's stats, and a second sample of the decisions written from ``steady_from``."""

        def __init__(self, steady_from: float) -> None:
            super().__init__()
            self.steady_from, self.steady = steady_from, JobStats()

        def add_latencies(self, values_ms) -> None:  # the writer's numpy array: read twice, not copied
            super().add_latencies(values_ms)
            if time.monotonic() >= self.steady_from:
                self.steady.add_latencies(values_ms)

    hb, off = f"hbl-{time.time_ns()}", f"offl-{time.time_ns()}"
    broker.create_topics([hb, off], partitions=4, exist_ok=True)
    cfg = _cfg(broker.bootstrap, tempfile.mkdtemp() + "/cp", heartbeats_topic=hb, offsets_topic=off,
               trigger_interval="1s", max_skew_ms=max_skew, kafka_source=kafka_source)
    writer = BatchWriter(cfg, stats=JobStats())
    query = start_query(spark, cfg, writer)
    while writer.stats.batches < 1:  # let the query start before the load does
        time.sleep(0.5)
    writer.stats = SteadyStats(time.monotonic() + warmup_s)
    cmd = [sys.executable, "-c", "from fencewatch.streaming.cli import console_main; console_main()", "simulate",
           "--profile", "mixed", "--groups", str(groups), "--seed", "9", "--start-ts", "now",
           "--duration", str(seconds), "--rate", "realtime", "--no-labels",
           "--bootstrap-servers", broker.bootstrap, "--heartbeats-topic", hb, "--offsets-topic", off]
    cpu0, load0 = cpu_seconds(), os.getloadavg()[0]
    t0, reaped0 = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
    sim = subprocess.run(cmd, capture_output=True, text=True)
    sim_s, reaped1 = time.monotonic() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    if sim.returncode != 0:
        raise RuntimeError(f"the simulator failed ({sim.returncode}): {sim.stderr[-2000:]}")
    time.sleep(5)
    stop_between_batches(query, timeout_s=10)
    cpu1 = cpu_seconds()
    cpu = {k: cpu1[k] - cpu0[k] for k in cpu1}
    # the simulator, reaped, counts in the driver's children: given on its own
    cpu["simulator"] = (reaped1.ru_utime + reaped1.ru_stime) - (reaped0.ru_utime + reaped0.ru_stime)
    cpu["driver"] -= cpu["simulator"]
    s = writer.stats
    produced = re.search(r"events=(\d+)", sim.stderr)  # the simulator's summary line
    if produced is None:
        raise RuntimeError(f"no summary line from the simulator: {sim.stderr[-500:]}")
    return {"rate": int(produced.group(1)) / sim_s, "events": s.events,
            "p50": s.percentile(s.latencies_ms, 0.5), "p99": s.percentile(s.latencies_ms, 0.99),
            "p50_steady": s.percentile(s.steady.latencies_ms, 0.5),
            "p99_steady": s.percentile(s.steady.latencies_ms, 0.99), "warmup_s": warmup_s,
            "batch_p50": s.percentile(s.batch_seconds, 0.5), "samples": len(s.latencies_ms), "batches": s.batches,
            "cpu_s": cpu, "wall_s": sim_s + 5, "max_skew": max_skew,
            "kafka_source": kafka_source,
            "load": (load0, os.getloadavg()[0])}


def python_stages(n_events: int, groups: int) -> dict:
    """The Python work per event outside Spark: router and state function, and the local engine."""
    import pandas as pd

    from fencewatch.sim.world import SimConfig, simulate
    from fencewatch.sim.profiles import profile
    from fencewatch.state.config import RulesConfig
    from fencewatch.streaming.runtime.replay import judge, decode_lines
    from fencewatch.streaming.runtime.routing import make_router
    from fencewatch.streaming.runtime.state_fn import make_stream_fn

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

    from bench.state_fn_batches import _State  # Spark's GroupState over a dict

    fn = make_stream_fn(RulesConfig(), emit_verdicts=True, wall_clock=time.time)  # no Spark: no batch time
    store: dict = {}
    t = time.process_time()
    for key, frame in routed.groupby("key"):
        list(fn((key,), iter([frame]), _State(store, key, 0)))
    state_s = time.process_time() - t
    n = len(lines)
    return {"engine_events_per_s": n / engine_s, "router_us": router_s / n * 1e6, "state_us": state_s / n * 1e6,
            "engine_us": engine_s / n * 1e6}


def _lat_line(lat: dict) -> str:
    fmt = lambda v: "n/a" if v is None else f"{v / 1000:.2f} s"  # noqa: E731
    cpu = lat["cpu_s"]
    return (f"  {lat['rate']:,.0f} events/s, skew tolerance {lat['max_skew']}: p50 {fmt(lat['p50'])}, "
            f"p99 {fmt(lat['p99'])} ({lat['samples']:,} decisions), micro-batch p50 "
            f"{lat['batch_p50'] or float('nan'):.2f} s; CPU {sum(cpu.values()) / lat['wall_s']:.2f} cores (JVM "
            f"{cpu['jvm'] / lat['wall_s']:.2f}, Python workers {cpu['python_workers'] / lat['wall_s']:.2f}), "
            f"load {lat['load'][0]:.1f} -> {lat['load'][1]:.1f}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--groups", type=int, default=50)
    ap.add_argument("--max-offsets-per-trigger", type=int, default=10_000)
    ap.add_argument("--warmup-batches", type=int, default=2)
    ap.add_argument("--shuffle-partitions", type=int, default=2, help="one state task per core on local[2]")
    ap.add_argument("--latency-seconds", type=int, default=40)
    ap.add_argument("--latency-groups", type=int, default=40)
    ap.add_argument("--latency-groups-high", type=int, default=200)
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args(argv)
    from fencewatch.streaming.brokers import embedded_broker
    from fencewatch.streaming.runtime.session import spark_session

    py = python_stages(min(args.events, 30_000), args.groups)
    print(f"python stages: {py}", file=sys.stderr)
    with embedded_broker(os.environ.get("FENCEWATCH_BENCH_BROKER", "kafka")) as broker:
        spark = spark_session("local[2]", shuffle_partitions=args.shuffle_partitions)
        sus = sustained(spark, broker, args.events, args.groups, args.max_offsets_per_trigger, args.warmup_batches)
        print(f"sustained: {sus}", file=sys.stderr)
        lats = [latency(spark, broker, args.latency_seconds, args.latency_groups),
                latency(spark, broker, args.latency_seconds, args.latency_groups, max_skew="0s"),
                latency(spark, broker, args.latency_seconds, args.latency_groups_high)]
        for lat in lats:
            print(f"latency: {lat}", file=sys.stderr)
        spark.stop()
    phases = ", ".join(f"{k} {v / 1000:.1f}s" for k, v in sorted(sus["phases_ms"].items(), key=lambda kv: -kv[1]))
    us = sus["cpu_us_per_event"]
    text = "\n".join([
        f"sustained, local[2], {args.shuffle_partitions} shuffle partitions, backlog of {sus['events']:,} events "
        f"({sus['verdicts']:,} verdicts, {sus['batches']} micro-batches of <= {args.max_offsets_per_trigger:,}):",
        f"  {sus['events_per_s']:,.0f} events/s over the {sus['steady_batches']} batches after the first "
        f"{args.warmup_batches} ({sus['steady_events']:,} events, {sus['wall_s']:.1f} s)   target: >= 100,000 events/s",
        f"  CPU per event: {sum(us.values()):,.0f} us = JVM {us['jvm']:,.0f} + Python workers "
        f"{us['python_workers']:,.0f} + driver {us['driver']:,.0f} (sinks); "
        f"{sus['cpu_s'] / sus['wall_s']:.2f} cores busy; load {sus['load'][0]:.1f} -> {sus['load'][1]:.1f}",
        f"  Spark time by phase: {phases}",
        "decision latency, 1 s trigger, real-time load (mixed profile):",
        *(_lat_line(lat) for lat in lats),
        "  target: p99 < 3 s at 20,000 events/s",
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
