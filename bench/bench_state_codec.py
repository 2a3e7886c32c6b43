"""The Spark state's encoding (``streaming/runtime/state_codec.py``) beside pickle, per key and micro-batch.

A simulated trace is replayed through the state function's own path without Spark: the router's
frames (``route_records``), each key's ``Hold``, ``_run``, the status row's fold, in micro-batches of
``--batch`` records, every key's state and hold carried from batch to batch by one codec, as the job
stores them; each encode and decode is timed (CPU time), once per replay, the codecs alternating:

- ``pickle``: what 0.1.0 stored (``pickle.HIGHEST_PROTOCOL``; topic watches with their log unfolded);
- ``state_codec``: the versioned msgpack (topic watches folded first, judgement cache not stored).

``--judgement-cache`` also runs the batches with the judgement cache emptied before storing (what
the job does) and carried over, to weigh rebuilding it against storing it. ``--uneven`` plans the
batches as a backlog read unevenly does (no caught-up mark), so holds keep events across batches.

    fencewatch simulate --profile mixed --groups 50 --events 200000 --seed 5 --out /tmp/mixed.jsonl
    python bench/bench_state_codec.py /tmp/mixed.jsonl [--batch 20000] [--uneven] [--judgement-cache]

Not in ``make bench``: a comparison behind a decision (docs/decisions.md, "State in the checkpoint").
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fencewatch.state import group as grp  # noqa: E402
from fencewatch.state.config import RulesConfig  # noqa: E402
from fencewatch.state.engine import KeyKind  # noqa: E402
from fencewatch.streaming.ingest.events import MEMBERSHIP_TYPES  # noqa: E402
from fencewatch.streaming.runtime import state_codec as codec  # noqa: E402
from fencewatch.streaming.runtime.columns import DLQ_KEY  # noqa: E402
from fencewatch.streaming.runtime.hold import Hold  # noqa: E402
from fencewatch.streaming.runtime.routing import (decode_released, make_checker, parse_key, read_items,  # noqa: E402
                                                  route_records)
from fencewatch.streaming.runtime.state_fn import _run  # noqa: E402

CLOCK = time.process_time_ns
PROTOCOL = pickle.HIGHEST_PROTOCOL
CODECS = {
    "pickle": (lambda k, st: pickle.dumps(st, PROTOCOL), lambda k, b: pickle.loads(b),
               lambda k, h: pickle.dumps(h, PROTOCOL), lambda k, b: pickle.loads(b)),
    "state_codec": (codec.encode_state, lambda k, b: codec.decode_state(k, b),
                    lambda k, h: codec.encode_hold(h), lambda k, b: codec.decode_hold(b, k)),
}


def micro_batches(path: Path, size: int):
    """The trace's records as the router's input rows, ``size`` to a batch."""
    batch = []
    with open(path, "rb") as f:
        for seq, line in enumerate(f):
            value = line.rstrip(b"\n")
            source = "heartbeats" if json.loads(value)["type"] in MEMBERSHIP_TYPES else "offsets"
            batch.append((value, seq, f"trace/0/{seq}", None, source, 0, None))
            if len(batch) == size:
                yield batch
                batch = []
    if batch:
        yield batch


def replay(path: Path, size: int, name: str, *, caught_up: bool = True, keep_cache: bool = False) -> dict:
    """Carry every key's state from batch to batch through codec ``name``, as the job stores it:
    ``{"group encode": [ns], ..., "hold bytes": [n], "group run": [ns], "topic bucket run": [ns]}``
    (run: the hold and the rules, the rest of the call's Python work; a topic watch's log is folded
    there when it grows past its limit, by ``state_codec`` before every write)."""
    enc, dec, enc_hold, dec_hold = CODECS[name]
    cfg, check = RulesConfig(), make_checker("json")
    stored, caches, now = {}, {}, 0
    stats: dict = defaultdict(list)
    for records in micro_batches(path, size):
        now += 1_000
        cols = route_records(records, check, caught_up)
        rows = defaultdict(list)
        for key, source, payload in zip(cols["key"], cols["source"], cols["payload"]):
            if key != DLQ_KEY:
                rows[key].append((source, payload))
        for key, items in rows.items():
            pkey, blob = parse_key(key), stored.get(key)
            kind = "group" if pkey.kind is KeyKind.GROUP else "topic bucket"
            st, hold = None, Hold()
            if blob is not None:
                t0 = CLOCK()
                st = dec(pkey, blob[0])
                t1 = CLOCK()
                hold = dec_hold(pkey, blob[1])
                stats[kind + " decode"].append(t1 - t0)
                stats["hold decode"].append(CLOCK() - t1)
            is_group = pkey.kind is KeyKind.GROUP
            if keep_cache and st is not None and key in caches:
                st.judged = caches[key]
            t0 = CLOCK()
            for source, payload in items:
                hold.admit_read(source, read_items(pkey, source, payload, Counter(), now), now)
            ready = decode_released(pkey, hold.release(now, 2_000, all_sources=is_group,
                                                       expected=("heartbeats", "offsets"), caught_up=caught_up), [])
            st = _run(pkey, st, ready, cfg, grp.Outputs(), hold.clock(now) if is_group and hold.last_ts else None)
            stats[kind + " run"].append(CLOCK() - t0)
            if is_group:
                caches[key] = st.judged
                st.judged = type(st.judged)()  # stored without it, as the job does (``keep_cache``: carried)
                grp.status(st, cfg)  # the status row folds the group's offsets, as in the job
            t0 = CLOCK()
            b = enc(pkey, st)
            t1 = CLOCK()
            h = enc_hold(pkey, hold)
            stats["hold encode"].append(CLOCK() - t1)
            stats[kind + " encode"].append(t1 - t0)
            stats[kind + " bytes"].append(len(b))
            stats["hold bytes"].append(len(h))
            stored[key] = (b, h)
    return stats


def report(runs: dict, title: str) -> str:
    lines = [title, "", "| codec | value | calls | encode us (mean / p50) | decode us (mean / p50) | bytes (mean / max) "
                        "| the call's rules, us (mean) |", "|---|---|---|---|---|---|---|"]
    for name, s in runs.items():
        for what in ("group", "topic bucket", "hold"):
            enc, dec, size = s[what + " encode"], s[what + " decode"], s[what + " bytes"]
            run = f"{statistics.fmean(s[what + ' run']) / 1e3:,.0f}" if what + " run" in s else ""
            lines.append(f"| {name} | {what} | {len(enc)} | {statistics.fmean(enc) / 1e3:.1f} / "
                         f"{statistics.median(enc) / 1e3:.1f} | {statistics.fmean(dec) / 1e3:.1f} / "
                         f"{statistics.median(dec) / 1e3:.1f} | {statistics.fmean(size):,.0f} / {max(size):,} | {run} |")
    return "\n".join(lines)


def judgement_cache(path: Path, size: int) -> str:
    """The rules' CPU per group key and batch with the cache emptied before storing (rebuilt on
    demand: what the job does) and carried over (what storing it would save at most)."""
    c = [t / 1e3 for t in replay(path, size, "state_codec")["group run"]]
    w = [t / 1e3 for t in replay(path, size, "state_codec", keep_cache=True)["group run"]]
    return (f"judgement cache, {len(c)} group calls: the rules' CPU per call mean {statistics.fmean(c):.0f} us "
            f"emptied, {statistics.fmean(w):.0f} us carried over (p50 {statistics.median(c):.0f} / "
            f"{statistics.median(w):.0f})")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace", type=Path, help="a JSON-lines trace (fencewatch simulate --out)")
    p.add_argument("--batch", type=int, default=20_000, help="records per micro-batch")
    p.add_argument("--rounds", type=int, default=2, help="replays per codec, alternating")
    p.add_argument("--uneven", action="store_true", help="no caught-up mark: holds keep events across batches")
    p.add_argument("--judgement-cache", action="store_true", help="also weigh rebuilding the cache against storing it")
    a = p.parse_args()
    runs: dict = {}
    for _ in range(a.rounds):  # alternating: this host's speed drifts
        for name in CODECS:
            for k, v in replay(a.trace, a.batch, name, caught_up=not a.uneven).items():
                runs.setdefault(name, defaultdict(list))[k] += v
    title = (f"`bench_state_codec.py {a.trace.name} --batch {a.batch}{' --uneven' if a.uneven else ''}`, "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load {os.getloadavg()[0]:.1f} "
             f"(CPU time per call, {a.rounds} rounds)")
    print(report(runs, title))
    if a.judgement_cache:
        print()
        print(judgement_cache(a.trace, a.batch))


if __name__ == "__main__":
    main()
