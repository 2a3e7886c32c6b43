"""Benchmark: soak. ``fencewatch run`` (the public command, local[2]) on the embedded broker for
``--duration`` (30 min in ``make bench``) with the simulator at about ``--rate`` events/s (half
the sustained capacity measured by bench_streaming.py), sampling every ``--every``:

- RSS of the driver (the ``fencewatch`` process), Spark's JVM, and the Python workers (summed);
- the JVM's heap, committed and used (``jcmd <pid> GC.heap_info``): RSS follows the committed heap;
- the state size (bytes under ``<checkpoint>/state``) and the checkpoint's size, and the groups and
  members the model knows (from the job's metrics), so state per group shows whether state grows
  with the keys the simulator adds or per key;
- events judged so far (from the job's metrics endpoint) and the input lag;
- with ``--nmt``: the JVM started with ``-XX:NativeMemoryTracking=summary`` (added to the Java
  options the job passes, not replacing them), and at every sample the memory the JVM has
  committed per NMT category (``jcmd <pid> VM.native_memory summary``: Java Heap, Class, Thread,
  Code, GC, Compiler, Internal, Other, Symbol, Arena Chunk, ...), its thread count
  (``/proc/<pid>/status``), its RSS split into anonymous and file-backed (``smaps_rollup``), and
  the gap RSS minus NMT's total committed: memory the JVM does not track (malloc by native
  libraries such as RocksDB's, glibc's arenas' free but unreturned pages), less what NMT counts
  as committed but was never touched (not resident).

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
from fencewatch.streaming.config.settings import duration_s_arg  # noqa: E402

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


NMT_LINE = re.compile(r"^-\s+(.+?) \(reserved=(\d+)KB, committed=(\d+)KB\)", re.M)
NMT_TOTAL = re.compile(r"^Total: reserved=(\d+)KB, committed=(\d+)KB", re.M)


def nmt_key(category: str) -> str:
    return "nmt_" + re.sub(r"\W+", "_", category.strip().lower()).strip("_")


MAP_LINE = re.compile(r"^([0-9a-f]+)-([0-9a-f]+) (\S+) \S+ \S+ \d+\s*(.*)$")
ARENA = 64 * 2**20  # glibc's per-thread malloc arenas are 64 MB mappings (HEAP_MAX_SIZE on 64-bit)


def smaps_mb(pid: int, heap: tuple[int, int] | None) -> dict[str, float]:
    """From ``/proc/<pid>/smaps``: resident MB of the Java heap's range (``heap``, from
    GC.heap_info), of glibc's malloc arenas (the brk ``[heap]`` plus the 64 MB-aligned anonymous
    mappings that, with the inaccessible rest after them, span 64 MB: an arena may hold several)
    and how many of those 64 MB heaps."""
    maps = []  # [start, end, perms, name, rss kB]
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        m = MAP_LINE.match(line)
        if m:
            maps.append([int(m.group(1), 16), int(m.group(2), 16), m.group(3), m.group(4).strip(), 0])
        elif line.startswith("Rss:") and maps:
            maps[-1][4] = int(line.split()[1])
    out = {"heap_rss": 0.0, "arena_rss": 0.0, "arenas": 0.0}
    for i, (start, end, perms, name, rss) in enumerate(maps):
        if heap and heap[0] <= start < heap[1]:
            out["heap_rss"] += rss / 1024
        elif name == "[heap]":
            out["arena_rss"] += rss / 1024
        elif not name and start % ARENA == 0 and perms.startswith("rw"):
            span = end - start
            if span < ARENA and i + 1 < len(maps) and maps[i + 1][0] == end and maps[i + 1][2].startswith("---"):
                span = maps[i + 1][1] - start
            if span == ARENA:
                out["arena_rss"] += rss / 1024
                out["arenas"] += 1
    return out


def heap_range(pid: int) -> tuple[int, int] | None:
    try:
        text = subprocess.run(["jcmd", str(pid), "GC.heap_info"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"heap\s+total \d+K, used \d+K \[0x([0-9a-f]+), 0x([0-9a-f]+)\)", text)
    return (int(m.group(1), 16), int(m.group(2), 16)) if m else None


def nmt_mb(pid: int | None) -> dict[str, float]:
    """Committed MB per Native Memory Tracking category (``nmt_java_heap``, ``nmt_class``, ...,
    ``nmt_total``), the JVM's threads, RSS anonymous / file-backed, and ``nmt_gap`` (RSS minus
    NMT's total committed); {} if the JVM runs without NMT or jcmd fails."""
    if pid is None:
        return {}
    try:
        text = subprocess.run(["jcmd", str(pid), "VM.native_memory", "summary"], capture_output=True, text=True,
                              timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    total = NMT_TOTAL.search(text)
    if not total:
        return {}
    out = {nmt_key(m.group(1)): int(m.group(3)) / 1024 for m in NMT_LINE.finditer(text)}
    out["nmt_total"] = int(total.group(2)) / 1024
    # what the JVM holds through malloc (live, all categories), and the sum of each category's
    # peak: glibc keeps freed chunks, so the arenas' resident memory follows peaks, not the live sum
    out["nmt_malloc"] = sum(int(kb) for kb in re.findall(r"\(malloc=(\d+)KB", text)) / 1024
    out["nmt_malloc_peaks"] = sum(int(p or m) for m, p in
                                  re.findall(r"\(malloc=(\d+)KB[^)]*\)(?: \(peak=(\d+)KB)?", text)) / 1024
    try:
        out["threads"] = float(re.search(r"^Threads:\s+(\d+)", Path(f"/proc/{pid}/status").read_text(), re.M).group(1))
        rollup = Path(f"/proc/{pid}/smaps_rollup").read_text()
        kb = {k: int(v) for k, v in re.findall(r"^(\w+):\s+(\d+) kB", rollup, re.M)}
        out["rss_anon"] = kb.get("Anonymous", 0) / 1024
        out["rss_file"] = (kb.get("Rss", 0) - kb.get("Anonymous", 0)) / 1024
        out["nmt_gap"] = kb.get("Rss", 0) / 1024 - out["nmt_total"]
        # the same gap without the heap, whose committed pages are not all resident
        out.update(smaps_mb(pid, heap_range(pid)))
        out["nonheap_rss"] = kb.get("Rss", 0) / 1024 - out["heap_rss"]
        out["nonheap_gap"] = out["nonheap_rss"] - (out["nmt_total"] - out.get("nmt_java_heap", 0.0))
    except (OSError, AttributeError):
        pass
    return out


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
    """Events judged, input lag, groups, members and the state stores' memory from the job's
    /metrics (its port from the job's log)."""
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
        elif line.startswith("fencewatch_state_memory_bytes "):
            out["state_mem_mb"] = float(line.rsplit(" ", 1)[1]) / 1e6  # RocksDB's own figure (native memory)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--duration", type=duration_s_arg, default=1800, help="30m, or seconds (default 1800)")
    ap.add_argument("--rate", type=float, default=1000, help="events/s (default 1000: half the measured capacity)")
    ap.add_argument("--every", type=duration_s_arg, default=30, help="sampling period (30 = 30s)")
    ap.add_argument("--groups", type=int, default=None, help="default: --rate / %.0f" % EVENTS_PER_GROUP_S)
    ap.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                    help="a Spark setting for the job (fencewatch run --conf), e.g. to A/B a memory setting")
    ap.add_argument("--nmt", action="store_true",
                    help="start the JVM with -XX:NativeMemoryTracking=summary (added to the job's Java options) "
                         "and sample its committed memory per category")
    ap.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                    help="an environment variable for the job (and so its JVM), e.g. MALLOC_ARENA_MAX=2")
    ap.add_argument("--from-samples", type=Path, default=None, metavar="SAMPLES_JSON",
                    help="no run: report (and with --write-docs write) a previous run's samples.json "
                         "(give the run's --duration, --rate, --nmt)")
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args()
    if args.groups is None:
        args.groups = max(1, round(args.rate / EVENTS_PER_GROUP_S))

    from fencewatch.sim.run import run_simulation
    from fencewatch.sim.world import SimConfig
    from fencewatch.sim.profiles import profile
    from fencewatch.streaming.brokers import embedded_broker
    from dataclasses import replace

    if args.from_samples:
        samples = json.loads(args.from_samples.read_text())
        return finish(samples, args, alive=bool(samples), work=None)
    conf = list(args.conf)
    if args.nmt:
        conf = with_nmt(conf)
    env = {**os.environ, **dict(kv.split("=", 1) for kv in args.env)}

    work = Path(tempfile.mkdtemp(prefix="fencewatch-soak-"))
    samples = []
    try:
        with embedded_broker(os.environ.get("FENCEWATCH_BENCH_BROKER", "kafka")) as broker:
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
                     "--verdicts-topic", "fencewatch.verdicts", *(x for kv in conf for x in ("--conf", kv))],
                    stdout=log, stderr=subprocess.STDOUT, env=env)
                sim.start()
                t0 = time.monotonic()
                print(f"samples: {work / 'samples.json'} (rewritten at every sample)", flush=True)
                jvm_cmdline_shown = False
                try:
                    while time.monotonic() - t0 < args.duration and proc.poll() is None:
                        time.sleep(args.every)
                        jvm = jvm_pid(proc.pid)
                        if jvm is not None and not jvm_cmdline_shown:  # the options the JVM really got
                            jvm_cmdline_shown = True
                            cmd = Path(f"/proc/{jvm}/cmdline").read_bytes().split(b"\0")
                            print("JVM options: " + " ".join(a.decode() for a in cmd if a[:2] in (b"-X", b"-D")), flush=True)
                        s = {"t": round(time.monotonic() - t0), **rss_by_kind(proc.pid), **heap_mb(jvm),
                             **(nmt_mb(jvm) if args.nmt else {}),
                             "state_mb": du(work / "cp" / "state") / 1e6, "checkpoint_mb": du(work / "cp") / 1e6,
                             "load": os.getloadavg()[0], **scrape(log_path)}
                        samples.append(s)
                        print(json.dumps(s), flush=True)
                        (work / "samples.json").write_text(json.dumps(samples))
                finally:
                    stop.set()
                    proc.terminate()
                    try:
                        proc.wait(60)
                    except subprocess.TimeoutExpired:
                        proc.kill()
    except subprocess.TimeoutExpired as e:
        # the in-memory broker of an hour's soak holds GBs and can outlast its stop's grace;
        # the job has stopped and the samples are kept: report them all the same
        if "broker" not in (e.cmd or []):
            raise
        print(f"warning: the broker's stop timed out ({e.timeout} s)", file=sys.stderr)

    alive = proc.returncode in (0, None) and len(samples) > 0
    return finish(samples, args, alive, work)


def with_nmt(conf: list[str]) -> list[str]:
    """``conf`` (``KEY=VALUE``s) with NMT added to ``spark.driver.extraJavaOptions``: to the user's
    options if given, else to the ones the job uses on a local master (the C1-only JIT), which a
    user setting replaces (fencewatch.streaming.runtime.session.driver_java_options)."""
    from fencewatch.streaming.runtime.session import LOCAL_JVM_OPTIONS

    key = "spark.driver.extraJavaOptions"
    user = [kv.split("=", 1)[1] for kv in conf if kv.split("=", 1)[0] == key]
    rest = [kv for kv in conf if kv.split("=", 1)[0] != key]
    return rest + [f"{key}={user[-1] if user else LOCAL_JVM_OPTIONS} -XX:NativeMemoryTracking=summary"]


def finish(samples: list, args, alive: bool, work: Path | None) -> int:
    body = report(samples, args, alive)
    print(body)
    if args.write_docs:
        extra = "".join(f" --conf {kv}" for kv in args.conf) + "".join(f" --env {kv}" for kv in args.env)
        write_section("Soak: fencewatch run at half capacity",
                      f"python bench/bench_soak.py --duration {args.duration:.0f} --rate {args.rate:.0f} "
                      f"--every {args.every:.0f} --groups {args.groups}{' --nmt' if args.nmt else ''}{extra} "
                      f"--write-docs", body)
    if work is not None:
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
             "on disk (/ in memory) | checkpoint MB | groups | members | state KB per group | events judged | input lag | load |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    step = max(1, len(samples) // 12)
    for s in samples[::step] + ([samples[-1]] if samples and (len(samples) - 1) % step else []):
        per_group = s["state_mb"] * 1000 / s["groups"] if s.get("groups") else 0.0
        lines.append(f"| {s['t']} | {s['driver']:.0f} | {s['jvm']:.0f} | {s.get('heap_committed', 0):.0f} / "
                     f"{s.get('heap_used', 0):.0f} | {s['python_workers']:.0f} ({s.get('python_workers_n', 0):.0f}, "
                     f"{s.get('python_worker_max', 0):.0f}) | {s['state_mb']:.1f}"
                     f"{' / %.1f' % s['state_mem_mb'] if 'state_mem_mb' in s else ''} | "
                     f"{s['checkpoint_mb']:.1f} | {s.get('groups', 0):,.0f} | {s.get('members', 0):,.0f} | "
                     f"{per_group:.1f} | {s.get('events', 0):,.0f} | {s.get('lag', 0):,.0f} | {s.get('load', 0):.1f} |")
    lines += ["", "Growth over the second half of the samples with events judged (per hour, least squares): " + ", ".join(
        f"{k} {growth(samples, k):+.1f}" for k in ("driver", "jvm", "heap_committed", "heap_used", "python_workers",
                                                 "python_worker_max", "state_mb", "state_mem_mb", "checkpoint_mb", "groups",
                                                 "members") if any(k in x for x in samples))]
    if any("nmt_total" in s for s in samples):
        lines += ["", *nmt_table(samples)]
    return "\n".join(lines)


NMT_FIRST = ("nmt_java_heap", "nmt_class", "nmt_thread", "nmt_code", "nmt_gc", "nmt_compiler", "nmt_internal",
             "nmt_other", "nmt_symbol", "nmt_arena_chunk", "nmt_metaspace")


def nmt_table(samples: list) -> list[str]:
    """The JVM's memory by NMT category: start (first sample with events judged), peak, end, and
    MB/h over the second half, as for the rows above; then the same for RSS, its anonymous and
    file-backed parts, the gap RSS minus NMT's committed total, and the thread count."""
    with_nmt = [s for s in samples if "nmt_total" in s]
    judged = [s for s in with_nmt if s.get("events", 0) > 0] or with_nmt
    keys = sorted({k for s in with_nmt for k in s if k.startswith("nmt_")} - {"nmt_total", "nmt_gap", "nmt_malloc",
                                                                              "nmt_malloc_peaks"},
                  key=lambda k: (NMT_FIRST.index(k) if k in NMT_FIRST else len(NMT_FIRST), k))
    # categories under 1 MB throughout are left out of the table (listed after it)
    small = [k for k in keys if max(s.get(k, 0.0) for s in with_nmt) < 1.0]
    for s in with_nmt:  # RSS in MiB like NMT (the table above has MB of 10^6 bytes)
        s.setdefault("rss", s.get("rss_anon", 0.0) + s.get("rss_file", 0.0))
    rows = [k for k in keys if k not in small] + [
        k for k in ("nmt_total", "rss", "rss_anon", "rss_file", "nmt_gap", "heap_rss", "nonheap_rss", "nonheap_gap",
                    "nmt_malloc", "nmt_malloc_peaks", "arena_rss", "arenas", "threads")
        if any(k in s for s in with_nmt)]
    names = {"nmt_total": "**NMT total committed**", "rss": "**JVM RSS**", "rss_anon": "RSS anonymous",
             "rss_file": "RSS file-backed", "nmt_gap": "**RSS minus NMT committed**",
             "heap_rss": "Java heap resident", "nonheap_rss": "**RSS outside the Java heap**",
             "nonheap_gap": "**RSS outside the heap minus NMT committed outside the heap**",
             "nmt_malloc": "NMT malloc, live (all categories)",
             "nmt_malloc_peaks": "NMT malloc, sum of each category's peak",
             "arena_rss": "glibc malloc arenas resident (brk heap + 64 MB arenas)", "arenas": "64 MB arena heaps (count)",
             "threads": "threads (count)"}
    first, last = judged[0], judged[-1]
    out = [f"The JVM's memory by Native Memory Tracking category (committed MiB; `jcmd VM.native_memory summary`; "
           f"RSS here from `/proc/<pid>/smaps_rollup`, also in MiB), "
           f"from the first sample with events judged (t={first['t']} s) to the last (t={last['t']} s):", "",
           "| category | start | min | peak (t s) | end | per hour, second half |", "|---|---|---|---|---|---|"]
    for k in rows:
        vals = [(s.get(k, 0.0), s["t"]) for s in judged]
        peak = max(vals)
        name = names.get(k, k[len("nmt_"):].replace("_", " ").title() if k.startswith("nmt_") else k)
        out.append(f"| {name} | {first.get(k, 0.0):.1f} | {min(v for v, _ in vals):.1f} | {peak[0]:.1f} ({peak[1]}) | "
                   f"{last.get(k, 0.0):.1f} | {growth(samples, k):+.1f} |")
    if small:
        out += ["", "Under 1 MB throughout: " + ", ".join(k[len("nmt_"):].replace("_", " ") for k in small) + "."]
    return out


if __name__ == "__main__":
    sys.exit(main())
