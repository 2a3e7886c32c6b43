"""``replay --engine spark``: the same trace through Spark, byte-identical to the local engine.

The file is read with its line numbers (the input order and default event id),
routed by ``routing.make_router``, grouped by key, and each key's events run
through ``state.engine.run_key`` with the clock at the trace's last ``ts`` —
exactly what the local engine does, one key at a time.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

from fencewatch.state.config import RulesConfig

from fencewatch.streaming.ingest.events import DecodeError
from fencewatch.streaming.runtime.outputs import read_rows
from fencewatch.streaming.runtime.columns import DLQ_KEY, OUTPUT, ROUTED

log = logging.getLogger(__name__)


@dataclass
class SparkReplayResult:
    verdict_lines: list[str]
    alert_lines: list[str]
    errors: list[DecodeError] = field(default_factory=list)
    unknown_types: dict[str, int] = field(default_factory=dict)
    events: int = 0


def replay_file_spark(path: str, cfg: RulesConfig, *, master: str | None = None, spark=None) -> SparkReplayResult:
    from pyspark.sql import functions as F

    from fencewatch.streaming.runtime.session import spark_session
    from fencewatch.streaming.runtime.routing import make_router
    from fencewatch.streaming.runtime.state_fn import make_batch_fn

    session = spark or spark_session(master or "local[2]", app_name="fencewatch-replay", shuffle_partitions=8)
    lines = session.sparkContext.textFile(path).zipWithIndex().filter(lambda li: li[0].strip() != "")
    raw = session.createDataFrame(lines, "value string, seq long")
    inputs = raw.select(
        F.col("value"), F.col("seq"), F.col("seq").cast("string").alias("event_id"),
        F.concat(F.lit("line "), (F.col("seq") + 1).cast("string")).alias("coords"),
        F.lit("file").alias("source"), F.lit(0).cast("long").alias("record_ts"),
        F.lit(None).cast("string").alias("bad_reason"))
    routed = inputs.mapInArrow(make_router("json"), ROUTED).cache()
    try:
        stats = routed.where(F.col("key") != DLQ_KEY).agg(
            F.max("ts").alias("clock"), F.sum("events").alias("n")
        ).collect()[0]
        clock, events = stats["clock"], int(stats["n"] or 0)
        outputs = routed.groupBy("key").applyInPandas(make_batch_fn(cfg, clock), OUTPUT)
        collected = outputs.collect()
    finally:
        routed.unpersist()
    rows = read_rows([r["record"] for r in collected], [r["ts"] for r in collected], [r["data"] for r in collected])
    verdicts = sorted((r for r in rows if r.record == "verdict"), key=lambda r: (r.ts, r.seq))
    alerts = sorted((r for r in rows if r.record == "alert"), key=lambda r: (r.ts, r.alert_id, r.json))
    result = SparkReplayResult([line for r in verdicts for line in r.json.split("\n")],
                               [r.json for r in alerts], events=events)
    for r in sorted((r for r in rows if r.record in ("dlq", "unknown")), key=lambda r: r.seq):
        if r.record == "dlq":
            code, _, rest = r.reason.partition("(")
            result.errors.append(DecodeError(code, {"detail": rest.rstrip(")")} if rest else {}, r.json))
        else:
            result.unknown_types[r.reason] = result.unknown_types.get(r.reason, 0) + 1
    return result
