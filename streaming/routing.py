"""What crosses Spark's shuffle between the router and the state function: records, not events.

The router (in the Kafka source's ``read``, or a ``mapInPandas``) reads each record only as far
as it must to know the keys it goes to and that it is valid, and ships the record's own bytes to
those keys; the state function decodes them where they are judged. A routed row holds one key's
records of one source for one input batch, as one msgpack frame:

- ``(seq, value, event_id)`` for an event the key applies: its JSON, decoded again by
  ``decoding.decode_accepted_json`` (Avro is turned into JSON here, at the edge);
- ``(ts, seq, group_id, partitions, offsets, leader_epochs)`` for a topic key: the offsets one
  stored commit wrote to that topic (KIP-320 truncation), without the rest of the commit;

with, beside the items, the count of the row's events by type (the job's event counts: a
stored commit's facts are not an event of the topic key).

Why records and not events: decoding a commit line costs about a third of pickling and
unpickling the event it gives (a Python call per object), and a well-formed commit, most of
the input, is checked and routed by one msgspec parse in C (``decoding.commit_line``) without
building the event at all (docs/decisions.md, issue 14). Anything else is decoded in full
here, so every dead letter is decided once, at the edge, with the reason the local engine
would give.
"""
from __future__ import annotations

import functools
from typing import Callable, Iterable

import msgspec

from fencewatch.state.engine import _by_topic, route
from fencewatch.state.events import OffsetCommit

from .decoding import (DecodeError, UnknownType, _TxnCommitLine as _TXN_LINE, _typed_event, avro_record_dict, bounded,
                       commit_line, decode_accepted_json, decode_json_line, event_from_dict, event_type, oversized)
from .gc_pause import no_cyclic_gc
from .schemas import DLQ_KEY, ROUTED

ROUTED_COLUMNS = ROUTED.fieldNames()
_SEP = "\x1f"
_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder().decode  # untyped: items come back as lists
_ROW = msgspec.structs.astuple  # a commit line's offset row as (topic, partition, offset, leader_epoch)


class Rows:
    """Column lists filled a row at a time (what ``pd.DataFrame`` takes), in schema order."""

    __slots__ = ("cols", "_appends")

    def __init__(self, names):
        self.cols: dict[str, list] = {c: [] for c in names}
        self._appends = [col.append for col in self.cols.values()]

    def add(self, *values) -> None:
        for append, v in zip(self._appends, values):
            append(v)


@functools.lru_cache(maxsize=1 << 16)
def key_string(key: tuple) -> str:
    # Memoised, bounded: a batch asks for the same few keys again and again.
    return _SEP.join(map(str, key))


def parse_key(text: str) -> tuple:
    kind, cluster, name = text.split(_SEP, 2)
    return (kind, cluster, name)


# --------------------------------------------------------------------------- the router


def make_checker(input_format: str = "json", schema_ids: Iterable[int] = (1,), registry=None) -> Callable:
    """(value, seq, event_id, coords) -> (a typed event, :class:`UnknownType` or :class:`DecodeError`;
    the JSON the state function will decode). ``registry``: a ``schema_registry.RegistryEventDecoder``
    for Avro input (else the fixed ``schema_ids``)."""
    ids = frozenset(schema_ids)
    if input_format != "avro":
        def check_json(value, seq, eid, coords):
            return decode_json_line(value, seq=seq, default_event_id=eid, coords=coords), value

        check_json.json = True  # commit lines may take the router's msgspec path
        return check_json

    def check_avro(value, seq, eid, coords):
        data = bytes(value)
        res = oversized(len(data), coords)
        if res is not None:
            return res, None
        d = avro_record_dict(data, coords=coords, schema_ids=ids, registry=registry)
        if isinstance(d, DecodeError):
            return d, None
        res = bounded(event_from_dict(d, seq=seq, default_event_id=eid, coords=coords), len(data), coords)
        return res, (None if isinstance(res, (DecodeError, UnknownType)) else msgspec.json.encode(d))

    check_avro.json = False
    return check_avro


def route_records(records: Iterable[tuple], check: Callable, caught_up: bool | None) -> dict[str, list]:
    """The router's work on one input batch: records (value, seq, event_id, coords, source,
    record_ts, bad_reason) -> ROUTED columns: one row per key and source with its items in one
    msgpack frame, one row per dead letter or unknown type (``DLQ_KEY``). ``check``: a
    :func:`make_checker`. ``coords`` None: made from a Kafka event id (``topic/partition/offset``)
    when a record needs them. Used by the ``mapInPandas`` router and inside the Kafka source."""
    with no_cyclic_gc(settle=False):
        return _route(records, check, caught_up)


def _route(records: Iterable[tuple], check: Callable, caught_up: bool | None) -> dict[str, list]:
    rows = Rows(ROUTED_COLUMNS)
    add = rows.add
    keyed: dict[str, dict[str, list]] = {}  # source -> key -> [items, newest ts, first seq, {type: n}]
    fast = getattr(check, "json", False)
    group_keys: dict = {}
    last_source, slots = None, None
    for value, seq, eid, coords, source, record_ts, bad in records:
        if bad is not None or value is None:
            add(DLQ_KEY, int(record_ts or 0), int(seq), "dlq", source, None if value is None else bytes(value),
                "MISSING_VALUE" if bad is None else bad, _coords(eid) if coords is None else coords, 0, None)
            continue
        if source is not last_source:
            slots = keyed.get(source)
            if slots is None:
                slots = keyed[source] = {}
            last_source = source
        seq = int(seq)
        c = commit_line(value) if fast else None
        if c is not None:  # most records: checked and routed in one C-level parse, nothing built
            ts, cluster, group_id = c.ts, c.cluster, c.group_id
            gk = group_keys.get((cluster, group_id))
            if gk is None:
                gk = group_keys[(cluster, group_id)] = key_string(("g", cluster, group_id))
            etype = "txn_offset_commit" if type(c) is _TXN_LINE else "offset_commit"
            slot = slots.get(gk)
            if slot is None:
                slots[gk] = [[(seq, value, eid)], ts, seq, {etype: 1}]
            else:
                slot[0].append((seq, value, eid))
                if ts > slot[1]:
                    slot[1] = ts
                counts = slot[3]
                counts[etype] = counts.get(etype, 0) + 1
            rows_ = c.offsets
            if rows_ and (c.error_code is None or c.error_code == 0):
                for topic, partitions, offsets, epochs in _facts(rows_):
                    _put(slots, key_string(("t", cluster, topic)), ts, seq,
                         (ts, seq, group_id, partitions, offsets, epochs), None)
            continue
        if coords is None:
            coords = _coords(eid)
        res, payload = check(value, seq, eid, coords)
        if isinstance(res, DecodeError):
            raw = value if isinstance(value, (bytes, bytearray)) else str(value).encode()
            add(DLQ_KEY, int(record_ts or 0), seq, "dlq", source, bytes(raw), res.reason, coords, 0, None)
        elif isinstance(res, UnknownType):
            add(DLQ_KEY, int(record_ts or 0), seq, "unknown", source, None, res.type, coords, 0, None)
        elif type(res) is OffsetCommit:
            _put(slots, key_string(("g", res.cluster, res.group_id)), res.ts, seq, (seq, payload, eid),
                 event_type(res))
            if res.error_code in (None, 0) and res.offsets.tps:
                for topic, partitions, offsets, epochs in _by_topic(res.offsets):
                    _put(slots, key_string(("t", res.cluster, topic)), res.ts, seq,
                         (res.ts, seq, res.group_id, partitions, offsets, epochs), None)
        else:
            etype = event_type(res)  # counted at the first key it goes to, its own (``state.engine.route``)
            for key, _ in route(res):
                _put(slots, key_string(key), res.ts, seq, (seq, payload, eid), etype)
                etype = None
    for source, slots in keyed.items():
        for key, (items, ts, seq, counts) in slots.items():
            add(key, ts, seq, "events", source, _encode((items, counts)), None, None, sum(counts.values()), caught_up)
    return rows.cols


def _coords(eid: str) -> str:
    """A Kafka record's coordinates, ``topic[partition]@offset``, from its default event id
    ``topic/partition/offset`` (the Kafka source leaves them to be made only when needed)."""
    topic, partition, offset = eid.rsplit("/", 2)
    return f"{topic}[{partition}]@{offset}"


def _put(slots: dict, key: str, ts: int, seq: int, item: tuple, etype: str | None) -> None:
    """``item`` to ``key``'s row; ``etype``: the event's type when ``key`` is its own."""
    slot = slots.get(key)
    if slot is None:
        slots[key] = [[item], ts, seq, {etype: 1} if etype else {}]
        return
    slot[0].append(item)
    if ts > slot[1]:
        slot[1] = ts
    if etype:
        counts = slot[3]
        counts[etype] = counts.get(etype, 0) + 1


def _facts(rows: list) -> list[tuple]:
    """(topic, partitions, offsets, leader epochs) per topic of a commit line's offset rows, in
    order of first appearance: what ``state.engine._by_topic`` gives for the decoded event."""
    topics, partitions, offsets, epochs = zip(*map(_ROW, rows))
    first = topics[0]
    n = len(topics)
    if topics.count(first) == n:
        return [(first, partitions, offsets, epochs)]
    # Usually each topic's partitions are listed together: slices, no loop per partition.
    starts = [0] + [i for i in range(1, n) if topics[i] != topics[i - 1]]
    if len(starts) == len(set(topics)):
        ends = starts[1:] + [n]
        return [(topics[a], partitions[a:b], offsets[a:b], epochs[a:b]) for a, b in zip(starts, ends)]
    cols: dict[str, tuple[list, list, list]] = {}
    for topic, p, o, e in zip(topics, partitions, offsets, epochs):
        c = cols.get(topic)
        if c is None:
            c = cols[topic] = ([], [], [])
        c[0].append(p)
        c[1].append(o)
        c[2].append(e)
    return [(t, tuple(p), tuple(o), tuple(e)) for t, (p, o, e) in cols.items()]


# --------------------------------------------------------------------------- the state function's side


def read_items(pkey: tuple, source: str | None, payload: bytes, counts, dead: list, now: int = 0) -> list[tuple]:
    """A routed row's items as the key holds them (``Hold.admit_read``): (ts, seq, payload, now), the payload a
    typed event for a group key, and for a topic key what ``state.engine`` routes to it (a
    ``partition_epochs`` event, an ``offset_committed``'s commit facts) or a stored commit's
    columns (group id, partitions, offsets, leader epochs). ``counts`` (a Counter) gets the
    router's (type, source) counts of the events this key owns; ``dead`` gets (value, reason,
    event id, seq) of a record that no longer decodes (a guard: the router accepted it)."""
    items, row_counts = _decode(payload)
    for etype, n in row_counts.items():
        counts[(etype, source)] += n
    out = []
    append = out.append
    is_group = pkey[0] == "g"
    typed = _typed_event
    for item in items:
        if len(item) == 3:
            seq, value, eid = item
            ev = typed(value, seq, eid) or decode_accepted_json(value, seq, eid, eid)
            if type(ev) in _NOT_EVENTS:
                dead.append((value, ev.reason if type(ev) is DecodeError else f"UNKNOWN_TYPE({ev.type})", eid, seq))
                continue
            if is_group:
                append((ev.ts, seq, ev, now))
                continue
            for key, kev in route(ev):
                if key == pkey:
                    append((ev.ts, seq, kev, now))
                    break
        else:
            ts, seq, group_id, partitions, offsets, epochs = item
            append((ts, seq, (group_id, tuple(partitions), tuple(offsets), tuple(epochs)), now))
    return out


_NOT_EVENTS = frozenset({DecodeError, UnknownType})
