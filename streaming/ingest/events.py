"""Bytes and dicts in, typed events (``state.events``) or a dead letter out (contract §1).

Bad input never raises out of here: it becomes a :class:`DecodeError` with a
stable ``code`` (MISSING_FIELD, WRONG_TYPE, ...), its parameters and the
record's coordinates, which is what the dead-letter topic carries.
Unknown ``type`` values are not errors: they are counted and skipped
(forward compatibility with newer producers).

The entry points live here; the work is split by what it knows: :mod:`.fields` (reading one
field, the bounds, the errors), :mod:`.commit_offsets` (a commit's partitions as columns),
:mod:`.fast_paths` (the common records decoded in C), :mod:`.builders` (each type's fields,
as declared in ``state.records``, to its typed event) and :mod:`.avro` (Avro input).
"""
from __future__ import annotations

import msgspec

from fencewatch.state.records import EVENT_TYPES_ON, InputTopic
from fencewatch.streaming.ingest.avro import avro_record_dict, decode_avro_record
from fencewatch.streaming.ingest.builders import event_from_dict
from fencewatch.streaming.ingest.fast_paths import commit_line, typed_event
from fencewatch.streaming.ingest.fields import (MAX_PARTITIONS, MAX_RECORD_BYTES, MAX_STRING_CHARS, DecodeError,
                                                UnknownType, bounded, event_type, oversized)

__all__ = [
    "MAX_PARTITIONS", "MAX_RECORD_BYTES", "MAX_STRING_CHARS", "MEMBERSHIP_TYPES", "DecodeError", "UnknownType",
    "avro_record_dict", "bounded", "commit_line", "decode_accepted_json", "decode_avro_record",
    "decode_json_line", "decode_json_lines", "event_from_dict", "event_type", "oversized", "sort_result",
    "typed_event",
]

MEMBERSHIP_TYPES = EVENT_TYPES_ON[InputTopic.HEARTBEATS]
"""The event types of the heartbeats topic (the rest come on the offsets topic)."""

_loads = msgspec.json.decode  # strict JSON: NaN and Infinity are not numbers here


def decode_json_lines(lines, errors: list, unknown: dict) -> list:
    """Typed events of a JSON-lines input, in input order: ``seq`` is the line index, event ids
    default to it, bad lines go to ``errors`` as "line N", unknown types are counted in ``unknown``.

    Well-formed commits and assignments (most lines) are decoded straight into events
    (``fast_paths.typed_event``); other lines are parsed into objects for :func:`event_from_dict`
    (which names what is wrong), and lines that are not JSON go through
    :func:`decode_json_line` for the parser's reason.
    """
    events = []
    append = events.append
    typed = typed_event
    for n, line in enumerate(lines):
        if len(line) > MAX_STRING_CHARS:  # rare: the bounds apply (decode_json_line)
            sort_result(decode_json_line(line, seq=n, default_event_id=str(n), coords=f"line {n + 1}"),
                        events, errors, unknown)
            continue
        ev = typed(line, n, None)
        if ev is not None:
            append(ev)
            continue
        try:
            d = _loads(line)
        except ValueError:  # not JSON, or a blank line
            if line.strip():
                sort_result(decode_json_line(line, seq=n, default_event_id=str(n), coords=f"line {n + 1}"),
                            events, errors, unknown)
            continue
        sort_result(event_from_dict(d, seq=n, default_event_id=str(n), coords=f"line {n + 1}"), events, errors, unknown)
    return events


def sort_result(res, events: list, errors: list, unknown: dict) -> None:
    """A decoder result to its list: events, bad records (``errors``), or a count per unknown type."""
    if isinstance(res, DecodeError):
        errors.append(res)
    elif isinstance(res, UnknownType):
        unknown[res.type] = unknown.get(res.type, 0) + 1
    else:
        events.append(res)


def decode_json_line(line: str | bytes, *, seq: int, default_event_id: str, coords: str):
    """One JSON record -> event, :class:`UnknownType` or :class:`DecodeError` (bounds included)."""
    size = len(line)
    if size > MAX_STRING_CHARS:
        return oversized(size, coords) or bounded(_decode_json_line(line, seq, default_event_id, coords), size, coords)
    return _decode_json_line(line, seq, default_event_id, coords)


def decode_accepted_json(line: bytes, seq: int, default_event_id: str, coords: str):
    """A record the router has accepted (``streaming.routing``), decoded again where it is judged.
    The bounds were checked on the record as it arrived (an Avro record's JSON may be longer)."""
    return _decode_json_line(line, seq, default_event_id, coords)


def _decode_json_line(line: str | bytes, seq: int, default_event_id: str, coords: str):
    ev = typed_event(line, seq, default_event_id)
    if ev is not None:
        return ev
    try:
        d = _loads(line)
    except (ValueError, UnicodeDecodeError, TypeError) as exc:
        return DecodeError("INVALID_JSON", {"problem": str(exc)[:200]}, coords)
    return event_from_dict(d, seq=seq, default_event_id=default_event_id, coords=coords)
