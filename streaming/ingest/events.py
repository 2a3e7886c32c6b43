"""Bytes and dicts in, typed events (``state.events``) or a dead letter out (contract §1).

Bad input never raises out of here: it becomes a :class:`DecodeError` with a
stable ``code`` (MISSING_FIELD, WRONG_TYPE, ...), its parameters and the
record's coordinates, which is what the dead-letter topic carries.
Unknown ``type`` values are not errors: they are counted and skipped
(forward compatibility with newer producers).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from itertools import chain, repeat
from operator import itemgetter
from typing import Annotated, Any, Mapping

import msgspec

from fencewatch.state.events import (NO_OFFSETS, ClassicJoin, ClassicSync, CommitOffset, CommitOffsets,
                                     GroupStateChange, Heartbeat, MemberAssignment, MemberLeft, OffsetCommit,
                                     OffsetCommitted, OffsetDeleted, PartitionEpochs)
from fencewatch.state.memo import Memo
from fencewatch.state.model import MemberState, Protocol

DEFAULT_CLUSTER = "default"
_new_tuple = tuple.__new__  # a NamedTuple without its Python-level __new__ (hot path)
MEMBERSHIP_TYPES = frozenset({"member_assignment", "member_left", "heartbeat", "classic_join", "classic_sync",
                              "group_state"})
OFFSET_TYPES = frozenset({"offset_commit", "txn_offset_commit", "offset_committed", "offset_deleted",
                          "partition_epochs"})
KNOWN_TYPES = MEMBERSHIP_TYPES | OFFSET_TYPES
LEAVE_REASONS = frozenset({"leave", "static_leave", "fenced", "session_timeout", "rebalance_timeout"})

# Bounds (docs/reliability.md, "Bounds"): a record over one is a dead letter with its reason, never
# judged with a cut field (a cut id would merge two members). None of them drops a real request:
# Kafka's protocol strings carry an int16 length, so no group, member, instance or transactional
# id, topic or commit metadata is longer than 32,767 characters; a record is bounded as a topic's
# default ``max.message.bytes`` (1 MiB) bounds it; a request naming more partitions than a large
# cluster holds is not one.
MAX_RECORD_BYTES = 1 << 20
MAX_STRING_CHARS = 32_767
MAX_PARTITIONS = 200_000


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


class _Bad(Exception):
    def __init__(self, code: str, **params: Any):
        super().__init__(code)
        self.code = code
        self.params = {k: str(v) for k, v in params.items()}


_loads = msgspec.json.decode  # strict JSON: NaN and Infinity are not numbers here
_INT64 = 2 ** 63  # a Kafka long: larger integers (or floats) are never one


def _req(d: Mapping, name: str) -> Any:
    try:
        v = d[name]
    except KeyError:
        raise _Bad("MISSING_FIELD", field=name) from None
    if v is None:
        raise _Bad("MISSING_FIELD", field=name)
    return v


def _int(d: Mapping, name: str) -> int:
    return _long(_req(d, name), name)


def _opt_int(d: Mapping, name: str, default: int | None = None) -> int | None:
    v = d.get(name)
    return default if v is None else _long(v, name)


def _long(v: Any, name: str, *, integral_floats: bool = True) -> int:
    """A Kafka long (64-bit signed); a float with an integral value counts when ``integral_floats``."""
    if type(v) is int:
        if -_INT64 <= v < _INT64:
            return v
        raise _Bad("WRONG_TYPE", field=name, expected="long", got="integer beyond 64 bits")
    if integral_floats and type(v) is float and v.is_integer() and -_INT64 <= v < _INT64:
        return int(v)
    raise _Bad("WRONG_TYPE", field=name, expected="long", got=type(v).__name__)


def _str(d: Mapping, name: str) -> str:
    v = _req(d, name)
    if type(v) is not str:
        raise _Bad("WRONG_TYPE", field=name, expected="string", got=type(v).__name__)
    return v


def _opt_str(d: Mapping, name: str, default: str | None = None) -> str | None:
    v = d.get(name)
    if v is None:
        return default
    if type(v) is not str:
        raise _Bad("WRONG_TYPE", field=name, expected="string", got=type(v).__name__)
    return v


def _list(v: Any, name: str) -> list:
    if type(v) is not list:
        raise _Bad("WRONG_TYPE", field=name, expected="array", got=type(v).__name__)
    return v


def _int_item(v: Any, name: str) -> int:
    return _long(v, name, integral_floats=False)


def _topic_partitions(d: Mapping, name: str, *, required: bool = True):
    """``[{"topic": t, "partitions": [..], "assignment_epochs": [..]?}]`` -> (tps, epochs or None)."""
    raw = d.get(name)
    if raw is None:
        if required:
            raise _Bad("MISSING_FIELD", field=name)
        return (), None
    tps: list[tuple[str, int]] = []
    epochs: list[int] | None = []
    for i, entry in enumerate(_list(raw, name)):
        where = f"{name}[{i}]"
        if type(entry) is not dict:
            raise _Bad("WRONG_TYPE", field=where, expected="object", got=type(entry).__name__)
        topic = _str(entry, "topic") if "topic" in entry else None
        if topic is None:
            raise _Bad("MISSING_FIELD", field=f"{where}.topic")
        parts = _list(_req(entry, "partitions"), f"{where}.partitions")
        if set(map(type, parts)) <= _INT and (not parts or -_INT64 <= min(parts) and max(parts) < _INT64):
            tps.extend(zip(repeat(topic), parts))
        else:
            for p in parts:
                tps.append((topic, _int_item(p, f"{where}.partitions")))
        ae = entry.get("assignment_epochs")
        if ae is None:
            epochs = None
        elif epochs is not None:
            ae = _list(ae, f"{where}.assignment_epochs")
            if len(ae) != len(parts):
                raise _Bad("INVALID_VALUE", field=f"{where}.assignment_epochs",
                           problem=f"{len(ae)} epochs for {len(parts)} partitions")
            epochs.extend(_int_item(e, f"{where}.assignment_epochs") for e in ae)
    return tuple(tps), (tuple(epochs) if epochs is not None and tps else None)


def _header(d: Mapping, seq: int, default_event_id: str) -> tuple[int, str, str]:
    ts = _int(d, "ts")
    cluster = _opt_str(d, "cluster", DEFAULT_CLUSTER)
    event_id = _opt_str(d, "event_id", default_event_id)
    return ts, cluster, event_id


_PROTOCOLS = {p.value: p for p in Protocol}


def _protocol(v: str | None) -> Protocol:
    if v is None:
        return Protocol.CONSUMER
    try:
        return _PROTOCOLS[v]
    except (KeyError, TypeError):
        raise _Bad("INVALID_VALUE", field="protocol", value=v, valid="consumer,streams,classic") from None


def _member_assignment(d, ts, cluster, eid, seq):
    if "assigned" in d and d["assigned"] is None:  # "unchanged" (request log): resolved by the group state
        assigned, assigned_epochs = None, None
    else:
        assigned, assigned_epochs = _topic_partitions(d, "assigned")
    if "pending_revocation" in d and d["pending_revocation"] is None:  # "derive it" (request log): group state
        pending, pending_epochs = None, None
    else:
        pending, pending_epochs = _topic_partitions(d, "pending_revocation", required=False)
    subscribed = d.get("subscribed_topics")
    if subscribed is not None:
        subscribed = tuple(str(t) for t in _list(subscribed, "subscribed_topics"))
    return MemberAssignment(
        ts=ts, cluster=cluster, group_id=_str(d, "group_id"), event_id=eid, seq=seq,
        member_id=_str(d, "member_id"), protocol=_protocol(_opt_str(d, "protocol")),
        member_epoch=_int(d, "member_epoch"), assigned=assigned, pending_revocation=pending,
        assigned_epochs=assigned_epochs, pending_epochs=pending_epochs,
        previous_member_epoch=_opt_int(d, "previous_member_epoch"),
        state=MemberState.parse(_opt_str(d, "state")), subscribed_topics=subscribed,
        instance_id=_opt_str(d, "instance_id"), group_epoch=_opt_int(d, "group_epoch"),
        target_assignment_epoch=_opt_int(d, "target_assignment_epoch"))


def _member_left(d, ts, cluster, eid, seq):
    reason = _opt_str(d, "reason", "leave")
    if reason not in LEAVE_REASONS:
        raise _Bad("INVALID_VALUE", field="reason", value=reason, valid=",".join(sorted(LEAVE_REASONS)))
    return MemberLeft(ts, cluster, _str(d, "group_id"), eid, seq, _str(d, "member_id"), reason)


def _heartbeat(d, ts, cluster, eid, seq):
    return Heartbeat(ts, cluster, _str(d, "group_id"), eid, seq, _str(d, "member_id"),
                     _opt_int(d, "request_epoch", -1), _opt_int(d, "response_epoch", -1),
                     _opt_int(d, "error_code", 0))


def _classic_join(d, ts, cluster, eid, seq):
    owned, _ = _topic_partitions(d, "owned", required=False)
    return ClassicJoin(ts, cluster, _str(d, "group_id"), eid, seq, _str(d, "member_id"),
                       _opt_int(d, "generation", -1), owned, _opt_str(d, "protocol"), _opt_str(d, "instance_id"))


def _classic_sync(d, ts, cluster, eid, seq):
    raw = _req(d, "assignments")
    if type(raw) is not dict:
        raise _Bad("WRONG_TYPE", field="assignments", expected="object", got=type(raw).__name__)
    assignments = []
    for mid in sorted(raw):
        tps, _ = _topic_partitions(raw, mid)
        assignments.append((mid, tps))
    return ClassicSync(ts, cluster, _str(d, "group_id"), eid, seq, _int(d, "generation"), tuple(assignments))


def _group_state(d, ts, cluster, eid, seq):
    return GroupStateChange(ts, cluster, _str(d, "group_id"), eid, seq, _str(d, "state"), _opt_str(d, "protocol"))


_OFFSET_FIELDS = itemgetter("topic", "partition", "offset", "leader_epoch")
_INT = frozenset({int})
_STR = frozenset({str})


# (topic, partitions) -> (the (topic, partition) keys, the partitions); bounded above the members
# of a large cluster.
_SHARED_TPS = Memo(1 << 15)


def _columns(topics: tuple, partitions: tuple, offsets: tuple, epochs: tuple) -> CommitOffsets:
    """Checked columns of a request's partitions as :class:`CommitOffsets`."""
    first = topics[0]
    if topics.count(first) != len(topics):
        return CommitOffsets(tuple(zip(topics, partitions)), offsets, epochs, None, partitions, None)
    tps, partitions = _shared_tps(first, partitions)
    return _new_tuple(CommitOffsets, (tps, offsets, epochs, None, partitions, first))


def _shared_tps(topic: str, partitions: tuple) -> tuple[tuple, tuple]:
    """The (topic, partition) keys of one topic's partitions and the partitions, one shared pair
    of tuples per distinct list: a member commits (and is assigned) the same partitions again and
    again, so the engine's lookups by them (request cache, offsets, owners) compare by identity,
    and its logs of stored requests (``state.folding``) tell a repeated request by it."""
    key = (topic, partitions)
    shared = _SHARED_TPS.get(key)
    if shared is None:
        shared = _SHARED_TPS.put(key, (tuple(zip(repeat(topic), partitions)), partitions))
    return shared


def _offsets(d) -> CommitOffsets:
    """Columns of the ``offsets`` list of a parsed commit. The fast path takes the common shape
    (exactly topic, partition, offset and leader_epoch, of the right types) with C-level maps
    and no object per partition; anything else takes the checked path, which names the bad field."""
    raw = d.get("offsets")
    if type(raw) is list and raw:
        try:
            topics, partitions, offsets, epochs = zip(*map(_OFFSET_FIELDS, raw))
        except (KeyError, TypeError):
            topics = None
        if topics is not None and sum(map(len, raw)) == 4 * len(raw):  # no field beyond the four
            ints = (partitions, offsets, epochs)
            if (_STR.issuperset(map(type, topics)) and _INT.issuperset(map(type, chain(*ints)))
                    and -_INT64 <= min(map(min, ints)) and max(map(max, ints)) < _INT64):
                return _columns(topics, partitions, offsets, epochs)
    return CommitOffsets.of(_offsets_checked(d))


def _offsets_checked(d) -> list[CommitOffset]:
    out = []
    for i, o in enumerate(_list(_req(d, "offsets"), "offsets")):
        if type(o) is not dict:
            raise _Bad("WRONG_TYPE", field=f"offsets[{i}]", expected="object", got=type(o).__name__)
        try:
            out.append(CommitOffset(_str(o, "topic"), _int(o, "partition"), _int(o, "offset"),
                                    _opt_int(o, "leader_epoch", -1), _opt_str(o, "metadata")))
        except _Bad as bad:
            bad.params["field"] = f"offsets[{i}].{bad.params.get('field', '')}"
            raise
    return out


# Fields of a commit that the fast path reads; any other field present takes the general path.
_COMMON_COMMIT_FIELDS = frozenset({"type", "ts", "cluster", "event_id", "group_id", "member_id", "member_epoch",
                                   "error_code", "offsets"})


def _fast_commit(d: dict, seq: int, default_event_id: str | None, transactional: bool) -> OffsetCommit | None:
    """The common well-formed commit, checked inline (it is most of the input); None: take the
    general path, which checks field by field and names what is wrong. ``default_event_id``
    None means ``str(seq)``."""
    if not d.keys() <= _COMMON_COMMIT_FIELDS:
        return None
    ts = d.get("ts")
    cluster = d.get("cluster", DEFAULT_CLUSTER)
    eid = d.get("event_id")
    if eid is None:
        eid = str(seq) if default_event_id is None else default_event_id
    gid = d.get("group_id")
    mid = d.get("member_id", "")
    epoch = d.get("member_epoch", -1)
    code = d.get("error_code")
    if (type(ts) is not int or type(cluster) is not str or type(eid) is not str or type(gid) is not str
            or type(mid) is not str or type(epoch) is not int or (code is not None and type(code) is not int)
            or not (-_INT64 <= ts < _INT64 and -_INT64 <= epoch < _INT64)
            or (code is not None and not -_INT64 <= code < _INT64)):
        return None
    return _common_commit(ts, cluster, gid, eid, seq, transactional, mid, epoch, _offsets(d), code)


def _common_commit(ts, cluster, gid, eid, seq, transactional, mid, epoch, offsets, code) -> OffsetCommit:
    """The commit both fast paths build: no instance id, no transactional fields."""
    return _new_tuple(OffsetCommit, (ts, cluster, gid, eid, seq, transactional, mid, epoch, offsets, None, code,
                                     None, None, None))


# The common commit line, decoded and checked in C by msgspec straight from its bytes, with no
# dict per partition. Anything else (another type, an extra or missing field, a null, a value
# of the wrong type or beyond a Kafka long) fails validation and takes the general path, which
# names what is wrong; the Hypothesis tests hold both paths to the same answers.
_Long = Annotated[int, msgspec.Meta(ge=-_INT64, le=_INT64 - 1)]


class _OffsetRow(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    topic: str
    partition: _Long
    offset: _Long
    leader_epoch: _Long


class _CommitLine(msgspec.Struct, tag_field="type", tag="offset_commit", forbid_unknown_fields=True, gc=False):
    ts: _Long
    group_id: str
    offsets: list[_OffsetRow]
    cluster: str = DEFAULT_CLUSTER
    event_id: str | None = None
    member_id: str = ""
    member_epoch: _Long = -1
    error_code: _Long | None = None
    instance_id: str | None = None


class _TxnCommitLine(_CommitLine, tag="txn_offset_commit"):
    # KIP-447's fields: most commits of an exactly-once workload are transactional.
    transactional_id: str | None = None
    producer_id: _Long | None = None
    producer_epoch: _Long | None = None


# The member_assignment line, the next most frequent, the same way.
class _PartitionsRow(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    topic: str
    partitions: list[_Long]
    assignment_epochs: list[_Long] | None = None


class _AssignmentLine(msgspec.Struct, tag_field="type", tag="member_assignment", forbid_unknown_fields=True,
                      gc=False):
    ts: _Long
    group_id: str
    member_id: str
    member_epoch: _Long
    assigned: list[_PartitionsRow]
    # Absent: nothing pending. An explicit null ("derive it", request log) takes the general path.
    pending_revocation: list[_PartitionsRow] | msgspec.UnsetType = msgspec.UNSET
    cluster: str = DEFAULT_CLUSTER
    event_id: str | None = None
    protocol: str | None = None
    state: str | None = None
    subscribed_topics: list[str] | None = None
    previous_member_epoch: _Long | None = None
    instance_id: str | None = None
    group_epoch: _Long | None = None
    target_assignment_epoch: _Long | None = None


_decode_typed_line = msgspec.json.Decoder(_CommitLine | _TxnCommitLine | _AssignmentLine).decode
_decode_commit_line = msgspec.json.Decoder(_CommitLine | _TxnCommitLine).decode


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
_ROW = msgspec.structs.astuple  # (topic, partition, offset, leader_epoch) in C, no attribute lookup each


def _typed_event(line: str | bytes, seq: int, default_event_id: str | None):
    """A common commit or assignment straight from its JSON text, or None (take the general path)."""
    try:
        c = _decode_typed_line(line)
    except msgspec.MsgspecError:
        return None
    eid = c.event_id
    if eid is None:
        eid = str(seq) if default_event_id is None else default_event_id
    if type(c) is _AssignmentLine:
        return _typed_assignment(c, eid, seq)
    rows = c.offsets
    offsets = _columns(*zip(*map(_ROW, rows))) if rows else NO_OFFSETS
    if type(c) is _TxnCommitLine:
        return _new_tuple(OffsetCommit, (c.ts, c.cluster, c.group_id, eid, seq, True, c.member_id, c.member_epoch,
                                         offsets, c.instance_id, c.error_code, c.transactional_id, c.producer_id,
                                         c.producer_epoch))
    return _new_tuple(OffsetCommit, (c.ts, c.cluster, c.group_id, eid, seq, False, c.member_id, c.member_epoch,
                                     offsets, c.instance_id, c.error_code, None, None, None))


def _typed_assignment(c: _AssignmentLine, eid: str, seq: int) -> MemberAssignment | None:
    assigned = _typed_partitions(c.assigned)
    pending = _typed_partitions(c.pending_revocation) if c.pending_revocation is not msgspec.UNSET else _NO_PARTITIONS
    protocol = _PROTOCOLS.get(c.protocol, _INVALID) if c.protocol is not None else Protocol.CONSUMER
    if assigned is None or pending is None or protocol is _INVALID:
        return None  # the general path names the bad value
    subscribed = c.subscribed_topics
    return _new_tuple(MemberAssignment, (
        c.ts, c.cluster, c.group_id, eid, seq, c.member_id, protocol, c.member_epoch, assigned[0], pending[0],
        assigned[1], pending[1],
        c.previous_member_epoch, MemberState.parse(c.state), None if subscribed is None else tuple(subscribed),
        c.instance_id, c.group_epoch, c.target_assignment_epoch))


_NO_PARTITIONS = ((), None)
_INVALID = object()  # not a protocol


def _typed_partitions(rows: list[_PartitionsRow]) -> tuple[tuple, tuple | None] | None:
    """(tps, assignment epochs or None) as :func:`_topic_partitions` makes them; None when an
    entry's epochs do not match its partitions (the general path says so)."""
    if len(rows) == 1:  # one topic: its (topic, partition) keys shared with the member's commits
        row = rows[0]
        partitions = tuple(row.partitions)
        tps = _shared_tps(row.topic, partitions)[0]
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


def _commit(d, ts, cluster, eid, seq, transactional):
    return OffsetCommit(
        ts=ts, cluster=cluster, group_id=_str(d, "group_id"), event_id=eid, seq=seq, transactional=transactional,
        member_id=_opt_str(d, "member_id", ""), member_epoch=_opt_int(d, "member_epoch", -1),
        offsets=_offsets(d), instance_id=_opt_str(d, "instance_id"), error_code=_opt_int(d, "error_code"),
        transactional_id=_opt_str(d, "transactional_id"), producer_id=_opt_int(d, "producer_id"),
        producer_epoch=_opt_int(d, "producer_epoch"))


def _offset_committed(d, ts, cluster, eid, seq):
    return OffsetCommitted(ts, cluster, _str(d, "group_id"), eid, seq, _str(d, "topic"), _int(d, "partition"),
                           _int(d, "offset"), _opt_int(d, "leader_epoch", -1), _opt_int(d, "commit_ts"),
                           _opt_int(d, "expire_ts"))


def _offset_deleted(d, ts, cluster, eid, seq):
    return OffsetDeleted(ts, cluster, _str(d, "group_id"), eid, seq, _str(d, "topic"), _int(d, "partition"))


def _partition_epochs(d, ts, cluster, eid, seq):
    epochs = []
    for i, e in enumerate(_list(d.get("epochs") or [], "epochs")):
        if type(e) is not dict:
            raise _Bad("WRONG_TYPE", field=f"epochs[{i}]", expected="object", got=type(e).__name__)
        epochs.append((_int(e, "epoch"), _int(e, "start_offset")))
    return PartitionEpochs(ts, cluster, eid, seq, _str(d, "topic"), _int(d, "partition"),
                           _opt_int(d, "log_start_offset", 0), _int(d, "log_end_offset"), tuple(sorted(epochs)))


_BUILDERS = {
    "member_assignment": _member_assignment,
    "member_left": _member_left,
    "heartbeat": _heartbeat,
    "classic_join": _classic_join,
    "classic_sync": _classic_sync,
    "group_state": _group_state,
    "offset_commit": lambda d, ts, c, e, s: _commit(d, ts, c, e, s, False),
    "txn_offset_commit": lambda d, ts, c, e, s: _commit(d, ts, c, e, s, True),
    "offset_committed": _offset_committed,
    "offset_deleted": _offset_deleted,
    "partition_epochs": _partition_epochs,
}


def event_from_dict(d: Any, *, seq: int, default_event_id: str, coords: str):
    """A typed event, an :class:`UnknownType`, or a :class:`DecodeError`; never raises."""
    if type(d) is not dict:
        return DecodeError("NOT_AN_OBJECT", {"got": type(d).__name__}, coords)
    try:
        etype = d.get("type")
        if etype == "offset_commit" or etype == "txn_offset_commit":
            ev = _fast_commit(d, seq, default_event_id, etype == "txn_offset_commit")
            if ev is not None:
                return ev
        etype = _str(d, "type")
        builder = _BUILDERS.get(etype)
        if builder is None:
            return UnknownType(etype, coords)
        ts, cluster, eid = _header(d, seq, default_event_id)
        return builder(d, ts, cluster, eid, seq)
    except _Bad as bad:
        params = dict(bad.params)
        if "type" in d and isinstance(d.get("type"), str):
            params = {"type": d["type"], **params}
        return DecodeError(bad.code, params, coords)
    except (TypeError, ValueError, AttributeError) as exc:  # defensive: odd shapes inside nested values
        return DecodeError("INVALID_VALUE", {"problem": f"{type(exc).__name__}: {exc}"}, coords)


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


def decode_avro_record(data: bytes, *, seq: int, default_event_id: str, coords: str,
                       schema_ids: frozenset[int] = frozenset({1}), registry=None):
    """Confluent wire format (magic 0 + schema id + body) or a plain Avro body; the same fields as JSON.
    With ``registry`` (a ``schema_registry.RegistryEventDecoder``) Confluent records take their
    schema from the Schema Registry instead of the fixed ``schema_ids``."""
    too_large = oversized(len(data), coords)
    if too_large is not None:
        return too_large
    return bounded(_decode_avro_record(data, seq=seq, default_event_id=default_event_id, coords=coords,
                                       schema_ids=schema_ids, registry=registry), len(data), coords)


def _decode_avro_record(data: bytes, *, seq: int, default_event_id: str, coords: str, schema_ids: frozenset[int],
                        registry=None):
    d = avro_record_dict(data, coords=coords, schema_ids=schema_ids, registry=registry)
    if isinstance(d, DecodeError):
        return d
    return event_from_dict(d, seq=seq, default_event_id=default_event_id, coords=coords)


def avro_record_dict(data: bytes, *, coords: str, schema_ids: frozenset[int] = frozenset({1}), registry=None):
    """An Avro record's fields as a dict (what :func:`event_from_dict` reads), or a :class:`DecodeError`
    (wire format, schema id, Schema Registry). The router turns the dict into JSON for the state
    function, so that only the edge knows Avro (``streaming.routing``)."""
    from fencewatch.streaming.ingest.avro import AvroWireError, decode_avro  # fastavro only when Avro is read

    if not data:
        return DecodeError("INVALID_AVRO", {"problem": "empty record"}, coords)
    # A plain body starts with the length of the non-empty ``type`` string, never 0.
    wire = "confluent" if data[0] == 0 else "plain"
    if wire == "confluent" and registry is not None:
        from fencewatch.streaming.ingest.schema_registry import RegistryDecodeError

        try:
            return registry.decode(data)
        except RegistryDecodeError as exc:  # RegistryUnavailable propagates: the batch is retried
            return DecodeError(exc.code, exc.params, coords)
    if wire == "confluent" and len(data) >= 5:
        schema_id = int.from_bytes(data[1:5], "big")
        if schema_id not in schema_ids:
            return DecodeError("UNKNOWN_SCHEMA_ID", {"schema_id": str(schema_id),
                                                     "known": ",".join(map(str, sorted(schema_ids)))}, coords)
    try:
        return decode_avro(data, wire=wire)
    except (AvroWireError, ValueError) as exc:
        return DecodeError("INVALID_AVRO", {"problem": str(exc)[:200]}, coords)


def decode_json_lines(lines, errors: list, unknown: dict) -> list:
    """Typed events of a JSON-lines input, in input order: ``seq`` is the line index, event ids
    default to it, bad lines go to ``errors`` as "line N", unknown types are counted in ``unknown``.

    Well-formed commits and assignments (most lines) are decoded straight into events
    (:func:`_typed_event`); other lines are parsed into objects for :func:`event_from_dict`
    (which names what is wrong), and lines that are not JSON go through
    :func:`decode_json_line` for the parser's reason.
    """
    events = []
    append = events.append
    typed_event = _typed_event
    for n, line in enumerate(lines):
        if len(line) > MAX_STRING_CHARS:  # rare: the bounds apply (decode_json_line)
            sort_result(decode_json_line(line, seq=n, default_event_id=str(n), coords=f"line {n + 1}"),
                        events, errors, unknown)
            continue
        ev = typed_event(line, n, None)
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
    ev = _typed_event(line, seq, default_event_id)
    if ev is not None:
        return ev
    try:
        d = _loads(line)
    except (ValueError, UnicodeDecodeError, TypeError) as exc:
        return DecodeError("INVALID_JSON", {"problem": str(exc)[:200]}, coords)
    return event_from_dict(d, seq=seq, default_event_id=default_event_id, coords=coords)


_TYPE_NAMES_BY_CLASS = {MemberAssignment: "member_assignment", MemberLeft: "member_left", Heartbeat: "heartbeat",
                        ClassicJoin: "classic_join", ClassicSync: "classic_sync", GroupStateChange: "group_state",
                        OffsetCommitted: "offset_committed", OffsetDeleted: "offset_deleted",
                        PartitionEpochs: "partition_epochs"}


def event_type(ev) -> str:
    """The SPEC ``type`` of a typed event (for counts and metrics)."""
    if type(ev) is OffsetCommit:
        return "txn_offset_commit" if ev.transactional else "offset_commit"
    return _TYPE_NAMES_BY_CLASS[type(ev)]
