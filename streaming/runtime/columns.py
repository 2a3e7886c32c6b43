"""Spark schemas of the job, declared once.

Rows between the stages are deliberately few and narrow: pyspark converts every key's rows
between Arrow and pandas column by column, a cost per column, key and micro-batch
(docs/decisions.md, "Routing", narrow rows). The
router emits one row per key and source per input batch with that key's records in one msgpack
frame (``streaming.routing``: the records themselves, decoded where they are judged); the state
function emits its outputs already rendered by ``sinks.jsonl`` (so both engines write identical
bytes), each row's fields in one msgpack frame (``streaming.outputs``): in the stream, one row for
all the verdict lines of a call (a key's micro-batch), in replay one per commit request, one per
alert, dead letter and group status.
"""
from __future__ import annotations

from pyspark.sql.types import BinaryType, BooleanType, LongType, StringType, StructField, StructType

DLQ_KEY = "\x00dlq"  # key of dead letters and skipped unknown types: passed through, no state

# Router output: one row per key and source per input batch (its items in one msgpack frame), and
# one row per dead letter or unknown type under DLQ_KEY.
ROUTED = StructType([
    StructField("key", StringType(), False),
    StructField("ts", LongType(), False),  # the newest event's ts (dead letter: the record's)
    StructField("source", StringType(), True),  # heartbeats | offsets | file | request_log | ... (the Hold's)
    # events: msgpack (items, {type: events}): (seq, JSON, event id) records and (ts, seq, group,
    # partitions, offsets, leader epochs) stored-commit facts (streaming.routing); dead letter /
    # unknown type: msgpack (etype "dlq" | "unknown", seq, record or None, reason or type, coordinates)
    StructField("payload", BinaryType(), True),
    StructField("events", LongType(), True),  # input events in ``payload`` (commit facts not counted)
    StructField("caught_up", BooleanType(), True),  # the micro-batch read every source to its end (Hold)
])

KEYED = ("key", "source", "payload", "caught_up")
"""The routed columns the state function reads (the rest serve ``replay --engine spark``)."""

# State function output: one row per call's verdicts (stream) or commit's verdicts (replay) / alert /
# dead letter / group status / a topic key's event counts; ``data``: the row's fields
# (streaming.outputs.OutRow), msgpack.
OUTPUT = StructType([
    StructField("record", StringType(), False),  # verdicts | verdict | alert | dlq | unknown | status | counts
    StructField("ts", LongType(), True),
    StructField("data", BinaryType(), False),
])

# Per-key state, each column a ``state_codec`` value (a versioned header and msgpack): the key's
# rules state (a group's aggregate, a topic bucket's watches), and its Hold (events held back).
STATE = StructType([
    StructField("blob", BinaryType(), True),
    StructField("pending", BinaryType(), True),
])
