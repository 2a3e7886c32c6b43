"""Spark state as bytes: what a key keeps between micro-batches, in an explicit, versioned encoding.

Every stored value is a header and a msgpack body. The header is ``b"fw"``, the format version
(one byte, :data:`FORMAT`) and the kind of value (one byte): ``G`` a group's aggregate
(``state.group.Group``), ``T`` a topic bucket's truncation watches (``{topic:
state.partition.TopicWatch}``), ``H`` a key's :class:`~fencewatch.streaming.runtime.hold.Hold`,
``B`` a group bucket's groups (``{group id: (group value, hold value, wake-up)}``: each group's
values encoded alone, so a group the micro-batch did not touch is carried as its bytes).
The body is what msgspec makes of the classes from their own annotations: dataclasses as maps by
field name, NamedTuples as arrays, enums by value, tuples and frozensets as arrays decoded back to
their annotated types. Nothing names a Python module or class, so moving or renaming one leaves
stored state readable; ``state/`` stays free of msgspec (its annotations are the schema).

What is not stored, because it is rebuilt: a group's judgement cache (emptied here, written as an
empty map; rebuilding it in the next micro-batch costs less than storing it, docs/decisions.md).
A topic watch's stored commits are folded before they are written (``partition.fold``: the same
watch, the newest commit per group and partition): the unfolded log finds its duplicates by object
identity, which no encoding keeps, so stored unfolded it only grew.

Versions: a value's format is checked before its body is read. A value of a newer format is
refused (a newer fencewatch wrote it); one of an older format is read through :data:`MIGRATIONS`
or refused; 0.1.0's pickled objects (first byte ``0x80``) are refused with what to do
(``fencewatch checkpoint reset-state``, docs/reliability.md). Changing what a stored class holds
(a field added, renamed, retyped or given a new meaning) changes ``tests/fixtures/state-format/
schema.json``, which a test compares: bump :data:`FORMAT` and add a migration, or, for a new
field with a default (older values decode to it), regenerate the snapshot.
"""
from __future__ import annotations

from typing import Callable

import msgspec

from fencewatch.state.engine import Key, KeyKind
from fencewatch.state.group import Group
from fencewatch.state.judgement_cache import JudgementCache
from fencewatch.state.offsets import committed_offsets
from fencewatch.state.partition import TopicWatch, fold
from fencewatch.streaming.runtime.hold import Held, Hold, stored_payload

FORMAT = 1
"""The state format this code writes. 0.1.0 (never released) pickled Python objects."""
MAGIC = b"fw"
GROUP, TOPICS, HOLD, BUCKET = b"G", b"T", b"H", b"B"
KIND_NAMES = {GROUP: "group", TOPICS: "topic bucket", HOLD: "hold", BUCKET: "group bucket"}
_HEADERS = {kind: MAGIC + bytes((FORMAT,)) + kind for kind in KIND_NAMES}
_PICKLE = 0x80  # pickle's PROTO opcode: 0.1.0's values (protocol 5) start with it

BucketEntry = tuple[bytes | None, bytes | None, int | None]
"""A group in a bucket: its group value, its hold value, the processing time (ms) it next has
something to do without input (None: nothing)."""

ROOT_TYPES: dict[bytes, object] = {GROUP: Group, TOPICS: dict[str, TopicWatch], HOLD: Hold,
                                   BUCKET: dict[str, BucketEntry]}
"""What each kind of value decodes to: the schema, read from these classes' annotations."""

MIGRATIONS: dict[int, Callable[[bytes, bytes], bytes]] = {}
"""Older format -> a function (kind, body) -> the body in the next format. None yet: format 1 is
the first explicit one."""


class StateFormatError(ValueError):
    """A stored value this code cannot read: written by 0.1.0, by a newer fencewatch, or damaged."""


REMEDY = ("start a new checkpoint from this one's committed offsets with `fencewatch checkpoint reset-state "
          "--checkpoint OLD --to NEW` and run on NEW (groups rebuild their state under the warm-up), or start "
          "from a fresh checkpoint (docs/reliability.md, \"State format\")")


def _dec_hook(kind: type, obj):
    """Types msgspec does not know: the judgement cache (stored empty) starts empty."""
    if kind is JudgementCache:
        return JudgementCache()
    # msgspec reports a hook's TypeError as a ValidationError at the value's path: decode() turns
    # it into a StateFormatError naming the key.
    raise TypeError(f"{kind!r} has no stored form")


_encode = msgspec.msgpack.Encoder().encode
_DECODERS = {kind: msgspec.msgpack.Decoder(t, dec_hook=_dec_hook).decode for kind, t in ROOT_TYPES.items()}


# --------------------------------------------------------------------------- encoding

def encode_group(g: Group) -> bytes:
    """A group's aggregate. Empties its judgement cache and folds its stored offsets first (the
    group means the same after both; the state function drops the object afterwards)."""
    g.judged.clear()
    committed_offsets(g)
    return _HEADERS[GROUP] + _encode(g)


def encode_topics(watches: dict[str, TopicWatch]) -> bytes:
    """A topic bucket's watches, each folded first (the same watch, its log applied)."""
    for tw in watches.values():
        fold(tw)
    return _HEADERS[TOPICS] + _encode(watches)


def encode_hold(hold: Hold) -> bytes:
    return _HEADERS[HOLD] + _encode(hold)


def encode_bucket(groups: dict[str, BucketEntry]) -> bytes:
    """A group bucket's groups (values already encoded: only the touched ones were re-encoded)."""
    return _HEADERS[BUCKET] + _encode(groups)


def decode_bucket(blob: bytes, pkey: Key | None = None) -> dict[str, list]:
    """A group bucket's groups, each as a mutable [group value, hold value, wake-up]."""
    groups = decode(blob, BUCKET, _name(pkey) if pkey else "a stored group bucket")
    return {g: list(entry) for g, entry in groups.items()}


def encode_state(pkey: Key, st) -> bytes:
    """A key's rules state: a group key's aggregate, or a topic bucket's watches."""
    return encode_group(st) if pkey.kind is KeyKind.GROUP else encode_topics(st)


# --------------------------------------------------------------------------- decoding

def decode(blob: bytes, kind: bytes, what: str = "a stored value"):
    """The object a value of ``kind`` holds; ``what`` names it in errors (e.g. its key)."""
    body = _body(blob, kind, what)
    try:
        value = _DECODERS[kind](body)
    except msgspec.DecodeError as exc:  # ValidationError included: a body that does not fit its schema
        raise StateFormatError(f"{what}: unreadable {KIND_NAMES[kind]} state of format {FORMAT}: {exc}") from exc
    return value


def decode_state(pkey: Key, blob: bytes):
    """A key's rules state (:func:`encode_state`'s)."""
    return decode(blob, GROUP if pkey.kind is KeyKind.GROUP else TOPICS, _name(pkey))


def decode_hold(blob: bytes, pkey: Key | None = None) -> Hold:
    """A key's hold, its entries :class:`~fencewatch.streaming.runtime.hold.Held` again."""
    hold = decode(blob, HOLD, _name(pkey) if pkey else "a stored hold")
    hold.pending = [Held(ts, seq, stored_payload(payload), arrived) for ts, seq, payload, arrived in hold.pending]
    return hold


def _body(blob: bytes, kind: bytes, what: str) -> bytes:
    """The msgpack body after the header, migrated to :data:`FORMAT`; else :class:`StateFormatError`."""
    version = value_format(blob)
    if version == "0.1.0":
        raise StateFormatError(f"{what}: written by fencewatch 0.1.0 (pickled Python objects), which this version "
                               f"does not read; {REMEDY}")
    if version is None:
        raise StateFormatError(f"{what}: not a fencewatch state value (starts {bytes(blob[:8])!r}); {REMEDY}")
    if blob[3:4] != kind:
        raise StateFormatError(f"{what}: a {KIND_NAMES.get(blob[3:4], repr(blob[3:4]))} value where a "
                               f"{KIND_NAMES[kind]} was expected")
    if version > FORMAT:
        raise StateFormatError(f"{what}: state format {version} was written by a newer fencewatch; this one reads "
                               f"formats up to {FORMAT}: run the newer version on this checkpoint")
    body = bytes(blob[4:])
    while version < FORMAT:
        migrate = MIGRATIONS.get(version)
        if migrate is None:
            raise StateFormatError(f"{what}: state format {version} is no longer read; {REMEDY}")
        body, version = migrate(kind, body), version + 1
    return body


def value_format(blob: bytes) -> int | str | None:
    """A stored value's format: its version number, ``"0.1.0"`` for a pickled object, None when it is
    neither (what ``fencewatch checkpoint show`` reports)."""
    if len(blob) >= 4 and blob[:2] == MAGIC:
        return blob[2]
    if blob[:1] == bytes((_PICKLE,)):
        return "0.1.0"
    return None


def _name(pkey: Key) -> str:
    return "key " + "/".join(map(str, pkey))


# --------------------------------------------------------------------------- the schema, as stored

_PRIMITIVES = {"IntType": "int", "StrType": "str", "BoolType": "bool", "FloatType": "float", "NoneType": "None",
               "BytesType": "bytes", "AnyType": "any"}
_ITEMS = {"ListType": "list", "SetType": "set", "FrozenSetType": "frozenset", "VarTupleType": "tuple"}


def stored_schema() -> dict:
    """Every stored class with its fields as stored (in order: type, whether it has a default), every enum with its
    values, and what each kind of value decodes to: the format's definition, compared by a test
    with ``tests/fixtures/state-format/schema.json``, so that changing a stored class cannot go
    unnoticed (regenerate: ``python -m fencewatch.streaming.runtime.state_codec``)."""
    import msgspec.inspect as mi

    classes: dict[str, dict] = {}
    enums: dict[str, list] = {}

    def name(t) -> str:
        kind = type(t).__name__
        if isinstance(t, (mi.DataclassType, mi.NamedTupleType)):
            cls = t.cls.__qualname__
            if cls not in classes:
                classes[cls] = {}  # before its fields: a class may refer to itself
                classes[cls] = {"encoded_as": "map" if isinstance(t, mi.DataclassType) else "array",
                                "fields": {f.name: name(f.type) + ("" if f.required else " (has a default)")
                                           for f in t.fields}}
            return cls
        if isinstance(t, mi.EnumType):
            enums[t.cls.__name__] = [m.value for m in t.cls]
            return t.cls.__name__
        if isinstance(t, mi.CustomType):
            return f"stored empty: {t.cls.__name__}"
        if isinstance(t, mi.DictType):
            return f"dict[{name(t.key_type)}, {name(t.value_type)}]"
        if kind in _ITEMS:
            return f"{_ITEMS[kind]}[{name(t.item_type)}{', ...' if kind == 'VarTupleType' else ''}]"
        if isinstance(t, mi.TupleType):
            return f"tuple[{', '.join(map(name, t.item_types))}]"
        if isinstance(t, mi.UnionType):
            return " | ".join(map(name, t.types))
        return _PRIMITIVES[kind]

    roots = {kind.decode(): name(mi.type_info(t)) for kind, t in ROOT_TYPES.items()}
    return {"format": FORMAT, "header": "b'fw' + format (1 byte) + kind (1 byte) + msgpack", "roots": roots,
            "classes": dict(sorted(classes.items())), "enums": dict(sorted(enums.items()))}


if __name__ == "__main__":  # regenerate tests/fixtures/state-format/schema.json
    import json
    import sys

    json.dump(stored_schema(), sys.stdout, indent=1)
    sys.stdout.write("\n")
