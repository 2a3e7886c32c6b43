"""The common records decoded without a dict per field: most of the input takes these paths.

What lives here: :func:`typed_event` (a well-formed commit or member assignment straight from
its JSON text, decoded and checked in C by msgspec), :func:`fast_commit` (a parsed commit of
the common shape, checked inline), and :func:`commit_line` (what the router needs of a commit).
The msgspec structs are made from the declaration (``state.records``): each event's fields
with their declared defaults, nothing else allowed. Anything else (another type, an extra or
missing field, a null, a value of the wrong type, beyond a Kafka long or outside a closed set)
fails validation and takes the general path (:mod:`.builders`), which names what is wrong;
the Hypothesis tests hold both paths to the same answers. Internal to ``streaming.ingest``.
"""
from __future__ import annotations

from itertools import repeat
from typing import Annotated, Any, Literal

import msgspec

from fencewatch.state.events import NO_OFFSETS, MemberAssignment, OffsetCommit, StreamsTask
from fencewatch.state.model import MemberState, Protocol
from fencewatch.state.records import (EVENTS, INT, LONG, PARTITION_OFFSET, STREAMS_TASKS, STRING, TOPIC_PARTITIONS,
                                      Array, EventType, FieldType, Record, RecordDrift)
from fencewatch.streaming.ingest.commit_offsets import columns, offsets, shared_tps
from fencewatch.streaming.ingest.fields import INT64, MAX_STRING_CHARS

_new_tuple = tuple.__new__  # a NamedTuple without its Python-level __new__ (hot path)
_Long = Annotated[int, msgspec.Meta(ge=-INT64, le=INT64 - 1)]

# --------------------------------------------------------------------------- structs from the declaration


def _struct_type(t: FieldType) -> Any:
    if t in (INT, LONG):
        return _Long
    if t == STRING:
        return str
    if isinstance(t, Array):
        return list[_struct_type(t.items)]
    if t is TOPIC_PARTITIONS:
        return _PartitionsRow
    if t is PARTITION_OFFSET:
        return _OffsetRow
    if t is STREAMS_TASKS:
        return _TasksRow
    raise RecordDrift(f"{__name__}: no fast-path type for {t!r}")


def _struct(name: str, record: Record, names: tuple[str, ...], *, all_required: bool = False, **config) -> type:
    """A msgspec struct of ``record``'s fields ``names``: required ones without a default,
    optional ones with their declared default (None: ``T | None``), a closed set as a Literal."""
    spec = []
    for n in names:
        slot = record.slot(n)
        t = Literal[slot.values] if slot.values is not None else _struct_type(slot.field.type)
        if slot.required or all_required:
            spec.append((n, t))
        elif slot.default is None:
            spec.append((n, t | None, None))
        else:
            spec.append((n, t, slot.default))
    return msgspec.defstruct(name, spec, module=__name__, forbid_unknown_fields=True, gc=False, kw_only=True,
                             **config)


def _line(name: str, etype: EventType) -> type:
    """The JSON line of an event type: its declared fields (those readers take), tagged by ``type``."""
    record = EVENTS[etype]
    return _struct(name, record, tuple(n for n in record.read_names if n != "type"), tag_field="type",
                   tag=etype.value, namespace={"event_type": etype.value})


_PartitionsRow = _struct("PartitionsRow", TOPIC_PARTITIONS, TOPIC_PARTITIONS.names)
_TasksRow = _struct("TasksRow", STREAMS_TASKS, STREAMS_TASKS.names)
# A partition's row: every field but the optional metadata, all of them present (rows without a
# leader epoch or with metadata take the general path); (topic, partition, offset, leader_epoch).
_OffsetRow = _struct("OffsetRow", PARTITION_OFFSET, ("topic", "partition", "offset", "leader_epoch"),
                     all_required=True)
CommitLine = _line("CommitLine", EventType.OFFSET_COMMIT)
TxnCommitLine = _line("TxnCommitLine", EventType.TXN_OFFSET_COMMIT)
AssignmentLine = _line("AssignmentLine", EventType.MEMBER_ASSIGNMENT)

_decode_typed_line = msgspec.json.Decoder(CommitLine | TxnCommitLine | AssignmentLine).decode
_decode_commit_line = msgspec.json.Decoder(CommitLine | TxnCommitLine).decode
_ROW = msgspec.structs.astuple  # (topic, partition, offset, leader_epoch) in C, no attribute lookup each


# --------------------------------------------------------------------------- from JSON text

def commit_line(line: bytes):
    """A well-formed commit's fields straight from its JSON text (msgspec, in C), or None.

    What the router needs to route a commit (its group, and the stored offsets for the topic
    keys), without building the event: a line this accepts is a valid event (the typed path
    builds one from every such line, with no further check), so the router can route it and
    leave the decoding to the state function. Lines over the string bound are not accepted
    (their fields are checked against it on the general path)."""
    if len(line) > MAX_STRING_CHARS:
        return None
    try:
        return _decode_commit_line(line)
    except msgspec.MsgspecError:
        return None


def typed_event(line: str | bytes, seq: int, default_event_id: str | None):
    """A common commit or assignment straight from its JSON text, or None (take the general path)."""
    try:
        c = _decode_typed_line(line)
    except msgspec.MsgspecError:
        return None
    eid = c.event_id
    if eid is None:
        eid = str(seq) if default_event_id is None else default_event_id
    if type(c) is AssignmentLine:
        return _typed_assignment(c, eid, seq)
    rows = c.offsets
    offsets_ = columns(*zip(*map(_ROW, rows))) if rows else NO_OFFSETS
    if type(c) is TxnCommitLine:
        return _new_tuple(OffsetCommit, (c.ts, c.cluster, c.group_id, eid, seq, True, c.member_id, c.member_epoch,
                                         offsets_, c.instance_id, c.error_code, c.transactional_id, c.producer_id,
                                         c.producer_epoch, c.api_version))
    return _new_tuple(OffsetCommit, (c.ts, c.cluster, c.group_id, eid, seq, False, c.member_id, c.member_epoch,
                                     offsets_, c.instance_id, c.error_code, None, None, None, c.api_version))


_PROTOCOLS = {p.value: p for p in Protocol}


def _typed_assignment(c, eid: str, seq: int) -> MemberAssignment | None:
    assigned = _typed_partitions(c.assigned)
    pending = _typed_partitions(c.pending_revocation)
    if assigned is None or pending is None:
        return None  # the general path names the bad value
    active, active_pending = c.active_tasks, c.active_tasks_pending_revocation
    if active is not None or active_pending is not None:
        active, active_pending = _typed_tasks(active), _typed_tasks(active_pending)
        if active is False or active_pending is False:
            return None
    subscribed = c.subscribed_topics
    return _new_tuple(MemberAssignment, (
        c.ts, c.cluster, c.group_id, eid, seq, c.member_id, _PROTOCOLS[c.protocol], c.member_epoch, assigned[0],
        pending[0], assigned[1], pending[1],
        c.previous_member_epoch, MemberState.parse(c.state), None if subscribed is None else tuple(subscribed),
        c.instance_id, c.group_epoch, c.target_assignment_epoch, active, active_pending))


def _typed_tasks(rows: list | None) -> tuple[StreamsTask, ...] | None | bool:
    """A streams member's tasks as ``builders`` makes them; False when an entry's epochs do not
    match its partitions (the general path says so)."""
    if rows is None:
        return None
    out = []
    for r in rows:
        epochs = r.assignment_epochs
        if epochs is not None and len(epochs) != len(r.partitions):
            return False
        out.append(StreamsTask(r.subtopology_id, tuple(r.partitions), None if epochs is None else tuple(epochs)))
    return tuple(out)


def _typed_partitions(rows: list) -> tuple[tuple, tuple | None] | None:
    """(tps, assignment epochs or None) as ``fields.topic_partitions`` makes them; None when an
    entry's epochs do not match its partitions (the general path says so)."""
    if len(rows) == 1:  # one topic: its (topic, partition) keys shared with the member's commits
        row = rows[0]
        partitions = tuple(row.partitions)
        tps = shared_tps(row.topic, partitions)[0]
        epochs = row.assignment_epochs
        if epochs is None:
            return tps, None
        if len(epochs) != len(partitions):
            return None
        return tps, (tuple(epochs) if tps else None)
    tps_l: list = []
    epochs_l: list | None = []
    for row in rows:
        tps_l.extend(zip(repeat(row.topic), row.partitions))
        if row.assignment_epochs is None:
            epochs_l = None
        elif epochs_l is not None:
            if len(row.assignment_epochs) != len(row.partitions):
                return None
            epochs_l.extend(row.assignment_epochs)
    return tuple(tps_l), (tuple(epochs_l) if epochs_l is not None and tps_l else None)


# --------------------------------------------------------------------------- from a parsed dict

# The fields of a commit the dict fast path reads (an offset_commit's, but its instance id); any
# other field present takes the general path. Their defaults are the declared ones.
_COMMIT = EVENTS[EventType.OFFSET_COMMIT]
_COMMON_COMMIT_FIELDS = frozenset(_COMMIT.read_names) - {"instance_id"}
_CLUSTER = _COMMIT.slot("cluster").default
_MEMBER_ID = _COMMIT.slot("member_id").default
_MEMBER_EPOCH = _COMMIT.slot("member_epoch").default


def fast_commit(d: dict, seq: int, default_event_id: str | None, transactional: bool) -> OffsetCommit | None:
    """The common well-formed commit, checked inline (it is most of the input); None: take the
    general path, which checks field by field and names what is wrong. ``default_event_id``
    None means ``str(seq)``."""
    if not d.keys() <= _COMMON_COMMIT_FIELDS:
        return None
    ts = d.get("ts")
    cluster = d.get("cluster", _CLUSTER)
    eid = d.get("event_id")
    if eid is None:
        eid = str(seq) if default_event_id is None else default_event_id
    gid = d.get("group_id")
    mid = d.get("member_id", _MEMBER_ID)
    epoch = d.get("member_epoch", _MEMBER_EPOCH)
    code = d.get("error_code")
    version = d.get("api_version")
    if (type(ts) is not int or type(cluster) is not str or type(eid) is not str or type(gid) is not str
            or type(mid) is not str or type(epoch) is not int or (code is not None and type(code) is not int)
            or not (-INT64 <= ts < INT64 and -INT64 <= epoch < INT64)
            or (code is not None and not -INT64 <= code < INT64)
            or (version is not None and (type(version) is not int or not -INT64 <= version < INT64))):
        return None
    return _new_tuple(OffsetCommit, (ts, cluster, gid, eid, seq, transactional, mid, epoch, offsets(d), None, code,
                                     None, None, None, version))
