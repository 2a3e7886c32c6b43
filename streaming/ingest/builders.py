"""Each event type's decoder on the general path: its declared fields read and checked, then
the typed event (``state.events``) built from them.

What lives here: one builder per event type, registered with :func:`builds`, and
:func:`event_from_dict`, which dispatches on ``type``. A builder's parameters after
(ts, cluster, event_id, seq) are the fields it takes, by name; at import they are checked
against the type's declared fields (``state.records.EVENTS``), and the declaration says how
each is read (:func:`reader_for`): required or not, the default an absent one stands for, its
closed set of values, what an explicit null means. Parameters are read in their order, so
the first bad field is the one reported. A builder only turns checked values into the event.
Internal to ``streaming.ingest``; the entry points are in :mod:`.events`.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping

from fencewatch.state.events import (ClassicGeneration, ClassicJoin, ClassicSync, GroupStateChange, Heartbeat, MemberAssignment,
                                     MemberLeft, OffsetCommit, OffsetCommitted, OffsetDeleted, PartitionEpochs,
                                     StreamsTask, StreamsTopology, Subtopology)
from fencewatch.state.model import MemberState, Protocol
from fencewatch.state.records import (ASSIGNMENT_EPOCHS, EPOCH_ENTRY, EVENTS, HEADER, INT, PARTITION_OFFSET, STREAMS_TASKS,
                                      STRING, SUBTOPOLOGY, TOPIC_PARTITIONS, Array, EventType, MapOf, Record, RecordDrift,
                                      Slot, check_names)
from fencewatch.streaming.ingest.commit_offsets import offsets
from fencewatch.streaming.ingest.fast_paths import fast_commit
from fencewatch.streaming.ingest.fields import (Bad, DecodeError, UnknownType, header, int_item, list_of, req, req_str,
                                                scalar_reader, topic_partitions)

# --------------------------------------------------------------------------- readers of declared fields


def _partitions(d: Mapping, name: str, arg: tuple[bool, bool]):
    """(tps, assignment epochs or None); None for an explicit null that means something."""
    required, null_is_value = arg
    if null_is_value and name in d and d[name] is None:
        return None
    return topic_partitions(d, name, required=required)


def _strings(d: Mapping, name: str, required: bool) -> tuple[str, ...] | None:
    v = req(d, name) if required else d.get(name)
    return None if v is None else tuple(str(t) for t in list_of(v, name))


def _assignments(d: Mapping, name: str, _: Any) -> tuple[tuple[str, tuple], ...]:
    """``{member_id: [partitions]}`` -> ((member id, tps), ...) in member id order."""
    raw = req(d, name)
    if type(raw) is not dict:
        raise Bad("WRONG_TYPE", field=name, expected="object", got=type(raw).__name__)
    return tuple((mid, topic_partitions(raw, mid)[0]) for mid in sorted(raw))


_EPOCH_PLAN = tuple((*scalar_reader(s), s.name) for s in EPOCH_ENTRY.slots)


def _epochs(d: Mapping, name: str, _: Any) -> tuple[tuple[int, int], ...]:
    """A leader epoch cache, ascending: ((epoch, start offset), ...)."""
    out = []
    for i, e in enumerate(list_of(d.get(name) or [], name)):
        if type(e) is not dict:
            raise Bad("WRONG_TYPE", field=f"{name}[{i}]", expected="object", got=type(e).__name__)
        out.append(tuple(read(e, n, arg) for read, arg, n in _EPOCH_PLAN))
    return tuple(sorted(out))


def _offsets(d: Mapping, name: str, _: Any):
    return offsets(d)


def _item_reader(slot: Slot, where: str) -> Callable[[Mapping], Any]:
    """A nested record's field: a string, or an array of integers or strings (None: absent)."""
    t, name = slot.field.type, slot.name
    if t == STRING:
        return lambda e: req_str(e, name) if slot.required else (None if e.get(name) is None else req_str(e, name))
    if t in (Array(INT), Array(STRING)):
        item = (lambda v, n: int_item(v, n)) if t == Array(INT) else _str_item

        def read(e: Mapping) -> tuple | None:
            v = req(e, name) if slot.required else e.get(name)
            if v is None:
                return None if slot.default is None else tuple(slot.default)
            return tuple(item(x, f"{where}.{name}") for x in list_of(v, f"{where}.{name}"))
        return read
    raise RecordDrift(f"{__name__}: no reader for field {name!r} of {where} ({t!r})")


def _str_item(v: Any, where: str) -> str:
    if type(v) is not str:
        raise Bad("WRONG_TYPE", field=where, expected="string", got=type(v).__name__)
    return v


def _records(d: Mapping, name: str, arg: tuple[Record, type, bool]):
    """A list of nested records (a streams member's tasks, a topology's subtopologies) -> a tuple of
    ``cls``, fields in the record's order; None when absent and not required."""
    record, cls, required = arg
    raw = req(d, name) if required else d.get(name)
    if raw is None:
        return None
    out = []
    for i, entry in enumerate(list_of(raw, name)):
        where = f"{name}[{i}]"
        if type(entry) is not dict:
            raise Bad("WRONG_TYPE", field=where, expected="object", got=type(entry).__name__)
        extra = [k for k in entry if k not in record.names]
        if extra:
            raise Bad("INVALID_VALUE", field=f"{where}.{extra[0]}", problem=f"not a field of {record.name}")
        values = [_item_reader(s, where)(entry) for s in record.slots]
        if record is STREAMS_TASKS and values[2] is not None and len(values[2]) != len(values[1]):
            raise Bad("INVALID_VALUE", field=f"{where}.{ASSIGNMENT_EPOCHS.name}",
                      problem=f"{len(values[2])} epochs for {len(values[1])} partitions")
        out.append(cls(*values))
    return tuple(out)


#: The nested records read as lists (:func:`_records`), and the class each item becomes.
_NESTED = ((STREAMS_TASKS, StreamsTask), (SUBTOPOLOGY, Subtopology))  # by identity (a Record's defaults are lists)
for _rec, _cls in _NESTED:
    check_names(f"{__name__}.{_cls.__name__}", _cls._fields, _rec.names, record=_rec.name)


def reader_for(slot: Slot) -> tuple[Callable, Any]:
    """(reader, its third argument) for one declared field, by its type."""
    scalar = scalar_reader(slot)
    if scalar is not None:
        return scalar
    t = slot.field.type
    if t == Array(TOPIC_PARTITIONS) and slot.default in (None, []):
        return _partitions, (slot.required, slot.null_means is not None)
    if t == Array(STRING) and slot.default is None:
        return _strings, slot.required
    if t == MapOf(Array(TOPIC_PARTITIONS)) and slot.required:
        return _assignments, None
    if t == Array(EPOCH_ENTRY) and slot.default in (None, []):
        return _epochs, None
    if t == Array(PARTITION_OFFSET) and slot.required:
        return _offsets, None
    nested = next((cls for rec, cls in _NESTED if isinstance(t, Array) and t.items is rec), None)
    if nested is not None and slot.default is None:
        return _records, (t.items, nested, slot.required)
    raise RecordDrift(f"{__name__}: no reader for field {slot.name!r} "
                      f"({'required' if slot.required else f'default {slot.default!r}'}) of type {t!r}")


# --------------------------------------------------------------------------- builders

BUILDERS: dict[str, Callable] = {}
"""type -> ``decode(d, ts, cluster, event_id, seq)``: the builder's fields read, then the builder."""


def builds(etype: EventType) -> Callable:
    """Register a builder for ``etype``; its fields are checked against the declaration now."""
    def register(fn: Callable) -> Callable:
        code = fn.__code__
        params = code.co_varnames[4:code.co_argcount]
        record = EVENTS[etype]
        check_names(f"{__name__}.{fn.__name__}", params,
                    [n for n in record.read_names if n not in HEADER], record=etype.value)
        BUILDERS[etype.value] = _decoder(fn, [(*reader_for(record.slot(n)), n) for n in params])
        return fn
    return register


def _decoder(build: Callable, plan: list[tuple[Callable, Any, str]]) -> Callable:
    """``decode(d, ts, cluster, eid, seq)``: ``build(ts, cluster, eid, seq, read(d, name, arg), ...)``
    for each (read, arg, name) of ``plan``, as one generated function rather than a loop over the plan
    (the general path decodes most heartbeats; measured in the commit that made it)."""
    defaults = {"_build": build}
    calls = []
    for i, (read, arg, name) in enumerate(plan):
        defaults[f"_r{i}"], defaults[f"_a{i}"] = read, arg
        calls.append(f"_r{i}(d, {name!r}, _a{i})")
    params = ", ".join(f"{k}={k}" for k in defaults)
    src = f"def decode(d, ts, cluster, eid, seq, {params}):\n    return _build(ts, cluster, eid, seq, {', '.join(calls)})\n"
    namespace = dict(defaults)
    exec(compile(src, f"<fencewatch-decode-{build.__name__}>", "exec"), namespace)
    return namespace["decode"]


@builds(EventType.MEMBER_ASSIGNMENT)
def _member_assignment(ts, cluster, eid, seq, assigned, pending_revocation, subscribed_topics, group_id, member_id,
                       protocol, member_epoch, previous_member_epoch, state, instance_id, group_epoch,
                       target_assignment_epoch, active_tasks, active_tasks_pending_revocation):
    # None: "unchanged" (assigned), "derive it" (pending): resolved by the group state (request log)
    assigned, assigned_epochs = (None, None) if assigned is None else assigned
    pending, pending_epochs = (None, None) if pending_revocation is None else pending_revocation
    return MemberAssignment(
        ts=ts, cluster=cluster, group_id=group_id, event_id=eid, seq=seq, member_id=member_id,
        protocol=_PROTOCOLS[protocol], member_epoch=member_epoch, assigned=assigned, pending_revocation=pending,
        assigned_epochs=assigned_epochs, pending_epochs=pending_epochs, previous_member_epoch=previous_member_epoch,
        state=MemberState.parse(state), subscribed_topics=subscribed_topics, instance_id=instance_id,
        group_epoch=group_epoch, target_assignment_epoch=target_assignment_epoch, active_tasks=active_tasks,
        active_tasks_pending_revocation=active_tasks_pending_revocation)


_PROTOCOLS = {p.value: p for p in Protocol}


@builds(EventType.MEMBER_LEFT)
def _member_left(ts, cluster, eid, seq, reason, group_id, member_id):
    return MemberLeft(ts, cluster, group_id, eid, seq, member_id, reason)


@builds(EventType.HEARTBEAT)
def _heartbeat(ts, cluster, eid, seq, group_id, member_id, request_epoch, response_epoch, error_code):
    return Heartbeat(ts, cluster, group_id, eid, seq, member_id, request_epoch, response_epoch, error_code)


@builds(EventType.CLASSIC_JOIN)
def _classic_join(ts, cluster, eid, seq, owned, group_id, member_id, generation, protocol, instance_id):
    return ClassicJoin(ts, cluster, group_id, eid, seq, member_id, generation, owned[0], protocol, instance_id)


@builds(EventType.CLASSIC_GENERATION)
def _classic_generation(ts, cluster, eid, seq, group_id, member_id, generation, protocol, instance_id, members):
    return ClassicGeneration(ts, cluster, group_id, eid, seq, member_id, generation, protocol, instance_id, members)


@builds(EventType.CLASSIC_SYNC)
def _classic_sync(ts, cluster, eid, seq, assignments, group_id, generation):
    return ClassicSync(ts, cluster, group_id, eid, seq, generation, assignments)


@builds(EventType.GROUP_STATE)
def _group_state(ts, cluster, eid, seq, group_id, state, protocol):
    return GroupStateChange(ts, cluster, group_id, eid, seq, state, protocol)


@builds(EventType.STREAMS_TOPOLOGY)
def _streams_topology(ts, cluster, eid, seq, group_id, topology_epoch, subtopologies):
    return StreamsTopology(ts, cluster, group_id, eid, seq, topology_epoch, subtopologies)


@builds(EventType.OFFSET_COMMIT)
def _offset_commit(ts, cluster, eid, seq, group_id, member_id, member_epoch, offsets, instance_id, error_code,
                   api_version):
    return OffsetCommit(ts, cluster, group_id, eid, seq, False, member_id, member_epoch, offsets, instance_id,
                        error_code, api_version=api_version)


@builds(EventType.TXN_OFFSET_COMMIT)
def _txn_offset_commit(ts, cluster, eid, seq, group_id, member_id, member_epoch, offsets, instance_id, error_code,
                       api_version, transactional_id, producer_id, producer_epoch):
    return OffsetCommit(ts, cluster, group_id, eid, seq, True, member_id, member_epoch, offsets, instance_id,
                        error_code, transactional_id, producer_id, producer_epoch, api_version)


@builds(EventType.OFFSET_COMMITTED)
def _offset_committed(ts, cluster, eid, seq, group_id, topic, partition, offset, leader_epoch, commit_ts,
                      expire_ts):
    return OffsetCommitted(ts, cluster, group_id, eid, seq, topic, partition, offset, leader_epoch, commit_ts,
                           expire_ts)


@builds(EventType.OFFSET_DELETED)
def _offset_deleted(ts, cluster, eid, seq, group_id, topic, partition):
    return OffsetDeleted(ts, cluster, group_id, eid, seq, topic, partition)


@builds(EventType.PARTITION_EPOCHS)
def _partition_epochs(ts, cluster, eid, seq, epochs, topic, partition, log_start_offset, log_end_offset):
    return PartitionEpochs(ts, cluster, eid, seq, topic, partition, log_start_offset, log_end_offset, epochs)


check_names(__name__ + ".BUILDERS", BUILDERS, EventType)
_COMMITS = {EventType.OFFSET_COMMIT.value: False, EventType.TXN_OFFSET_COMMIT.value: True}


def build_event(d: Mapping, etype: str, seq: int, default_event_id: str):
    """The general path alone for a known ``etype``: the header and the declared fields read and
    checked, then the builder; raises :class:`Bad` naming the first bad field."""
    ts, cluster, eid = header(d, seq, default_event_id)
    return BUILDERS[etype](d, ts, cluster, eid, seq)


def event_from_dict(d: Any, *, seq: int, default_event_id: str, coords: str):
    """A typed event, an :class:`UnknownType`, or a :class:`DecodeError`; never raises."""
    if type(d) is not dict:
        return DecodeError("NOT_AN_OBJECT", {"got": type(d).__name__}, coords)
    try:
        etype = d.get("type")
        transactional = _COMMITS.get(etype) if type(etype) is str else None
        if transactional is not None:
            ev = fast_commit(d, seq, default_event_id, transactional)
            if ev is not None:
                return ev
        etype = req_str(d, "type")
        decode = BUILDERS.get(etype)
        if decode is None:
            return UnknownType(etype, coords)
        ts, cluster, eid = header(d, seq, default_event_id)
        return decode(d, ts, cluster, eid, seq)
    except Bad as bad:
        params = dict(bad.params)
        if "type" in d and isinstance(d.get("type"), str):
            params = {"type": d["type"], **params}
        return DecodeError(bad.code, params, coords)
    except (TypeError, ValueError, AttributeError) as exc:  # defensive: odd shapes inside nested values
        return DecodeError("INVALID_VALUE", {"problem": f"{type(exc).__name__}: {exc}"}, coords)
