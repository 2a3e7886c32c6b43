"""``fencewatch checkpoint``: show a job's checkpoint, bound a batch planned too large, or start a
new checkpoint where an old one stopped (``reset-state``). Local checkpoints: for a remote one,
copy its ``offsets/`` and ``commits/`` (and ``fencewatch-state/``) locally first
(docs/reliability.md)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from fencewatch.streaming.config.settings import positive_int_arg
from fencewatch.streaming.runtime import checkpoint as cp


def _show(path: Path, state: bool = False) -> int:
    from fencewatch.sinks.kafka import parse_log

    p = cp.plan(path)
    out = {k: v for k, v in p.items() if k != "starts"}
    found = cp.state_format(str(path))
    out["state_format"] = (f"{found} (pickled Python objects: not read by this version; "
                           f"`fencewatch checkpoint reset-state`)" if found == cp.OLD_FORMAT else found)
    out["kafka_source"] = cp.recorded_source(None, str(path))
    try:
        out["sink_log"] = parse_log(cp.sink_log(None, str(path)).read())
    except ValueError as exc:
        out["sink_log"] = str(exc)
    seed = cp.start_offsets(str(path))
    if seed is not None:
        out["starts_at"] = seed
    if state:
        out["state"] = _local_state_figures(str(path))
    print(json.dumps(out, indent=1))
    return 0


def _bound(path: Path, limit: int) -> int:
    if limit <= 0:
        print("--max-offsets-per-partition must be > 0", file=sys.stderr)
        return 1
    done = cp.bound_planned_batch(path, limit)
    if done is None:
        print("the last planned batch is committed: nothing to bound (start the job with --max-offsets-per-trigger)")
        return 0
    print(f"batch {done['batch']}: {done['before']:,} records planned, now {done['after']:,} "
          f"(the rest follow in the next batches); start the job again on this checkpoint")
    return 0


def _reset_state(path: Path, new: str | None) -> int:
    if not new:
        print("reset-state needs --to NEW_CHECKPOINT (a new, empty folder)", file=sys.stderr)
        return 1
    done = cp.reset_state(path, Path(new))
    after = done["planned_after"]
    print(f"{new}: a new checkpoint that starts after batch {done['batch']} of {path} "
          f"({sum(len(p) for p in done['offsets'].values())} partitions of {len(done['offsets'])} topics)"
          + (f"; batch {after} was planned but not committed: its records are read again, and outputs "
             f"it had written may repeat (alert ids repeat only for identical alerts)" if after is not None else "")
          + f". Run the job with --checkpoint {new}: every group's state starts empty and is rebuilt from the "
          f"events read (members seen before the start count as unknown for the warm-up); keep {path} until "
          f"the new query has caught up")
    return 0


def _cmd_checkpoint(args: argparse.Namespace) -> int:
    path = Path(args.checkpoint)
    if not (path / "offsets").is_dir() and not (args.action == "show" and (path / cp.START_OFFSETS_FILE).exists()):
        print(f"{path}: not a streaming checkpoint (no offsets/ folder); remote checkpoints: copy offsets/ and "
              f"commits/ locally, run this, copy the result back", file=sys.stderr)
        return 1
    try:
        if args.action == "show":
            return _show(path, args.state)
        if args.action == "bound":
            return _bound(path, args.max_offsets_per_partition)
        return _reset_state(path, args.to)
    except (OSError, ValueError) as exc:
        print(f"{path}: {exc}", file=sys.stderr)
        return 1


def register(subparsers) -> None:
    p = subparsers.add_parser("checkpoint", help="show a streaming checkpoint, bound a batch planned too large, "
                                                 "or start a new checkpoint where one stopped")
    p.add_argument("action", choices=("show", "bound", "reset-state"),
                   help="show: the last planned batch, its size, the state format, the Kafka reader, the sink log; bound: rewrite "
                        "the last planned batch to read at most --max-offsets-per-partition records per partition; "
                        "reset-state: a new checkpoint (--to) that resumes at this one's committed offsets with "
                        "empty state (a checkpoint whose state this version cannot read)")
    p.add_argument("--checkpoint", required=True, help="the job's checkpoint directory (local)")
    p.add_argument("--max-offsets-per-partition", type=positive_int_arg, default=50_000,
                   help="bound: records per partition the rewritten batch reads at most (default %(default)s)")
    p.add_argument("--to", help="reset-state: the new checkpoint directory (absent or empty)")
    p.add_argument("--state", action="store_true",
                   help="show: also the keyed state at the last committed batch (rows, stored bytes; starts a local "
                        "Spark; the job may be running)")
    p.set_defaults(func=_cmd_checkpoint)


def _local_state_figures(checkpoint_location: str) -> dict:
    """:func:`checkpoint.state_figures` in this process's Spark session, or a local one started for it."""
    from pyspark.sql import SparkSession

    from fencewatch.streaming.runtime.session import spark_session

    active = SparkSession.getActiveSession()
    spark = active or spark_session("local[1]", app_name="fencewatch-checkpoint", shuffle_partitions=1)
    try:
        return cp.state_figures(spark, checkpoint_location)
    finally:
        if active is None:
            spark.stop()
