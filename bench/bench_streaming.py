"""Benchmark: the streaming job on each Kafka reader beside ``replay --engine local`` and Spark's
own skeleton, one run.

For each simulator profile (``mixed``, and the commit-heavy ``steady``) the same events are
produced to the test broker and judged these ways, back to back, so the host's noise
(a shared 2-core machine) cancels in the ratios:

- ``replay --engine local`` on those events (decode + judge + write, one core, in this process);
- the job (``start_query``: Kafka source -> router -> ``applyInPandasWithState`` -> the
  ``foreachBatch`` writer with ``fencewatch run``'s sinks) reading them as a backlog with ``run``'s
  default pacing, once with each Kafka reader (``--sources``: ``python``, fencewatch-kafka, and
  ``spark``, Spark's own connector), on ``local[2]`` and on ``local[1]``, then on a standalone
  cluster (master + 1, then 2 one-core workers on loopback: the scaling curve);
- the skeleton of the same query shape with no work in it (a streaming source -> pass-through
  ``mapInPandas`` -> ``groupBy(key).applyInPandasWithState`` counting rows, RocksDB, Arrow ->
  ``foreachBatch`` collect), same session, same keys: what Spark itself costs here;
- on ``local[2]`` (``--engine-floor``), the engine floors: the same backlog, in the same
  micro-batches, through the query with nothing in it but the engine's own work per event
  (decode + rules, the group's state stored as the job stores it), with the records grouped by their Kafka key, and
  with them routed inside the source as the job does: what the job costs over its rules.

Then the decision latency with a 1 s trigger at real-time loads (``fencewatch simulate --rate
realtime`` in a process of its own on this machine, as an operator tries it), on ``local[2]``, for
each reader: at about 2,000 events/s, and up the ``--latency-groups`` loads until p99 passes 3 s
(the live capacity). The bars judge the sustained p99: the decisions after the load's first 10 s
(``bench_pipeline.WARMUP_S``); the whole run's is printed beside it.
With ``--spark-floor PATH`` (the skeleton as a script of its own, e.g. ../shared/tools/spark_floor.py)
it runs too, in its own JVM, right after each local master's jobs. Each Spark master runs in its
own process (one JVM per master). The bars the issue set are checked at the end (``bars``).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_pipeline import _follow, latency  # noqa: E402
from bench.report import write_section  # noqa: E402

logging.basicConfig(level=logging.WARNING)
PROFILES = ("mixed", "steady")


def simulate_lines(profile_name: str, n_events: int, groups: int) -> list[bytes]:
    from fencewatch.sim.world import SimConfig, simulate
    from fencewatch.sim.profiles import profile

    sim = SimConfig(knobs=replace(profile(profile_name), groups=groups), seed=5, duration_ms=None,
                    max_events=n_events, labels=False)
    return [json.dumps(e).encode() for e in simulate(sim)]


def produce(bootstrap: str, lines: list[bytes], hb: str, off: str) -> None:
    """As ``fencewatch simulate --bootstrap-servers`` does: membership to heartbeats, the rest to
    offsets, keyed by group; then one single-record produce per partition so that Tansu's high
    watermark covers every record (NOTES.md)."""
    from confluent_kafka import Producer

    from fencewatch.streaming.ingest.events import MEMBERSHIP_TYPES

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10_000})
    for line in lines:
        e = json.loads(line)
        p.produce(hb if e.get("type") in MEMBERSHIP_TYPES else off, key=(e.get("group_id") or "").encode(),
                  value=line)
        p.poll(0)
    p.flush(60)
    tail = Producer({"bootstrap.servers": bootstrap, "batch.num.messages": 1, "linger.ms": 0})
    for topic in (hb, off):
        for part in range(4):
            tail.produce(topic, value=b'{"type": "bench_tail", "ts": 0}', partition=part)
            tail.flush(10)


def replay_rate(lines: list[bytes]) -> dict:
    """``replay --engine local``'s work on the same events, one core: events per wall and per CPU second."""
    from fencewatch.state.config import RulesConfig
    from fencewatch.streaming.runtime.replay import decode_lines, judge, write_verdicts

    best = None
    for _ in range(3):
        c0, w0 = time.process_time(), time.perf_counter()
        events = decode_lines(lines, [], {})
        commits, _, _ = judge(events, RulesConfig())
        with open(os.devnull, "wb") as out:
            write_verdicts(commits, out)
        cpu, wall = time.process_time() - c0, time.perf_counter() - w0
        if best is None or wall < best["wall_s"]:
            best = {"events_per_s": len(lines) / wall, "events_per_cpu_s": len(lines) / cpu, "wall_s": wall}
    return best


# --------------------------------------------------------------------------- in a worker process

WARMUP_BATCHES = 3
"""Micro-batches left out of the rates: the query's start, and the adaptive limit's growth from its
first batch (up to x4 per batch, ``sources.pacing.MAX_GROWTH``) to batches near ``catch_up_batch_ms``."""


def job_backlog(spark, bootstrap: str, hb: str, off: str, n_events: int, max_per_trigger: int | None,
                warmup_batches: int = WARMUP_BATCHES, verdicts: bool = True, kafka_source: str = "python") -> dict:
    """The job reading a backlog as ``fencewatch run`` does, with its defaults (unless
    ``max_per_trigger``) and its sinks (``make_sinks``: the Kafka outputs with their log in the
    checkpoint, the metrics exporter on a free port, the query's facts read each batch):
    events/s over the micro-batches after the first ``warmup_batches``."""
    from fencewatch.streaming.config import settings as cfgmod
    from fencewatch.streaming.runtime.writer import BatchWriter
    from fencewatch.streaming.runtime.query import make_sinks, query_facts, start_query, stop_between_batches

    streaming = {"bootstrap_servers": bootstrap, "starting_offsets": "earliest", "heartbeats_topic": hb,
                 "offsets_topic": off, "checkpoint_location": tempfile.mkdtemp() + "/cp", "kafka_source": kafka_source}
    if max_per_trigger:
        streaming["max_offsets_per_trigger"] = max_per_trigger
    cfg = cfgmod.load_config(environ={}, overrides={"streaming": streaming, "sinks": {
        "verdicts_topic": "fencewatch.verdicts" if verdicts else ""}})
    kafka, metrics = make_sinks(cfg, spark, metrics_port=0)
    metrics.start()
    writer = BatchWriter(cfg, kafka=kafka, metrics=metrics)
    writer.progress = lambda: query_facts(writer.query)
    query = start_query(spark, cfg, writer, trigger="1 second")
    try:
        marks = _follow(query, lambda m: sum(x[1] for x in m) >= n_events)
        stop_between_batches(query, timeout_s=30)
    finally:
        kafka.close()
        metrics.close()
    rates = _steady_rates(marks, warmup_batches)
    return {**rates, "verdicts": writer.stats.verdicts}


def _steady_rates(marks: list, warmup_batches: int) -> dict:
    """Events/s (per wall and per busy second), batch sizes and CPU per event over the micro-batches
    after the first ``warmup_batches`` (``_follow``'s marks)."""
    data = [m for m in marks if m[1]]
    if len(data) < 2:
        raise RuntimeError(f"{len(data)} micro-batch(es) with input: a rate needs 2 at least (more events, "
                           "or a lower --max-offsets-per-trigger)")
    steady = data[warmup_batches:] if len(data) > warmup_batches + 1 else data[1:]
    first, last = data[data.index(steady[0]) - 1], steady[-1]
    rows, wall = sum(m[1] for m in steady), last[2] - first[2]
    busy = sum(m[4].get("triggerExecution", 0) for m in steady) / 1000
    cpu = {k: last[3][k] - first[3][k] for k in last[3]}
    return {"events": sum(m[1] for m in data), "batches": len(data), "steady_batches": len(steady),
            "events_per_s": rows / wall, "events_per_busy_s": rows / busy if busy else None,
            "batch_rows_p50": sorted(m[1] for m in steady)[len(steady) // 2],
            "batch_s_p50": sorted(m[4].get("triggerExecution", 0) for m in steady)[len(steady) // 2] / 1000,
            "cpu_us_per_event": {k: v / rows * 1e6 for k, v in cpu.items()}}


def skeleton(spark, rate: int, seconds: int, keys: int) -> dict:
    """Spark's machinery for the job's shape, no work: rows per busy second at an offered rate."""
    import pandas as pd
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    src = spark.readStream.format("rate").option("rowsPerSecond", rate).load()
    df = src.select((F.col("value") % keys).cast("string").alias("key"), F.col("value"), F.col("timestamp"))
    df = df.mapInPandas(lambda batches: (b for b in batches), df.schema)

    def count(key, pdfs, state):
        n = sum(len(p) for p in pdfs)
        total = (state.get[0] if state.exists else 0) + n
        state.update((total,))
        yield pd.DataFrame({"key": [key[0]], "n": [total]})

    out = df.groupBy("key").applyInPandasWithState(count, "key string, n long", "n long", "append",
                                                   GroupStateTimeout.NoTimeout)
    q = (out.writeStream.foreachBatch(lambda bdf, bid: bdf.collect())
         .option("checkpointLocation", tempfile.mkdtemp()).trigger(processingTime="1 second").start())
    time.sleep(seconds)
    stop_q = q.recentProgress
    q.stop()
    progress = [p for p in stop_q if p["numInputRows"]][2:]  # after start-up
    if not progress:
        return {"error": "too few micro-batches"}
    durations = sorted(p["durationMs"]["triggerExecution"] / 1000 for p in progress)
    rows = sum(p["numInputRows"] for p in progress)
    return {"offered": rate, "batches": len(progress), "batch_s_p50": durations[len(durations) // 2],
            "rows_per_busy_s": rows / sum(durations)}


def engine_floor(spark, bootstrap: str, hb: str, off: str, n_events: int, max_per_trigger: int | None,
                 warmup_batches: int = WARMUP_BATCHES, routed: bool = False) -> dict:
    """The job's shape with nothing in it but the engine's own work per event, reading the same
    backlog in the same micro-batches: the Kafka source's records grouped by their Kafka key (the
    group id, as the simulator keys them: no routing stage), and per key ``applyInPandasWithState``
    decoding each record and applying the rules (``run_key``) to the group's stored state, one
    count row per key to a collect. No hold, topic keys, rendering, status rows or Kafka outputs:
    what any design with the rules in Python under ``applyInPandasWithState`` must at least pay.

    ``routed``: the job's own first half instead (its source decoding and routing inside ``read``,
    one routed row per key per task), then only the rules per key (no hold, rendering, status
    or outputs): the job minus everything after the rules."""
    import pandas as pd
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    from fencewatch.state import group as grp
    from fencewatch.state.config import RulesConfig
    from fencewatch.state.engine import group_key, run_key, sort_key
    from fencewatch.streaming.config import settings as cfgmod
    from fencewatch.streaming.ingest.events import DecodeError, UnknownType, decode_json_line
    from fencewatch.streaming.runtime.input_plan import InputPlan
    from fencewatch.streaming.runtime.state_codec import decode_state, encode_state
    from fencewatch.streaming.sources import read_kafka_stream

    # The job's micro-batches on fencewatch-kafka: its defaults (adaptive) unless ``max_per_trigger``.
    job_cfg = cfgmod.load_config(environ={}, overrides={"streaming": {
        "kafka_source": "python", "checkpoint_location": tempfile.mkdtemp() + "/cp", "bootstrap_servers": bootstrap,
        "starting_offsets": "earliest", "heartbeats_topic": hb, "offsets_topic": off,
        "group_buckets": 0,  # a key per group: the floor's state function reads one group a key
        **({"max_offsets_per_trigger": max_per_trigger} if max_per_trigger else {})}})
    cfg = RulesConfig()

    def judge_records(key, pdfs, state):
        gkey = group_key("", key[0])  # a group key (the kind of state; the cluster is the events')
        st = decode_state(gkey, state.get[0]) if state.exists and state.get[0] is not None else None
        events = []
        for pdf in pdfs:
            for value, seq in zip(pdf["value"].tolist(), pdf["seq"].tolist()):
                ev = decode_json_line(value, seq=seq, default_event_id="", coords="")
                if not isinstance(ev, (DecodeError, UnknownType)):
                    events.append(ev)
        out = grp.Outputs()
        if events and key[0]:
            events.sort(key=sort_key)
            st = run_key(group_key(events[0].cluster, key[0]), st, events, cfg, out)
        state.update((encode_state(gkey, st),) if st is not None else (None,))
        yield pd.DataFrame({"key": [key[0]], "n": [len(out.commits)]})

    if routed:
        from fencewatch.streaming.runtime.inputs import build_inputs
        from fencewatch.streaming.runtime.routing import parse_key
        from fencewatch.streaming.runtime.columns import DLQ_KEY
        from fencewatch.streaming.runtime.state_fn import _run, read_whole

        def judge_routed(key, pdfs, state):
            if key[0] == DLQ_KEY:  # dead letters and unknown types (the bench's tail records)
                yield pd.DataFrame({"key": [key[0]], "n": [0]})
                return
            pkey = parse_key(key[0])
            st = decode_state(pkey, state.get[0]) if state.exists and state.get[0] is not None else None
            items = read_whole(pkey, pdfs, [])  # as replay reads a key's rows (the job adds the hold)
            out = grp.Outputs()
            if items:
                st = _run(pkey, st, items, cfg, out, None)
            state.update((encode_state(pkey, st),) if st is not None else (None,))
            yield pd.DataFrame({"key": [key[0]], "n": [len(out.commits)]})

        df, judge = build_inputs(spark, job_cfg).select("key", "source", "payload"), judge_routed
    else:
        plan = InputPlan.build(spark, job_cfg)
        src = read_kafka_stream(spark, bootstrap=bootstrap, topics=[hb, off],
                                options={"startingOffsets": "earliest", **plan.batch_limits, **plan.tasks},
                                implementation="python")
        rank = F.when(F.col("topic") == hb, 0).otherwise(1)
        df = src.select(F.col("key").cast("string").alias("key"), "value", (F.col("offset") * 4 + rank).alias("seq"))
        judge = judge_records
    out = df.groupBy("key").applyInPandasWithState(judge, "key string, n long", "blob binary", "append",
                                                   GroupStateTimeout.NoTimeout)
    return _collected_rates(out, n_events, warmup_batches)


def _collected_rates(out, n_events: int, warmup_batches: int) -> dict:
    """Run ``out`` into a collect until ``n_events`` are read: :func:`_steady_rates`."""
    query = (out.writeStream.foreachBatch(lambda bdf, bid: bdf.collect())
             .option("checkpointLocation", tempfile.mkdtemp()).trigger(processingTime="1 second").start())
    marks = _follow(query, lambda m: sum(x[1] for x in m) >= n_events)
    query.stop()
    return _steady_rates(marks, warmup_batches)


def worker(spec: dict) -> dict:
    from fencewatch.streaming.runtime.session import checkpoint_conf, spark_session

    # as ``fencewatch run`` sets it for its (local) checkpoint; the A/B flags last
    extra = {**checkpoint_conf(tempfile.gettempdir()), **(spec.get("conf") or {})}
    if not spec["master"].startswith("local"):  # the standalone cluster on loopback: one-core executors
        # spark.cores.max: the cluster's cores, as a deployment states them (run's default shuffle
        # partitions follow it: spark.state_partitions)
        extra = {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
                 "spark.executor.cores": "1", "spark.executor.memory": "1g",
                 "spark.cores.max": str(spec.get("workers", 1)), **extra}
    from fencewatch.streaming.config.settings import StreamingConfig

    partitions = spec["shuffle_partitions"] or StreamingConfig().shuffle_partitions  # run's default
    spark = spark_session(spec["master"], shuffle_partitions=partitions, extra=extra,
                          jemalloc=spec.get("jemalloc", "auto"))
    out = {"master": spec.get("label") or spec["master"], "jobs": {}}
    for name, (hb, off, n) in spec["topics"].items():
        out["jobs"][name] = {src: job_backlog(spark, spec["bootstrap"], hb, off, n, spec.get("max_per_trigger"),
                                              verdicts=not spec.get("no_verdicts"), kafka_source=src)
                             for src in spec["sources"]}
    if spec.get("engine_floor"):
        out["engine_floor"] = {f"{name}{' routed' if routed else ''}": engine_floor(
            spark, spec["bootstrap"], hb, off, n, spec.get("max_per_trigger"), routed=routed)
            for name, (hb, off, n) in spec["topics"].items() for routed in (False, True)}
    if spec["skeleton_seconds"]:
        out["skeleton"] = skeleton(spark, spec["skeleton_rate"], spec["skeleton_seconds"], spec["groups"])
    if spec.get("spark_floor") and spec["master"].startswith("local"):
        out["spark_floor"] = spark_floor(spec["spark_floor"], spec["skeleton_rate"], spec["groups"], spec["master"])
    out["load"] = os.getloadavg()[0]
    if spec.get("latency"):
        class _Broker:  # the parent's broker, as ``latency`` expects it
            bootstrap = spec["bootstrap"]

            @staticmethod
            def create_topics(names, partitions, exist_ok):
                from confluent_kafka.admin import AdminClient, NewTopic

                admin = AdminClient({"bootstrap.servers": spec["bootstrap"]})
                for f in admin.create_topics([NewTopic(t, partitions, 1) for t in names]).values():
                    f.result()

        out["latency"] = {src: live_capacity(spark, _Broker, spec["latency_seconds"], spec["latency"], src)
                          for src in spec["sources"]}
    spark.stop()
    return out


P99_BAR_MS = 3_000
"""Decision latency p99 a live load must stay under (issue 34's bar), once sustained: over the
decisions after the load's first ``bench_pipeline.WARMUP_S`` seconds (docs/decisions.md, "Live
latency is judged once the load is sustained"); the whole run's p99 is reported beside it."""


def live_capacity(spark, broker, seconds: int, loads: list[int], kafka_source: str) -> list[dict]:
    """The latency at each real-time load (groups of the ``mixed`` profile, 7-8 events/s each),
    lowest first; it stops after the first load whose p99 passes :data:`P99_BAR_MS` (the ones
    above would too, and a query behind its input only falls further behind)."""
    out = []
    for groups in sorted(loads):
        lat = latency(spark, broker, seconds, groups, kafka_source=kafka_source)
        out.append({**lat, "groups": groups})
        if lat["p99_steady"] is None or lat["p99_steady"] >= P99_BAR_MS:
            break
    return out


def spark_floor(path: str, rate: int, keys: int, master: str, seconds: int = 40) -> dict:
    """The skeleton as its own script (``SPARK_FLOOR``), in a JVM of its own: its summary line."""
    res = subprocess.run([sys.executable, path, str(rate), str(seconds), str(keys), master], capture_output=True,
                         text=True, timeout=seconds + 300)
    line = (res.stdout.strip().splitlines() or ["no output: " + res.stderr.strip()[-200:]])[-1]
    return {"line": line, "ok": res.returncode == 0}


class StandaloneCluster:
    """A standalone master and ``workers`` one-core workers on loopback (as tests/streaming/
    test_standalone_cluster.py starts them), for the scaling runs."""

    def __init__(self, workers: int, memory: str = "2g"):
        self.workers, self.memory, self.procs = workers, memory, []

    def __enter__(self) -> "StandaloneCluster":
        import socket
        import urllib.request

        import pyspark

        def free_port() -> int:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                return sock.getsockname()[1]

        home = Path(pyspark.__file__).parent
        spark_class = str(home / "bin" / "spark-class")
        self.env = {**os.environ, "SPARK_HOME": str(home), "PYSPARK_PYTHON": sys.executable,
                    "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_WORKER_DIR": tempfile.mkdtemp(prefix="bench-work-")}
        port, ui = free_port(), free_port()
        self.url = f"spark://127.0.0.1:{port}"
        self.procs.append(subprocess.Popen([spark_class, "org.apache.spark.deploy.master.Master", "--host",
                                            "127.0.0.1", "--port", str(port), "--webui-port", str(ui)],
                                           env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                           start_new_session=True))
        for _ in range(self.workers):
            self.procs.append(subprocess.Popen([spark_class, "org.apache.spark.deploy.worker.Worker", self.url,
                                                "--host", "127.0.0.1", "--cores", "1", "--memory", self.memory,
                                                "--webui-port", "0"], env=self.env, stdout=subprocess.DEVNULL,
                                               stderr=subprocess.DEVNULL, start_new_session=True))
        deadline, alive = time.monotonic() + 180, 0
        while time.monotonic() < deadline and alive < self.workers:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as r:
                    alive = sum(1 for w in json.load(r).get("workers", []) if w.get("state") == "ALIVE")
            except OSError:
                pass
            time.sleep(1)
        if alive < self.workers:
            self.__exit__(None, None, None)
            raise RuntimeError(f"{alive} of {self.workers} standalone workers registered")
        return self

    def __exit__(self, *exc) -> None:
        import signal

        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for p in self.procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)


def run_worker(spec: dict, env: dict | None = None) -> dict:
    """One master's runs in its own process; a failed run is reported as such (the others stand)."""
    res = subprocess.run([sys.executable, __file__, "--worker", json.dumps(spec)], capture_output=True, text=True,
                         env=env)
    if res.returncode != 0:
        lines = [x for x in res.stderr.splitlines() if "Error" in x or "Exception" in x or "Timed out" in x]
        print(f"worker {spec['master']} failed:\n{res.stderr[-4000:]}", file=sys.stderr)
        return {"master": spec.get("label") or spec["master"], "jobs": {},
                "error": (lines[-1] if lines else res.stderr.strip()[-300:])[:300]}
    return json.loads(res.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- report

def _cores(run: dict) -> int:
    """Cores of a run's label: local[N] or 'standalone Nx1 core'."""
    label = run["master"]
    if label.startswith("local["):
        return int(label[6:-1]) if label[6:-1].isdigit() else 0
    return int(label.split()[1].split("x")[0]) if label.startswith("standalone") else 0


SOURCE_NAMES = {"python": "fencewatch-kafka", "spark": "connector"}


def _job_line(run: dict, label: str, j: dict, r: dict) -> str:
    us = j["cpu_us_per_event"]
    if run["master"].startswith("local"):
        cpu = (f"{sum(us.values()):>10,.0f} ({us['jvm']:,.0f} + {us['python_workers']:,.0f} + "
               f"driver {us['driver']:,.0f})")
    else:  # executors run under the cluster's worker JVMs, outside this process tree
        cpu = f"{'n/a':>10} (driver JVM {us['jvm']:,.0f} + driver {us['driver']:,.0f}; executors not counted)"
    return (f"  {label:<33}{j['events_per_s']:>10,.0f}  {r['events_per_s']:>8,.0f}  "
            f"{j['events_per_s'] / r['events_per_s']:>8.2f}  {j['batch_s_p50']:>8.2f} s  "
            f"{cpu}   [{j['batches']} batches, p50 {j['batch_rows_p50']:,} rows]")


def report(args, runs: list[dict]) -> str:
    profiles = args.profiles.split(",")
    limit = (f"maxOffsetsPerTrigger {args.max_offsets_per_trigger:,}" if args.max_offsets_per_trigger else
             "fencewatch run's defaults (adaptive batches aiming at catch_up_batch_ms)")
    from fencewatch.streaming.config.settings import StreamingConfig
    from fencewatch.streaming.runtime.session import PARTITIONS_PER_CORE

    partitions = args.shuffle_partitions or StreamingConfig().shuffle_partitions
    partitions = (f"{partitions} shuffle partitions" if partitions else
                  f"shuffle partitions: {PARTITIONS_PER_CORE} per core (run's default)")
    lines = [f"backlog: {args.events:,} simulated events per profile, {args.groups} groups, 4 partitions per topic; "
             f"micro-batches: {limit}; {partitions}; run's sinks (Kafka outputs with their log, "
             f"metrics exporter); trigger 1 s; rates over the batches after the first {WARMUP_BATCHES}; "
             "replay --engine local on the same events, one core, measured just before and just after each "
             "master's runs (the better of the two); readers: fencewatch-kafka (Python) and connector "
             "(Spark's own, format kafka)",
             f"{'':35}{'events/s':>10}  {'replay':>8}  {'x replay':>8}  {'batch p50':>10}  "
             f"{'CPU us/event (JVM + Python)':>28}"]
    for name in profiles:
        lines.append(f"{name}:")
        for run in runs:
            for src, j in (run["jobs"].get(name) or {}).items():
                lines.append(_job_line(run, f"{SOURCE_NAMES[src]} {run['master']}", j, run["replay"][name]))
            if name not in run["jobs"]:
                lines.append(f"  {run['master']:<33}failed: {run.get('error', 'no result')}")
    lines += _floor_lines(args, runs, profiles)
    lines += _scaling_lines(runs, profiles)
    lines += _latency_lines(runs)
    lines += bars(runs, profiles)
    return "\n".join(lines)


def _floor_lines(args, runs: list[dict], profiles: list[str]) -> list[str]:
    lines = []
    floors = [run for run in runs if run.get("engine_floor")]
    if floors:
        lines.append("engine floor (same backlog and micro-batches; source -> applyInPandasWithState doing only "
                     "decode + rules per event -> collect; a micro-batch shorter than the 1 s trigger waits for it, "
                     "so the floor's capacity is its events per busy second, in brackets):")
        for run in floors:
            for name in (f"{p}{r}" for p in profiles for r in ("", " routed")):
                f = run["engine_floor"][name]
                us = f["cpu_us_per_event"]
                r = run["replay"][name.split()[0]]
                lines.append(f"  {name} {run['master']:<24}{f['events_per_s']:>10,.0f}  {r['events_per_s']:>8,.0f}  "
                             f"{f['events_per_s'] / r['events_per_s']:>8.2f}  "
                             f"{f['batch_s_p50']:>8.2f} s  "
                             f"{sum(us.values()):>10,.0f} ({us['jvm']:,.0f} + {us['python_workers']:,.0f} + "
                             f"driver {us['driver']:,.0f})   [{f['batches']} batches; "
                             f"{f['events_per_busy_s']:,.0f} per busy s = "
                             f"{f['events_per_busy_s'] / r['events_per_s']:.2f}x replay]")
    lines.append(f"skeleton (same shape, no work; offered {args.skeleton_rate:,} rows/s, {args.groups} keys):")
    for run in runs:
        s = run.get("skeleton", {"error": "not run"})
        if "error" in s:
            lines.append(f"  {run['master']}: {s['error']}")
        else:
            lines.append(f"  {run['master']:<31}{s['rows_per_busy_s']:>10,.0f} rows per busy second, "
                         f"micro-batch p50 {s['batch_s_p50']:.2f} s (load {run['load']:.1f})")
        if run.get("spark_floor"):
            lines.append(f"  spark_floor.py: {run['spark_floor']['line']}")
    return lines


def _scaling_lines(runs: list[dict], profiles: list[str]) -> list[str]:
    lines = []
    local = [r for r in runs if r["master"].startswith("local") and r["jobs"]]
    standalone = [r for r in runs if not r["master"].startswith("local") and r["jobs"]]
    for group in (local, standalone):
        if len(group) > 1:
            a, b = sorted(group[:2], key=_cores)  # fewer cores -> more cores
            for name in profiles:
                for src in b["jobs"].get(name, {}):
                    if src in a["jobs"].get(name, {}):
                        lines.append(f"scaling {name} {SOURCE_NAMES[src]}: {a['master']} -> {b['master']}: "
                                     f"x{b['jobs'][name][src]['events_per_s'] / a['jobs'][name][src]['events_per_s']:.2f}")
    return lines


def _latency_lines(runs: list[dict]) -> list[str]:
    fmt = lambda v: "n/a" if v is None else f"{v / 1000:.2f} s"  # noqa: E731
    lines = []
    for run in runs:
        for src, lats in (run.get("latency") or {}).items():
            for lat in lats:
                lines.append(f"latency {SOURCE_NAMES[src]} {run['master']}, trigger 1 s, {lat['rate']:,.0f} events/s "
                             f"real time ({lat['groups']} groups): sustained (after {lat['warmup_s']:.0f} s) "
                             f"p50 {fmt(lat['p50_steady'])}, p99 {fmt(lat['p99_steady'])}; whole run p50 "
                             f"{fmt(lat['p50'])}, p99 {fmt(lat['p99'])} ({lat['samples']:,} decisions sampled), "
                             f"foreachBatch p50 {lat['batch_p50'] or float('nan'):.2f} s, "
                             f"load {lat['load'][0]:.1f} -> {lat['load'][1]:.1f}")
    return lines


def bars(runs: list[dict], profiles: list[str]) -> list[str]:
    """Issue 34's bars, each PASS or FAIL with its figure."""
    out = ["bars:"]
    one = next((r for r in runs if r["master"] == "local[2]"), None)
    for name in profiles:
        j = ((one or {}).get("jobs") or {}).get(name, {}).get("spark")
        if j:
            ratio = j["events_per_s"] / one["replay"][name]["events_per_s"]
            out.append(f"  {'PASS' if ratio >= 0.5 else 'FAIL'} connector {name} local[2], run's default pacing: "
                       f"{ratio:.2f}x the one-core engine (bar 0.5x)")
    for src, lats in ((one or {}).get("latency") or {}).items():
        near = min(lats, key=lambda lat: abs(lat["rate"] - 2_000), default=None)
        if near is not None and src == "spark":
            ok = near["p99_steady"] is not None and near["p99_steady"] < P99_BAR_MS
            out.append(f"  {'PASS' if ok else 'FAIL'} connector p99 at {near['rate']:,.0f} events/s live: "
                       f"{(near['p99_steady'] or float('nan')) / 1000:.2f} s sustained, "
                       f"{(near['p99'] or float('nan')) / 1000:.2f} s whole run (bar 3 s at about 2,000/s)")
        kept = [lat for lat in lats if lat["p99_steady"] is not None and lat["p99_steady"] < P99_BAR_MS]
        best = max(kept, key=lambda lat: lat["rate"], default=None)
        out.append(f"  {'PASS' if best and best['rate'] >= 10_000 else 'FAIL'} {SOURCE_NAMES[src]} live capacity "
                   f"(sustained p99 < 3 s): {best['rate'] if best else 0:,.0f} events/s of the loads tried "
                   f"(bar 10,000/s)" + (f"; its whole run's p99 {best['p99'] / 1000:.2f} s" if best else ""))
    return out


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--events", type=int, default=1_200_000,
                    help="the backlog per profile: long enough for run's pacing to reach its target batch "
                         "(catch_up_batch_ms) after its ramp (480,000 was read within the ramp: batches of "
                         "1.7-2.5 s against the 8 s target)")
    ap.add_argument("--groups", type=int, default=50)
    ap.add_argument("--masters", default="local[2],local[1]")
    ap.add_argument("--profiles", default=",".join(PROFILES))
    ap.add_argument("--max-offsets-per-trigger", type=int, default=None, help="default: the job's own")
    ap.add_argument("--shuffle-partitions", type=int, default=None,
                    help="default: fencewatch run's (streaming.shuffle_partitions)")
    ap.add_argument("--skeleton-rate", type=int, default=20_000)
    ap.add_argument("--skeleton-seconds", type=int, default=40)
    ap.add_argument("--standalone", default="1,2",
                    help="standalone clusters to run the throughput on: one-core workers each (empty: none)")
    ap.add_argument("--sources", default="python,spark",
                    help="Kafka readers to run the job with: python (fencewatch-kafka), spark (Spark's connector)")
    ap.add_argument("--latency-groups", default="280,700,1450",
                    help="real-time loads for the latency runs (local[2]), in groups of the mixed profile (as the "
                         "simulator produced them on 2026-11-28: ~2,400, ~5,300, ~10,200 events/s); each reader goes "
                         "up them until p99 passes 3 s")
    ap.add_argument("--spark-floor", default=None, metavar="PATH",
                    help="also run this skeleton script (spark_floor.py) after each local master's jobs")
    ap.add_argument("--bootstrap", default=None, help="a running broker instead of the embedded one")
    ap.add_argument("--latency-seconds", type=int, default=60,
                    help="each live load's length; its first bench_pipeline.WARMUP_S seconds do not count for "
                         "the sustained p99")
    ap.add_argument("--no-verdicts", action="store_true", help="no verdicts topic (alerts and metrics only)")
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                    help="extra Spark setting for the job's session (A/B runs), repeatable")
    ap.add_argument("--jemalloc", default="auto", help="streaming.jemalloc for the job's JVM (auto, off, a path)")
    ap.add_argument("--engine-floor", default="local[2]",
                    help="masters (of --masters) that also run the engine floor: the same backlog with only "
                         "decode + rules per event in the query (empty: none)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--write-docs", action="store_true")
    return ap


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    if args.worker:
        print(json.dumps(worker(json.loads(args.worker))))
        return 0
    profiles = args.profiles.split(",")
    from fencewatch.streaming.brokers import embedded_broker
    from fencewatch.streaming.brokers.common import ExternalBroker

    topics, traces = {}, {}
    sources = [x for x in args.sources.split(",") if x]
    broker = ExternalBroker(args.bootstrap) if args.bootstrap else \
        embedded_broker(os.environ.get("FENCEWATCH_BENCH_BROKER", "kafka"))
    with broker:
        for name in profiles:
            lines = simulate_lines(name, args.events, args.groups)
            hb, off = f"hb-{name}-{time.time_ns()}", f"off-{name}-{time.time_ns()}"
            broker.create_topics([hb, off], partitions=4)
            produce(broker.bootstrap, lines, hb, off)
            topics[name], traces[name] = (hb, off, len(lines)), lines
        broker.create_topics(["fencewatch.verdicts", "fencewatch.alerts", "fencewatch.dlq"], partitions=4,
                             exist_ok=True)
        runs = []

        def replays() -> dict:
            return {name: replay_rate(traces[name]) for name in profiles}

        def beside(run: dict, before: dict) -> dict:
            """The run with replay's rate on the same events measured just before and just after it
            (the better of the two: the host's speed drifts within minutes)."""
            after = replays()
            run["replay"] = {n: max(before[n], after[n], key=lambda r: r["events_per_s"]) for n in profiles}
            return run

        common = {"bootstrap": broker.bootstrap, "topics": topics, "groups": args.groups, "sources": sources,
                  "shuffle_partitions": args.shuffle_partitions, "max_per_trigger": args.max_offsets_per_trigger,
                  "skeleton_rate": args.skeleton_rate, "no_verdicts": args.no_verdicts, "jemalloc": args.jemalloc,
                  "conf": dict(c.split("=", 1) for c in args.conf)}
        for i, master in enumerate(args.masters.split(",")):
            spec = {**common, "master": master, "skeleton_seconds": args.skeleton_seconds,
                    "latency": [int(g) for g in args.latency_groups.split(",") if g] if i == 0 else [],
                    "latency_seconds": args.latency_seconds, "spark_floor": args.spark_floor,
                    "engine_floor": master in args.engine_floor.split(",")}
            runs.append(beside(run_worker(spec), replays()))
            print(json.dumps(runs[-1]), file=sys.stderr)
        for n in [int(w) for w in args.standalone.split(",") if w]:
            before = replays()
            with StandaloneCluster(n) as cluster:
                spec = {**common, "master": cluster.url, "label": f"standalone {n}x1 core", "workers": n,
                        "skeleton_seconds": 0, "latency": [], "latency_seconds": 0}
                run = run_worker(spec, env=cluster.env)
            runs.append(beside(run, before))
            print(json.dumps(runs[-1]), file=sys.stderr)
    text = report(args, runs)
    print(text)
    if args.write_docs:
        write_section("streaming job on both Kafka readers beside replay and Spark's skeleton",
                      "make bench  (python bench/bench_streaming.py --write-docs)", "```\n" + text + "\n```")
    return 0


if __name__ == "__main__":
    sys.exit(main())
