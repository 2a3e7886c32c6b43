"""Spark schemas of the job, declared once.

Rows between the stages are deliberately few and flat: the router emits one row
per (key, event) with the event pickled (the typed event or a partition's commit
fact), and the state function emits one row per output record (one per commit request for
its verdicts) already rendered by ``sinks.jsonl`` (so both engines write identical bytes) plus
the few columns the driver aggregates for metrics.
"""
from __future__ import annotations

from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType

DLQ_KEY = "\x00dlq"  # key of dead letters and skipped unknown types: passed through, no state

# Router output: one row per (key, event).
ROUTED = StructType([
    StructField("key", StringType(), False),
    StructField("ts", LongType(), False),
    StructField("seq", LongType(), False),
    StructField("etype", StringType(), True),  # SPEC event type (for counts), or "dlq" / "unknown"
    StructField("source", StringType(), True),  # heartbeats | offsets | file | other
    StructField("payload", BinaryType(), True),  # pickled keyed event, or the raw record for the DLQ
    StructField("reason", StringType(), True),  # DLQ reason, or the unknown type name
    StructField("coords", StringType(), True),
])

# State function output: one row per verdict / alert / dead letter / group status.
OUTPUT = StructType([
    StructField("record", StringType(), False),  # verdict | alert | dlq | unknown | status
    StructField("ts", LongType(), True),
    StructField("seq", LongType(), True),
    StructField("ord", IntegerType(), True),  # verdict: how many lines ``json`` holds
    StructField("cluster", StringType(), True),
    StructField("group_id", StringType(), True),
    StructField("json", StringType(), True),  # a commit's verdict lines ("\n"-joined) / alert / status line
    StructField("alert_id", StringType(), True),
    StructField("raw", BinaryType(), True),  # dead letter: the original record value
    StructField("reason", StringType(), True),  # dead letter: why
])

# Per-key state: the key's pickled state object, and events held back by the skew tolerance.
STATE = StructType([
    StructField("blob", BinaryType(), True),
    StructField("pending", BinaryType(), True),
])
