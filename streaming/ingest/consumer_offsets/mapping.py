"""Coordinator records -> contract §1 events (plain dicts), with the little state it takes.

What lives here: ``Bridge`` (stateful, one per reader of ``__consumer_offsets``: its entry
points and the OffsetCommit fast path; each record type's handler is in :mod:`.handlers`,
topic id resolution in :mod:`.topic_names`) and ``decode_record`` (stateless, for a Spark
pandas UDF). No I/O, no clock: ``ts`` is the source record's timestamp (the coordinator's
append time).

Record -> events (Kafka 4.3 record types):

=====================================  ==================================================
0/1 OffsetCommit value                 ``offset_committed`` (leader epoch -1 before v3;
                                       ``expire_ts`` from v1 values)
0/1 OffsetCommit tombstone             ``offset_deleted``
2 GroupMetadata value                  ``member_left`` for members gone since the previous
                                       generation, then per member ``classic_join``
                                       (claimed generation + owned partitions, KIP-341),
                                       ``classic_sync`` (the stored assignment),
                                       ``group_state`` Stable; or ``group_state`` Empty
2 GroupMetadata tombstone              ``group_state`` Dead (classic)
3 ConsumerGroupMetadata                group epoch; tombstone -> ``group_state`` Dead
4 ConsumerGroupPartitionMetadata       learns topic id -> name
5 ConsumerGroupMemberMetadata          instance id, subscriptions, classic or not (joined
                                       into the member's next ``member_assignment``)
6 ConsumerGroupTargetAssignmentMetadata target assignment epoch
7 ConsumerGroupTargetAssignmentMember  nothing (the current assignment is what counts)
8 ConsumerGroupCurrentMemberAssignment ``member_assignment``; member epoch -2 ->
                                       ``member_left`` ``static_leave``; tombstone ->
                                       ``member_left`` ``leave``
16 ConsumerGroupRegularExpression      topics a subscribed regex resolved to
17 StreamsGroupMetadata               group epoch; tombstone -> ``group_state`` Dead
                                       (protocol streams)
19 StreamsGroupMemberMetadata          instance id (joined into the next assignment)
20 StreamsGroupTargetAssignmentMetadata target assignment epoch
21 StreamsGroupTargetAssignmentMember  nothing
22 StreamsGroupCurrentMemberAssignment ``member_assignment`` protocol ``streams``: the
                                       active tasks (and those pending revocation)
                                       with their assignment epochs (standby and
                                       warm-up tasks own none; the rules make them
                                       partitions, ``state.streams``); -2 /
                                       tombstone as type 8
23 StreamsGroupTopology                ``streams_topology`` (each subtopology's source
                                       and repartition source topics)
=====================================  ==================================================

For KIP-848 groups the bridge also derives ``group_state`` (Empty, Assigning,
Reconciling, Stable) as Kafka's ``ConsumerGroup.maybeUpdateGroupState`` does
(a streams group also NotReady, without a topology: ``StreamsGroup``'s) and emits
it when it changes.

What ``__consumer_offsets`` does not say, and what the bridge does about it:

- why a member left: every removal is ``reason: "leave"`` except a static
  leave (member epoch -2), which Kafka writes as an assignment record;
- a static member replaced by a new member id under the same instance id
  (after a static leave) is written as tombstones of the old member followed
  by the new member's records in the same batch: the bridge holds the old
  member's removal until the next record of that group and drops it if that
  record is the new member with the same instance id, so the monitor sees a
  takeover (contract §1.1), not a leave;
- assignment epochs before KIP-1251 (no ``AssignmentEpochs`` tag): by default
  (``absent_assignment_epochs="derive"``) the event carries no
  ``assignment_epochs`` and the monitor derives them from the history (contract
  §2), which is what an upgrade decision needs; ``"member-epoch"`` writes
  max(member epoch, 0) for every partition instead, which is what a 4.3
  broker holds after loading such a record (Kafka's
  ``Utils.assignmentFromTopicPartitions``).

State (bounded by what the coordinator itself holds): per live group its
epoch, target assignment epoch, derived state, resolved regexes, and per
member its instance id, subscriptions, epoch and state; per streams group its
topology (for the derived state only); per classic group its last members. A group's entry is dropped on its tombstone. Topic ids -> names
learned from records (OffsetCommit v4 carries both; so does the partition
metadata record) are kept for the life of the bridge (one entry per topic).
"""

from __future__ import annotations

import logging
import struct
from typing import Any, Iterable, Mapping

from fencewatch.state.records import EventType, InputTopic
from fencewatch.state.records import EVENTS as _DECLARED
from fencewatch.streaming.ingest.consumer_offsets.handlers import (HANDLERS, MEMBER_STATES, BridgeStats,
                                                                   _Group)
from fencewatch.streaming.ingest.consumer_offsets.records import (RecordDecodeError, decode_key, decode_value,
                                                                  record_type_name)
from fencewatch.streaming.ingest.consumer_offsets.streams_handlers import STREAMS_HANDLERS, StreamsRecordHandlers
from fencewatch.streaming.ingest.consumer_offsets.topic_names import TopicNames

__all__ = [
    "Bridge",
    "map_records",
    "BridgeStats",
    "TopicNames",
    "decode_record",
    "event_role",
    "MEMBER_STATES",
    "ABSENT_EPOCH_MODES",
]

log = logging.getLogger(__name__)

ABSENT_EPOCH_MODES = ("derive", "member-epoch")
_OFFSET_COMMITTED = EventType.OFFSET_COMMITTED.value
_OFFSET_DELETED = EventType.OFFSET_DELETED.value
_GROUP_STATE = EventType.GROUP_STATE.value

_INT32 = struct.Struct(">i").unpack_from
_INT64 = struct.Struct(">q").unpack_from
_V3_HEAD = struct.Struct(">qih").unpack_from  # offset, leaderEpoch, metadata length (int16)
_V4_HEAD = struct.Struct(">qiB").unpack_from  # offset, leaderEpoch, compact metadata length (1-byte varint)


class _Fallback(Exception):
    """Leave the offset-commit fast path for the schema-driven one."""


def event_role(event_type: str) -> str:
    """Which input topic an event belongs on: ``offsets`` or ``heartbeats`` (as declared)."""
    record = _DECLARED.get(event_type)
    return (record.topic if record is not None else InputTopic.HEARTBEATS).value


#: Every mapped record type's handler: the consumer and classic groups' and the streams groups'.
_HANDLERS = {**HANDLERS, **STREAMS_HANDLERS}


class Bridge(StreamsRecordHandlers):
    """Turns ``__consumer_offsets`` records, in log order per partition, into
    contract §1 events. ``feed`` raises ``RecordDecodeError`` for a record it cannot
    use (``skippable`` tells unknown types/versions from malformed ones); the
    bridge stays usable and the error is counted in ``stats``."""

    def __init__(
        self,
        topic_names: TopicNames | Mapping[Any, str] | None = None,
        *,
        cluster: str | None = None,
        absent_assignment_epochs: str = "derive",
    ) -> None:
        if absent_assignment_epochs not in ABSENT_EPOCH_MODES:
            raise ValueError(f"unknown absent_assignment_epochs {absent_assignment_epochs!r}; "
                             f"valid: {', '.join(ABSENT_EPOCH_MODES)}")
        self.topic_names = topic_names if isinstance(topic_names, TopicNames) else TopicNames(topic_names)
        self.cluster = cluster
        self.fill_epochs = absent_assignment_epochs == "member-epoch"
        self.groups: dict[str, _Group] = {}
        self._holding: dict[str, None] = {}  # groups with a held-back removal or state, in order
        self.stats = BridgeStats()

    # -- entry points -------------------------------------------------------

    def feed(self, key: bytes | None, value: bytes | None, timestamp_ms: int | None,
             event_id: str) -> list[dict[str, Any]]:
        """Events of one record, in log order. OffsetCommit v3/v4 (what brokers
        since 2.1 / 4.0 write, the bulk of the topic) and offset tombstones take
        a path of precompiled Structs; anything unusual there (other versions,
        unknown tags, malformed bytes) takes the schema-driven path and its
        error reporting."""
        if key is None or len(key) < 9 or key[1] != 1 or key[0] != 0:
            return self._feed(key, value, timestamp_ms, event_id)
        try:
            glen = key[2] << 8 | key[3]
            p = 4 + glen
            tlen = key[p] << 8 | key[p + 1]
            q = p + 2 + tlen
            if glen >= 0x8000 or tlen >= 0x8000 or q + 4 > len(key):
                raise _Fallback
            group = key[4:p].decode()
            topic = key[p + 2:q].decode()
            partition = _INT32(key, q)[0]
            if value is None:
                deleted = self._deleted(group, topic, partition, timestamp_ms, event_id)
                if deleted is None:
                    raise _Fallback
                return deleted
            if value[0] != 0:
                raise _Fallback
            version = value[1]
            if version == 3:
                offset, leader_epoch, mlen = _V3_HEAD(value, 2)
                if mlen < 0:
                    raise _Fallback
                commit_ts = _INT64(value, 16 + mlen)[0]
            elif version == 4:
                offset, leader_epoch, mlen = _V4_HEAD(value, 2)
                if mlen == 0 or mlen >= 0x80:
                    raise _Fallback
                p = 14 + mlen
                commit_ts = _INT64(value, p)[0]
                ntags = value[p + 8]
                if ntags == 1 and value[p + 9] == 0 and value[p + 10] == 16 and len(value) >= p + 27:
                    topic_id = value[p + 11:p + 27]
                    if self.topic_names.get(topic_id) != topic:
                        self.topic_names.learn(topic_id, topic)
                elif ntags != 0:
                    raise _Fallback
            else:
                raise _Fallback
        except (_Fallback, IndexError, UnicodeDecodeError, struct.error):
            return self._feed(key, value, timestamp_ms, event_id)
        stats = self.stats
        stats.records += 1
        stats.fast_offset_commits += 1
        ts = timestamp_ms if timestamp_ms is not None and timestamp_ms >= 0 else commit_ts
        if self.cluster is None:
            e = {"type": _OFFSET_COMMITTED, "ts": ts, "group_id": group, "event_id": event_id, "topic": topic,
                 "partition": partition, "offset": offset, "leader_epoch": leader_epoch, "commit_ts": commit_ts}
        else:
            e = {"type": _OFFSET_COMMITTED, "ts": ts, "cluster": self.cluster, "group_id": group,
                 "event_id": event_id, "topic": topic, "partition": partition, "offset": offset,
                 "leader_epoch": leader_epoch, "commit_ts": commit_ts}
        if self._holding:
            out = self._release_held(ts)
            g = self.groups.get(group)
            if g is not None and g.pending is not None:
                out.extend(self._before(group, g))
            out.append(e)
            stats.events += len(out)
            return out
        stats.events += 1
        return [e]

    def _deleted(self, group: str, topic: str, partition: int, timestamp_ms: int | None,
                 event_id: str) -> list[dict[str, Any]] | None:
        """An offset tombstone's event on the fast path; None: take the schema-driven one
        (something is held back, or the record has no timestamp)."""
        if self._holding or timestamp_ms is None or timestamp_ms < 0:
            return None
        stats = self.stats
        stats.records += 1
        stats.fast_offset_commits += 1
        stats.events += 1
        e = {"type": _OFFSET_DELETED, "ts": timestamp_ms}
        if self.cluster is not None:
            e["cluster"] = self.cluster
        e.update(group_id=group, event_id=event_id, topic=topic, partition=partition)
        return [e]

    def _feed(self, key: bytes | None, value: bytes | None, timestamp_ms: int | None,
              event_id: str) -> list[dict[str, Any]]:
        stats = self.stats
        stats.records += 1
        try:
            record_type, k = decode_key(key)
            if record_type not in _HANDLERS:
                raise RecordDecodeError(
                    "UNKNOWN_RECORD_TYPE", f"{record_type_name(record_type)} (type {record_type}) is decoded "
                    "(records.decode) but not mapped to events", record_type)
            if value is None:
                version, v = None, None
            else:
                version, v = decode_value(record_type, value)
        except RecordDecodeError as exc:
            (stats.skipped if exc.skippable else stats.errors)[exc.code] += 1
            raise
        stats.by_record_type[record_type] += 1
        ts = timestamp_ms if timestamp_ms is not None and timestamp_ms >= 0 else -1
        handler = _HANDLERS[record_type]
        if self._holding:
            events = self._release_held(ts)
            events.extend(handler(self, k, version, v, ts, event_id))
        else:
            events = handler(self, k, version, v, ts, event_id)
        stats.events += len(events)
        return events

    def flush(self) -> list[dict[str, Any]]:
        """Emit what is held back (static-member removals awaiting a possible
        replacement). Call at the end of input, or when the source is idle."""
        out = self._release_held(None)
        self.stats.events += len(out)
        return out

    def _release_held(self, ts: int | None) -> list[dict[str, Any]]:
        """Emit what was held back by records of an earlier coordinator batch
        (records of one batch share one timestamp); all of it when ``ts`` is None."""
        out: list[dict[str, Any]] = []
        for group_id in list(self._holding):
            g = self.groups.get(group_id)
            if g is None:
                del self._holding[group_id]
                continue
            if g.pending is not None and (ts is None or g.pending.ts != ts):
                out.extend(self._release_pending(group_id, g))
            held = g.held_state
            if held is not None and (ts is None or held[1] != ts):
                g.held_state = None
                if held[0] != g.state:
                    g.state = held[0]
                    out.append(self._event(_GROUP_STATE, held[1], group_id, held[2], state=held[0],
                                           protocol=g.protocol))
            if g.pending is None and g.held_state is None:
                del self._holding[group_id]
        return out

def decode_record(
    key: bytes | None,
    value: bytes | None,
    timestamp_ms: int | None,
    event_id: str,
    topic_names: TopicNames | Mapping[Any, str] | None = None,
    *,
    cluster: str | None = None,
    absent_assignment_epochs: str = "derive",
) -> list[dict[str, Any]]:
    """One record -> its contract §1 events, with no memory of earlier records (for a
    Spark pandas UDF). Without history: no ``member_left`` from generation
    diffs, no derived KIP-848 ``group_state``, no subscription join, and a
    static member's removal is a plain ``leave``, and a streams member's assignment
    has no instance id or group epochs. A streams group's records need none: its
    topology is a ``streams_topology`` event and a current assignment names tasks,
    which the rules make partitions through it (``state.streams``). Pass a
    ``TopicNames`` built once rather than a dict, to skip re-parsing the ids per call.
    Raises ``RecordDecodeError`` (see ``.skippable``)."""
    bridge = Bridge(topic_names, cluster=cluster, absent_assignment_epochs=absent_assignment_epochs)
    events = bridge.feed(key, value, timestamp_ms, event_id)
    events.extend(bridge.flush())
    return [e for e in events if not (e["type"] == _GROUP_STATE and e.get("protocol") in ("consumer", "streams")
                                      and e["state"] != "Dead")]


def map_records(
    records: Iterable[tuple[bytes | None, bytes | None, int | None, str]],
    bridge: Bridge,
    *,
    flush: bool = True,
) -> tuple[list[dict[str, Any]], list[tuple[str, str, str]]]:
    """A batch of ``(key, value, timestamp_ms, event_id)`` through ``bridge``:
    ``(events, problems)`` where a problem is ``(event_id, code, detail)`` for
    each record that could not be used (dead-letter material; ``code`` is
    ``UNKNOWN_RECORD_TYPE``/``UNKNOWN_VALUE_VERSION`` for skips). For a Spark
    pandas UDF: keep one ``Bridge`` per ``__consumer_offsets`` partition (a
    group lives in one partition) in the state store (it pickles), and pass
    ``flush=False`` until the batch is known to end a coordinator batch."""
    events: list[dict[str, Any]] = []
    problems: list[tuple[str, str, str]] = []
    feed = bridge.feed
    for key, value, ts, event_id in records:
        try:
            events.extend(feed(key, value, ts, event_id))
        except RecordDecodeError as exc:
            problems.append((event_id, exc.code, exc.detail))
    if flush:
        events.extend(bridge.flush())
    return events, problems
