"""The query's checkpoint: the sink log written through Spark's own checkpoint file manager, and
``fencewatch checkpoint``, which shows a checkpoint and bounds a batch planned too large.

Spark plans a micro-batch by writing its end offsets to ``offsets/N`` before running it, and
marks it finished in ``commits/N``. A batch planned over a whole backlog (no
``maxOffsetsPerTrigger`` when it was planned) is replayed with the same end offsets after every
crash: ``fencewatch checkpoint bound`` rewrites that one uncommitted ``offsets/N`` so that it
reads at most N records per partition from where batch N-1 ended; later batches are planned by
the running job's own limit. Nothing is skipped: the records after the new end are the next
batches' input.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from urllib.parse import urlparse

log = logging.getLogger(__name__)

SINK_LOG = "fencewatch-sink/state.json"
LEGACY_SINK_LOG = "fencewatch-sink-batch"
SOURCE_MARK = "fencewatch-source.json"
_MANAGERS = ("org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager",  # Spark 4.1+
             "org.apache.spark.sql.execution.streaming.CheckpointFileManager")


class CheckpointSinkLog:
    """The sink's log (``sinks.kafka.SinkLog``) in the checkpoint, through Spark's checkpoint file
    manager: atomic replacement on HDFS, object stores (S3A, ABFS, GCS) and local disks alike, as
    Spark's own offset and commit logs."""

    def __init__(self, spark, checkpoint_location: str, name: str = SINK_LOG, legacy: str | None = LEGACY_SINK_LOG):
        jvm = spark._jvm
        conf = spark._jsc.hadoopConfiguration()
        self._path = jvm.org.apache.hadoop.fs.Path(checkpoint_location.rstrip("/") + "/" + name)
        manager = None
        for cls in _MANAGERS:
            try:
                manager = _java_class(jvm, cls).create(self._path.getParent(), conf)
                break
            except Exception as exc:  # the class moved between Spark versions
                log.debug("checkpoint file manager %s: %s", cls, exc)
        if manager is None:
            raise RuntimeError("Spark's CheckpointFileManager was not found")
        self._fm = manager
        self._fm.mkdirs(self._path.getParent())
        self._jvm = jvm
        # Before this log, the last batch written was a number in this file (read once, on upgrade).
        self._legacy = None if legacy is None else jvm.org.apache.hadoop.fs.Path(
            checkpoint_location.rstrip("/") + "/" + legacy)

    def read(self) -> str | None:
        path = self._path if self._fm.exists(self._path) or self._legacy is None else self._legacy
        if not self._fm.exists(path):
            return None
        stream = self._fm.open(path)
        try:
            return self._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
        finally:
            stream.close()

    def write(self, text: str) -> None:
        out = self._fm.createAtomic(self._path, True)
        try:
            out.write(bytearray(text.encode()))
            out.close()  # the rename (or the object store's atomic put) happens here
        except Exception:
            out.cancel()
            raise


def sink_log(spark, checkpoint_location: str, name: str = SINK_LOG):
    """The sink log for a checkpoint: on the local file system a file written from Python
    (``sinks.kafka.BatchMarker``), else :class:`CheckpointSinkLog` (HDFS, object stores).

    Why not through Hadoop locally: without Hadoop's native library (not in the pyspark wheel) its
    local file system starts a ``chmod`` process per file it creates and a ``readlink`` per status
    it reads; the log is written twice per micro-batch, ~16 processes a batch on the driver's cores
    (docs/decisions.md, issue 14). Both write the same path."""
    if is_local(checkpoint_location):
        from fencewatch.sinks.kafka import BatchMarker

        root = Path(urlparse(checkpoint_location).path if checkpoint_location.lower().startswith("file:")
                    else checkpoint_location)
        return BatchMarker(root / name, legacy=root / "fencewatch-sink-batch")
    return CheckpointSinkLog(spark, checkpoint_location, name)


# --------------------------------------------------------------------------- the source it was written with

def _source_file(spark, checkpoint_location: str):
    if is_local(checkpoint_location):
        from fencewatch.sinks.kafka import BatchMarker

        return BatchMarker(_local_root(checkpoint_location) / SOURCE_MARK)
    return CheckpointSinkLog(spark, checkpoint_location, SOURCE_MARK, legacy=None)


def _local_root(location: str) -> Path:
    return Path(urlparse(location).path if location.lower().startswith("file:") else location)


def recorded_source(spark, checkpoint_location: str) -> str | None:
    """The Kafka reader a checkpoint was written with (``spark`` or ``python``), None for a new
    checkpoint. Why it matters: the two keep their offsets apart (Spark's connector also keeps its
    starting offsets in ``sources/N/0``, and the query plans differ), so a checkpoint read by the
    other one would read records again or skip them. A local checkpoint written before the mark
    existed says it by its files: only the connector writes ``sources/N/0``."""
    text = _source_file(spark, checkpoint_location).read()
    if text:
        return json.loads(text)["kafka_source"]
    if is_local(checkpoint_location):
        root = _local_root(checkpoint_location)
        if _batches(root / "offsets"):
            return "spark" if any((root / "sources").glob("*/0")) else "python"
    return None


def record_source(spark, checkpoint_location: str, source: str) -> None:
    """Mark the checkpoint with its Kafka reader (once; :func:`recorded_source` reads it)."""
    mark = _source_file(spark, checkpoint_location)
    if not mark.read():
        mark.write(json.dumps({"kafka_source": source}) + "\n")


def is_local(location: str) -> bool:
    """A path without a scheme, or a ``file:`` URI."""
    return location.lower().startswith("file:") or "://" not in location


def _java_class(jvm, name: str):
    obj = jvm
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


# --------------------------------------------------------------------------- offsets log (local files)

def _batches(folder: Path) -> list[int]:
    return sorted(int(p.name) for p in folder.glob("*") if p.name.isdigit()) if folder.is_dir() else []


def read_offsets_file(path: Path) -> tuple[list[str], list[dict | None]]:
    """``offsets/N``: the version line and batch metadata line, then one offsets line per source."""
    lines = path.read_text().split("\n")
    head, sources = lines[:2], []
    for line in lines[2:]:
        if not line.strip():
            continue
        sources.append(None if line.strip() == "-" else json.loads(line))
    return head, sources


def plan(checkpoint: Path) -> dict:
    """The last planned batch, whether it committed, and its offsets against the previous batch's."""
    offsets, commits = _batches(checkpoint / "offsets"), _batches(checkpoint / "commits")
    if not offsets:
        return {"planned": None, "committed": commits[-1] if commits else None}
    last = offsets[-1]
    _, ends = read_offsets_file(checkpoint / "offsets" / str(last))
    starts = read_offsets_file(checkpoint / "offsets" / str(last - 1))[1] if last - 1 in offsets else [None] * len(ends)
    sizes = []
    for start, end in zip(starts, ends):
        n = 0
        for topic, parts in (end or {}).items():
            for p, off in parts.items():
                n += max(0, int(off) - int(((start or {}).get(topic) or {}).get(p, 0)))
        sizes.append(n)
    return {"planned": last, "committed": commits[-1] if commits else None, "uncommitted": last not in commits,
            "records": sum(sizes), "starts": starts, "ends": ends}


def bound_planned_batch(checkpoint: Path, max_per_partition: int) -> dict | None:
    """Rewrite the uncommitted ``offsets/N`` so each partition reads at most ``max_per_partition``
    records after batch N-1's end (from 0 when N is the first batch and the source began at the
    earliest offsets). None when the last planned batch is committed (nothing to do)."""
    p = plan(checkpoint)
    if p["planned"] is None or not p.get("uncommitted"):
        return None
    n = p["planned"]
    path = checkpoint / "offsets" / str(n)
    head, ends = read_offsets_file(path)
    bounded = []
    for start, end in zip(p["starts"], ends):
        if end is None:
            bounded.append(None)
            continue
        new = {}
        for topic, parts in end.items():
            new[topic] = {}
            for part, off in parts.items():
                first = ((start or {}).get(topic) or {}).get(part)
                first = int(first) if first is not None else _earliest(checkpoint, topic, part, int(off))
                new[topic][part] = min(int(off), first + max_per_partition)
        bounded.append(new)
    lines = head + ["-" if b is None else json.dumps(b, separators=(",", ":")) for b in bounded]
    backup = path.with_name(f"{n}.unbounded")
    if not backup.exists():
        backup.write_text(path.read_text())
    tmp = path.with_name(f".{n}.tmp")
    tmp.write_text("\n".join(lines))
    tmp.replace(path)
    crc = path.with_name(f".{n}.crc")  # Hadoop's local checksum of the old content
    if crc.exists():
        crc.unlink()
    return {"batch": n, "before": p["records"], "after": plan(checkpoint)["records"]}


def _earliest(checkpoint: Path, topic: str, part: str, end: int) -> int:
    """The first batch's start: 0 (a topic's log start when the source read from the earliest
    offsets; an offset below the log start is skipped by the source, never lost)."""
    return 0


# --------------------------------------------------------------------------- command

def _cmd_checkpoint(args: argparse.Namespace) -> int:
    cp = Path(args.checkpoint)
    if not (cp / "offsets").is_dir():
        print(f"{cp}: not a streaming checkpoint (no offsets/ folder); remote checkpoints: copy offsets/ and "
              f"commits/ locally, run this, copy offsets/N back", file=sys.stderr)
        return 1
    try:
        if args.action == "show":
            p = plan(cp)
            p["kafka_source"] = recorded_source(None, str(cp))
            print(json.dumps({k: v for k, v in p.items() if k not in ("starts",)}, indent=1))
            return 0
        if args.max_offsets_per_partition <= 0:
            print("--max-offsets-per-partition must be > 0", file=sys.stderr)
            return 1
        done = bound_planned_batch(cp, args.max_offsets_per_partition)
    except (OSError, ValueError) as exc:
        print(f"{cp}: {exc}", file=sys.stderr)
        return 1
    if done is None:
        print("the last planned batch is committed: nothing to bound (start the job with --max-offsets-per-trigger)")
        return 0
    print(f"batch {done['batch']}: {done['before']:,} records planned, now {done['after']:,} "
          f"(the rest follow in the next batches); start the job again on this checkpoint")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("checkpoint", help="show a streaming checkpoint, or bound a batch planned too large")
    p.add_argument("action", choices=("show", "bound"),
                   help="show: the last planned batch and its size; bound: rewrite it to read at most "
                        "--max-offsets-per-partition records per partition")
    p.add_argument("--checkpoint", required=True, help="the job's checkpoint directory (local)")
    p.add_argument("--max-offsets-per-partition", type=int, default=50_000)
    p.set_defaults(func=_cmd_checkpoint)
