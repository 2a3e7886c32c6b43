"""Test-side ENCODER for coordinator records, built from the same schema tables
as the decoder (``fencewatch.streaming.ingest.consumer_offsets.record_types``), following the writer
rules of Kafka's generated message classes (``MessageDataGenerator``):

- non-flexible versions: int16-length strings (-1 null), int32-length bytes and
  arrays (-1 null);
- flexible versions: compact strings/bytes/arrays (unsigned varint of length + 1,
  0 = null) and a tagged-field section after every struct;
- a tagged field is written only when it differs from its default (a null
  default: only when not null); a nullable struct in a tagged field is written
  as ``size + 1``, then varint 1, then the struct;
- fields absent from a version are not written.

``data`` dicts use Kafka's JSON field names; a missing field is written with its
default. ``data["_unknown_tags"] = [(tag, raw_bytes), ...]`` appends raw tagged
fields (to test that readers skip tags they do not know).
"""

from __future__ import annotations

import struct

from fencewatch.streaming.ingest.consumer_offsets.record_types import RECORD_TYPES, Field, Message, in_versions


def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _default(f: Field, version: int):
    if f.default is not None:
        return f.default
    if in_versions(version, f.nullable):
        return None
    if f.type in ("int8", "int16", "uint16", "int32", "int64"):
        return 0
    return {"string": "", "bytes": b"", "uuid": bytes(16), "struct": {}}.get(f.type, [])


_FMT = {"int8": ">b", "int16": ">h", "uint16": ">H", "int32": ">i", "int64": ">q"}


def _len(n: int | None, flexible: bool, wide: bool) -> bytes:
    if flexible:
        return uvarint(0 if n is None else n + 1)
    if n is None:
        n = -1
    return struct.pack(">i" if wide else ">h", n)


def encode_field(f: Field, value, version: int, flexible: bool) -> bytes:
    t = f.type
    if t in _FMT:
        return struct.pack(_FMT[t], value)
    if t == "uuid":
        assert len(value) == 16
        return bytes(value)
    if t == "string":
        if value is None:
            return _len(None, flexible, False)
        raw = value.encode()
        return _len(len(raw), flexible, False) + raw
    if t == "bytes":
        if value is None:
            return _len(None, flexible, True)
        return _len(len(value), flexible, True) + bytes(value)
    if t == "struct":
        if in_versions(version, f.nullable):
            if value is None:
                return b"\xff"
            return b"\x01" + encode_struct(f.fields, value, version, flexible)
        return encode_struct(f.fields, value, version, flexible)
    if t.startswith("[]"):
        if value is None:
            return _len(None, flexible, True)
        out = bytearray(_len(len(value), flexible, True))
        elem = t[2:]
        for item in value:
            if elem in _FMT:
                out += struct.pack(_FMT[elem], item)
            elif elem == "string":
                raw = item.encode()
                out += _len(len(raw), flexible, False) + raw
            else:
                out += encode_struct(f.fields, item, version, flexible)
        return bytes(out)
    raise ValueError(t)


def _tagged_payload(f: Field, value, version: int) -> bytes:
    if f.type == "struct" and in_versions(version, f.nullable):
        body = encode_struct(f.fields, value, version, True)
        return uvarint(1) + body
    return encode_field(f, value, version, True)


def encode_struct(fields: tuple[Field, ...], data: dict, version: int, flexible: bool) -> bytes:
    out = bytearray()
    tagged = []
    for f in fields:
        if not in_versions(version, f.versions):
            continue
        value = data.get(f.name, _default(f, version))
        if f.tag is not None:
            if not flexible:
                continue
            if value is None or value == f.default:
                continue
            tagged.append((f.tag, _tagged_payload(f, value, version)))
            continue
        out += encode_field(f, value, version, flexible)
    if flexible:
        tagged.extend(data.get("_unknown_tags", ()))
        tagged.sort(key=lambda t: t[0])
        out += uvarint(len(tagged))
        for tag, payload in tagged:
            out += uvarint(tag) + uvarint(len(payload)) + payload
    return bytes(out)


def encode_message(message: Message, version: int, data: dict) -> bytes:
    return encode_struct(message.fields, data, version, message.is_flexible(version))


def encode_record(record_type: int, key: dict, version: int | None = None,
                  value: dict | None = None) -> tuple[bytes, bytes | None]:
    """(key bytes, value bytes or None for a tombstone), as ``CoordinatorRecordSerde`` writes them."""
    rt = RECORD_TYPES[record_type]
    k = struct.pack(">h", record_type) + encode_message(rt.key, 0, key)
    if value is None:
        return k, None
    assert version is not None
    return k, struct.pack(">h", version) + encode_message(rt.value, version, value)


def version_prefixed(message: Message, version: int, data: dict) -> bytes:
    """``MessageUtil.toVersionPrefixedBytes`` (embedded consumer protocol)."""
    return struct.pack(">h", version) + encode_message(message, version, data)


def sticky_user_data(previous: list[tuple[str, list[int]]], generation: int | None) -> bytes:
    """KIP-341 StickyAssignor user data: V0 without generation, V1 with it."""
    out = bytearray(struct.pack(">i", len(previous)))
    for topic, parts in previous:
        raw = topic.encode()
        out += struct.pack(">h", len(raw)) + raw + struct.pack(">i", len(parts))
        out += b"".join(struct.pack(">i", p) for p in parts)
    if generation is not None:
        out += struct.pack(">i", generation)
    return bytes(out)
