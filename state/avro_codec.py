"""The declared records (``state.records``) in Avro's binary encoding: a codec compiled from a
schema, and the input events' codec and wire formats (contract §1).

Owns: :func:`compile_codec` (a schema -> one generated Python function per record type and
direction, every field's encoding inlined), :data:`EVENT_SCHEMA` (``records.event_avro_schema``)
with its codec (:func:`encode_body`, :func:`decode_body`), and the two wire formats:
Confluent's (magic byte 0, 4-byte big-endian schema id, body) and a plain body
(:func:`encode_avro`, :func:`decode_avro`, which drops null fields, so
``decode_avro(encode_avro(e)) == e`` for an event without nulls).

Why compiled: fastavro resolves every union branch by validating the datum, which on a schema
this wide costs more than the encoding; the generated code is faster (docs/decisions.md) and
writes standard Avro, checked byte for byte against fastavro in the tests. Here, not in ``streaming/``, because the simulator writes what the monitor
reads and imports ``state`` only. Pure: the standard library only, no fastavro.
"""

from __future__ import annotations

import struct
from typing import Any, Literal

from fencewatch.state.records import event_avro_schema

__all__ = [
    "CONFLUENT_MAGIC",
    "EVENT_SCHEMA",
    "AvroWireError",
    "compile_codec",
    "decode_avro",
    "decode_body",
    "encode_avro",
    "encode_body",
    "encode_body_into",
    "write_long",
]

CONFLUENT_MAGIC = 0
_HEADER = struct.Struct(">bI")
EVENT_SCHEMA: dict[str, Any] = event_avro_schema()


class AvroWireError(ValueError):
    """A byte string is not a record of the schema, or not in the expected wire format."""


# ---------------------------------------------------------------------------- compiled codec
#
# Each record type of a schema becomes one generated Python function per
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
    """Emit Python source for the encoders/decoders of a schema's record types."""

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
        exec(compile("\n".join(self.lines), "<fencewatch-avro-codec>", "exec"), namespace)
        return namespace


def compile_codec(schema: dict[str, Any]) -> tuple[Any, Any, Any]:
    """(encode(value, out), decode(data, pos), decode_compact(data, pos)) for ``schema``'s top
    record: decode returns every field (None when null) as fastavro does, decode_compact leaves
    null fields out; both return (record, end position)."""
    codec = _Generator().build(schema)
    name = schema["name"]
    return codec["enc_" + name], codec["dec_" + name], codec["compact_" + name]


write_long = _write_long
"""Avro's zigzag varint of ``n``, appended to ``out`` (container files' block headers)."""
_encode_event, _decode_event, _decode_compact = compile_codec(EVENT_SCHEMA)
encode_body_into = _encode_event
"""``encode_body_into(event, out)``: :func:`encode_body` appended to a bytearray (container blocks)."""


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


