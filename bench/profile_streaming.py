"""Profile the streaming job on a backlog: py-spy on every Python process Spark starts, Spark's
per-operator SQL metrics, ``jcmd Thread.print`` samples of the JVM, CPU by process kind.

Not a benchmark (the profilers cost time); it answers "where does the job's time go". Needs
``py-spy`` (``.venv/bin/pip install py-spy``: a tool, not a dependency) and the JDK's ``jcmd``.

usage: python bench/profile_streaming.py [--profile steady] [--events 120000] [--kafka-source spark] [--out DIR]
Writes DIR/pyspy-<pid>.txt (collapsed stacks), DIR/jstack-*.txt, DIR/sql-metrics.json and prints
a summary (top Python frames by process kind, per-operator times, CPU per event).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.bench_pipeline import cpu_seconds, records_read  # noqa: E402
from bench.bench_streaming import produce, simulate_lines  # noqa: E402


def _tree(root: int) -> dict[int, str]:
    """pid -> argv of ``root``'s descendants."""
    kids: dict[int, list[int]] = collections.defaultdict(list)
    argv: dict[int, str] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                stat = Path(f"/proc/{name}/stat").read_text()
                argv[int(name)] = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            kids[int(stat[stat.rfind(")") + 2:].split()[1])].append(int(name))
    out, todo = {}, [root]
    while todo:
        pid = todo.pop()
        for k in kids.get(pid, []):
            out[k] = argv.get(k, "")
            todo.append(k)
    return out


class Profilers:
    """py-spy on each new Python process of the tree (daemons with --subprocesses), jcmd samples."""

    def __init__(self, out: Path, pyspy: str, rate: int):
        self.out, self.pyspy, self.rate = out, pyspy, rate
        self.procs: list[subprocess.Popen] = []
        self.seen: set[int] = set()
        self.stop = threading.Event()

    def attach(self, pid: int, label: str, subprocesses: bool = False) -> None:
        cmd = [self.pyspy, "record", "-p", str(pid), "-r", str(self.rate), "-f", "raw", "--nonblocking",
               "-o", str(self.out / f"pyspy-{label}-{pid}.txt")]
        if subprocesses:
            cmd.append("--subprocesses")
        self.procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    def watch(self) -> None:
        me = os.getpid()
        n = 0
        while not self.stop.wait(0.5):
            tree = _tree(me)
            for pid, cmd in tree.items():
                if pid in self.seen or "py-spy" in cmd or "jcmd" in cmd:
                    continue
                if " -m pyspark.daemon" in cmd or "daemon" in cmd.split(" -m ")[-1][:40]:
                    self.seen.add(pid)
                    self.attach(pid, "daemon", subprocesses=True)
                elif "python" in cmd.split(" ")[0]:
                    # forked workers of a daemon are followed by the daemon's py-spy
                    ppid_cmd = ""
                    try:
                        stat = Path(f"/proc/{pid}/stat").read_text()
                        ppid = int(stat[stat.rfind(")") + 2:].split()[1])
                        ppid_cmd = tree.get(ppid, "")
                    except OSError:
                        pass
                    self.seen.add(pid)
                    if "daemon" not in ppid_cmd:
                        self.attach(pid, "worker", subprocesses=False)
            if n % 10 == 0:
                for pid, cmd in tree.items():
                    if cmd.split(" ")[0].endswith("java"):
                        res = subprocess.run(["jcmd", str(pid), "Thread.print"], capture_output=True, text=True)
                        (self.out / f"jstack-{n:04d}.txt").write_text(res.stdout)
            n += 1

    def close(self) -> None:
        self.stop.set()
        for p in self.procs:
            p.send_signal(2)
        for p in self.procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()


def summarize_pyspy(out: Path, top: int = 25) -> str:
    """Self and inclusive samples per function over all py-spy files, by file label."""
    lines = []
    for f in sorted(out.glob("pyspy-*.txt")):
        self_c, incl = collections.Counter(), collections.Counter()
        total = 0
        for line in f.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if not stack or not count.isdigit():
                continue
            c = int(count)
            total += c
            frames = stack.split(";")
            if frames and frames[0].startswith("process "):
                frames = frames[1:]
            if not frames:  # a sample with no Python frame (native code only)
                frames = ["<native>"]
            self_c[frames[-1]] += c
            for fr in set(frames):
                incl[fr] += c
        if not total:
            continue
        lines.append(f"== {f.name}: {total} samples")
        lines.append("  inclusive:")
        lines += [f"    {n / total:6.1%}  {fr[:150]}" for fr, n in incl.most_common(top)]
        lines.append("  self:")
        lines += [f"    {n / total:6.1%}  {fr[:150]}" for fr, n in self_c.most_common(top)]
    return "\n".join(lines)


def sql_metrics(ui: str) -> list:
    """Per-operator metrics of the last few SQL executions (Spark's REST API)."""
    apps = json.load(urllib.request.urlopen(f"{ui}/api/v1/applications"))
    app = apps[0]["id"]
    execs = json.load(urllib.request.urlopen(f"{ui}/api/v1/applications/{app}/sql?details=true&length=1000"))
    stages = json.load(urllib.request.urlopen(f"{ui}/api/v1/applications/{app}/stages"))
    return {"sql": execs, "stages": stages}


def summarize_stages(stages: list) -> str:
    """Task time by stage kind (the last operator of the stage's name), JVM task CPU included."""
    agg = collections.defaultdict(lambda: [0, 0, 0.0, 0.0, 0.0])
    for st in stages:
        name = st.get("name", "")[:60]
        a = agg[name]
        a[0] += 1
        a[1] += st.get("numTasks", 0)
        a[2] += st.get("executorRunTime", 0) / 1000
        a[3] += st.get("executorCpuTime", 0) / 1e9
        a[4] += st.get("jvmGcTime", 0) / 1000
    rows = sorted(agg.items(), key=lambda kv: -kv[1][2])
    return "\n".join(f"  {n:<60} stages {a[0]:3} tasks {a[1]:4} run {a[2]:7.1f} s  JVM task CPU {a[3]:6.1f} s  GC {a[4]:5.1f} s"
                     for n, a in rows)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--profile", default="steady")
    ap.add_argument("--events", type=int, default=120_000)
    ap.add_argument("--groups", type=int, default=50)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--shuffle-partitions", type=int, default=2)
    ap.add_argument("--max-offsets-per-trigger", type=int, default=None, help="default: the job's own")
    ap.add_argument("--rate", type=int, default=50, help="py-spy samples per second")
    ap.add_argument("--no-pyspy", action="store_true")
    ap.add_argument("--conf", action="append", default=[], help="extra spark conf KEY=VALUE")
    ap.add_argument("--kafka-source", default="python", choices=("python", "spark"),
                    help="the Kafka reader: fencewatch-kafka (python) or Spark's own connector (spark)")
    ap.add_argument("--bootstrap", default=None, help="a running broker instead of the embedded one")
    ap.add_argument("--out", default=None)
    return ap


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    out = Path(args.out or tempfile.mkdtemp(prefix="fencewatch-profile-"))
    out.mkdir(parents=True, exist_ok=True)

    from fencewatch.sinks.kafka import KafkaOutputs
    from fencewatch.streaming import config as cfgmod
    from fencewatch.streaming.brokers import embedded_broker
    from fencewatch.streaming.brokers.common import ExternalBroker
    from fencewatch.streaming.runtime.writer import BatchWriter
    from fencewatch.streaming.runtime.stats import JobStats
    from fencewatch.streaming.runtime.query import start_query, stop_between_batches
    from fencewatch.streaming.runtime.session import checkpoint_conf, spark_session

    extra = {**checkpoint_conf(str(out)), "spark.ui.enabled": "true", "spark.ui.port": "4077", "spark.sql.ui.retainedExecutions": "1000"}
    extra.update(dict(c.split("=", 1) for c in args.conf))
    broker = ExternalBroker(args.bootstrap) if args.bootstrap else \
        embedded_broker(os.environ.get("FENCEWATCH_BENCH_BROKER", "kafka"))
    with broker:
        lines = simulate_lines(args.profile, args.events, args.groups)
        hb, off = f"hb-{time.time_ns()}", f"off-{time.time_ns()}"
        broker.create_topics([hb, off], partitions=4)
        broker.create_topics(["fencewatch.verdicts", "fencewatch.alerts", "fencewatch.dlq"], partitions=4, exist_ok=True)
        produce(broker.bootstrap, lines, hb, off)
        spark = spark_session(args.master, shuffle_partitions=args.shuffle_partitions, extra=extra,
                              kafka_source=args.kafka_source)
        # spark_session turns the UI off on local masters; the profile needs it
        ui = spark.sparkContext.uiWebUrl
        cfg = cfgmod.load_config(environ={}, overrides={"streaming": {
            "bootstrap_servers": broker.bootstrap, "starting_offsets": "earliest", "heartbeats_topic": hb,
            "offsets_topic": off, "checkpoint_location": str(out / "cp"), "kafka_source": args.kafka_source,
            **({"max_offsets_per_trigger": args.max_offsets_per_trigger} if args.max_offsets_per_trigger else {})},
            "sinks": {"verdicts_topic": "fencewatch.verdicts"}})
        kafka = KafkaOutputs({"bootstrap.servers": broker.bootstrap}, verdicts_topic="fencewatch.verdicts",
                             alerts_topic="fencewatch.alerts", dlq_topic="fencewatch.dlq")
        writer = BatchWriter(cfg, kafka=kafka, stats=JobStats())
        prof = None
        if not args.no_pyspy:
            prof = Profilers(out, shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy")), args.rate)
            threading.Thread(target=prof.watch, daemon=True).start()
            prof.attach(os.getpid(), "driver")
        c0, t0 = cpu_seconds(), time.monotonic()
        query = start_query(spark, cfg, writer, trigger="1 second")
        done = 0
        while query.isActive and done < len(lines):
            time.sleep(0.5)
            done = sum(records_read(p) for p in query.recentProgress)
        wall = time.monotonic() - t0
        c1 = cpu_seconds()
        progress = list(query.recentProgress)
        stop_between_batches(query, timeout_s=30)
        kafka.close()
        try:
            metrics = sql_metrics(ui)
            (out / "sql-metrics.json").write_text(json.dumps(metrics, indent=1))
            print("stages:\n" + summarize_stages(metrics["stages"]))
        except Exception as exc:  # the UI is a side view
            print(f"SQL metrics: {exc}", file=sys.stderr)
        if prof:
            prof.close()
        spark.stop()
    data = [p for p in progress if records_read(p)]
    phases = collections.Counter()
    for p in data:
        phases.update(p["durationMs"])
    cpu = {k: c1[k] - c0[k] for k in c0}
    print(f"{args.profile}, {len(lines):,} events, {args.master}, Kafka read by {args.kafka_source}, "
          f"{len(data)} batches, wall {wall:.1f} s "
          f"({len(lines) / wall:,.0f} events/s incl. start-up), load {os.getloadavg()[0]:.1f}")
    print("CPU us/event: " + ", ".join(f"{k} {v / len(lines) * 1e6:,.0f}" for k, v in cpu.items()))
    print("batch ms: " + ", ".join(str(p["durationMs"]["triggerExecution"]) for p in data))
    print("phases s: " + ", ".join(f"{k} {v / 1000:.1f}" for k, v in phases.most_common()))
    print(f"output in {out}")
    if not args.no_pyspy:
        (out / "pyspy-summary.txt").write_text(summarize_pyspy(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
