"""The Avro schema of fencewatch input events (contract §1), kept in this one place.

What lives here: one Avro record type, ``FencewatchEvent``, whose fields are the
union of every contract §1 event type's fields with the contract's names, plus the
simulator's optional ground-truth label ``truth`` (docs/simulator.md). Only
``type`` and ``ts`` are required; every other field is a ``["null", X]`` union
with default ``null``, so one schema serves every event type and a record
written by an older producer (fewer fields) still decodes.

Wire formats (contract §1): Confluent (magic byte 0, 4-byte big-endian schema id,
Avro body) or a plain Avro body. :func:`encode_avro` writes either;
:func:`decode_avro` reads either and drops null fields, so
``decode_avro(encode_avro(e)) == e`` for an event without nulls.

The body codec is compiled once from :data:`EVENT_SCHEMA` into plain Python
closures (Avro binary encoding: zigzag varints, length-prefixed strings,
blocked arrays and maps, union branch index). fastavro spends 30-140 us per
record on a schema this wide (it resolves every union branch by validating
the datum); the compiled codec is several times faster and is checked
against fastavro, the reference, in tests/sim/test_emit.py. Bodies written
here are standard Avro: ``fastavro.schemaless_reader(buf, PARSED_SCHEMA)``
reads them, and :class:`AvroContainerWriter` writes object container files
any Avro reader opens.

May import: fastavro and the standard library only.
"""

from __future__ import annotations

import io
import json
import os
import struct
from typing import IO, Any, Literal

import fastavro

__all__ = [
    "CONFLUENT_MAGIC",
    "EVENT_SCHEMA",
    "PARSED_SCHEMA",
    "AvroContainerWriter",
    "AvroWireError",
    "decode_avro",
    "decode_body",
    "encode_avro",
    "encode_body",
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


# ---------------------------------------------------------------------------- compiled codec
#
# Each record type of EVENT_SCHEMA becomes one generated Python function per
# direction, with every field's encoding inlined (a function call per field
# would cost more than the encoding itself). The generator below is the only
# place that knows the Avro binary rules; its output is checked byte for byte
# against fastavro in the tests.


def _write_long(n: int, out: bytearray) -> None:
    n = (n << 1) ^ (n >> 63)  # zigzag
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _read_long(data: bytes, pos: int) -> tuple[int, int]:
    b = data[pos]
    pos += 1
    n = b & 0x7F
    shift = 7
    while b & 0x80:
        b = data[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if shift > 70:
            raise AvroWireError("varint longer than 10 bytes")
    return (n >> 1) ^ -(n & 1), pos


def _type_error(where: str, expected: str, value: Any) -> TypeError:
    return TypeError(f"{where}: expected {expected}, got {type(value).__name__}")


class _Generator:
    """Emit Python source for the encoders/decoders of EVENT_SCHEMA's record types."""

    def __init__(self) -> None:
        self.records: dict[str, dict] = {}
        self.lines: list[str] = []
        self.counter = 0
        self.prefix = "dec_"  # decoders being generated: dec_ (all fields) or compact_ (nulls dropped)

    def tmp(self, stem: str) -> str:
        self.counter += 1
        return f"{stem}{self.counter}"

    def collect(self, schema: Any) -> None:
        if isinstance(schema, list):
            for branch in schema:
                self.collect(branch)
        elif isinstance(schema, dict):
            if schema["type"] == "record":
                self.records[schema["name"]] = schema
                for f in schema["fields"]:
                    self.collect(f["type"])
            elif schema["type"] == "array":
                self.collect(schema["items"])
            elif schema["type"] == "map":
                self.collect(schema["values"])

    # -- encoding: statements that write value expression ``x`` (a local name) to ``out``

    def enc(self, schema: Any, x: str, where: str, ind: str) -> list[str]:
        if isinstance(schema, list):
            if len(schema) != 2 or schema[0] != "null":
                raise ValueError(f"only [null, T] unions are supported, got {schema}")
            return [f"{ind}if {x} is None:", f"{ind}    out.append(0)", f"{ind}else:", f"{ind}    out.append(2)",
                    *self.enc(schema[1], x, where, ind + "    ")]
        kind = schema if isinstance(schema, str) else schema["type"]
        if isinstance(schema, str) and schema in self.records:
            return [f"{ind}enc_{schema}({x}, out)"]
        if kind in ("long", "int"):
            return [f"{ind}if type({x}) is not int:", f"{ind}    raise _type_error({where!r}, 'an int', {x})",
                    f"{ind}if -64 <= {x} < 64:", f"{ind}    out.append(({x} << 1) ^ ({x} >> 63))",
                    f"{ind}else:", f"{ind}    _write_long({x}, out)"]
        if kind == "string":
            raw = self.tmp("raw")
            return [f"{ind}if type({x}) is not str:", f"{ind}    raise _type_error({where!r}, 'a string', {x})",
                    f"{ind}{raw} = {x}.encode()", f"{ind}if len({raw}) < 64:", f"{ind}    out.append(len({raw}) << 1)",
                    f"{ind}else:", f"{ind}    _write_long(len({raw}), out)", f"{ind}out += {raw}"]
        if kind == "boolean":
            return [f"{ind}if type({x}) is not bool:", f"{ind}    raise _type_error({where!r}, 'a boolean', {x})",
                    f"{ind}out.append(1 if {x} else 0)"]
        if kind == "record":
            return [f"{ind}enc_{schema['name']}({x}, out)"]
        if kind in ("array", "map"):
            item = self.tmp("item")
            key = self.tmp("key")
            is_map = kind == "map"
            inner = schema["values"] if is_map else schema["items"]
            check = "dict" if is_map else "list"
            loop = f"for {key}, {item} in {x}.items():" if is_map else f"for {item} in {x}:"
            body = self.enc("string", key, where + " key", ind + "        ") if is_map else []
            return [f"{ind}if type({x}) is not {check} and type({x}) is not tuple:",
                    f"{ind}    raise _type_error({where!r}, 'a {kind}', {x})",
                    f"{ind}if {x}:", f"{ind}    _write_long(len({x}), out)", f"{ind}    {loop}",
                    *body, *self.enc(inner, item, where + " item", ind + "        "), f"{ind}out.append(0)"]
        raise ValueError(f"unsupported Avro type {kind!r}")

    def encoder(self, name: str) -> None:
        schema = self.records[name]
        self.lines += [f"def enc_{name}(v, out):", "    if type(v) is not dict:",
                       f"        raise _type_error({name!r}, 'a record (dict)', v)", "    get = v.get"]
        for f in schema["fields"]:
            x = self.tmp("f")
            where = f"{name}.{f['name']}"
            self.lines.append(f"    {x} = get({f['name']!r})")
            if not isinstance(f["type"], list):
                self.lines += [f"    if {x} is None:", f"        raise ValueError('{where}: missing required field')"]
            self.lines += self.enc(f["type"], x, where, "    ")
        self.lines.append("")

    # -- decoding: statements that read into local ``x`` from ``data`` at ``pos``

    def long(self, x: str, ind: str) -> list[str]:
        return [f"{ind}b = data[pos]", f"{ind}if b < 128:", f"{ind}    {x} = (b >> 1) ^ -(b & 1)", f"{ind}    pos += 1",
                f"{ind}else:", f"{ind}    {x}, pos = _read_long(data, pos)"]

    def dec(self, schema: Any, x: str, ind: str) -> list[str]:
        if isinstance(schema, list):
            return [f"{ind}b = data[pos]", f"{ind}pos += 1", f"{ind}if b == 0:", f"{ind}    {x} = None",
                    f"{ind}elif b == 2:", *self.dec(schema[1], x, ind + "    "), f"{ind}else:",
                    f"{ind}    raise AvroWireError(f'union branch byte {{b}}')"]
        kind = schema if isinstance(schema, str) else schema["type"]
        if isinstance(schema, str) and schema in self.records:
            return [f"{ind}{x}, pos = {self.prefix}{schema}(data, pos)"]
        if kind in ("long", "int"):
            return self.long(x, ind)
        if kind == "string":
            n = self.tmp("n")
            return [*self.long(n, ind), f"{ind}if {n} < 0 or pos + {n} > len(data):",
                    f"{ind}    raise AvroWireError(f'string of {{{n}}} bytes runs past the end of the record')",
                    f"{ind}{x} = data[pos:pos + {n}].decode()", f"{ind}pos += {n}"]
        if kind == "boolean":
            return [f"{ind}b = data[pos]", f"{ind}if b > 1:", f"{ind}    raise AvroWireError(f'boolean byte {{b}}')",
                    f"{ind}{x} = b == 1", f"{ind}pos += 1"]
        if kind == "record":
            return [f"{ind}{x}, pos = {self.prefix}{schema['name']}(data, pos)"]
        if kind in ("array", "map"):
            count, item, key = self.tmp("count"), self.tmp("item"), self.tmp("key")
            is_map = kind == "map"
            inner = schema["values"] if is_map else schema["items"]
            store = [*self.dec("string", key, ind + "        "), *self.dec(inner, item, ind + "        "),
                     f"{ind}        {x}[{key}] = {item}"] if is_map else [
                *self.dec(inner, item, ind + "        "), f"{ind}        {x}.append({item})"]
            return [f"{ind}{x} = {{}}" if is_map else f"{ind}{x} = []", f"{ind}while True:",
                    *self.long(count, ind + "    "), f"{ind}    if {count} == 0:", f"{ind}        break",
                    f"{ind}    if {count} < 0:", f"{ind}        {count} = -{count}",
                    f"{ind}        _, pos = _read_long(data, pos)",
                    f"{ind}    if {count} > len(data):",
                    f"{ind}        raise AvroWireError(f'block of {{{count}}} items in a record of {{len(data)}} bytes')",
                    f"{ind}    for _ in range({count}):", *store]
        raise ValueError(f"unsupported Avro type {kind!r}")

    def decoder(self, name: str, compact: bool) -> None:
        """``dec_<name>`` returns every field (None when null), as fastavro does; ``compact_<name>``
        leaves null fields out, the shape of the JSON events."""
        schema = self.records[name]
        self.prefix = "compact_" if compact else "dec_"
        self.lines.append(f"def {self.prefix}{name}(data, pos):")
        names = []
        for f in schema["fields"]:
            x = self.tmp("f")
            names.append((f["name"], x, isinstance(f["type"], list)))
            self.lines += self.dec(f["type"], x, "    ")
        if compact:
            self.lines.append("    r = {" + ", ".join(f"{n!r}: {x}" for n, x, optional in names if not optional) + "}")
            for n, x, optional in names:
                if optional:
                    self.lines += [f"    if {x} is not None:", f"        r[{n!r}] = {x}"]
            self.lines.append("    return r, pos")
        else:
            self.lines.append("    return {" + ", ".join(f"{n!r}: {x}" for n, x, _ in names) + "}, pos")
        self.lines.append("")

    def build(self, schema: dict) -> dict[str, Any]:
        self.collect(schema)
        for name in self.records:
            self.encoder(name)
            self.decoder(name, compact=False)
            self.decoder(name, compact=True)
        namespace: dict[str, Any] = {"_write_long": _write_long, "_read_long": _read_long,
                                     "_type_error": _type_error, "AvroWireError": AvroWireError}
        exec(compile("\n".join(self.lines), "<fencewatch-event-avro-codec>", "exec"), namespace)
        return namespace


_CODEC = _Generator().build(EVENT_SCHEMA)
_encode_event = _CODEC["enc_" + EVENT_SCHEMA["name"]]
_decode_event = _CODEC["dec_" + EVENT_SCHEMA["name"]]
_decode_compact = _CODEC["compact_" + EVENT_SCHEMA["name"]]


def encode_body(event: dict[str, Any]) -> bytes:
    """The plain Avro body of one event; absent optional fields are null, unknown keys ignored."""
    out = bytearray()
    _encode_event(event, out)
    return bytes(out)


def decode_body(data: bytes, *, drop_nulls: bool = False) -> dict[str, Any]:
    """One plain Avro body: every field (absent ones as None, as fastavro returns it), or with
    ``drop_nulls`` only the fields that are set (nulls inside arrays are kept)."""
    try:
        record, end = (_decode_compact if drop_nulls else _decode_event)(data, 0)
    except IndexError:
        raise AvroWireError(f"record truncated ({len(data)} bytes)") from None
    except UnicodeDecodeError as exc:
        raise AvroWireError(f"string is not UTF-8: {exc}") from None
    if end != len(data):
        raise AvroWireError(f"{len(data) - end} trailing bytes after the Avro body")
    return record


def encode_avro(
    event: dict[str, Any],
    *,
    wire: Literal["confluent", "plain"] = "confluent",
    schema_id: int = 1,
) -> bytes:
    """Encode one event dict; absent optional fields are written as null, unknown keys ignored."""
    out = bytearray()
    if wire == "confluent":
        out += _HEADER.pack(CONFLUENT_MAGIC, schema_id)
    elif wire != "plain":
        raise ValueError(f"unknown Avro wire format {wire!r}; valid: confluent, plain")
    _encode_event(event, out)
    return bytes(out)


def decode_avro(
    data: bytes,
    *,
    wire: Literal["confluent", "plain"] = "confluent",
    expected_schema_id: int | None = None,
) -> dict[str, Any]:
    """Decode one record written by :func:`encode_avro`; null fields are dropped (nulls in arrays kept)."""
    body = data
    if wire == "confluent":
        if len(data) < _HEADER.size:
            raise AvroWireError(f"record of {len(data)} bytes is shorter than the Confluent header")
        magic, schema_id = _HEADER.unpack_from(data)
        if magic != CONFLUENT_MAGIC:
            raise AvroWireError(f"magic byte {magic} is not {CONFLUENT_MAGIC}")
        if expected_schema_id is not None and schema_id != expected_schema_id:
            raise AvroWireError(f"unknown schema id {schema_id}; expected {expected_schema_id}")
        body = data[_HEADER.size:]
    elif wire != "plain":
        raise ValueError(f"unknown Avro wire format {wire!r}; valid: confluent, plain")
    return decode_body(bytes(body), drop_nulls=True)


class AvroContainerWriter:
    """An Avro object container file of FencewatchEvent (null codec), written with the compiled encoder."""

    def __init__(self, stream: IO[bytes], *, block_records: int = 4096) -> None:
        self._stream = stream
        self._sync = os.urandom(16)
        self._block = bytearray()
        self._count = 0
        self._limit = block_records
        header = bytearray(b"Obj\x01")
        meta = {"avro.schema": json.dumps(EVENT_SCHEMA).encode(), "avro.codec": b"null"}
        _write_long(len(meta), header)
        for key, value in meta.items():
            _write_long(len(key), header)
            header += key.encode()
            _write_long(len(value), header)
            header += value
        header.append(0)
        header += self._sync
        stream.write(header)

    def write(self, event: dict[str, Any]) -> None:
        _encode_event(event, self._block)
        self._count += 1
        if self._count >= self._limit:
            self.flush()

    def flush(self) -> None:
        if self._count:
            head = bytearray()
            _write_long(self._count, head)
            _write_long(len(self._block), head)
            self._stream.write(head + self._block + self._sync)
            self._block = bytearray()
            self._count = 0
        self._stream.flush()
