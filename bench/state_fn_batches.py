"""Not in ``make bench``: the router and the state function over live-sized micro-batches, outside
Spark. Where a live batch's Python time goes with many groups (the live limit, issue 34).

The simulator's ``mixed`` events for ``--groups`` groups are cut into batches of ``--batch-ms`` of
event time, routed (``make_router``, the job's group buckets) and handed key by key to
``make_stream_fn`` with an in-memory stand-in for Spark's ``GroupState`` (its stored values and
timeouts, due keys timed out as Spark does). Each helper of the state function is wrapped in a
wall-clock timer, so the figures include the timers' own cost (~0.2 us a call). Batches after the
first ``--warmup`` are counted. Prints per batch: router and state function milliseconds; per
helper: us per call and calls per batch.

    python bench/state_fn_batches.py [--groups 1450] [--batch-ms 1000] [--seconds 30] [--per-batch]
"""
from __future__ import annotations

import argparse
import functools
import json
import sys
import time
from collections import Counter, defaultdict
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TIMED = ("decode_state", "decode_hold", "encode_state", "encode_hold", "_render", "decode_released",
         "_run", "held_items", "decode_bucket", "encode_bucket", "read_bucket", "_frame", "_Statuses.add",
         "_Statuses.flush")


class _State:
    """What the state function asks of Spark's ``GroupState``, over a dict: key -> [value, wake-up]."""

    def __init__(self, store: dict, key, now: int, timed_out: bool = False) -> None:
        self.store, self.key, self.now, self.hasTimedOut = store, key, now, timed_out

    @property
    def exists(self) -> bool:
        return self.key in self.store

    @property
    def get(self):
        return self.store[self.key][0]

    def update(self, value) -> None:
        self.store[self.key] = [value, None]

    def remove(self) -> None:
        self.store.pop(self.key, None)

    def setTimeoutDuration(self, ms: int) -> None:
        self.store[self.key][1] = self.now + ms

    def getCurrentProcessingTimeMs(self) -> int:
        return self.now


def _timers(module, names) -> tuple[dict, Counter]:
    spent: dict = defaultdict(float)
    calls: Counter = Counter()
    for name in names:
        owner, _, attr = name.rpartition(".")  # "Class.method": the class's method
        owner = getattr(module, owner) if owner else module
        fn = getattr(owner, attr, None)
        if fn is None:
            continue

        def timed(*a, _fn=fn, _name=name, **k):
            t = time.perf_counter()
            try:
                return _fn(*a, **k)
            finally:
                spent[_name] += time.perf_counter() - t
                calls[_name] += 1

        setattr(owner, attr, functools.wraps(fn)(timed))
    return spent, calls


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", type=int, default=1450)
    ap.add_argument("--batch-ms", type=int, default=1000)
    ap.add_argument("--seconds", type=int, default=30, help="simulated event time")
    ap.add_argument("--group-buckets", type=int, default=64)
    ap.add_argument("--warmup", type=int, default=6)
    ap.add_argument("--per-batch", action="store_true", help="also print each batch's figures")
    ap.add_argument("--groups-topic", action="store_true", help="write group snapshots (sinks.groups_topic on)")
    ap.add_argument("--write-docs", action="store_true", help="accepted for make bench's habits; writes nothing")
    args = ap.parse_args(argv)

    import pandas as pd

    import fencewatch.streaming.runtime.state_fn as sf
    from fencewatch.streaming.runtime.routing import make_router
    from fencewatch.sim.profiles import profile
    from fencewatch.sim.world import SimConfig, simulate
    from fencewatch.state.config import RulesConfig

    events = simulate(SimConfig(knobs=replace(profile("mixed"), groups=args.groups), seed=9,
                                start_ts=1_700_000_000_000, duration_ms=args.seconds * 1000, labels=False))
    lines = [(e["ts"], json.dumps(e).encode()) for e in events]
    spent, calls = _timers(sf, TIMED)
    router = make_router(group_buckets=args.group_buckets)
    fn = sf.make_stream_fn(RulesConfig(), sources=("heartbeats", "offsets"), emit_groups=args.groups_topic)
    store: dict = {}
    t0, i, seq, batch = lines[0][0], 0, 0, 0
    totals = {"route": 0.0, "state": 0.0, "batches": 0, "events": 0}
    while i < len(lines):
        batch += 1
        end = t0 + batch * args.batch_ms
        chunk = []
        while i < len(lines) and lines[i][0] < end:
            chunk.append(lines[i][1])
            i += 1
        now = end + 300
        n = len(chunk)
        pdf = pd.DataFrame({"value": chunk, "seq": range(seq, seq + n),
                            "event_id": [f"t/0/{j}" for j in range(seq, seq + n)], "coords": [None] * n,
                            "source": ["offsets"] * n, "record_ts": [0] * n, "caught_up": [True] * n})
        seq += n
        counted = batch > args.warmup
        if batch == args.warmup + 1:  # the helpers' time from here on
            spent.clear()
            calls.clear()
        ta = time.process_time()
        routed = pd.concat(list(router([pdf])))
        tb = time.process_time()
        keys = dict(list(routed.groupby("key")))
        due = [k for k, (_, wake) in store.items() if wake is not None and wake < now and k not in keys]
        for k, frame in keys.items():
            list(fn((k,), iter([frame[["key", "source", "payload", "caught_up"]]]), _State(store, k, now)))
        for k in due:
            list(fn((k,), iter([]), _State(store, k, now, timed_out=True)))
        tc = time.process_time()
        if args.per_batch:
            print(f"batch {batch}: {n:,} events, router {(tb - ta) * 1000:.0f} ms, state function "
                  f"{(tc - tb) * 1000:.0f} ms, {len(keys)} keys with rows, {len(due)} timed out")
        if counted:
            totals["route"] += tb - ta
            totals["state"] += tc - tb
            totals["batches"] += 1
            totals["events"] += n
    b = totals["batches"]
    if not b:
        print("no batch after the warm-up: raise --seconds", file=sys.stderr)
        return 1
    print(f"{args.groups} groups, batches of {args.batch_ms} ms, {b} counted: {totals['events'] / b:,.0f} events a batch; "
          f"router {totals['route'] / b * 1000:.0f} ms, state function {totals['state'] / b * 1000:.0f} ms a batch "
          f"({totals['state'] / totals['events'] * 1e6:.1f} us an event)")
    print("per helper of the state function (nested helpers are inside their callers' time too):")
    for name, s in sorted(spent.items(), key=lambda kv: -kv[1]):
        print(f"  {name:18s} {s / calls[name] * 1e6:7.1f} us a call, {calls[name] / b:7.0f} calls a batch, "
              f"{s / b * 1000:6.1f} ms a batch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
