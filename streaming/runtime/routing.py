"""What crosses Spark's shuffle between the router and the state function: records, not events.

The router (in the Kafka source's ``read``, or a ``mapInArrow``) reads each record only as far
as it must to know the keys it goes to and that it is valid, and ships the record's own bytes to
those keys; the state function decodes them where they are judged. A routed row holds one key's
records of one source for one input batch, as one msgpack frame, LZ4-compressed
(:func:`pack_frame`): ``(records, commits, counts)``, each item a ``hold.Held`` entry as the key
will hold it (:func:`read_key_frame` decodes the frame straight into them):

- ``records``: ``Held(ts, seq, Record(value, event_id))`` for an event the key applies: its
  JSON, decoded again by ``decoding.decode_accepted_json`` when the key applies it (Avro is
  turned into JSON here, at the edge);
- ``commits``: ``Held(ts, seq, StoredCommit(topic, group_id, partitions, offsets,
  leader_epochs))`` for a topic bucket: the offsets one stored commit wrote to that topic
  (KIP-320 truncation), without the rest of the commit (topics share :data:`TOPIC_BUCKETS` keys
  per cluster);
- ``counts``: the row's events by type (the job's event counts: a stored commit's facts are not
  an event of the topic key).

A group bucket's row holds ``[(group id, records, counts), ...]`` (:func:`read_bucket`).

Why records and not events: decoding a commit line costs less than pickling and unpickling
the event it gives (a Python call per object), and a well-formed commit, most of the input, is
checked and routed by one msgspec parse in C (``decoding.commit_line``) without building the
event at all (docs/decisions.md, "Routing", records routed as themselves). Anything else is decoded in full
here, so every dead letter is decided once, at the edge, with the reason the local engine
would give.

:func:`make_router` is the ``mapInArrow`` function that does this (the Kafka source runs
:func:`route_records` inside ``read``); bad records become dead-letter rows under ``DLQ_KEY``
with their reason, unknown types are counted the same way.
"""
from __future__ import annotations

import functools
import zlib
from itertools import repeat
from typing import Callable, Iterable, Iterator

import msgspec

from fencewatch.state.engine import Key, KeyKind, commit_topics, group_key, route, stored_topics
from fencewatch.state.events import OffsetCommit

from fencewatch.streaming.ingest.events import (DecodeError, UnknownType, avro_record_dict, bounded, commit_line,
                                                decode_accepted_json, decode_json_line, event_from_dict, event_type,
                                                oversized, typed_event)
from fencewatch.streaming.runtime.gc_pause import no_cyclic_gc
from fencewatch.streaming.runtime.hold import Held, Record, StoredCommit, TopicEvent
from fencewatch.streaming.runtime.columns import DLQ_KEY, ROUTED, pack_bytes, unpack_bytes

ROUTED_COLUMNS = ROUTED.fieldNames()
_SEP = "\x1f"
_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder().decode  # untyped: a dead letter's row
_decode_key_frame = msgspec.msgpack.Decoder(tuple[list[Held[Record]], list[Held[StoredCommit]], dict[str, int]]).decode
_decode_bucket_frame = msgspec.msgpack.Decoder(list[tuple[str, list[Held[Record]], dict[str, int]]]).decode
_ROW = msgspec.structs.astuple  # a commit line's offset row as (topic, partition, offset, leader_epoch)


def pack_frame(obj) -> bytes:
    """A key's routed items: msgpack, packed (:func:`pack_bytes`). Mostly the records' JSON,
    which LZ4 shrinks several-fold for little CPU (docs/decisions.md, "Routing")."""
    return pack_bytes(_encode(obj))


def unpack_frame(payload: bytes):
    """What :func:`pack_frame` packed, untyped (lists): for looking at a frame, not reading it."""
    return _decode(unpack_bytes(payload))


def read_key_frame(payload: bytes) -> tuple[list[Held], list[Held], dict[str, int]]:
    """A key's routed row: (records, commits, counts), decoded into their named types in C."""
    return _decode_key_frame(unpack_bytes(payload))


@functools.cache
def _routed_arrow_schema():
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(ROUTED)


def arrow_batch(cols: dict[str, list]):
    """:func:`route_records`' columns as one Arrow batch of ROUTED rows."""
    import pyarrow as pa

    schema = _routed_arrow_schema()
    return pa.RecordBatch.from_arrays([pa.array(cols[f.name], type=f.type) for f in schema], schema=schema)


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
def key_string(key: Key) -> str:
    """A key as the stream's string: its fields joined (the kind's letter first)."""
    # Memoised, bounded: a batch asks for the same few keys again and again.
    return _SEP.join(map(str, key))


_KINDS = {kind.value: kind for kind in KeyKind}


def parse_key(text: str) -> Key:
    """The :class:`~fencewatch.state.engine.Key` a key string (:func:`key_string`) names."""
    kind, cluster, name = text.split(_SEP, 2)
    return Key(_KINDS[kind], cluster, name)


TOPIC_BUCKETS = 16
"""Topic keys per cluster in the stream: a topic's truncation watch (``state.partition``) lives
in bucket ``crc32(topic) % 16``. pyspark has a fixed cost per key and micro-batch whatever the
key holds, and every topic committed to in a batch was a key of its own: most of the ``mixed``
profile's keys (docs/decisions.md, "Routing", topic buckets). Fixed for a checkpoint's life: a topic must always land in the same bucket."""
BUCKET_PREFIX = "#"  # '#' is not a legal character of a Kafka topic name: no topic key looks like a bucket


@functools.lru_cache(maxsize=1 << 16)
def topic_bucket(cluster: str, topic: str) -> str:
    """The key string of ``topic``'s bucket (:data:`TOPIC_BUCKETS`)."""
    return _SEP.join((KeyKind.TOPIC, cluster, f"{BUCKET_PREFIX}{zlib.crc32(topic.encode()) % TOPIC_BUCKETS}"))


@functools.lru_cache(maxsize=1 << 16)
def group_bucket(cluster: str, group_id: str, buckets: int) -> str:
    """The key string of ``group_id``'s bucket, one of ``buckets`` per cluster (``streaming.
    group_buckets``). pyspark pays a fixed cost per key and micro-batch (its Arrow and pandas
    conversions, the state store's get and put) whatever the key holds: with one key per group,
    that cost, not the rules, set the live limit (docs/decisions.md, "Group buckets"). A bucket
    holds its groups' states side by side, each still encoded and judged alone."""
    return _SEP.join((KeyKind.GROUP_BUCKET, cluster, f"{BUCKET_PREFIX}{zlib.crc32(group_id.encode()) % buckets}"))


def _bucket_of(key: Key) -> str:
    """The stream's key string for ``state.engine``'s ``key``: a topic key goes to its bucket."""
    return topic_bucket(key.cluster, key.name) if key.kind is KeyKind.TOPIC else key_string(key)


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


def task_caught_up() -> bool | None:
    """The caught-up mark of the micro-batch this task belongs to, when the job read it with
    Spark's own Kafka connector (``sources.connector.ConnectorBatches`` sets it on the query's
    thread before the batch's jobs run; it names its batch, so a mark left from another batch
    is never taken). None: no mark (the Python source marks its rows itself)."""
    from pyspark import TaskContext

    from fencewatch.streaming.sources.connector import CAUGHT_UP_PROPERTY

    ctx = TaskContext.get()
    mark = ctx.getLocalProperty(CAUGHT_UP_PROPERTY) if ctx is not None else None
    if not mark:
        return None
    batch, _, value = mark.partition(":")
    return value == "true" if batch == ctx.getLocalProperty("streaming.sql.batchId") else None


def route_records(records: Iterable[tuple], check: Callable, caught_up: bool | None,
                  group_buckets: int = 0) -> dict[str, list]:
    """The router's work on one input batch: records (value, seq, event_id, coords, source,
    record_ts, bad_reason) -> ROUTED columns: one row per key and source with its items in one
    msgpack frame, one row per dead letter or unknown type (``DLQ_KEY``). ``check``: a
    :func:`make_checker`. ``coords`` None: made from a Kafka event id (``topic/partition/offset``)
    when a record needs them. ``group_buckets`` > 0: a group's records go to its bucket's row
    (:func:`group_bucket`), still one frame per group inside it. Used by the ``mapInArrow``
    router and inside the Kafka source."""
    with no_cyclic_gc(settle=False):
        return _route(records, check, caught_up, group_buckets)


def _route(records: Iterable[tuple], check: Callable, caught_up: bool | None, group_buckets: int) -> dict[str, list]:
    rows = Rows(ROUTED_COLUMNS)
    add = rows.add

    def dead(ts: int, source: str, etype: str, seq: int, raw: bytes | None, reason: str, coords: str) -> None:
        add(DLQ_KEY, ts, source, _encode((etype, seq, raw, reason, coords)), 0, caught_up)

    keyed: dict[str, dict[str, list]] = {}  # source -> key -> [items, newest ts, {type: n}]
    fast = getattr(check, "json", False)
    group_keys: dict = {}
    last_source, slots = None, None
    for value, seq, eid, coords, source, record_ts, bad in records:
        if bad is not None or value is None:
            dead(int(record_ts or 0), source, "dlq", int(seq), None if value is None else bytes(value),
                 "MISSING_VALUE" if bad is None else bad, _coords(eid) if coords is None else coords)
            continue
        if type(value) is str:  # a text file's lines (replay --engine spark): records are bytes
            value = value.encode()
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
                gk = group_keys[(cluster, group_id)] = key_string(group_key(cluster, group_id))
            etype = c.event_type
            slot = slots.get(gk)
            if slot is None:
                slots[gk] = [[Held(ts, seq, Record(value, eid))], [], ts, {etype: 1}]
            else:
                slot[0].append(Held(ts, seq, Record(value, eid)))
                if ts > slot[2]:
                    slot[2] = ts
                counts = slot[3]
                counts[etype] = counts.get(etype, 0) + 1
            rows_ = c.offsets
            if rows_:  # the topics ``state.engine.route`` sends the stored offsets to
                for topic, partitions, offsets, epochs in commit_topics(c.error_code, map(_ROW, rows_)):
                    _put_commit(slots, topic_bucket(cluster, topic), ts,
                                Held(ts, seq, StoredCommit(topic, group_id, partitions, offsets, epochs)))
            continue
        if coords is None:
            coords = _coords(eid)
        res, payload = check(value, seq, eid, coords)
        if isinstance(res, DecodeError):
            raw = value if isinstance(value, (bytes, bytearray)) else str(value).encode()
            dead(int(record_ts or 0), source, "dlq", seq, bytes(raw), res.reason, coords)
        elif isinstance(res, UnknownType):
            dead(int(record_ts or 0), source, "unknown", seq, None, res.type, coords)
        elif type(res) is OffsetCommit:
            _put(slots, key_string(group_key(res.cluster, res.group_id)), res.ts,
                 Held(res.ts, seq, Record(payload, eid)), event_type(res))
            for topic, partitions, offsets, epochs in stored_topics(res):
                _put_commit(slots, topic_bucket(res.cluster, topic), res.ts,
                            Held(res.ts, seq, StoredCommit(topic, res.group_id, partitions, offsets, epochs)))
        else:
            etype = event_type(res)  # counted at the first key it goes to, its own (``state.engine.route``)
            record = Held(res.ts, seq, Record(payload, eid))
            for key, _ in route(res):
                _put(slots, _bucket_of(key), res.ts, record, etype)
                etype = None
    for source, slots in keyed.items():
        if group_buckets:
            buckets = _in_buckets(slots, group_buckets)
            for key, (frames, ts, n) in buckets.items():
                add(key, ts, source, pack_frame(frames), n, caught_up)
        for key, (records, commits, ts, counts) in slots.items():
            add(key, ts, source, pack_frame((records, commits, counts)), sum(counts.values()), caught_up)
    return rows.cols


def _in_buckets(slots: dict, buckets: int) -> dict[str, list]:
    """Take the group keys' slots out of ``slots`` into their buckets: bucket key -> [[(group id,
    records, counts), ...], newest ts, events] (:func:`read_bucket` reads one; a group has no
    stored commits, which go to topic buckets)."""
    out: dict[str, list] = {}
    for key in list(slots):
        k = parse_key(key)
        if k.kind is not KeyKind.GROUP:
            continue
        records, _, ts, counts = slots.pop(key)
        group_id = k.name
        bkey = group_bucket(k.cluster, group_id, buckets)
        b = out.get(bkey)
        if b is None:
            out[bkey] = [[(group_id, records, counts)], ts, sum(counts.values())]
        else:
            b[0].append((group_id, records, counts))
            if ts > b[1]:
                b[1] = ts
            b[2] += sum(counts.values())
    return out


def _coords(eid: str) -> str:
    """A Kafka record's coordinates, ``topic[partition]@offset``, from its default event id
    ``topic/partition/offset`` (the Kafka source leaves them to be made only when needed)."""
    topic, partition, offset = eid.rsplit("/", 2)
    return f"{topic}[{partition}]@{offset}"


def _put(slots: dict, key: str, ts: int, record: Held, etype: str | None) -> None:
    """A record to ``key``'s row (a slot: [records, commits, newest ts, {type: events}]);
    ``etype``: the event's type when ``key`` is its own."""
    slot = slots.get(key)
    if slot is None:
        slots[key] = [[record], [], ts, {etype: 1} if etype else {}]
        return
    slot[0].append(record)
    if ts > slot[2]:
        slot[2] = ts
    if etype:
        counts = slot[3]
        counts[etype] = counts.get(etype, 0) + 1


def _put_commit(slots: dict, key: str, ts: int, commit: Held) -> None:
    """A stored commit's facts to its topic bucket's row (not an event of the bucket: not counted)."""
    slot = slots.get(key)
    if slot is None:
        slots[key] = [[], [commit], ts, {}]
        return
    slot[1].append(commit)
    if ts > slot[2]:
        slot[2] = ts


def make_router(input_format: str = "json", schema_ids: Iterable[int] = (1,), registry=None,
                group_buckets: int = 0, kafka_topics: Iterable[tuple[str, str, int]] = ()) -> Callable:
    """The ``mapInArrow`` function (``mapInPandas`` too: pandas frames in, pandas frames out):
    columns value, seq, event_id, coords, source, record_ts, bad_reason (``bad_reason`` set: an
    upstream decoder already rejected the record; a missing column is null) -> ROUTED rows. Or
    Spark's connector's own columns, value, offset, partition, rank, record_ts
    (``inputs._event_inputs``), with ``kafka_topics`` naming each rank's topic and source as
    ``RouterSpec.topics`` does: seq, event id and source are made here, as the Kafka source's
    ``read`` makes them, rather than as strings per record in the JVM and again in Arrow.
    ``registry``: a ``schema_registry.RegistryEventDecoder`` for Avro input (else the fixed ids).
    ``group_buckets``: the stream's (``streaming.group_buckets``); replay keys each group alone."""
    import pandas as pd

    check = make_checker(input_format, schema_ids, registry)
    ranks = {rank: (topic, source) for topic, source, rank in kafka_topics}

    def route_batches(batches: Iterator) -> Iterator:
        for batch in batches:
            arrow = not isinstance(batch, pd.DataFrame)
            cols = _input_columns(batch, arrow)
            # One micro-batch per task: its rows share the source's caught-up mark (None: unknown);
            # Spark's connector has no such column: the driver marks the batch (:func:`task_caught_up`).
            marks = cols.get("caught_up")
            if marks and None not in marks:
                caught_up = all(marks)
            else:
                caught_up = bool(task_caught_up())
            if "rank" in cols:
                records = _connector_records(cols, ranks)
            else:
                n = len(cols["value"])
                records = zip(*(cols.get(c) or repeat(None, n) for c in _RECORD_COLUMNS))
            out = route_records(records, check, caught_up, group_buckets)
            if out["key"]:  # no empty frame (see request_log_input)
                yield arrow_batch(out) if arrow else pd.DataFrame(out, columns=ROUTED_COLUMNS)

    return route_batches


_RECORD_COLUMNS = ("value", "seq", "event_id", "coords", "source", "record_ts", "bad_reason")


def _input_columns(batch, arrow: bool) -> dict[str, list]:
    """A router input batch's columns as lists of Python values (None for null)."""
    if arrow:
        return {name: batch.column(i).to_pylist() for i, name in enumerate(batch.schema.names)}
    return {name: [None if v is None or v != v else v for v in batch[name].tolist()]
            if batch[name].dtype.kind == "f" else batch[name].tolist() for name in batch.columns}


def _connector_records(cols: dict[str, list], ranks: dict[int, tuple[str, str]]) -> Iterator[tuple]:
    """Spark's connector's records as the router takes them: seq = offset * 4 + rank, event id
    ``topic/partition/offset`` (the coordinates are made from it when a record needs them)."""
    for value, offset, partition, rank, record_ts in zip(cols["value"], cols["offset"], cols["partition"],
                                                         cols["rank"], cols["record_ts"]):
        topic, source = ranks[rank]
        yield value, offset * 4 + rank, f"{topic}/{partition}/{offset}", None, source, record_ts, None


# --------------------------------------------------------------------------- the state function's side


def read_dead(payload: bytes) -> tuple:
    """A dead letter's or unknown type's routed row: (etype, seq, record, reason, coordinates)."""
    return tuple(_decode(payload))



def read_items(pkey: Key, source: str | None, payload: bytes, counts, now: int = 0) -> list[Held]:
    """A routed row's items as the key holds them (``Hold.admit_read``): :class:`~fencewatch.
    streaming.runtime.hold.Held` entries arrived ``now``, each a record still to decode
    (:func:`decode_released`) or a topic bucket's stored commit. Records are decoded when they
    are released, not here: events held across micro-batches (a backlog read unevenly) would
    otherwise be stored with the key's state batch after batch, which cost more than judging them
    (docs/decisions.md, "Routing"). ``counts`` (a Counter) gets the router's (type, source) counts
    of the events this key owns."""
    return held_items(read_key_frame(payload), source, counts, now)


def read_bucket(payload: bytes) -> list[tuple[str, tuple]]:
    """A group bucket's routed row: (group id, (records, commits, counts)) per group in it, each
    frame what :func:`held_items` reads (a group's commits: none)."""
    return [(group_id, (records, (), counts)) for group_id, records, counts in _decode_bucket_frame(
        unpack_bytes(payload))]


def held_items(frame: tuple, source: str | None, counts, now: int = 0) -> list[Held]:
    """One key's (records, commits, counts) frame as the key holds them (:func:`read_items`):
    its entries, fresh from the frame, marked arrived ``now``."""
    records, commits, row_counts = frame
    for etype, n in row_counts.items():
        counts[(etype, source)] += n
    for held in records:
        held.arrived = now
    if not commits:
        return records
    for held in commits:
        held.arrived = now
    return records + list(commits)


def decode_released(pkey: Key, ready: list[Held], dead: list) -> list[Held]:
    """The released entries with their records decoded: a group key's into typed events, a topic
    bucket's into :class:`~fencewatch.streaming.runtime.hold.TopicEvent` (what ``state.engine.
    route`` gives a topic of the bucket: a ``partition_epochs`` event, an ``offset_committed``'s
    commit facts); a bucket's stored commits pass as they are. Each entry's payload is replaced
    in place: released, the entries are the caller's alone, and a new ``Held`` per event cost
    the state function ~0.1 us an event. ``dead`` gets (value, reason, event id, seq) of a record
    that no longer decodes (a guard: the router accepted it) instead of an entry."""
    out = []
    append = out.append
    is_group = pkey.kind is KeyKind.GROUP
    own = None if is_group else key_string(pkey)
    typed = typed_event
    for held in ready:
        record = held.payload
        if type(record) is not Record:  # a topic bucket's stored commit
            append(held)
            continue
        value, eid, seq = record.value, record.event_id, held.seq
        ev = typed(value, seq, eid) or decode_accepted_json(value, seq, eid, eid)
        if type(ev) in _NOT_EVENTS:
            dead.append((value, ev.reason if type(ev) is DecodeError else f"UNKNOWN_TYPE({ev.type})", eid, seq))
            continue
        if is_group:
            held.payload = ev
            append(held)
            continue
        for key, kev in route(ev):
            if key.kind is KeyKind.TOPIC and key.cluster == pkey.cluster and topic_bucket(key.cluster, key.name) == own:
                held.payload = TopicEvent(key.name, kev)
                append(held)
                break
    return out


_NOT_EVENTS = frozenset({DecodeError, UnknownType})
