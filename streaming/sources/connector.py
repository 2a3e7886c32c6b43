"""Spark's own Kafka connector (``format("kafka")``): where its jars are, which reader a query uses
and why, and what the job adds to it so that it keeps the Python source's guarantees.

What lives here:

- the jars: ``make connector-jars`` (``pom-connector.xml``) puts ``spark-sql-kafka-0-10_2.13``
  and the three jars it needs in ``<jars dir>/spark-kafka-<pyspark version>/``
  (:func:`connector_jars`); the session puts them on the driver's and executors' classpath
  (``spark.jars``); the image has them in Spark's own jars;
- the choice (``streaming.kafka_source``: auto | spark | python, :func:`choose`): ``auto`` is the
  connector when its provider class loads, else ``fencewatch-kafka``;
- :class:`ConnectorBatches`, around the ``foreachBatch`` function, for the two things the
  connector does not do by itself: the caught-up mark (the micro-batch read every partition to
  the end offsets Spark found when it planned it: the hold may then release a group's events at
  once) and the adaptive limit (``sources.pacing.BatchPacer``, as the Python source applies it).

How: a ``foreachBatch`` function runs on the query's own thread (py4j calls back on the JVM
thread that called it) before any job of its micro-batch: Spark computes the batch's rows only
when that function collects them. So, first, it reads the batch's planned offsets from the
running query (its ``MicroBatchExecutionContext``: start, end, and the latest offsets the
connector saw at planning) and sets the mark as a local property of that thread, which every
task of the batch's jobs then reads (``runtime.routing.task_caught_up``). A batch run again after
a restart has no latest offsets in Spark (it is planned from ``offsets/N``), so a first attempt
writes its mark to the checkpoint before the batch's outputs, and the rerun reads it back: the
rerun releases what its first attempt released (docs/reliability.md, issue 33). After the batch it sets
the next batch's ``ReadLimit`` in the query's table of read limits (``uniqueSources``), read
when Spark plans the next batch on the same thread. Both are Spark internals (4.0 to 4.2 checked):
if they are missing, the job logs it once and runs as before (no mark: the hold's wall-time
rules; the first limit, fixed).

Imports: the standard library, ``pacing`` and the Kafka source's options (no pyspark at import).
"""
from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from fencewatch.streaming.config.settings import ConfigError
from fencewatch.streaming.sources.kafka.options import SHORT_NAME
from fencewatch.streaming.sources.pacing import BatchPacer

log = logging.getLogger(__name__)

#: Spark's own connector's provider (``format("kafka")``).
JVM_PROVIDER_CLASS = "org.apache.spark.sql.kafka010.KafkaSourceProvider"
#: What ``pom-connector.xml`` fetches: the connector and the jars it needs that pyspark lacks.
ARTIFACTS = ("spark-sql-kafka-0-10_2.13", "spark-token-provider-kafka-0-10_2.13", "kafka-clients", "commons-pool2")
#: ``streaming.kafka_source``'s values.
KAFKA_SOURCES = ("auto", "spark", "python")
#: The jar cache, as the Makefile's ``JARS_DIR``: ``$FENCEWATCH_JARS_DIR``, else the user's cache.
JARS_ENV = "FENCEWATCH_JARS_DIR"
#: The local property a micro-batch's tasks read the caught-up mark from: ``<batch id>:true|false``.
CAUGHT_UP_PROPERTY = "fencewatch.caughtUp"
_BATCH_ID_PROPERTY = "streaming.sql.batchId"  # Spark's own, set on the query's thread for each batch
_QUERY_ID_PROPERTY = "sql.streaming.queryId"
_KAFKA_STREAM = "KafkaMicroBatchStream"


# --------------------------------------------------------------------------- the jars

def jars_root() -> Path:
    """Where ``make`` puts one folder per jar set (the Makefile's ``JARS_DIR``)."""
    explicit = os.environ.get(JARS_ENV, "").strip()
    if explicit:
        return Path(explicit)
    cache = os.environ.get("XDG_CACHE_HOME", "").strip() or str(Path.home() / ".cache")
    return Path(cache) / "fencewatch" / "jars"


def connector_dir(spark_version: str) -> Path:
    return jars_root() / f"spark-kafka-{spark_version}"


def connector_jars(spark_version: str) -> list[str] | None:
    """The connector's jars for this Spark version, or None when ``make connector-jars`` has not
    fetched them (a folder is complete once Maven finished: ``.complete``)."""
    folder = connector_dir(spark_version)
    if not (folder / ".complete").is_file():
        return None
    jars = sorted(str(p) for p in folder.glob("*.jar"))
    if not all(any(Path(j).name.startswith(a + "-") for j in jars) for a in ARTIFACTS):
        return None
    return jars


def classpath_conf(setting: str, spark_version: str, conf: dict[str, str]) -> dict[str, str]:
    """``spark.jars`` with the connector's jars added, for a session this process starts: unless
    the source is ``python``, the jars are not fetched, or the settings already bring the connector
    (``spark.jars.packages`` naming it, or its jar in ``spark.jars``)."""
    if setting == "python" or "spark-sql-kafka" in conf.get("spark.jars.packages", "") \
            or "spark-sql-kafka" in conf.get("spark.jars", ""):
        return {}
    jars = connector_jars(spark_version)
    if not jars:
        return {}
    given = [j for j in conf.get("spark.jars", "").split(",") if j.strip()]
    return {"spark.jars": ",".join(given + jars)}


# --------------------------------------------------------------------------- the choice

@dataclass(frozen=True, slots=True)
class SourceChoice:
    """Which reader the job's Kafka sources use, and why (the start-up log says both)."""

    source: str  # "spark" (format("kafka")) | "python" (fencewatch-kafka)
    reason: str

    @property
    def connector(self) -> bool:
        return self.source == "spark"

    @property
    def fmt(self) -> str:
        return "kafka" if self.connector else SHORT_NAME

    def describe(self) -> str:
        name = "Spark's Kafka connector (format kafka)" if self.connector else f"{SHORT_NAME} (Python)"
        return f"{name}: {self.reason}"


class ConnectorMissing(ConfigError):
    """The connector is asked for (or the checkpoint was written with it) and does not load."""


class SourceMismatch(ConfigError):
    """``streaming.kafka_source`` names the other reader than the one the checkpoint was written with."""


def missing_hint(spark_version: str) -> str:
    return (f"Spark's Kafka connector ({JVM_PROVIDER_CLASS}) is not on the classpath: `make connector-jars` "
            f"fetches spark-sql-kafka-0-10_2.13:{spark_version} into {connector_dir(spark_version)}, where "
            f"fencewatch finds it; or give Spark the jars yourself (spark.jars, $SPARK_HOME/jars, or "
            f"--packages org.apache.spark:spark-sql-kafka-0-10_2.13:{spark_version})")


_NAMES = {"spark": "Spark's Kafka connector", "python": SHORT_NAME}


class InternalTopic(ConfigError):
    """Spark's connector is asked to read one of Kafka's internal topics, which it does not."""


def choose(setting: str, *, loadable: bool, spark_version: str, jars_added: bool,
           recorded: str | None = None, internal_topic: str | None = None) -> SourceChoice:
    """``streaming.kafka_source`` against what this session can load and what the checkpoint was
    written with (``recorded``, None for a new one). ``auto`` keeps a checkpoint's reader; an
    explicit setting that names the other one is refused: their offsets are kept apart, and a
    silent switch would read records again or skip them. ``internal_topic``: an internal topic the
    job reads (``__consumer_offsets``): Spark's connector reads nothing from one (Spark 4.2 against
    Kafka 4.2: no rows with subscribe, subscribePattern or assign), so only the Python reader will do."""
    if internal_topic is not None and "spark" in (setting, recorded):
        raise InternalTopic(
            f"Spark's Kafka connector reads no record of the internal topic {internal_topic} (--source "
            "consumer-offsets); use --kafka-source python (or auto)"
            + (", with a new checkpoint: this one was written with the connector" if recorded == "spark" else ""))
    if internal_topic is not None:
        return SourceChoice("python", f"the job reads the internal topic {internal_topic}, which Spark's "
                                      f"Kafka connector does not read (streaming.kafka_source {setting})")
    where = f"its jars from {connector_dir(spark_version)}" if jars_added else "on Spark's own classpath"
    if recorded is not None and setting in ("spark", "python") and setting != recorded:
        raise SourceMismatch(
            f"the checkpoint was written reading Kafka with {_NAMES[recorded]} (streaming.kafka_source "
            f"{recorded}); this start asks for {_NAMES[setting]} ({setting}). The two keep their offsets "
            f"apart, so switching would read records again or skip them. Start with --kafka-source {recorded} "
            f"(or auto), or use a new checkpoint with --starting-offsets set to where it should begin")
    wanted = recorded or setting
    why = f"the checkpoint was written with it (streaming.kafka_source {setting})" if recorded \
        else f"streaming.kafka_source is {setting}"
    if wanted == "python":
        return SourceChoice("python", why)
    if wanted == "spark":
        if not loadable:
            raise ConnectorMissing(f"{why}, but {missing_hint(spark_version)}")
        return SourceChoice("spark", f"{why}; {where}")
    if loadable:
        return SourceChoice("spark", f"streaming.kafka_source is auto and the connector loads ({where})")
    return SourceChoice("python", f"streaming.kafka_source is auto and the connector does not load (no "
                                  f"{connector_dir(spark_version)}: `make connector-jars` fetches it)")


def provider_loadable(spark) -> bool:
    """True when Spark's own Kafka connector is on the driver's classpath (classic sessions only)."""
    try:
        jvm = spark._jvm  # Spark Connect sessions have no JVM gateway
        if jvm is None:
            return False
        loader = jvm.java.lang.Thread.currentThread().getContextClassLoader()
        jvm.java.lang.Class.forName(JVM_PROVIDER_CLASS, False, loader)
        return True
    except Exception:
        return False


# --------------------------------------------------------------------------- the planned batch

@dataclass(frozen=True, slots=True)
class PlannedBatch:
    """A micro-batch's Kafka offsets as Spark planned them (every ``format("kafka")`` source)."""

    batch_id: int
    planned_ms: int  # wall time of the planning (Spark's batch timestamp)
    records: int  # offsets planned: sum of end - start
    caught_up: bool  # every partition read to the latest offset the connector found at planning
    limited: bool  # some partition stops short of it: the read limit cut the batch
    ends: tuple[str, ...] = ()  # each Kafka source's planned end offsets, as canonical JSON
    rerun: bool = False  # planned before a restart: Spark kept no latest offsets for it


def planned_batch(ranges: list[tuple[dict, dict, dict | None]], batch_id: int, planned_ms: int) -> PlannedBatch:
    """(start, end, latest) offsets JSON of each Kafka source -> the batch's facts. ``latest``
    None: not known in this process (a batch planned before a restart and run again): not
    caught up by these offsets alone (:meth:`ConnectorBatches.mark` keeps its first attempt's)."""
    records, caught_up, limited, rerun = 0, True, False, False
    for start, end, latest in ranges:
        for topic, parts in end.items():
            for p, off in parts.items():
                records += max(0, int(off) - int((start.get(topic) or {}).get(p, off)))
        if latest is None:
            caught_up, rerun = False, True
            continue
        short = any(int((end.get(t) or {}).get(p, -1)) < int(off) for t, ps in latest.items() for p, off in ps.items())
        caught_up = caught_up and not short
        limited = limited or short
    ends = tuple(sorted(json.dumps(end, sort_keys=True, separators=(",", ":")) for _, end, _ in ranges))
    return PlannedBatch(batch_id, planned_ms, records, caught_up and bool(ranges), limited, ends, rerun)


def _scala_items(scala_map) -> Iterator[tuple]:
    it = scala_map.iterator()
    while it.hasNext():
        pair = it.next()
        yield pair._1(), pair._2()


def _read_planned(execution, batch_id: int) -> PlannedBatch | None:
    """The running query's view of batch ``batch_id`` (None: not the batch Spark is running)."""
    ctx = execution.getLatestExecutionContext()
    if ctx.batchId() != batch_id:
        return None
    starts = {s: o for s, o in _scala_items(ctx.startOffsets())}
    latests = {s: o for s, o in _scala_items(ctx.latestOffsets())}
    ranges = []
    for stream, end in _scala_items(ctx.endOffsets()):
        if _KAFKA_STREAM not in stream.getClass().getName():
            continue
        start, latest = starts.get(stream), latests.get(stream)
        ranges.append((json.loads(start.json()) if start is not None else {}, json.loads(end.json()),
                       json.loads(latest.json()) if latest is not None else None))
    return planned_batch(ranges, batch_id, int(ctx.offsetSeqMetadata().batchTimestampMs()))


def _set_read_limit(jvm, execution, max_rows: int) -> None:
    """The next micro-batch's read limit for every Kafka source of the query: Spark reads the
    table ``uniqueSources`` (source -> ``ReadLimit``) each time it plans a batch."""
    table = execution.uniqueSources()
    limit = jvm.org.apache.spark.sql.connector.read.streaming.ReadLimit.maxRows(max_rows)
    updated = table
    for stream, _ in _scala_items(table):
        if _KAFKA_STREAM in stream.getClass().getName():
            updated = updated.updated(stream, limit)
    getattr(execution, "uniqueSources_$eq")(updated)


class ConnectorBatches:
    """The ``foreachBatch`` function for a query reading with ``format("kafka")``: sets the
    micro-batch's caught-up mark before ``write`` computes it, and the next batch's adaptive limit
    after (see the module). ``pacer`` None: a fixed limit (``maxOffsetsPerTrigger`` given).
    ``spark``: the session that starts the query (a micro-batch runs in a clone of it, whose query
    manager does not know the query). ``marks``: a log in the checkpoint (``read``/``write`` of a
    text, as the sink log) where a batch's first attempt keeps its mark for a rerun; None: a rerun
    after a restart is never caught up."""

    def __init__(self, write: Callable, pacer: BatchPacer | None, spark, marks=None) -> None:
        self.write = write
        self.pacer = pacer
        self.spark = spark
        self.marks = marks
        self.broken: str | None = None  # why the internals could not be read (logged once)
        self.last: PlannedBatch | None = None

    def __call__(self, df, batch_id: int) -> None:
        spark = df.sparkSession
        planned, execution = self._before(spark, batch_id)
        self.write(df, batch_id)
        if planned is not None and self.pacer is not None:
            self._after(spark, execution, planned)

    def _before(self, spark, batch_id: int):
        sc = spark.sparkContext
        sc.setLocalProperty(CAUGHT_UP_PROPERTY, None)
        if self.broken:
            return None, None
        try:
            query_id = sc.getLocalProperty(_QUERY_ID_PROPERTY)
            execution = self.spark._jsparkSession.streams().get(query_id).streamingQuery()
            planned = _read_planned(execution, batch_id)
        except Exception as exc:  # Spark's internals moved: run without the mark and the pacing
            self._give_up(exc)
            return None, None
        if planned is None:
            return None, None
        self.last = planned
        caught_up = self.mark(planned)
        sc.setLocalProperty(CAUGHT_UP_PROPERTY, f"{batch_id}:{'true' if caught_up else 'false'}")
        log.debug("connector: batch %d plans %d offsets, caught up: %s%s", batch_id, planned.records, caught_up,
                  " (its first attempt's mark)" if planned.rerun else "")
        return planned, execution

    def mark(self, planned: PlannedBatch) -> bool:
        """The batch's caught-up mark, the same on every attempt. A first attempt that is caught up
        says so in ``marks`` before any of its outputs are written; a rerun after a restart takes
        that mark when it is its batch's, planned to the same end offsets (``fencewatch checkpoint
        bound`` may have cut the batch since: then it no longer reads to the ends)."""
        if not planned.rerun:
            if planned.caught_up and self.marks is not None:
                self.marks.write(json.dumps({"batch": planned.batch_id, "ends": list(planned.ends),
                                             "caught_up": True}))
            return planned.caught_up
        text = self.marks.read() if self.marks is not None else None
        try:
            kept = json.loads(text) if text else {}
        except ValueError:
            log.warning("connector: unreadable caught-up mark %r: batch %d runs without it", text[:200],
                        planned.batch_id)
            return False
        return (isinstance(kept, dict) and kept.get("batch") == planned.batch_id
                and kept.get("ends") == list(planned.ends) and kept.get("caught_up") is True)

    def _after(self, spark, execution, planned: PlannedBatch) -> None:
        pacer = self.pacer
        elapsed_ms = max(1.0, time.time() * 1000 - planned.planned_ms)
        # Spark's connector rounds each partition's share down: a batch it cut reads a few offsets
        # under its limit, so "cut" is read from the offsets (limited), not from the count.
        before = pacer.limit
        limit = pacer.observe(elapsed_ms, before if planned.limited else planned.records, before)
        if limit == before:
            return
        try:
            _set_read_limit(spark._jvm, execution, limit)
        except Exception as exc:
            self._give_up(exc)
            return
        log.debug("connector: batch %d read %d offsets in %.0f ms; next limit %d", planned.batch_id,
                  planned.records, elapsed_ms, limit)

    def _give_up(self, exc: Exception) -> None:
        self.broken = f"{type(exc).__name__}: {exc}"
        log.warning("Spark's Kafka connector: this Spark's query internals are not the ones fencewatch reads "
                    "(%s); running without the caught-up mark (held events wait streaming.max_skew) and with a "
                    "fixed batch limit", self.broken.split("\n")[0][:300])
