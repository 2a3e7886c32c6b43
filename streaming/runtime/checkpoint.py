"""The query's checkpoint: the sink log written through Spark's own checkpoint file manager, the
format of its Spark state, and what ``fencewatch checkpoint`` does with one (show it, bound a
batch planned too large, start a new checkpoint where an old one stopped).

Spark plans a micro-batch by writing its end offsets to ``offsets/N`` before running it, and
marks it finished in ``commits/N``. A batch planned over a whole backlog (no
``maxOffsetsPerTrigger`` when it was planned) is replayed with the same end offsets after every
crash: ``fencewatch checkpoint bound`` rewrites that one uncommitted ``offsets/N`` so that it
reads at most N records per partition from where batch N-1 ended; later batches are planned by
the running job's own limit. Nothing is skipped: the records after the new end are the next
batches' input.

A checkpoint's Spark state is in ``state_codec``'s format, recorded in
:data:`STATE_FORMAT_FILE`; a checkpoint of fencewatch 0.1.0 (pickled state) is refused before a
query starts on it, and ``reset-state`` starts a new checkpoint at its committed offsets. The Kafka
reader that wrote a checkpoint (Spark's connector or the Python source) is recorded in
:data:`SOURCE_MARK`: the other one is refused on it; the connector's caught-up mark of a batch
is kept in :data:`CONNECTOR_MARK` for its rerun.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from urllib.parse import urlparse

from fencewatch.streaming.config.settings import ConfigError

log = logging.getLogger(__name__)

SINK_LOG = "fencewatch-sink/state.json"
SOURCE_MARK = "fencewatch-source.json"
CONNECTOR_MARK = "fencewatch-source-caught-up.json"
"""Spark's connector's caught-up mark of the last batch whose first attempt was caught up
(``sources.connector.ConnectorBatches.mark``), read by that batch's rerun after a restart."""
_MANAGERS = ("org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager",  # Spark 4.1+
             "org.apache.spark.sql.execution.streaming.CheckpointFileManager")


class CheckpointSinkLog:
    """The sink's log (``sinks.kafka.SinkLog``) in the checkpoint, through Spark's checkpoint file
    manager: atomic replacement on HDFS, object stores (S3A, ABFS, GCS) and local disks alike, as
    Spark's own offset and commit logs."""

    def __init__(self, spark, checkpoint_location: str, name: str = SINK_LOG):
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

    def read(self) -> str | None:
        if not self._fm.exists(self._path):
            return None
        stream = self._fm.open(self._path)
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
    it reads; the log is written twice per micro-batch, so those processes would run on the
    driver's cores every batch (docs/decisions.md, "Checkpoint files on a local file system").
    Both write the same path."""
    if is_local(checkpoint_location):
        from fencewatch.sinks.kafka import BatchMarker

        return BatchMarker(local_path(checkpoint_location) / name)
    return CheckpointSinkLog(spark, checkpoint_location, name)


# --------------------------------------------------------------------------- the source it was written with

def _source_file(spark, checkpoint_location: str):
    return sink_log(spark, checkpoint_location, SOURCE_MARK)


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
        root = local_path(checkpoint_location)
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


def local_path(location: str) -> Path:
    """A local checkpoint location (a path or a ``file:`` URI) as a path."""
    return Path(urlparse(location).path if location.lower().startswith("file:") else location)


def writable_problem(location: str) -> str | None:
    """Why the job could not write a local checkpoint at ``location``, or None: the folder, or
    its nearest existing parent (the job creates the rest), must take a file; one is written,
    fsynced and removed. Remote file systems (HDFS, S3A, ...) are reached through Spark's Hadoop
    client, which only a Spark session has: not checked here."""
    import os
    import tempfile

    path = local_path(location).expanduser().absolute()
    existing = path
    while not existing.exists():
        if existing.parent == existing:
            return f"no part of {path} exists"
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a folder"
    try:
        fd, name = tempfile.mkstemp(prefix=".fencewatch-doctor-", dir=existing)
        try:
            os.write(fd, b"fencewatch doctor")
            os.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(name)
    except OSError as exc:
        return f"cannot write in {existing}: {exc.strerror or exc}"
    return None


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
        for topic, parts in _topics(end):
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
        for topic, parts in _topics(end):
            new[topic] = {}
            for part, off in parts.items():
                first = ((start or {}).get(topic) or {}).get(part)
                first = int(first) if first is not None else _earliest(checkpoint, topic, part, int(off))
                new[topic][part] = min(int(off), first + max_per_partition)
        if new == {t: dict(parts) for t, parts in _topics(end)}:  # nothing cut: marks kept (the caught-up one)
            new = dict(end)
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


def _topics(offsets: dict | None) -> list[tuple[str, dict]]:
    """A source's offsets per topic, without the marks a source may keep beside them (the Kafka
    source's ``fencewatch:caught_up``: a batch that ``bound`` cuts is no longer caught up)."""
    return [(t, parts) for t, parts in (offsets or {}).items() if isinstance(parts, dict)]


def _earliest(checkpoint: Path, topic: str, part: str, end: int) -> int:
    """The first batch's start: 0 (a topic's log start when the source read from the earliest
    offsets; an offset below the log start is skipped by the source, never lost)."""
    return 0


# --------------------------------------------------------------------------- the state's format

STATE_FORMAT_FILE = "fencewatch-state/format.json"
"""``{"state_format": N}``: the ``state_codec.FORMAT`` of the checkpoint's Spark state, written when
a query first starts on the checkpoint. A checkpoint with batches and no such file is 0.1.0's,
whose state is pickled Python objects."""
START_OFFSETS_FILE = "fencewatch-state/start-offsets.json"
"""``fencewatch checkpoint reset-state``'s seed: where a new checkpoint's query starts reading."""
OLD_FORMAT = "0.1.0"


class CheckpointFormatError(ConfigError):
    """A checkpoint whose Spark state this version cannot read (refused before the query starts)."""


def _file(spark, location: str, name: str):
    """A small fencewatch file in the checkpoint, read and replaced like the sink log."""
    return sink_log(spark, location, name)


def has_batches(location: str, spark=None) -> bool:
    """Whether a query has planned a batch on this checkpoint (``offsets/N`` exists)."""
    if is_local(location):
        return bool(_batches(local_path(location) / "offsets"))
    jvm = spark._jvm
    path = jvm.org.apache.hadoop.fs.Path(location.rstrip("/") + "/offsets")
    fs = path.getFileSystem(spark._jsc.hadoopConfiguration())
    return fs.exists(path) and any(st.getPath().getName().isdigit() for st in fs.listStatus(path))


def state_format(location: str, spark=None) -> int | str | None:
    """The checkpoint's state format: a ``state_codec.FORMAT``, ``"0.1.0"`` (pickled objects), or
    None (no query has started on it yet)."""
    text = _file(spark, location, STATE_FORMAT_FILE).read()
    if text:
        try:
            return int(json.loads(text)["state_format"])
        except (ValueError, KeyError, TypeError) as exc:
            raise CheckpointFormatError(f"checkpoint {location}: unreadable {STATE_FORMAT_FILE}: {text[:200]!r}") from exc
    return OLD_FORMAT if has_batches(location, spark) else None


def ensure_state_format(location: str, spark=None, group_buckets: int = 0) -> int:
    """Before a query starts: refuse a checkpoint whose state this version does not read, with what
    to do; on a new checkpoint, record the format the query will write and its ``group_buckets``
    (``streaming.group_buckets``). Returns the checkpoint's group buckets: the recorded ones, 0
    for a checkpoint of 0.2.0 (one key per group), else ``group_buckets``. ``spark``: needed for a
    checkpoint that is not local."""
    from fencewatch.streaming.runtime.state_codec import FORMAT, MIGRATIONS

    mark = _file(spark, location, STATE_FORMAT_FILE)
    found = state_format(location, spark)
    if found is None:
        mark.write(json.dumps({"state_format": FORMAT, "group_buckets": group_buckets}))
        return group_buckets
    if found == OLD_FORMAT:
        raise CheckpointFormatError(
            f"checkpoint {location} holds Spark state in fencewatch 0.1.0's format (pickled Python objects), "
            f"which this version does not read. To resume where it stopped with fresh state (groups rebuild "
            f"under the warm-up): fencewatch checkpoint reset-state --checkpoint {location} --to NEW_CHECKPOINT, "
            f"then run with --checkpoint NEW_CHECKPOINT; or start from a fresh checkpoint "
            f"(docs/reliability.md, \"State format\")")
    if found > FORMAT:
        raise CheckpointFormatError(f"checkpoint {location} holds state format {found}, written by a newer "
                                    f"fencewatch; this one reads up to format {FORMAT}: run the newer version")
    if found < FORMAT and any(v not in MIGRATIONS for v in range(found, FORMAT)):
        raise CheckpointFormatError(f"checkpoint {location} holds state format {found}, no longer read: "
                                    f"fencewatch checkpoint reset-state --checkpoint {location} --to NEW_CHECKPOINT")
    recorded = json.loads(mark.read())
    if "group_buckets" in recorded:
        frozen = int(recorded["group_buckets"])
    elif has_batches(location, spark):
        frozen = 0  # written by 0.2.0: its state has one key per group
    else:  # no query has run on it yet: nothing to keep
        frozen = group_buckets
        mark.write(json.dumps({**recorded, "group_buckets": frozen}))
    if frozen != group_buckets:
        log.warning("streaming.group_buckets is %d, but checkpoint %s was started with %d, which it keeps "
                    "(its state's keys depend on it; a new checkpoint takes the setting)", group_buckets,
                    location, frozen)
    return frozen


def reset_state(old: Path, new: Path) -> dict:
    """A new checkpoint that starts where ``old``'s last committed batch ended, with no state: its
    query reads on from there (:func:`start_offsets`) and builds every key's state afresh. ``old``
    is left as it is. Local checkpoints (copy ``offsets/``, ``commits/`` of a remote one first)."""
    p = plan(old)
    batch = p["committed"]
    if batch is None:
        raise ValueError("no batch was committed: nothing to resume from; start from a fresh checkpoint")
    if new.exists() and any(new.iterdir()):
        raise ValueError(f"{new} exists and is not empty: give a new folder")
    offsets: dict[str, dict[str, int]] = {}
    for source in read_offsets_file(old / "offsets" / str(batch))[1]:
        for topic, parts in _topics(source):  # not the Kafka source's caught-up mark
            offsets.setdefault(topic, {}).update({str(k): int(v) for k, v in parts.items()})
    from fencewatch.streaming.runtime.state_codec import FORMAT

    seed = {"from": str(old.resolve()), "batch": batch, "offsets": offsets}
    _file(None, str(new), START_OFFSETS_FILE).write(json.dumps(seed, indent=1, sort_keys=True))
    _file(None, str(new), STATE_FORMAT_FILE).write(json.dumps({"state_format": FORMAT}))
    return {**seed, "planned_after": p["planned"] if p.get("uncommitted") else None}


def start_offsets(location: str, spark=None) -> dict[str, dict[str, int]] | None:
    """``{topic: {partition: offset}}`` where a query on this checkpoint starts, when
    ``reset-state`` made it and no batch has been planned yet (afterwards Spark's own offsets rule)."""
    text = _file(spark, location, START_OFFSETS_FILE).read()
    if not text or has_batches(location, spark):
        return None
    return json.loads(text)["offsets"]


def starting_offsets_json(seed: dict[str, dict[str, int]], topics) -> str | None:
    """``startingOffsets`` for a source reading ``topics`` (Spark's Kafka JSON), or None when the
    seed does not cover them all (a topic added since: the configured starting offsets apply)."""
    if not topics or any(t not in seed for t in topics):
        return None
    return json.dumps({t: seed[t] for t in topics}, separators=(",", ":"))


# --------------------------------------------------------------------------- the state it holds

def state_reader(spark):
    """``spark.read.format("statestore")`` that works in a session that has run no query: pyspark
    4.2.0's state data source asks the driver's state store coordinator, which only the session's
    query manager registers (without it: CANNOT_LOAD_STATE_STORE, RpcEndpointNotFoundException
    StateStoreCoordinator; 4.3.0 read without). ``spark.streams`` makes that manager."""
    spark.streams  # noqa: B018 - creates the query manager, which registers the coordinator
    return spark.read.format("statestore")


def state_figures(spark, checkpoint_location: str, batch_id: int | None = None) -> dict:
    """What the keyed state holds at a committed batch (default: the last), read with Spark's
    state data source (``format("statestore")``): rows and stored bytes (the encoded state and
    held events of each key, as state_codec stored them), split into group keys, group buckets and
    topic keys. The store's own figures
    (``memoryUsedBytes``) follow RocksDB's caches and memtables, not what is stored; this is."""
    from pyspark.sql import functions as F

    from fencewatch.state.engine import KeyKind

    reader = state_reader(spark)
    if batch_id is not None:
        reader = reader.option("batchId", batch_id)
    df = reader.load(checkpoint_location)
    size = "length(value.groupState.blob) + coalesce(length(value.groupState.pending), 0)"
    rows = (df.selectExpr("substring(key.key, 1, 1) AS kind", f"{size} AS size").groupBy("kind")
            .agg(F.count(F.lit(1)).alias("n"), F.sum("size").alias("size")).collect())
    by_kind = {r["kind"]: (int(r["n"]), int(r["size"] or 0)) for r in rows}
    names = {KeyKind.GROUP: "group", KeyKind.GROUP_BUCKET: "group_bucket", KeyKind.TOPIC: "topic"}
    out = {"rows": sum(n for n, _ in by_kind.values()), "bytes": sum(b for _, b in by_kind.values())}
    for k, (n, b) in sorted(by_kind.items()):
        out[f"{names.get(k, k)}_rows"], out[f"{names.get(k, k)}_bytes"] = n, b
    # groups: a key each (0.2.0's layout), or side by side in their buckets (at most
    # streaming.group_buckets rows per cluster, so read back and counted here)
    out["groups"] = by_kind.get(KeyKind.GROUP, (0, 0))[0]
    if KeyKind.GROUP_BUCKET in by_kind:
        from fencewatch.streaming.runtime.state_codec import decode_bucket

        blobs = df.where(f"substring(key.key, 1, 1) = '{KeyKind.GROUP_BUCKET.value}'").selectExpr("value.groupState.blob AS blob").collect()
        out["groups"] += sum(len(decode_bucket(bytes(r["blob"]))) for r in blobs if r["blob"] is not None)
    return out
