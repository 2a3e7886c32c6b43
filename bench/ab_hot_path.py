"""Not in ``make bench``: the router and the state function (the job's hot path, outside Spark) of
an older commit and this code, run alternately in child processes on the same micro-batches.

Why: a change to what crosses the router, the hold and the state function (issue 47 item 1, the
named records) must not cost the job its speed, and this host's speed drifts within minutes, so
old and new run in pairs, seconds apart, each child the best of ``--repeats`` passes. Each child
routes the simulator's ``mixed`` events for ``--groups`` groups in batches of ``--batch-ms`` of
event time (``make_router`` with the job's group buckets) and hands each key's rows to
``make_stream_fn`` with an in-memory stand-in for Spark's ``GroupState`` (as
``state_fn_batches.py``, without its timers). It prints CPU microseconds per event for the router
and the state function, and a digest of every output row's fields (verdict lines unpacked, the
status rows' groups, alerts, dead letters): old and new must give the same digest.

    python bench/ab_hot_path.py OLD_REV [--groups 400] [--seconds 40] [--pairs 5]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.ab_replay import finish, head, old_code  # noqa: E402

CHILD = r"""
import hashlib, json, pickle, sys, time
from dataclasses import replace
import pandas as pd
import fencewatch.streaming.runtime.state_fn as sf
try:
    from fencewatch.streaming.runtime.routing import make_router
except ImportError:  # before issue 47 item 1 it lived in state_fn
    make_router = sf.make_router
try:
    from fencewatch.streaming.runtime.outputs import read_status, unpack_lines
except ImportError:
    read_status, unpack_lines = sf.read_status, sf.unpack_lines
from fencewatch.streaming.runtime.outputs import read_frame
from fencewatch.sim.profiles import profile
from fencewatch.sim.world import SimConfig, simulate
from fencewatch.state.config import RulesConfig

groups, seconds, batch_ms, buckets, repeats = map(int, sys.argv[1:6])


class State:
    def __init__(self, store, key, now, timed_out=False):
        self.store, self.key, self.now, self.hasTimedOut = store, key, now, timed_out

    @property
    def exists(self):
        return self.key in self.store

    @property
    def get(self):
        return self.store[self.key][0]

    def update(self, value):
        self.store[self.key] = [value, None]

    def remove(self):
        self.store.pop(self.key, None)

    def setTimeoutDuration(self, ms):
        self.store[self.key][1] = self.now + ms

    def getCurrentProcessingTimeMs(self):
        return self.now


events = simulate(SimConfig(knobs=replace(profile("mixed"), groups=groups), seed=9, start_ts=1_700_000_000_000,
                            duration_ms=seconds * 1000, labels=False))
lines = [(e["ts"], json.dumps(e).encode()) for e in events]
frames = []
t0, i, seq, batch = lines[0][0], 0, 0, 0
while i < len(lines):
    batch += 1
    end = t0 + batch * batch_ms
    chunk = []
    while i < len(lines) and lines[i][0] < end:
        chunk.append(lines[i][1])
        i += 1
    n = len(chunk)
    # two sources, every other record, uneven marks: the hold keeps and releases events
    frames.append((end + 300, pd.DataFrame({
        "value": chunk, "seq": range(seq, seq + n), "event_id": [f"t/0/{j}" for j in range(seq, seq + n)],
        "coords": [None] * n, "source": ["heartbeats" if j % 2 else "offsets" for j in range(n)],
        "record_ts": [0] * n, "caught_up": [batch % 3 != 0] * n})))
    seq += n
best = None
for _ in range(repeats):
    router = make_router(group_buckets=buckets)
    fn = sf.make_stream_fn(RulesConfig(), sources=("heartbeats", "offsets"))
    store, digest, route_s, state_s = {}, hashlib.sha256(), 0.0, 0.0
    for now, pdf in frames:
        ta = time.process_time()
        routed = pd.concat(list(router([pdf])))
        tb = time.process_time()
        keys = dict(list(routed.groupby("key")))
        due = [k for k, (_, wake) in store.items() if wake is not None and wake < now and k not in keys]
        outs = []
        for k, frame in keys.items():
            outs += fn((k,), iter([frame[["key", "source", "payload", "caught_up"]]]), State(store, k, now))
        for k in due:
            outs += fn((k,), iter([]), State(store, k, now, timed_out=True))
        tc = time.process_time()
        route_s += tb - ta
        state_s += tc - tb
        for out in outs:
            for r in read_frame(out):
                if r.record == "verdicts":
                    r = r._replace(raw=unpack_lines(r.raw))
                elif r.record == "status":
                    statuses, summary = read_status(r.raw)
                    r = r._replace(raw=repr((statuses, sorted(summary[0].items()) if summary else None,
                                             sorted(summary[1].items()) if summary else None)).encode())
                digest.update(repr(tuple(r)).encode())
    if best is None or route_s + state_s < best[0] + best[1]:
        best = (route_s, state_s)
print(json.dumps({"events": len(lines), "route_us": best[0] / len(lines) * 1e6,
                  "state_us": best[1] / len(lines) * 1e6, "digest": digest.hexdigest()[:16]}))
"""


def child(pythonpath: str | None, args) -> dict:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    res = subprocess.run([sys.executable, "-c", CHILD, str(args.groups), str(args.seconds), str(args.batch_ms),
                          str(args.group_buckets), str(args.repeats)], env=env, cwd="/tmp", capture_output=True,
                         text=True)
    if res.returncode:
        raise SystemExit(f"the child failed: {res.stderr.strip().splitlines()[-1:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old", help="the commit to compare against")
    ap.add_argument("--old-pythonpath", help="a PYTHONPATH entry with the old code (instead of a worktree of OLD)")
    ap.add_argument("--groups", type=int, default=400)
    ap.add_argument("--seconds", type=int, default=40, help="simulated event time")
    ap.add_argument("--batch-ms", type=int, default=1000)
    ap.add_argument("--group-buckets", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=2, help="passes per child, the best kept")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args(argv)
    rows = []

    def pairs(old_pp: str) -> None:
        for i in range(1, args.pairs + 1):
            for side, pp in (("old", old_pp), ("new", os.environ.get("PYTHONPATH"))):
                r = child(pp, args)
                r.update(pair=i, side=side)
                rows.append(r)
                print(f"{i} {side}: router {r['route_us']:.2f} us/event, state function {r['state_us']:.2f} "
                      f"us/event, digest {r['digest']}", file=sys.stderr)

    if args.old_pythonpath:
        pairs(args.old_pythonpath)
    else:
        with old_code(args.old, prefix="fw-abh-") as (_, old_pp):
            pairs(str(old_pp))
    lines = [f"load average at start: {os.getloadavg()[0]:.2f}",
             f"{rows[0]['events']:,} mixed events, {args.groups} groups, batches of {args.batch_ms} ms, "
             f"{args.group_buckets} group buckets; CPU us per event, each child the best of {args.repeats} passes",
             f"{'pair':<5}{'code':<8}{'router':>8}{'state fn':>10}{'total':>8}  digest"]
    for r in rows:
        lines.append(f"{r['pair']:<5}{r['side']:<8}{r['route_us']:>8.2f}{r['state_us']:>10.2f}"
                     f"{r['route_us'] + r['state_us']:>8.2f}  {r['digest']}")
    ratios = []
    for i in range(1, args.pairs + 1):
        old, new = (next(r for r in rows if r["pair"] == i and r["side"] == s) for s in ("old", "new"))
        ratios.append((old["route_us"] + old["state_us"]) / (new["route_us"] + new["state_us"]))
    lines.append("old/new CPU per event per pair: " + ", ".join(f"{x:.3f}" for x in ratios)
                 + f"; median {statistics.median(ratios):.3f}")
    lines.append("outputs: " + ("identical in every run (digest)" if len({r["digest"] for r in rows}) == 1
                                else "DIFFER (see the digests)"))
    finish(lines, f"router + state function A/B against {args.old} ({head()})",
           f"python bench/ab_hot_path.py {args.old} --groups {args.groups} --seconds {args.seconds} "
           f"--pairs {args.pairs}", args.write_docs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
