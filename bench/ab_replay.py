"""Replay before and after: this checkout against an older commit, run interleaved.

This machine's speed drifts by +-25% within minutes (a shared host), so a benchmark run
now and one run an hour ago cannot be compared. This runs the old commit and the working
tree alternately, seconds apart, on the same trace (decode, judge, write: the calls of
``bench_replay.py``), and optionally counts instructions under valgrind (cachegrind),
which do not drift at all: the old code is a ``git worktree`` reached through a directory
of symlinks named ``fencewatch`` put first on ``PYTHONPATH``.

    python bench/ab_replay.py caf9570 [--trace benchmark|churn] [--groups 200] [--rounds 3] [--instructions]
        [--write-docs]

``--trace churn``: members reassigned every few commits, stale epochs common (``bench/traces.py``).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.report import write_section  # noqa: E402
from bench.traces import TRACES  # noqa: E402

PACKAGES = ("state", "streaming", "sinks", "sim", "dashboards")

# Run in a child: the phases of one replay; ``stop`` ends early (for instruction counts).
# Older commits wrote verdicts to a text handle, newer ones to a binary one.
CHILD = r"""
import gc, inspect, os, sys, time
try:
    from fencewatch.streaming.runtime.replay import decode_lines, judge, write_verdicts
except ImportError:  # a commit before streaming/ was laid out by stage (issue 37)
    from fencewatch.streaming.replay import decode_lines, judge, write_verdicts
from fencewatch.state.config import RulesConfig
path, stop = sys.argv[1], sys.argv[2]
if stop == "none":
    os._exit(0)
if stop == "time":
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
binary = "bytes" in str(inspect.signature(write_verdicts))
best = None
for _ in range(2 if stop == "time" else 1):
    gc.collect()
    c0 = time.process_time()
    with open(path, "rb") as fh:
        events = decode_lines(fh, [], {})
    c1 = time.process_time()
    if stop != "decode":
        commits, alerts, _ = judge(events, RulesConfig())
    c2 = time.process_time()
    if stop in ("write", "time"):
        with open(os.devnull, "wb" if binary else "w") as out:
            write_verdicts(commits, out)
    c3 = time.process_time()
    row = (c1 - c0, c2 - c1, c3 - c2, c3 - c0)
    best = row if best is None or row[3] < best[3] else best
    events = commits = alerts = None
print(" ".join(f"{v:.3f}" for v in best), flush=True)
os._exit(0)  # no teardown: instruction counts end with the phase
"""


def old_tree(rev: str, tmp: Path) -> Path:
    """A PYTHONPATH entry whose ``fencewatch`` package is ``rev``'s code."""
    tree = tmp / "old"
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(tree), rev], check=True)
    return package_of(tree, tmp)


def package_of(tree: Path, tmp: Path) -> Path:
    """A PYTHONPATH entry whose ``fencewatch`` package is ``tree``'s folders, symlinked as the
    installed package lays them out."""
    pkg = tmp / "pp" / "fencewatch"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    for name in PACKAGES:
        if (tree / name).is_dir():
            (pkg / name).symlink_to(tree / name)
    return tmp / "pp"


@contextlib.contextmanager
def old_code(rev: str, prefix: str = "fw-ab-"):
    """(a scratch folder, a PYTHONPATH entry with ``rev``'s code); both removed afterwards."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield tmp, old_tree(rev, tmp)
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tmp / "old")],
                       capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


def head() -> str:
    return subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()


def finish(lines: list[str], title: str, command: str, write_docs: bool) -> None:
    """Print the A/B's table (load at the end added) and, asked to, write it at the top of
    docs/archive/benchmarks-history.md: it is the evidence of one change, not a standing figure."""
    lines.append(f"load average at end: {os.getloadavg()[0]:.2f}")
    text = "\n".join(lines)
    print(text)
    if write_docs:
        write_section(title, command, "Old and new code run alternately, seconds apart (this host's speed "
                      "drifts).\n\n```\n" + text + "\n```", history=True)


def run(pythonpath: Path | None, path: Path, stop: str, under: list[str] = (), child: str = CHILD) -> str:
    """The ``child`` script on ``path`` stopped after ``stop``, with the code on ``pythonpath``
    (None: this checkout), optionally under ``under`` (valgrind); its output."""
    env = dict(os.environ)
    if under:
        env["PYTHONHASHSEED"] = "0"  # instruction counts repeat exactly with one hash seed
    env.pop("PYTHONPATH", None)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    # cwd outside the checkout: the new code is the installed (editable) package.
    res = subprocess.run([*under, sys.executable, "-c", child, str(path), stop], env=env, cwd=path.parent,
                         capture_output=True, text=True, check=True)
    return res.stdout if not under else res.stderr


def refs(pythonpath: Path | None, path: Path, stops: tuple[str, ...], child: str = CHILD) -> dict[str, int]:
    """Whole-process instruction counts (cachegrind) of ``child`` stopped after each of ``stops``."""
    valgrind = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"]
    counts = {}
    for stop in stops:
        out = run(pythonpath, path, stop, valgrind, child)
        line = next(x for x in out.splitlines() if "I" in x and "refs:" in x)
        counts[stop] = int(line.split("refs:")[1].replace(",", "").strip())
    return counts


def instructions(pythonpath: Path | None, trace: Path) -> dict[str, int]:
    """Instructions per phase (millions): differences of whole-process counts stopped after each."""
    counts = refs(pythonpath, trace, ("none", "decode", "judge", "write"))
    return {"decode": (counts["decode"] - counts["none"]) // 10**6,
            "judge": (counts["judge"] - counts["decode"]) // 10**6,
            "write": (counts["write"] - counts["judge"]) // 10**6}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old", help="the commit to compare against")
    ap.add_argument("--trace", choices=sorted(TRACES), default="benchmark", help="which trace (bench/traces.py)")
    ap.add_argument("--groups", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3, help="old/new pairs, each the best of 2 replays")
    ap.add_argument("--instructions", action="store_true", help="also count instructions (valgrind, 100 groups)")
    ap.add_argument("--write-docs", action="store_true")
    args = ap.parse_args(argv)
    new = head()
    with old_code(args.old) as (tmp, old_pp):
        trace = tmp / "trace.jsonl"
        make = TRACES[args.trace]
        info = make(trace, groups=args.groups, rounds=5)
        cp = info["commit_partitions"]
        lines = [f"load average at start: {os.getloadavg()[0]:.2f}",
                 f"trace: {args.trace}, {args.groups} groups, {cp:,} commit-partitions; best of 2 replays per run, "
                 f"CPU seconds, one core", f"{'run':<5}{'code':<22}{'decode':>8}{'judge':>8}{'write':>8}{'total':>8}"
                 f"{'commit-partitions/s':>22}"]
        for i in range(1, args.rounds + 1):
            for label, pp in ((f"{args.old} (before)", old_pp), (f"{new}+ (after)", None)):
                d, j, w, t = map(float, run(pp, trace, "time").split())
                lines.append(f"{i:<5}{label:<22}{d:>8.2f}{j:>8.2f}{w:>8.2f}{t:>8.2f}{cp / t:>22,.0f}")
                print(lines[-1], file=sys.stderr)
        if args.instructions and shutil.which("valgrind"):
            small = tmp / "small.jsonl"
            sinfo = make(small, groups=100, rounds=5)
            lines += ["", f"instructions (millions, valgrind cachegrind; {sinfo['commit_partitions']:,} "
                          f"commit-partitions, 100 groups):", f"{'code':<22}{'decode':>8}{'judge':>8}{'write':>8}"]
            for label, pp in ((f"{args.old} (before)", old_pp), (f"{new}+ (after)", None)):
                n = instructions(pp, small)
                lines.append(f"{label:<22}{n['decode']:>8}{n['judge']:>8}{n['write']:>8}")
                print(lines[-1], file=sys.stderr)
    finish(lines, f"replay A/B against {args.old} ({args.trace} trace)",
           f"python bench/ab_replay.py {args.old} --trace {args.trace} --groups {args.groups} --rounds "
           f"{args.rounds}" + (" --instructions" if args.instructions else ""), args.write_docs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
