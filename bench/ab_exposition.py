"""Not in ``make bench``: the job's exporter (``sinks/prometheus.py``) of an older tree and of this
checkout fed the same micro-batches, its ``/metrics`` text compared after every batch.

Why: a change to how the exporter is told what to show (issue 47 item 4: the group gauges read off
the specs' ``status_field``) must not change what it shows -- same families, same series, same
order, byte for byte -- and must not cost a batch its time. The batches are made once, here, and
pickled: the simulator's profiles through the router and the state function (outside Spark, an
in-memory ``GroupState``) and the writer's own counting of each output chunk
(``BatchWriter._chunk``, as ``foreachBatch`` does), the dashboards tests' synthetic feed, and
hand-made edge cases (groups folded into ``other`` and promoted out of it, a restarted rebalance
count, dead and deleted groups, values outside the enums, malformed status records). Each child
(old, new) feeds every scenario to a fresh ``MetricsSink`` with a fixed clock and renders after
every batch (a scrape, which also releases held increments); the children run with
``PYTHONHASHSEED=0`` (the exporter's own sets order some series). Then the times of ``add`` and
of a scrape, old and new alternately.

    python bench/ab_exposition.py OLD_TREE [--pairs 3] [--groups 12] [--events 6000]

``OLD_TREE``: a folder with the older code's packages (``git archive REV | tar -x -C DIR``).
"""
from __future__ import annotations

import argparse
import difflib
import json
import os
import pickle
import statistics
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CHILD = r"""
import json, pickle, sys, time
from fencewatch.sinks.metrics import MetricsConfig
from fencewatch.sinks.metrics_batch import MetricsBatch
from fencewatch.sinks.prometheus import MetricsSink

scenarios = pickle.load(open(sys.argv[1], "rb"))
out, mode = sys.argv[2], sys.argv[3]
texts, times = [], {}
for name, config, batches in scenarios:
    add_s = render_s = 0.0
    now = [4_000_000_000.0]
    sink = MetricsSink(MetricsConfig(**config), clock=lambda: now[0],
                       build_labels={"version": "v", "python_version": "p", "pyspark_version": "s"})
    for i, fields in enumerate(batches):
        now[0] += 1.0
        batch = MetricsBatch(**fields)
        t0 = time.process_time()
        sink.add(batch)
        t1 = time.process_time()
        text = sink.render()
        t2 = time.process_time()
        add_s += t1 - t0
        render_s += t2 - t1
        if mode == "texts":
            texts.append((name, i, text))
    times[name] = (add_s, render_s)
if mode == "texts":
    pickle.dump(texts, open(out, "wb"))
print(json.dumps(times))
"""


# ----------------------------------------------------------------------------- the batches


def simulated(profile_name: str, groups: int, events: int, batch_ms: int = 1000) -> list[dict]:
    """A profile's events as the job's micro-batches bring them to the exporter: routed, judged,
    and counted chunk by chunk by the writer (``BatchWriter._chunk``); the batch's
    :class:`MetricsBatch` fields as ``BatchWriter._write_batch`` hands them over."""
    import pandas as pd

    from fencewatch.sim.profiles import profile
    from fencewatch.sim.world import SimConfig, simulate
    from fencewatch.state.config import RulesConfig
    from fencewatch.streaming.runtime.routing import make_router
    from fencewatch.streaming.runtime.state_fn import make_stream_fn
    from fencewatch.streaming.runtime.writer import BatchWriter, _BatchTotals
    from bench.state_fn_batches import _State  # Spark's GroupState over a dict

    evs = simulate(SimConfig(knobs=replace(profile(profile_name), groups=groups), seed=5,
                             start_ts=1_700_000_000_000, duration_ms=None, max_events=events, labels=False))
    lines = [(e["ts"], json.dumps(e).encode()) for e in evs]
    router = make_router()
    wall = [lines[0][0] / 1000]
    fn = make_stream_fn(RulesConfig(), wall_clock=lambda: wall[0], sources=("heartbeats", "offsets"))
    writer = BatchWriter(None)
    store: dict = {}
    out, i, seq, n_batch, after = [], 0, 0, 0, 0
    while after < 5:  # then five empty batches: what the hold kept is released
        after += i >= len(lines)
        n_batch += 1
        end = lines[0][0] + n_batch * batch_ms
        chunk = []
        while i < len(lines) and lines[i][0] < end:
            chunk.append(lines[i][1])
            i += 1
        n = len(chunk)
        keys = {}
        if n:
            pdf = pd.DataFrame({
                "value": chunk, "seq": range(seq, seq + n), "event_id": [f"t/0/{j}" for j in range(seq, seq + n)],
                "coords": [None] * n, "source": ["heartbeats" if j % 2 else "offsets" for j in range(n)],
                "record_ts": [0] * n, "caught_up": [True] * n})
            keys = dict(list(pd.concat(list(router([pdf]))).groupby("key")))
        seq += n
        now = end + 300
        wall[0] = now / 1000
        acc = _BatchTotals()
        for k in sorted(set(keys) | set(store)):
            frames = fn((k,), iter([keys[k][["key", "source", "payload", "caught_up"]]] if k in keys else []),
                        _State(store, k, now, timed_out=k not in keys))
            for frame in frames:
                writer._chunk(frame, acc)
        out.append({"batch_id": n_batch, "alerts": acc.alerts, "dlq": dict(acc.dlq_counts), **acc.steps.fields(),
                    "batch_duration_s": 0.25 + (n_batch % 7) / 10, "decision_latencies_s": acc.latencies_s(),
                    "last_event_ts_ms": acc.last_ts, "input_lag_records": n, "state_rows": len(store)})
    return out


def synthetic() -> list[dict]:
    """The dashboards tests' feed (``tests/dashboards/conftest.py``), 40 batches."""
    sys.path.insert(0, str(ROOT / "tests" / "dashboards"))
    from conftest import SyntheticFeed

    feed = SyntheticFeed()
    return [feed.batch() for _ in range(40)]


def _status(group: str, cluster: str = "c", **kw) -> dict:
    base = {"cluster": cluster, "group_id": group, "protocol": "consumer", "members": 2, "partitions_held": 4,
            "group_epoch": 3, "max_member_epoch": 3, "expiry_deadline_ms": None, "rebalances_total": 1,
            "state": "Stable"}
    return {**base, **kw}


def edges() -> list[dict]:
    """Cases the profiles may not reach: folding and promotion, restarts, deletion, odd values."""
    ts = 1_800_000_000_000
    out = []
    for b in range(30):
        statuses = [_status(f"g{j}", "c" if j % 3 else "d", members=j + b % 3, rebalances_total=(b * j) % 11,
                            protocol=("consumer", "classic", "streams", "weird")[j % 4],
                            state=("Stable", "Empty", "Reconciling", "Nope")[(b + j) % 4],
                            expiry_deadline_ms=ts + j * 60_000 if j % 2 else None,
                            group_epoch=None if j == 5 else b) for j in range(8) if (b + j) % 3]
        if b == 7:
            statuses.append(_status("g2", state="Dead"))
        if b % 9 == 4:
            statuses += [{"cluster": "c", "group_id": "bad", "members": "x"}, {"group_id": ""},
                         _status("none", members=None, partitions_held=None, max_member_epoch=None,
                                 rebalances_total=None)]
        events = {("c", f"g{(b * 5) % 8}", "offset_commit", "offsets"): 50 + b,
                  ("d", f"g{(b * 3) % 8}", "heartbeat", "heartbeats"): 5, ("c", "", "partition_epochs", "offsets"): 1}
        out.append({"batch_id": b, "group_status": statuses, "events": events,
                    "heartbeat_errors": [{"cluster": "c", "group_id": f"g{b % 8}", "error": 110, "count": 2}],
                    "deleted_groups": [("c", "g4")] if b == 20 else [], "last_event_ts_ms": ts + b * 1000,
                    "alerts": [{"cluster": "c", "group_id": f"g{b % 8}", "kind": "LOG_TRUNCATION",
                                "severity": "critical", "ts": ts + b * 1000, "details": {}}] if b % 6 == 1 else [],
                    "dlq": {"MISSING_FIELD: x": 1}, "state_memory_bytes": 1024 * b})
    return out


def wide(groups: int = 5000, batches: int = 12) -> list[dict]:
    """Many groups a batch (a live cluster's): what the status parsing, the rebalances' growth and
    the group gauges cost per batch and per scrape; also folding at scale."""
    ts = 1_800_000_000_000
    return [{"batch_id": b, "last_event_ts_ms": ts + b * 1000,
             "group_status": [_status(f"w{j}", f"k{j % 3}", members=1 + (j + b) % 5, partitions_held=j % 17,
                                      group_epoch=b + j % 4, max_member_epoch=b + j % 4,
                                      rebalances_total=b * (j % 3), state=("Stable", "Reconciling")[(j + b) % 2],
                                      expiry_deadline_ms=ts + j * 1000 if j % 5 == 0 else None,
                                      protocol=("consumer", "classic")[j % 2])
                              for j in range(groups) if (j + b) % 4],
             "events": {(f"k{j % 3}", f"w{j}", "offset_commit", "offsets"): 1 + (j * b) % 7
                        for j in range(0, groups, 3)}}
            for b in range(batches)]


def scenarios(groups: int, events: int) -> list[tuple[str, dict, list[dict]]]:
    out = []
    for name in ("mixed", "ephemeral", "expiry-hazard", "streams"):
        batches = simulated(name, groups, events)
        out.append((f"{name}/max_groups=3", {"max_groups": 3}, batches))
        out.append((f"{name}/default", {}, batches))
    feed = synthetic()
    out += [("synthetic/max_groups=2", {"max_groups": 2}, feed), ("synthetic/default", {}, feed)]
    out += [("edges/max_groups=3", {"max_groups": 3}, edges()), ("edges/max_groups=0", {"max_groups": 0}, edges())]
    out.append(("wide/max_groups=200", {"max_groups": 200}, wide()))
    return out


# ----------------------------------------------------------------------------- the children


def python_path(old_tree: Path, tmp: Path) -> Path:
    """A PYTHONPATH entry whose ``fencewatch`` package is ``old_tree``'s code."""
    from bench.ab_replay import package_of

    return package_of(old_tree, tmp)


def child(pythonpath: Path | None, data: Path, out: Path, mode: str) -> dict:
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    env.pop("PYTHONPATH", None)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    # cwd outside the checkout: the new code is the installed (editable) package
    res = subprocess.run([sys.executable, "-c", CHILD, str(data), str(out), mode], env=env, cwd="/tmp",
                         capture_output=True, text=True)
    if res.returncode:
        raise SystemExit(f"the child failed: {res.stderr.strip().splitlines()[-1:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old_tree", type=Path)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--groups", type=int, default=12)
    ap.add_argument("--events", type=int, default=6000)
    args = ap.parse_args()
    if not (args.old_tree / "sinks" / "prometheus.py").is_file():
        print(f"{args.old_tree}: no sinks/prometheus.py (an older tree: git archive REV | tar -x -C DIR)",
              file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="fw-ab-exposition-") as tmp_name:
        tmp = Path(tmp_name)
        made = scenarios(args.groups, args.events)
        data = tmp / "batches.pickle"
        data.write_bytes(pickle.dumps(made))
        old_pp = python_path(args.old_tree.resolve(), tmp)
        child(old_pp, data, tmp / "old.pickle", "texts")
        child(None, data, tmp / "new.pickle", "texts")
        old, new = pickle.loads((tmp / "old.pickle").read_bytes()), pickle.loads((tmp / "new.pickle").read_bytes())
        assert [(n, i) for n, i, _ in old] == [(n, i) for n, i, _ in new]
        differ = [(n, i) for (n, i, a), (_, _, b) in zip(old, new) if a != b]
        for (n, i, a), (_, _, b) in zip(old, new):
            if a != b:  # the first difference, as a diff
                print("\n".join(list(difflib.unified_diff(a.splitlines(), b.splitlines(), f"old {n} #{i}",
                                                             f"new {n} #{i}", lineterm="", n=1))[:40]))
                break
        for name, config, batches in made:
            texts = [t for n, _, t in new if n == name]
            series = len([line for line in texts[-1].splitlines() if line and not line.startswith("#")])
            print(f"{name:28} {len(batches):4} batches, {series:5} series at the end, "
                  f"{sum(1 for n, _ in differ if n == name)} differ")
        total = sum(len(t) for _, _, t in new)
        print(f"{len(new)} scrapes compared ({total / 1e6:.1f} MB of text): "
              f"{'byte-identical' if not differ else f'{len(differ)} DIFFER, first {differ[0]}'}")
        times: dict[str, list] = {"old": [], "new": []}
        for _ in range(args.pairs):
            times["old"].append(child(old_pp, data, tmp / "x", "time"))
            times["new"].append(child(None, data, tmp / "x", "time"))
        print(f"CPU seconds, median of {args.pairs} children each, old and new alternately:")
        for label, names in (("all scenarios", [n for n, _, _ in made]), ("wide only", ["wide/max_groups=200"])):
            for k, what in enumerate(("add", "scrape")):
                o, n = (statistics.median(sum(t[name][k] for name in names) for t in times[side])
                        for side in ("old", "new"))
                print(f"  {label:14} {what:6}: old {o:.3f} s, new {n:.3f} s ({(n / o - 1) * 100:+.1f} %)")
        print(f"load average at end: {os.getloadavg()[0]:.2f}")
        return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
