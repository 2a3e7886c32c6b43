"""Benchmark: soak. ``fencewatch run`` (the public command, local[2]) on the embedded broker for
``--duration`` (30 min in ``make bench``) with the simulator at about ``--rate`` events/s (half
the sustained capacity measured by bench_streaming.py), sampling every ``--every``:

- RSS of the driver (the ``fencewatch`` process), Spark's JVM, and the Python workers (summed);
- the JVM's heap, committed and used (``jcmd <pid> GC.heap_info``): RSS follows the committed heap;
- the state size (bytes under ``<checkpoint>/state``) and the checkpoint's size, and the groups and
  members the model knows (from the job's metrics), so state per group shows whether state grows
  with the keys the simulator adds or per key;
- events judged so far (from the job's metrics endpoint) and the input lag.

The simulator runs in real time (event ``ts`` = wall time, as a live cluster's coordinator
writes it) with ``--groups`` sized to give ``--rate`` (the ``mixed`` profile makes about
:data:`EVENTS_PER_GROUP_S` events per group per second).

It reports the samples and the growth over the second half of the run (after warm-up): flat
memory is what an always-on job needs; growth is reported as MB per hour to be explained.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.report import write_section  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")
EVENTS_PER_GROUP_S = 10.0  # profile mixed: 60,000 events of 50 groups span 119.4 s of simulated time


def jvm_pid(root: int) -> int | None:
    """Spark's JVM below ``root``."""
    todo = [root]
    while todo:
        pid = todo.pop()
        try:
            children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        except OSError:
            continue
        for c in map(int, children):
            try:
                if Path(f"/proc/{c}/cmdline").read_bytes().split(b"\0")[0].endswith(b"java"):
                    return c
            except OSError:
                continue
            todo.append(c)
    return None


def heap_mb(pid: int | None) -> dict[str, float]:
    """The JVM heap, committed and used, in MB (``jcmd GC.heap_info``; {} if unavailable)."""
    if pid is None:
        return {}
    try:
        text = subprocess.run(["jcmd", str(pid), "GC.heap_info"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    m = re.search(r"heap\s+total (\d+)K, used (\d+)K", text)
    return {"heap_committed": int(m.group(1)) / 1024, "heap_used": int(m.group(2)) / 1024} if m else {}


def rss_by_kind(root: int) -> dict[str, float]:
    """RSS in MB of ``root``'s process tree: driver (root itself), jvm, python_workers."""
    procs = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
            cmd = Path(f"/proc/{name}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        procs[int(name)] = (int(fields[1]), int(fields[21]) * PAGE / 1e6, cmd)
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        tree.add(pid)
        todo += [p for p, (ppid, _, _) in procs.items() if ppid == pid and p not in tree]
    out = {"driver": 0.0, "jvm": 0.0, "python_workers": 0.0, "python_workers_n": 0.0, "python_worker_max": 0.0}
    for pid in tree:
        if pid not in procs:
            continue
        _, rss, cmd = procs[pid]
        kind = "driver" if pid == root else "jvm" if cmd.endswith("java") else "python_workers"
        out[kind] += rss
        if kind == "python_workers":  # how many, and the largest: more workers, or each one growing
            out["python_workers_n"] += 1
            out["python_worker_max"] = max(out["python_worker_max"], rss)
    return out


def du(path: Path) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(dirpath, f))
            except OSError:
                pass
    return total


def scrape(port_file: Path) -> dict[str, float]:
    """Events judged and input lag from the job's /metrics (its port from the job's log)."""
    m = re.search(r"metrics on http://([\d.]+):(\d+)/metrics", port_file.read_text(errors="replace"))
    if not m:
        return {}
    try:
        text = urllib.request.urlopen(f"http://{m.group(1)}:{m.group(2)}/metrics", timeout=5).read().decode()
    except OSError:
        return {}
    out = {"events": 0.0, "lag": 0.0, "groups": 0.0, "members": 0.0}
    for line in text.splitlines():
        if line.startswith("fencewatch_events_total"):
            out["events"] += float(line.rsplit(" ", 1)[1])
        elif line.startswith("fencewatch_input_lag_records"):
            out["lag"] = float(line.rsplit(" ", 1)[1])
        elif line.startswith("fencewatch_groups{"):
            out["groups"] += float(line.rsplit(" ", 1)[1])
        elif line.startswith("fencewatch_group_members{"):
            out["members"] += float(line.rsplit(" ", 1)[1])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=float, default=1800, help="seconds (default 1800)")
    ap.add_argument("--rate", type=float, default=1000, help="events/s (default 1000: half the measured capacity)")
    ap.add_argument("--every", type=float, default=30, help="sampling period, seconds")
    ap.add_argument("--groups", type=int, default=None, help="default: --rate / %.0f" % EVENTS_PER_GROUP_S)
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                    help="a Spark setting for the job (fencewatch run --conf), e.g. to A/B a memory setting")
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    if args.groups is None:
        args.groups = max(1, round(args.rate / EVENTS_PER_GROUP_S))

    from fencewatch.sim.command import run_simulation
    from fencewatch.sim.engine import SimConfig
    from fencewatch.sim.profiles import profile
    from fencewatch.streaming.broker import EmbeddedBroker
    from dataclasses import replace

    work = Path(tempfile.mkdtemp(prefix="fencewatch-soak-"))
    samples = []
    with EmbeddedBroker() as broker:
        topics = ["fencewatch.heartbeats", "fencewatch.offsets", "fencewatch.alerts", "fencewatch.dlq",
                  "fencewatch.verdicts"]
        broker.create_topics(topics, partitions=4)
        stop = threading.Event()
        sim_cfg = SimConfig(knobs=replace(profile("mixed"), groups=args.groups), seed=1,
                            start_ts=int(time.time() * 1000), duration_ms=None,
                            max_events=int(args.rate * (args.duration + 60)), labels=False)
        sim = threading.Thread(target=run_simulation, args=(sim_cfg,), daemon=True,
                               kwargs={"bootstrap_servers": broker.bootstrap, "pace": ("realtime", 1.0)})
        log_path = work / "run.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [str(Path(sys.executable).parent / "fencewatch"), "run", "--bootstrap-servers", broker.bootstrap,
                 "--starting-offsets", "earliest", "--checkpoint", str(work / "cp"), "--metrics-port", "0",
                 "--verdicts-topic", "fencewatch.verdicts", *(x for kv in args.conf for x in ("--conf", kv))],
                stdout=log, stderr=subprocess.STDOUT)
            sim.start()
            t0 = time.monotonic()
            try:
                while time.monotonic() - t0 < args.duration and proc.poll() is None:
                    time.sleep(args.every)
                    s = {"t": round(time.monotonic() - t0), **rss_by_kind(proc.pid), **heap_mb(jvm_pid(proc.pid)),
                         "state_mb": du(work / "cp" / "state") / 1e6, "checkpoint_mb": du(work / "cp") / 1e6,
                         "load": os.getloadavg()[0], **scrape(log_path)}
                    samples.append(s)
                    print(json.dumps(s), flush=True)
            finally:
                stop.set()
                proc.terminate()
                try:
                    proc.wait(60)
                except subprocess.TimeoutExpired:
                    proc.kill()
    alive = proc.returncode in (0, None) and len(samples) > 0
    body = report(samples, args, alive)
    print(body)
    if args.write_docs:
        write_section("Soak: fencewatch run at half capacity",
                      f"python bench/bench_soak.py --duration {args.duration:.0f} --rate {args.rate:.0f} "
                      f"--every {args.every:.0f} --groups {args.groups} --write-docs", body)
    (work / "samples.json").write_text(json.dumps(samples))
    print(f"samples: {work / 'samples.json'}")
    return 0 if alive else 1


def growth(samples: list, key: str) -> float:
    """MB per hour over the second half of the samples taken once events were judged (the
    first half is start-up and warm-up: JIT, Python workers, state store), least squares."""
    judged = [s for s in samples if s.get("events", 0) > 0]
    half = judged[len(judged) // 2:]
    if len(half) < 2:
        return 0.0
    xs = [s["t"] / 3600 for s in half]
    ys = [s.get(key, 0.0) for s in half]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs) or 1.0
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den


def report(samples: list, args, alive: bool) -> str:
    judged = [s for s in samples if s.get("events", 0) > 0]
    rate = ((judged[-1]["events"] - judged[0]["events"]) / (judged[-1]["t"] - judged[0]["t"])
            if len(judged) > 1 and judged[-1]["t"] > judged[0]["t"] else 0.0)
    lines = [f"about {args.rate:,.0f} events/s offered ({args.groups} groups, profile mixed, real time), "
             f"{rate:,.0f} events/s judged, for {args.duration / 60:.0f} min; "
             f"job {'alive to the end' if alive else 'DIED'}", "",
             "| t (s) | driver RSS MB | JVM RSS MB | JVM heap committed / used MB | Python workers RSS MB (n, largest) | state MB "
             "| checkpoint MB | groups | members | state KB per group | events judged | input lag | load |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    step = max(1, len(samples) // 12)
    for s in samples[::step] + ([samples[-1]] if samples and (len(samples) - 1) % step else []):
        per_group = s["state_mb"] * 1000 / s["groups"] if s.get("groups") else 0.0
        lines.append(f"| {s['t']} | {s['driver']:.0f} | {s['jvm']:.0f} | {s.get('heap_committed', 0):.0f} / "
                     f"{s.get('heap_used', 0):.0f} | {s['python_workers']:.0f} ({s.get('python_workers_n', 0):.0f}, "
                     f"{s.get('python_worker_max', 0):.0f}) | {s['state_mb']:.1f} | "
                     f"{s['checkpoint_mb']:.1f} | {s.get('groups', 0):,.0f} | {s.get('members', 0):,.0f} | "
                     f"{per_group:.1f} | {s.get('events', 0):,.0f} | {s.get('lag', 0):,.0f} | {s.get('load', 0):.1f} |")
    lines += ["", "Growth over the second half of the samples with events judged (per hour, least squares): " + ", ".join(
        f"{k} {growth(samples, k):+.1f}" for k in ("driver", "jvm", "heap_committed", "heap_used", "python_workers",
                                                 "python_worker_max", "state_mb", "checkpoint_mb", "groups", "members"))]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
