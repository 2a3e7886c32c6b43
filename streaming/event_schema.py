"""The Avro schema of fencewatch input events (SPEC §1), kept in this one place.

What lives here: one Avro record type, ``FencewatchEvent``, whose fields are the
union of every SPEC §1 event type's fields with SPEC's names, plus the
simulator's optional ground-truth label ``truth`` (docs/simulator.md). Only
``type`` and ``ts`` are required; every other field is a ``["null", X]`` union
with default ``null``, so one schema serves every event type and a record
written by an older producer (fewer fields) still decodes.

Wire formats (SPEC §1): Confluent (magic byte 0, 4-byte big-endian schema id,
Avro body) or a plain Avro body. :func:`encode_avro` writes either;
:func:`decode_avro` reads either and drops null fields, so
``decode_avro(encode_avro(e)) == e`` for an event without nulls. The streaming
decoder reads bodies with ``fastavro.schemaless_reader(buf, PARSED_SCHEMA)``.

May import: fastavro and the standard library only.
"""

from __future__ import annotations

import io
import struct
from typing import Any, Literal

import fastavro

__all__ = [
    "CONFLUENT_MAGIC",
    "EVENT_SCHEMA",
    "PARSED_SCHEMA",
    "AvroWireError",
    "decode_avro",
    "encode_avro",
]

CONFLUENT_MAGIC = 0
_HEADER = struct.Struct(">bI")

_TOPIC_PARTITIONS = {
    "type": "record",
    "name": "TopicPartitions",
    "doc": "A topic and some of its partitions; assignment_epochs (KIP-1251) align with partitions.",
    "fields": [
        {"name": "topic", "type": "string"},
        {"name": "partitions", "type": {"type": "array", "items": "int"}},
        {"name": "assignment_epochs", "type": ["null", {"type": "array", "items": "int"}], "default": None},
    ],
}

_PARTITION_OFFSET = {
    "type": "record",
    "name": "PartitionOffset",
    "doc": "One partition of an OffsetCommit / TxnOffsetCommit request.",
    "fields": [
        {"name": "topic", "type": "string"},
        {"name": "partition", "type": "int"},
        {"name": "offset", "type": "long"},
        {"name": "leader_epoch", "type": ["null", "int"], "default": None},
        {"name": "metadata", "type": ["null", "string"], "default": None},
    ],
}

_EPOCH_ENTRY = {
    "type": "record",
    "name": "EpochEntry",
    "doc": "One entry of a partition's leader epoch cache (KIP-101/KIP-320).",
    "fields": [
        {"name": "epoch", "type": "int"},
        {"name": "start_offset", "type": "long"},
    ],
}

_TRUTH = {
    "type": "record",
    "name": "SimTruth",
    "doc": "The simulator's ground truth for one event (docs/simulator.md); ignored by the monitor.",
    "fields": [
        {"name": "scenario", "type": "string"},
        {"name": "cause", "type": ["null", "string"], "default": None},
        {"name": "current_owner", "type": ["null", "boolean"], "default": None},
        {"name": "owners", "type": ["null", {"type": "array", "items": ["null", "string"]}], "default": None},
        {"name": "expect", "type": ["null", {"type": "array", "items": "string"}], "default": None},
        {"name": "details", "type": ["null", {"type": "map", "values": "string"}], "default": None},
    ],
}


def _opt(name: str, avro_type: Any, doc: str) -> dict[str, Any]:
    return {"name": name, "type": ["null", avro_type], "default": None, "doc": doc}


def _array(items: Any) -> dict[str, Any]:
    return {"type": "array", "items": items}


EVENT_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "FencewatchEvent",
    "namespace": "io.fencewatch",
    "doc": "Any fencewatch input event (SPEC §1); dispatch is by `type`.",
    "fields": [
        {"name": "type", "type": "string", "doc": "event type; unknown types are counted and skipped"},
        {"name": "ts", "type": "long", "doc": "coordinator time, epoch milliseconds"},
        _opt("cluster", "string", "defaults to 'default'"),
        _opt("group_id", "string", "absent only on partition-scoped events"),
        _opt("event_id", "string", "echoed on outputs"),
        # membership (heartbeats topic)
        _opt("member_id", "string", "member id; '' for admin commits"),
        _opt("protocol", "string", "consumer | streams | classic"),
        _opt("member_epoch", "int", "broker member epoch, or the client epoch/generation of a commit"),
        _opt("previous_member_epoch", "int", "member_assignment"),
        _opt("state", "string", "member state (member_assignment) or group state (group_state)"),
        _opt("assigned", _array(_TOPIC_PARTITIONS), "member_assignment"),
        _opt("pending_revocation", _array("TopicPartitions"), "member_assignment"),
        _opt("subscribed_topics", _array("string"), "member_assignment"),
        _opt("instance_id", "string", "static membership (KIP-345)"),
        _opt("group_epoch", "int", "member_assignment"),
        _opt("target_assignment_epoch", "int", "member_assignment"),
        _opt("reason", "string", "member_left: leave | static_leave | fenced | session_timeout | rebalance_timeout"),
        _opt("request_epoch", "int", "heartbeat"),
        _opt("response_epoch", "int", "heartbeat"),
        _opt("error_code", "int", "Kafka error code the broker answered (0 = none)"),
        _opt("generation", "int", "classic_join / classic_sync"),
        _opt("owned", _array("TopicPartitions"), "classic_join: partitions the member claims"),
        _opt("assignments", {"type": "map", "values": _array("TopicPartitions")}, "classic_sync"),
        # commits and partition facts (offsets topic)
        _opt("offsets", _array(_PARTITION_OFFSET), "offset_commit / txn_offset_commit"),
        _opt("transactional_id", "string", "txn_offset_commit"),
        _opt("producer_id", "long", "txn_offset_commit"),
        _opt("producer_epoch", "int", "txn_offset_commit"),
        _opt("topic", "string", "offset_committed / offset_deleted / partition_epochs"),
        _opt("partition", "int", "offset_committed / offset_deleted / partition_epochs"),
        _opt("offset", "long", "offset_committed"),
        _opt("leader_epoch", "int", "offset_committed; -1 unknown"),
        _opt("metadata", "string", "offset_committed"),
        _opt("commit_ts", "long", "offset_committed"),
        _opt("expire_ts", "long", "offset_committed (v1 records only)"),
        _opt("log_start_offset", "long", "partition_epochs"),
        _opt("log_end_offset", "long", "partition_epochs"),
        _opt("epochs", _array(_EPOCH_ENTRY), "partition_epochs: the leader epoch cache"),
        _opt("truth", _TRUTH, "simulator ground truth; not part of the monitor's contract"),
    ],
}

PARSED_SCHEMA = fastavro.parse_schema(EVENT_SCHEMA)


class AvroWireError(ValueError):
    """A byte string is not a FencewatchEvent in the expected wire format."""


def encode_avro(
    event: dict[str, Any],
    *,
    wire: Literal["confluent", "plain"] = "confluent",
    schema_id: int = 1,
) -> bytes:
    """Encode one event dict; absent optional fields are written as null, unknown keys ignored."""
    buf = io.BytesIO()
    if wire == "confluent":
        buf.write(_HEADER.pack(CONFLUENT_MAGIC, schema_id))
    elif wire != "plain":
        raise ValueError(f"unknown Avro wire format {wire!r}; valid: confluent, plain")
    fastavro.schemaless_writer(buf, PARSED_SCHEMA, event)
    return buf.getvalue()


def _drop_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nulls(v) for v in value]
    return value


def decode_avro(
    data: bytes,
    *,
    wire: Literal["confluent", "plain"] = "confluent",
    expected_schema_id: int | None = None,
) -> dict[str, Any]:
    """Decode one record written by :func:`encode_avro`; null fields are dropped (nulls in arrays kept)."""
    buf = io.BytesIO(data)
    if wire == "confluent":
        if len(data) < _HEADER.size:
            raise AvroWireError(f"record of {len(data)} bytes is shorter than the Confluent header")
        magic, schema_id = _HEADER.unpack(buf.read(_HEADER.size))
        if magic != CONFLUENT_MAGIC:
            raise AvroWireError(f"magic byte {magic} is not {CONFLUENT_MAGIC}")
        if expected_schema_id is not None and schema_id != expected_schema_id:
            raise AvroWireError(f"unknown schema id {schema_id}; expected {expected_schema_id}")
    elif wire != "plain":
        raise ValueError(f"unknown Avro wire format {wire!r}; valid: confluent, plain")
    try:
        record = fastavro.schemaless_reader(buf, PARSED_SCHEMA)
    except (EOFError, ValueError, IndexError, UnicodeDecodeError) as exc:
        raise AvroWireError(f"not a FencewatchEvent Avro body: {exc}") from exc
    if buf.tell() != len(data):
        raise AvroWireError(f"{len(data) - buf.tell()} trailing bytes after the Avro body")
    return _drop_nulls(record)
