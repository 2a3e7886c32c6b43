"""The streaming query: inputs -> per-key state (``applyInPandasWithState``) -> the batch writer;
starting it on a checkpoint, draining it, stopping it between micro-batches, and the facts the
exporter reads from its progress. Also the job's sinks and its start-up line. Each start works
out its inputs once (``input_plan.InputPlan``) and hands that plan to the inputs, the output
batching, the connector's pacer and the start-up line."""
from __future__ import annotations

import contextlib
import json
import logging
import time
from dataclasses import replace

from fencewatch.streaming.config import settings as cfgmod
from fencewatch.streaming.runtime.input_plan import InputPlan, connector_pacer
from fencewatch.streaming.runtime.inputs import build_inputs, group_sources
from fencewatch.streaming.runtime.writer import BatchWriter, StopRequested

log = logging.getLogger(__name__)


def build_outputs(inputs, cfg: cfgmod.Config, *, emit_verdicts: bool | None = None):
    """Routed rows (:func:`build_inputs`) -> keyed state; the DataFrame of output records (schemas.OUTPUT)."""
    from fencewatch.streaming.runtime.columns import KEYED, OUTPUT, STATE
    from fencewatch.streaming.runtime.state_fn import make_stream_fn

    if emit_verdicts is None:
        emit_verdicts = bool(cfg.sinks.verdicts_topic)
    # No event-time watermark: reading a backlog, one topic runs ahead of the other and a
    # watermark would drop the other's events as late. Ordering is per key (hold.Hold).
    return inputs.select(*KEYED).groupBy("key").applyInPandasWithState(
        make_stream_fn(cfg.state, max_skew_ms=cfg.streaming.max_skew_ms, emit_verdicts=emit_verdicts,
                       sources=group_sources(cfg.streaming.source), emit_groups=bool(cfg.sinks.groups_topic)),
        OUTPUT, STATE, "append", "ProcessingTimeTimeout")


COLLECT_BATCH_ROWS = 40


_MAX_RECORDS_PER_BATCH = "spark.sql.execution.arrow.maxRecordsPerBatch"


@contextlib.contextmanager
def _collect_batching(spark, cfg: cfgmod.Config, plan: InputPlan):
    """Small Arrow batches for the query's outputs, so the driver writes a state task's outputs
    while the other tasks still run; set while the query starts (a streaming query runs in a copy
    of the session made at its start), then the session's own value again.

    Why: Spark's collect writes each partition's Arrow batches to the driver's socket through an
    8 KB buffer it flushes only when more bytes come, so the driver can read a finished partition's
    last batch only when the next partition's arrive. A partition's outputs are ~50-150 rows, one
    batch at Spark's default (10,000 rows): with one state partition per core (then the default)
    the driver wrote a whole batch's outputs after the last task, with the executors idle. At
    40 rows a partition's outputs are several batches and only the last waits, so the driver writes
    each finished task's outputs while the others run; the last task's still come after it ends
    (docs/decisions.md, "Outputs and exactly-once" and "State partitions"). The same
    setting sizes the router's ``mapInArrow`` input batches, where 40 rows would cost a Python call per 40
    records: only a query without one gets it (the events source routing inside ``read``), and a
    ``streaming.spark_conf`` value wins (``plan``: the query start's, which says whether a source
    goes through the router)."""
    s = cfg.streaming
    if _MAX_RECORDS_PER_BATCH in s.spark_conf or plan.through_router:
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


def start_query(spark, cfg: cfgmod.Config, writer: BatchWriter, *, trigger: str | None = None,
                plan: InputPlan | None = None):
    """Start the query on a checkpoint whose state this version reads (``checkpoint.
    ensure_state_format``) and whose Kafka reader is the one chosen (the plan's ``reader``).
    ``plan``: this start's inputs, when the caller built it for the start-up line
    (:func:`startup_line`); else built here. Either way once per start: a restart builds a new one
    (the topics' ids as they are then). (No ``availableNow``: processing-time timeouts keep a
    stateful query scheduling batches, so it would never finish; use :func:`drain` to process a
    backlog.)"""
    from fencewatch.streaming.runtime.checkpoint import CONNECTOR_MARK, ensure_state_format, record_source, sink_log
    from fencewatch.streaming.sources.connector import ConnectorBatches

    location = cfg.streaming.checkpoint_location
    if plan is None:
        plan = InputPlan.build(spark, cfg)  # refuses a checkpoint written with the other reader
    buckets = ensure_state_format(location, spark, cfg.streaming.group_buckets)
    if buckets != cfg.streaming.group_buckets:  # the checkpoint's keys decide
        cfg = replace(cfg, streaming=replace(cfg.streaming, group_buckets=buckets))
    record_source(spark, location, plan.reader.source)
    # Spark's connector: the driver marks each batch caught up (or not; a rerun as its first
    # attempt, from the checkpoint) and paces the next one.
    batches = writer if not plan.connector else ConnectorBatches(
        writer, connector_pacer(cfg, plan), spark, marks=sink_log(spark, location, CONNECTOR_MARK))
    with _collect_batching(spark, cfg, plan):
        outputs = build_outputs(build_inputs(spark, cfg, plan), cfg)
        query = (outputs.writeStream.queryName("fencewatch").foreachBatch(batches)
                 .option("checkpointLocation", location).outputMode("append")
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
    from fencewatch.streaming.runtime.output_topics import topics_gone
    from fencewatch.streaming.runtime.probes import health_config

    k = cfg.sinks
    client = cfgmod.kafka_client_config(cfg, "producer")
    marker = sink_log(spark, cfg.streaming.checkpoint_location)
    fmt = cfgmod.alerts_format(cfg)
    log.info("alerts to %s as %s (sinks.alerts_format %s: %s)", k.alerts_topic, fmt.upper() if fmt == "json" else "Avro",
             k.alerts_format, "a Schema Registry is configured" if cfg.streaming.schema_registry.get("url")
             else "no Schema Registry is configured")
    kafka = KafkaOutputs(client, verdicts_topic=k.verdicts_topic, alerts_topic=k.alerts_topic,
                         dlq_topic=k.dlq_topic, groups_topic=k.groups_topic, alerts_format=fmt, marker=marker,
                         alert_serializer=alert_encoder(cfg) if fmt == "avro" else None,
                         topics_gone=topics_gone(cfg))
    metrics = MetricsSink(MetricsConfig(host=k.metrics_host, port=k.metrics_port if metrics_port is None else metrics_port,
                                        max_groups=k.metrics_top_groups,
                                        critical_hold_s=k.metrics_critical_hold_ms / 1000,
                                        expiry_warning_s=cfg.state.expiry_warning_ms / 1000,
                                        broker_policy=cfg.state.broker_policy.value, health=health_config(cfg)))
    return kafka, metrics


def alert_encoder(cfg: cfgmod.Config):
    """The Schema Registry encoder of the alerts when a registry is configured, else None."""
    settings = cfg.streaming.schema_registry
    if not settings:
        return None
    from fencewatch.streaming.ingest.schema_registry import RegistryAlertEncoder

    return RegistryAlertEncoder(settings)


def cluster_note(s: cfgmod.StreamingConfig) -> str:
    """The startup line's word on ``streaming.cluster``: the name the job gives what it decodes
    itself, or that it names nothing (an events-only job: events carry their own field)."""
    if any(name != "events" for name in cfgmod.source_list(s.source)):
        return f" as cluster {s.cluster!r}"
    if cfgmod.job_cluster(s) is not None:
        return (f" (streaming.cluster {s.cluster!r} unused: contract events keep their own cluster field, "
                "set by the bridge's --cluster)")
    return ""


def startup_line(cfg: cfgmod.Config, spark, plan: InputPlan) -> str:
    """The job's first line: version, config digest, inputs, rules, outputs, and which reader
    reads Kafka and why (``plan``: the one the first start uses, so the line says what runs)."""
    from fencewatch.sinks.build_info import installed

    s = cfg.streaming
    topics = {"events": f"{s.heartbeats_topic} + {s.offsets_topic} ({s.input_format})",
              "request-log": s.request_log_topic, "consumer-offsets": s.consumer_offsets_topic}
    read = " + ".join(topics.get(name, name) for name in cfgmod.source_list(s.source))
    return (f"fencewatch {installed()} (config {cfgmod.digest(cfg)}), Spark {spark.version} {s.spark_master}: "
            f"{read} @ {s.bootstrap_servers}{cluster_note(s)} (from "
            f"{s.starting_offsets}), skew {s.max_skew_ms} ms, warm-up {cfg.state.warmup_ms} ms, trigger "
            f"{s.trigger_interval}, checkpoint {s.checkpoint_location}; alerts -> {cfg.sinks.alerts_topic} "
            f"({cfgmod.alerts_format(cfg)}), verdicts -> {cfg.sinks.verdicts_topic or 'off'}, "
            f"DLQ -> {cfg.sinks.dlq_topic}{f', groups -> {cfg.sinks.groups_topic}' if cfg.sinks.groups_topic else ''}; Kafka read by {plan.read_by}")
