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

import struct

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


# --------------------------------------------------------------------------- binary columns

_LENGTH = struct.Struct("<Q")


def pack_bytes(data: bytes) -> bytes:
    """Bytes as they cross the JVM: LZ4 (pyarrow's codec), behind their length. Every byte of a
    row is copied between Arrow and the JVM's rows (and, routed, written to the shuffle and
    read back): the router's frames (``routing.pack_frame``) and the verdict lines
    (``outputs.pack_lines``) both travel this way (docs/decisions.md, "Routing" and "Outputs and
    exactly-once")."""
    import pyarrow as pa

    return _LENGTH.pack(len(data)) + pa.compress(data, codec="lz4", asbytes=True)


def unpack_bytes(packed: bytes) -> bytes:
    """What :func:`pack_bytes` packed."""
    import pyarrow as pa

    (size,) = _LENGTH.unpack_from(packed)
    return pa.decompress(memoryview(packed)[_LENGTH.size:], decompressed_size=size, codec="lz4", asbytes=True)
