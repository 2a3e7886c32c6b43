"""Decoder for the group coordinator's records in ``__consumer_offsets``.

What lives here: bytes -> ``CoordinatorRecord`` (record type, key fields,
value version, value fields or ``None`` for a tombstone), and the inverse view
``kafka_json`` that prints a record as Kafka's own tools do. No I/O, no state.

How: the schema tables of ``schemas.py`` are compiled, once per (message,
version), into specialised Python functions (the way Kafka's generator turns
the JSON schemas into Java readers). Consecutive fixed-width fields are read
with one precompiled ``struct.Struct``; non-flexible versions use int16/int32
length prefixes, flexible ones compact (unsigned varint, length + 1) strings,
bytes and arrays and end every struct with a tagged-field section, where
unknown tags are skipped as Kafka's readers do. Generated sources are kept in
``COMPILED_SOURCES`` for debugging.

Forward compatibility (Kafka's ``CoordinatorRecordSerde``): an unknown record
type or value version raises ``RecordDecodeError`` with ``skippable=True``
(count it and move on); anything else that cannot be parsed raises it with
``skippable=False`` and a reason naming the field.
"""

from __future__ import annotations

import base64
import struct
import uuid
from dataclasses import dataclass
from typing import Any, Callable

from fencewatch.streaming.ingest.consumer_offsets.record_types import (
    KNOWN_UNDECODED_TYPES,
    RECORD_TYPES,
    Field,
    Message,
    in_versions,
)

__all__ = [
    "CoordinatorRecord",
    "RecordDecodeError",
    "decode",
    "decode_key",
    "decode_value",
    "decode_message",
    "kafka_json",
    "record_type_name",
    "uuid_to_kafka_string",
    "uuid_to_standard_string",
    "parse_topic_id",
    "COMPILED_SOURCES",
]


class RecordDecodeError(ValueError):
    """A record that cannot be decoded. ``code`` is stable (for DLQ reasons and
    counters); ``skippable`` is true for unknown record types and value
    versions, which Kafka itself treats as "not mine, skip"."""

    SKIPPABLE = frozenset({"UNKNOWN_RECORD_TYPE", "UNKNOWN_VALUE_VERSION"})

    def __init__(self, code: str, detail: str, record_type: int | None = None) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail
        self.record_type = record_type

    @property
    def skippable(self) -> bool:
        return self.code in self.SKIPPABLE


class _Malformed(Exception):
    """Raised by generated readers; turned into RecordDecodeError by the caller."""


@dataclass(frozen=True, slots=True)
class CoordinatorRecord:
    record_type: int
    key: dict[str, Any]
    version: int | None  # None for a tombstone
    value: dict[str, Any] | None  # None for a tombstone

    @property
    def name(self) -> str:
        return record_type_name(self.record_type)

    @property
    def is_tombstone(self) -> bool:
        return self.value is None


def record_type_name(record_type: int) -> str:
    rt = RECORD_TYPES.get(record_type)
    if rt is not None:
        return rt.key.name[: -len("Key")]
    return KNOWN_UNDECODED_TYPES.get(record_type, f"Unknown({record_type})")


# ---------------------------------------------------------------------------
# The compiler
# ---------------------------------------------------------------------------

_FIXED = {"int8": ("b", 1), "int16": ("h", 2), "uint16": ("H", 2), "int32": ("i", 4), "int64": ("q", 8),
          "uuid": ("16s", 16)}
_H = struct.Struct(">h").unpack_from
_I = struct.Struct(">i").unpack_from


def _uvarint(b: bytes, p: int) -> tuple[int, int]:
    """Unsigned varint (Kafka's ByteUtils.readUnsignedVarint), at most 5 bytes."""
    value = 0
    shift = 0
    while True:
        x = b[p]
        p += 1
        value |= (x & 0x7F) << shift
        if x < 0x80:
            return value, p
        shift += 7
        if shift > 28:
            raise _Malformed("varint longer than 5 bytes")


_INT32_ARRAYS = [struct.Struct(">%di" % c).unpack_from for c in range(128)]


def _int32s(b: bytes, p: int, c: int) -> list[int]:
    if c < 128:
        return list(_INT32_ARRAYS[c](b, p))
    return list(struct.unpack_from(">%di" % c, b, p))


COMPILED_SOURCES: dict[str, str] = {}


class _Compiler:
    def __init__(self) -> None:
        self.ns: dict[str, Any] = {
            "_H": _H, "_I": _I, "_uv": _uvarint, "_M": _Malformed, "_int32s": _int32s,
            "_unpack": struct.unpack_from,
        }
        self.count = 0

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def compile_struct(self, label: str, fields: tuple[Field, ...], version: int, flexible: bool) -> str:
        """Emit ``def f(b, p, n) -> (dict, p)`` for these fields at this version."""
        fname = self.name("_s")
        out: list[str] = [f"def {fname}(b, p, n):", "    d = {}"]
        present = [f for f in fields if in_versions(version, f.versions)]
        plain = [f for f in present if f.tag is None]
        tagged = [f for f in present if f.tag is not None and flexible]
        run: list[Field] = []

        def flush_run() -> None:
            if not run:
                return
            fmt = ">" + "".join(_FIXED[f.type][0] for f in run)
            size = sum(_FIXED[f.type][1] for f in run)
            sname = self.name("_S")
            self.ns[sname] = struct.Struct(fmt).unpack_from
            targets = ", ".join(f"d[{f.name!r}]" for f in run)
            if len(run) == 1:
                targets += ","
            out.append(f"    if p + {size} > n: raise _M('truncated at {run[0].name}')")
            out.append(f"    {targets} = {sname}(b, p)")
            out.append(f"    p += {size}")
            run.clear()

        for f in plain:
            if f.type in _FIXED:
                run.append(f)
                continue
            flush_run()
            out.extend(self.field_reader(f, version, flexible, "    ", f"d[{f.name!r}]"))
        flush_run()
        if flexible:
            out.append("    nt = b[p]")
            out.append("    if nt < 128: p += 1")
            out.append("    else: nt, p = _uv(b, p)")
            out.append("    for _k in range(nt):")
            out.append("        t, p = _uv(b, p)")
            out.append("        sz, p = _uv(b, p)")
            out.append("        e = p + sz")
            out.append("        if e > n: raise _M('truncated tagged field %d' % t)")
            for f in tagged:
                tname = self.name("_t")
                body = [f"def {tname}(b, p, n, d):"]
                body.extend(self.field_reader(f, version, flexible, "    ", f"d[{f.name!r}]", tagged=True))
                body.append("    return p")
                self.exec("\n".join(body), f"{label}.{f.name}")
                out.append(f"        if t == {f.tag}: {tname}(b[p:e], 0, sz, d)")
            out.append("        p = e")
        out.append("    return d, p")
        self.exec("\n".join(out), label)
        return fname

    def exec(self, source: str, label: str) -> None:
        COMPILED_SOURCES[label] = COMPILED_SOURCES.get(label, "") + source + "\n"
        exec(compile(source, f"<bridge:{label}>", "exec"), self.ns)

    def length(self, ind: str, flexible: bool, wide: bool) -> list[str]:
        """Read a length/count into ``l``: compact (varint - 1) or int16/int32."""
        if flexible:
            return [
                f"{ind}l = b[p]",
                f"{ind}if l < 128: p += 1",
                f"{ind}else: l, p = _uv(b, p)",
                f"{ind}l -= 1",
            ]
        reader, size = ("_I", 4) if wide else ("_H", 2)
        return [f"{ind}l = {reader}(b, p)[0]", f"{ind}p += {size}"]

    def field_reader(self, f: Field, version: int, flexible: bool, ind: str, target: str,
                     tagged: bool = False) -> list[str]:
        nullable = in_versions(version, f.nullable)
        null_action = f"{target} = None" if nullable else f"raise _M('non-nullable field {f.name} was serialized as null')"
        lines: list[str] = []
        t = f.type
        if t in _FIXED:
            fmt, size = _FIXED[t]
            sname = self.name("_S")
            self.ns[sname] = struct.Struct(">" + fmt).unpack_from
            lines.append(f"{ind}if p + {size} > n: raise _M('truncated at {f.name}')")
            lines.append(f"{ind}{target}, = {sname}(b, p)")
            lines.append(f"{ind}p += {size}")
            return lines
        if t in ("string", "bytes"):
            lines.extend(self.length(ind, flexible, wide=(t == "bytes")))
            lines.append(f"{ind}if l < 0: {null_action}")
            lines.append(f"{ind}else:")
            lines.append(f"{ind}    e = p + l")
            lines.append(f"{ind}    if e > n: raise _M('truncated at {f.name}')")
            conv = ".decode()" if t == "string" else ""
            lines.append(f"{ind}    {target} = b[p:e]{conv}")
            lines.append(f"{ind}    p = e")
            return lines
        if t == "struct":
            sub = self.compile_struct(f"{f.name}", f.fields, version, flexible)
            if nullable:
                if tagged:
                    lines.append(f"{ind}x, p = _uv(b, p)")
                    lines.append(f"{ind}if x <= 0: {target} = None")
                else:
                    lines.append(f"{ind}x = b[p]; p += 1")
                    lines.append(f"{ind}if x >= 128: {target} = None")
                lines.append(f"{ind}else: {target}, p = {sub}(b, p, n)")
            else:
                lines.append(f"{ind}{target}, p = {sub}(b, p, n)")
            return lines
        if t.startswith("[]"):
            lines.extend(self.length(ind, flexible, wide=True))
            lines.append(f"{ind}if l < 0: {null_action}")
            lines.append(f"{ind}elif l > n - p: raise _M('array {f.name} claims %d elements, only %d bytes left' % (l, n - p))")
            lines.append(f"{ind}else:")
            elem = t[2:]
            if elem == "int32":
                lines.append(f"{ind}    e = p + 4 * l")
                lines.append(f"{ind}    if e > n: raise _M('truncated at {f.name}')")
                lines.append(f"{ind}    {target} = _int32s(b, p, l)")
                lines.append(f"{ind}    p = e")
            elif elem in _FIXED:
                fmt, size = _FIXED[elem]
                lines.append(f"{ind}    e = p + {size} * l")
                lines.append(f"{ind}    if e > n: raise _M('truncated at {f.name}')")
                lines.append(f"{ind}    {target} = list(_unpack('>%d{fmt}' % l, b, p))")
                lines.append(f"{ind}    p = e")
            elif elem == "string":
                lines.append(f"{ind}    c = l; a = []")
                lines.append(f"{ind}    for _j in range(c):")
                inner = ind + "        "
                lines.extend(self.length(inner, flexible, wide=False))
                lines.append(f"{inner}if l < 0: raise _M('null string in {f.name}')")
                lines.append(f"{inner}e = p + l")
                lines.append(f"{inner}if e > n: raise _M('truncated at {f.name}')")
                lines.append(f"{inner}a.append(b[p:e].decode())")
                lines.append(f"{inner}p = e")
                lines.append(f"{ind}    {target} = a")
            elif elem == "struct":
                sub = self.compile_struct(f"{f.name}[]", f.fields, version, flexible)
                lines.append(f"{ind}    a = []")
                lines.append(f"{ind}    for _j in range(l):")
                lines.append(f"{ind}        v, p = {sub}(b, p, n)")
                lines.append(f"{ind}        a.append(v)")
                lines.append(f"{ind}    {target} = a")
            else:
                raise ValueError(f"unsupported array element type {elem}")
            return lines
        raise ValueError(f"unsupported field type {t}")


_COMPILER = _Compiler()
_READERS: dict[tuple[str, int], Callable[[bytes, int, int], tuple[dict, int]]] = {}


def _reader(message: Message, version: int) -> Callable[[bytes, int, int], tuple[dict, int]]:
    key = (message.name, version)
    r = _READERS.get(key)
    if r is None:
        fname = _COMPILER.compile_struct(f"{message.name}v{version}", message.fields, version,
                                         message.is_flexible(version))
        r = _READERS[key] = _COMPILER.ns[fname]
    return r


def decode_message(message: Message, version: int, data: bytes, offset: int = 0) -> dict[str, Any]:
    """Decode one message body (no version prefix) at ``version``."""
    try:
        d, _ = _reader(message, version)(data, offset, len(data))
        return d
    except (_Malformed, struct.error, IndexError, UnicodeDecodeError) as exc:
        raise RecordDecodeError("MALFORMED", f"{message.name} v{version}: {_why(exc)}") from None


def _why(exc: BaseException) -> str:
    if isinstance(exc, (struct.error, IndexError)):
        return "truncated"
    if isinstance(exc, UnicodeDecodeError):
        return "string is not UTF-8"
    return str(exc)


# Precompile every known (message, version) so the first record pays nothing.
for _rt in RECORD_TYPES.values():
    _reader(_rt.key, 0)
    lo, hi = _rt.value.valid  # type: ignore[misc]
    for _v in range(lo, (hi if hi is not None else lo) + 1):
        _reader(_rt.value, _v)

_KEY_READER = {t: _reader(rt.key, 0) for t, rt in RECORD_TYPES.items()}
_VALUE_RANGE = {t: rt.value.valid for t, rt in RECORD_TYPES.items()}
_VALUE_READER = {
    (t, v): _reader(rt.value, v)
    for t, rt in RECORD_TYPES.items()
    for v in range(rt.value.valid[0], rt.value.valid[1] + 1)  # type: ignore[index,operator]
}


def decode_key(key: bytes | None) -> tuple[int, dict[str, Any]]:
    """Record type and key fields. Keys are read with the layout of version 0
    whatever the type (Kafka reads them with version = type, and every key
    field is declared for version 0 only, so the generated reader always reads it)."""
    if not key:
        raise RecordDecodeError("MISSING_KEY", "record has no key")
    if len(key) < 2:
        raise RecordDecodeError("MALFORMED_KEY", "key shorter than its int16 record type")
    record_type = (key[0] << 8 | key[1])
    if record_type >= 0x8000:
        record_type -= 0x10000
    reader = _KEY_READER.get(record_type)
    if reader is None:
        if record_type in KNOWN_UNDECODED_TYPES:
            raise RecordDecodeError("UNKNOWN_RECORD_TYPE",
                                    f"{KNOWN_UNDECODED_TYPES[record_type]} (type {record_type}) is not decoded",
                                    record_type)
        raise RecordDecodeError("UNKNOWN_RECORD_TYPE", f"unknown record type {record_type}", record_type)
    try:
        fields, _ = reader(key, 2, len(key))
    except (_Malformed, struct.error, IndexError, UnicodeDecodeError) as exc:
        raise RecordDecodeError("MALFORMED_KEY", f"{record_type_name(record_type)}Key: {_why(exc)}",
                                record_type) from None
    return record_type, fields


def decode_value(record_type: int, value: bytes) -> tuple[int, dict[str, Any]]:
    if len(value) < 2:
        raise RecordDecodeError("MALFORMED_VALUE", "value shorter than its int16 version", record_type)
    version = (value[0] << 8 | value[1])
    if version >= 0x8000:
        version -= 0x10000
    reader = _VALUE_READER.get((record_type, version))
    if reader is None:
        lo, hi = _VALUE_RANGE[record_type]  # type: ignore[misc]
        raise RecordDecodeError(
            "UNKNOWN_VALUE_VERSION",
            f"{record_type_name(record_type)}Value version {version} (known {lo}-{hi})",
            record_type)
    try:
        fields, _ = reader(value, 2, len(value))
    except (_Malformed, struct.error, IndexError, UnicodeDecodeError) as exc:
        raise RecordDecodeError("MALFORMED_VALUE", f"{record_type_name(record_type)}Value v{version}: {_why(exc)}",
                                record_type) from None
    return version, fields


def decode(key: bytes | None, value: bytes | None) -> CoordinatorRecord:
    """Decode one ``__consumer_offsets`` record; a null value is a tombstone."""
    record_type, key_fields = decode_key(key)
    if value is None:
        return CoordinatorRecord(record_type, key_fields, None, None)
    version, value_fields = decode_value(record_type, value)
    return CoordinatorRecord(record_type, key_fields, version, value_fields)


# ---------------------------------------------------------------------------
# Topic ids and Kafka's JSON view
# ---------------------------------------------------------------------------

def uuid_to_kafka_string(raw: bytes) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def uuid_to_standard_string(raw: bytes) -> str:
    return str(uuid.UUID(bytes=bytes(raw)))


def parse_topic_id(text: str) -> bytes:
    """16 bytes from either Kafka's base64 form (``MKXx1fIkQy2J9jXHhK8m1w``,
    as ``kafka-topics --describe`` prints it) or a standard UUID string."""
    text = text.strip()
    if len(text) == 22:
        raw = base64.urlsafe_b64decode(text.replace("+", "-").replace("/", "_") + "==")
        if len(raw) == 16:
            return raw
    return uuid.UUID(text).bytes


def _json_value(f: Field, value: Any, version: int) -> Any:
    if value is None:
        return None
    if f.type == "bytes":
        return base64.b64encode(value).decode()
    if f.type == "uuid":
        return uuid_to_kafka_string(value)
    if f.type == "struct":
        return _json_struct(f.fields, value, version)
    if f.type == "[]struct":
        return [_json_struct(f.fields, v, version) for v in value]
    return value


def _json_struct(fields: tuple[Field, ...], data: dict[str, Any], version: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields:
        if not in_versions(version, f.versions) or f.name not in data:
            continue
        value = data[f.name]
        if f.tag is not None and value == f.default:
            continue  # Kafka's JSON converters print tagged fields only when not default
        out[f.name] = _json_value(f, value, version)
    return out


def kafka_json(record: CoordinatorRecord) -> dict[str, Any]:
    """The record as Kafka's ``CoordinatorRecordMessageFormatter`` prints it:
    ``{"key": {"type": T, "data": {...}}, "value": {"version": V, "data": {...}} | null}``
    (fields in schema order, bytes as base64, topic ids in Kafka's base64 form)."""
    rt = RECORD_TYPES[record.record_type]
    key = {"type": record.record_type, "data": _json_struct(rt.key.fields, record.key, 0)}
    if record.value is None:
        return {"key": key, "value": None}
    assert record.version is not None
    value = {"version": record.version, "data": _json_struct(rt.value.fields, record.value, record.version)}
    return {"key": key, "value": value}
