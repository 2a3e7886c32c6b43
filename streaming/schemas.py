"""Spark schemas of the job, declared once.

Rows between the stages are deliberately few: the router emits one row per key and source per
input batch with that key's records in one msgpack frame (``streaming.routing``: the records
themselves, decoded where they are judged), and the state function emits its outputs already
rendered by ``sinks.jsonl`` (so both engines write identical bytes): in the stream, one row for
all the verdict lines of a call (a key's micro-batch), in replay one per commit request (sorted
by ts), one per alert, dead letter and group status, plus the few columns the driver aggregates
for metrics.
"""
from __future__ import annotations

from pyspark.sql.types import BinaryType, BooleanType, IntegerType, LongType, StringType, StructField, StructType

DLQ_KEY = "\x00dlq"  # key of dead letters and skipped unknown types: passed through, no state

# Router output: one row per key and source per input batch (its items in one msgpack frame), and
# one row per dead letter or unknown type under DLQ_KEY.
ROUTED = StructType([
    StructField("key", StringType(), False),
    StructField("ts", LongType(), False),  # the newest event's ts (dead letter: the record's)
    StructField("seq", LongType(), False),  # the first record's seq
    StructField("etype", StringType(), True),  # "events", or "dlq" / "unknown"
    StructField("source", StringType(), True),  # heartbeats | offsets | file | request_log | ... (the Hold's)
    # events: msgpack (items, {type: events}): (seq, JSON, event id) records and (ts, seq, group,
    # partitions, offsets, leader epochs) stored-commit facts (streaming.routing); dead letter: the record
    StructField("payload", BinaryType(), True),
    StructField("reason", StringType(), True),  # DLQ reason, or the unknown type name
    StructField("coords", StringType(), True),
    StructField("events", LongType(), True),  # input events in ``payload`` (commit facts not counted)
    StructField("caught_up", BooleanType(), True),  # the micro-batch read every source to its end (Hold)
])

# State function output: one row per call's verdicts (stream) or commit's verdicts (replay) / alert /
# dead letter / group status / a topic key's event counts.
OUTPUT = StructType([
    StructField("record", StringType(), False),  # verdicts | verdict | alert | dlq | unknown | status | counts
    StructField("ts", LongType(), True),
    StructField("seq", LongType(), True),
    StructField("ord", IntegerType(), True),  # verdicts, verdict: how many lines ``json`` holds
    StructField("cluster", StringType(), True),
    StructField("group_id", StringType(), True),
    StructField("json", StringType(), True),  # verdict lines of replay ("\n"-joined) / alert / status / counts line
    StructField("alert_id", StringType(), True),
    # dead letter: the record value; verdicts: the lines, UTF-8, each ending in "\n" (bytes, not a
    # string: Arrow converts a Python str ~17x slower, and the producer wants bytes)
    StructField("raw", BinaryType(), True),
    StructField("reason", StringType(), True),  # dead letter: why
    StructField("stamps", BinaryType(), True),  # verdicts: each line's commit ts, int64 LE
])

# Per-key state: the key's pickled state object, and events held back by the skew tolerance.
STATE = StructType([
    StructField("blob", BinaryType(), True),
    StructField("pending", BinaryType(), True),
])
