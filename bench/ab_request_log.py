"""Request-log decoding before and after: this checkout against an older commit, run interleaved.

This host's speed drifts (a shared host: the same bench gave 58,599 and 207,593 lines/CPU-s two
days apart, and its ``__consumer_offsets`` reference 153,728 and 604,663), so a figure from an
earlier run cannot be set against one from now. This runs the old commit and the working tree
alternately, seconds apart, on the same lines of ``bench_request_log.py``'s mix, as the
commands get them (bytes), and optionally counts instructions under valgrind (cachegrind),
which do not drift: the old code is a ``git worktree`` reached through a directory of symlinks
named ``fencewatch`` put first on ``PYTHONPATH`` (as ``ab_replay.py``).

Two measures, lines/s per CPU-second on one core:

- ``records``: lines -> output JSON records, one ``bytes`` per event, as the Spark mapper and
  the live bridge make them: ``events_many`` with ``BATCH_LINES`` per call and ``event_json`` per event
  where the code has ``events_many``, else ``events`` and ``event_json`` line by line (what
  those commands did before it);
- ``offline``: ``run_from_request_log`` (the offline bridge's loop) reading the lines as a
  file's bytes, writing into a ``StringIO``.

    python bench/ab_request_log.py 4d9530a [--lines 200000] [--rounds 3] [--instructions]
        [--write-docs]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench.ab_replay import finish, head, old_code, refs  # noqa: E402
from bench.ab_replay import run as run_child  # noqa: E402

CHILD = r"""
import gc, io, json, os, sys, time
from fencewatch.streaming.commands.bridge import run_from_request_log, tune_gc
from fencewatch.streaming.ingest import request_log
from fencewatch.streaming.ingest.request_log import RequestLogBridge, event_json
batch = getattr(request_log, "BATCH_LINES", 1000)
path, stop = sys.argv[1], sys.argv[2]
with open(path, "rb") as f:
    data = f.read()
with open(path + ".names") as f:
    names = json.load(f)
lines = data.split(b"\n")[:-1]
ids = [str(i) for i in range(len(lines))]
if stop == "none":
    os._exit(0)
if stop == "time":
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
gc.collect()
gc.freeze()
tune_gc()

def records():
    b = RequestLogBridge(names)
    if hasattr(b, "events_many"):
        for k in range(0, len(lines), batch):
            for events in b.events_many(lines[k:k + batch], ids[k:k + batch]):
                for e in events:
                    event_json(e)
    else:
        for line, eid in zip(lines, ids):
            for e in b.events(line, eid):
                event_json(e)

def offline():
    run_from_request_log(io.BytesIO(data), io.StringIO(), io.StringIO(), RequestLogBridge(names))

best = [float("inf"), float("inf")]
for _ in range(2 if stop == "time" else 1):
    for i, (name, fn) in enumerate((("records", records), ("offline", offline))):
        if stop in (name, "time"):
            c0 = time.process_time()
            fn()
            best[i] = min(best[i], time.process_time() - c0)
        if stop == name:
            os._exit(0)
print(" ".join(f"{v:.4f}" for v in best), flush=True)
os._exit(0)
"""


def write_lines(path: Path, n: int) -> None:
    from bench_request_log import build

    lines, names = build(n)
    path.write_bytes(("\n".join(lines) + "\n").encode())
    Path(str(path) + ".names").write_text(json.dumps(names))


def run(pythonpath: Path | None, lines: Path, stop: str) -> str:
    return run_child(pythonpath, lines, stop, (), CHILD)


def instructions(pythonpath: Path | None, lines: Path) -> dict[str, int]:
    """Instructions per line of each measure: whole-process counts minus the start-up's."""
    counts = refs(pythonpath, lines, ("none", "records", "offline"), CHILD)
    n = lines.read_bytes().count(b"\n")
    return {k: (counts[k] - counts["none"]) // n for k in ("records", "offline")}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old", help="the commit to compare against")
    ap.add_argument("--lines", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3, help="old/new pairs, each the best of 2 runs")
    ap.add_argument("--instructions", action="store_true", help="also count instructions (valgrind, 20,000 lines)")
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args(argv)
    new = head()
    with old_code(args.old, "fw-ab-rl-") as (tmp, old_pp):
        path = tmp / "lines.log"
        write_lines(path, args.lines)
        lines = [f"load average at start: {os.getloadavg()[0]:.2f}",
                 f"{args.lines:,} lines of bench_request_log.py's mix as bytes; best of 2 per run; lines/s per "
                 f"CPU-second, one core", f"{'run':<5}{'code':<22}{'records':>12}{'offline':>12}"]
        for i in range(1, args.rounds + 1):
            for label, pp in ((f"{args.old} (before)", old_pp), (f"{new}+ (after)", None)):
                r, o = map(float, run(pp, path, "time").split())
                lines.append(f"{i:<5}{label:<22}{args.lines / r:>12,.0f}{args.lines / o:>12,.0f}")
                print(lines[-1], file=sys.stderr)
        if args.instructions and shutil.which("valgrind"):
            small = tmp / "small.log"
            write_lines(small, 20_000)
            lines += ["", "instructions per line (valgrind cachegrind; 20,000 lines):",
                      f"{'code':<22}{'records':>12}{'offline':>12}"]
            for label, pp in ((f"{args.old} (before)", old_pp), (f"{new}+ (after)", None)):
                n = instructions(pp, small)
                lines.append(f"{label:<22}{n['records']:>12,}{n['offline']:>12,}")
                print(lines[-1], file=sys.stderr)
    finish(lines, f"request-log A/B against {args.old}",
           f"python bench/ab_request_log.py {args.old} --lines {args.lines} --rounds {args.rounds}"
           + (" --instructions" if args.instructions else ""), args.write_docs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
