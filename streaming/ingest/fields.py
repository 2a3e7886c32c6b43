"""Reading one field of a decoded record, and what a bad one becomes (contract §1.3).

What lives here: :class:`DecodeError` (a stable ``code``, its parameters, the record's
coordinates: what the dead-letter topic carries), :class:`UnknownType`, the bounds on a
record and its fields, and the field readers the decoders share: each takes the record's
dict and a field name, returns the value checked against its declared type (a Kafka long,
a string, a list of topic partitions) and raises :class:`Bad` naming the field otherwise.
Internal to ``streaming.ingest``; the entry points are in :mod:`.events`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from itertools import repeat
from typing import Any, Callable, Mapping

from fencewatch.state.events import EVENT_CLASSES, OffsetCommit
from fencewatch.state.records import (DEFAULT_CLUSTER, HEADER, INT, LONG, STRING, TOPIC_PARTITIONS, EventType, Slot,
                                      check_names)

# Bounds (docs/reliability.md, "Bounds"): a record over one is a dead letter with its reason, never
# judged with a cut field (a cut id would merge two members). None of them drops a real request:
# Kafka's protocol strings carry an int16 length, so no group, member, instance or transactional
# id, topic or commit metadata is longer than 32,767 characters; a record is bounded as a topic's
# default ``max.message.bytes`` (1 MiB) bounds it; a request naming more partitions than a large
# cluster holds is not one.
MAX_RECORD_BYTES = 1 << 20
MAX_STRING_CHARS = 32_767
MAX_PARTITIONS = 200_000

INT64 = 2 ** 63  # a Kafka long: larger integers (or floats) are never one
INT_TYPES = frozenset({int})
STR_TYPES = frozenset({str})


@dataclass(frozen=True, slots=True)
class DecodeError:
    """Why a record could not become an event; ``reason`` is what the DLQ record carries."""

    code: str  # stable: INVALID_JSON, NOT_AN_OBJECT, MISSING_FIELD, WRONG_TYPE, INVALID_VALUE, UNKNOWN_SCHEMA_ID, INVALID_AVRO
    params: Mapping[str, str]
    coords: str  # topic[partition]@offset, or "line N"

    @property
    def reason(self) -> str:
        """``CODE(k=v, ...)``; bounded: a parameter quoting the input is cut at 200 characters."""
        detail = ", ".join(f"{k}={v if len(v) <= 200 else v[:200] + '...'}" for k, v in self.params.items())
        return f"{self.code}({detail})" if detail else self.code

    def __str__(self) -> str:
        return f"{self.coords}: {self.reason}"


@dataclass(frozen=True, slots=True)
class UnknownType:
    """A well-formed event of a type this version does not know: counted and skipped."""

    type: str
    coords: str


class Bad(Exception):
    """A field is missing or wrong; the decoder turns it into a :class:`DecodeError`."""

    def __init__(self, code: str, **params: Any):
        super().__init__(code)
        self.code = code
        self.params = {k: str(v) for k, v in params.items()}


# --------------------------------------------------------------------------- scalars
# Every reader takes (record, field name[, default]); the decoders' plans call them by type.

def req(d: Mapping, name: str, _: Any = None) -> Any:
    try:
        v = d[name]
    except KeyError:
        raise Bad("MISSING_FIELD", field=name) from None
    if v is None:
        raise Bad("MISSING_FIELD", field=name)
    return v


def long_of(v: Any, name: str, *, integral_floats: bool = True) -> int:
    """A Kafka long (64-bit signed); a float with an integral value counts when ``integral_floats``."""
    if type(v) is int:
        if -INT64 <= v < INT64:
            return v
        raise Bad("WRONG_TYPE", field=name, expected="long", got="integer beyond 64 bits")
    if integral_floats and type(v) is float and v.is_integer() and -INT64 <= v < INT64:
        return int(v)
    raise Bad("WRONG_TYPE", field=name, expected="long", got=type(v).__name__)


def req_int(d: Mapping, name: str, _: Any = None) -> int:
    return long_of(req(d, name), name)


def opt_int(d: Mapping, name: str, default: int | None = None) -> int | None:
    v = d.get(name)
    return default if v is None else long_of(v, name)


def req_str(d: Mapping, name: str, _: Any = None) -> str:
    v = req(d, name)
    if type(v) is not str:
        raise Bad("WRONG_TYPE", field=name, expected="string", got=type(v).__name__)
    return v


def opt_str(d: Mapping, name: str, default: str | None = None) -> str | None:
    v = d.get(name)
    if v is None:
        return default
    if type(v) is not str:
        raise Bad("WRONG_TYPE", field=name, expected="string", got=type(v).__name__)
    return v


def list_of(v: Any, name: str) -> list:
    if type(v) is not list:
        raise Bad("WRONG_TYPE", field=name, expected="array", got=type(v).__name__)
    return v


def int_item(v: Any, name: str) -> int:
    return long_of(v, name, integral_floats=False)


def header(d: Mapping, seq: int, default_event_id: str) -> tuple[int, str, str]:
    """(ts, cluster, event id) of any event (the declared header but ``type``, read first)."""
    ts = req_int(d, "ts")
    cluster = opt_str(d, "cluster", DEFAULT_CLUSTER)
    event_id = opt_str(d, "event_id", default_event_id)
    return ts, cluster, event_id


check_names(f"{__name__}.header", ("type", "ts", "cluster", "event_id"), HEADER)


# --------------------------------------------------------------------------- topic partitions

def topic_partitions(d: Mapping, name: str, *, required: bool = True):
    """``[{"topic": t, "partitions": [..], "assignment_epochs": [..]?}]`` -> (tps, epochs or None)."""
    raw = d.get(name)
    if raw is None:
        if required:
            raise Bad("MISSING_FIELD", field=name)
        return (), None
    tps: list[tuple[str, int]] = []
    epochs: list[int] | None = []
    for i, entry in enumerate(list_of(raw, name)):
        where = f"{name}[{i}]"
        if type(entry) is not dict:
            raise Bad("WRONG_TYPE", field=where, expected="object", got=type(entry).__name__)
        topic = req_str(entry, "topic") if "topic" in entry else None
        if topic is None:
            raise Bad("MISSING_FIELD", field=f"{where}.topic")
        parts = list_of(req(entry, "partitions"), f"{where}.partitions")
        if set(map(type, parts)) <= INT_TYPES and (not parts or -INT64 <= min(parts) and max(parts) < INT64):
            tps.extend(zip(repeat(topic), parts))
        else:
            for p in parts:
                tps.append((topic, int_item(p, f"{where}.partitions")))
        ae = entry.get("assignment_epochs")
        if ae is None:
            epochs = None
        elif epochs is not None:
            ae = list_of(ae, f"{where}.assignment_epochs")
            if len(ae) != len(parts):
                raise Bad("INVALID_VALUE", field=f"{where}.assignment_epochs",
                          problem=f"{len(ae)} epochs for {len(parts)} partitions")
            epochs.extend(int_item(e, f"{where}.assignment_epochs") for e in ae)
    return tuple(tps), (tuple(epochs) if epochs is not None and tps else None)


check_names(f"{__name__}.topic_partitions", ("topic", "partitions", "assignment_epochs"),
            TOPIC_PARTITIONS.names, record=TOPIC_PARTITIONS.name)


# --------------------------------------------------------------------------- bounds

def oversized(size: int, coords: str) -> DecodeError | None:
    """The whole-record bound."""
    if size > MAX_RECORD_BYTES:
        return DecodeError("RECORD_TOO_LARGE", {"bytes": str(size), "limit": str(MAX_RECORD_BYTES)}, coords)
    return None


def bounded(res, size: int, coords: str):
    """``res`` itself, or a :class:`DecodeError` when a field of the event is over its bound.
    A record shorter than the string bound cannot hold a string or a partition list over it,
    so the common record costs one comparison."""
    if size <= MAX_STRING_CHARS or isinstance(res, (DecodeError, UnknownType)):
        return res
    names = res._fields if isinstance(res, tuple) else [f.name for f in dataclasses.fields(res)]
    for name in names:
        problem = _over(getattr(res, name))
        if problem is not None:
            code, params = problem
            return DecodeError(code, {"type": event_type(res), "field": name, **params}, coords)
    return res


def _over(value) -> tuple[str, dict] | None:
    """Why ``value`` (a string, or nested tuples of strings and numbers) is over a bound, or None."""
    if type(value) is str:
        if len(value) > MAX_STRING_CHARS:
            return "FIELD_TOO_LONG", {"length": str(len(value)), "limit": str(MAX_STRING_CHARS)}
        return None
    if isinstance(value, tuple):
        if len(value) > MAX_PARTITIONS:
            return "TOO_MANY_ENTRIES", {"entries": str(len(value)), "limit": str(MAX_PARTITIONS)}
        for item in value:
            if type(item) is str or isinstance(item, tuple):
                problem = _over(item)
                if problem is not None:
                    return problem
    return None


_TYPE_BY_CLASS = {cls: etype.value for etype, cls in EVENT_CLASSES.items() if cls is not OffsetCommit}
_COMMIT_TYPES = (EventType.OFFSET_COMMIT.value, EventType.TXN_OFFSET_COMMIT.value)


def event_type(ev) -> str:
    """The contract's ``type`` of a typed event (for counts and metrics)."""
    if type(ev) is OffsetCommit:
        return _COMMIT_TYPES[ev.transactional]
    return _TYPE_BY_CLASS[type(ev)]


# --------------------------------------------------------------------------- declared scalars

def _choice(d: Mapping, name: str, arg: tuple) -> str:
    required, default, valid, listed = arg
    v = req_str(d, name) if required else opt_str(d, name, default)
    if v not in valid:
        raise Bad("INVALID_VALUE", field=name, value=v, valid=listed)
    return v


def scalar_reader(slot: Slot) -> tuple[Callable, Any] | None:
    """(reader, its third argument) for a declared string or integer field, or None for other types:
    required or not, the default an absent one stands for, the values a closed set allows."""
    t = slot.field.type
    if t in (INT, LONG):
        return (req_int, None) if slot.required else (opt_int, slot.default)
    if t == STRING:
        if slot.values is not None:
            return _choice, (slot.required, slot.default, frozenset(slot.values), ",".join(slot.values))
        return (req_str, None) if slot.required else (opt_str, slot.default)
    return None
