"""Coordinator records -> SPEC events (plain dicts), with the little state it takes.

What lives here: ``Bridge`` (stateful, one per reader of ``__consumer_offsets``)
and ``decode_record`` (stateless, for a Spark pandas UDF). No I/O, no clock:
``ts`` is the source record's timestamp (the coordinator's append time).

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
=====================================  ==================================================

For KIP-848 groups the bridge also derives ``group_state`` (Empty, Assigning,
Reconciling, Stable) as Kafka's ``ConsumerGroup.maybeUpdateGroupState`` does
and emits it when it changes.

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
  ``assignment_epochs`` and the monitor derives them from the history (SPEC
  §2), which is what an upgrade decision needs; ``"member-epoch"`` writes
  max(member epoch, 0) for every partition instead, which is what a 4.3
  broker holds after loading such a record (Kafka's
  ``Utils.assignmentFromTopicPartitions``).

State (bounded by what the coordinator itself holds): per live group its
epoch, target assignment epoch, derived state, resolved regexes, and per
member its instance id, subscriptions, epoch and state; per classic group its
last members. A group's entry is dropped on its tombstone. Topic ids -> names
learned from records (OffsetCommit v4 carries both; so does the partition
metadata record) are kept for the life of the bridge (one entry per topic).
"""

from __future__ import annotations

import logging
import struct
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from fencewatch.streaming.ingest.consumer_offsets.protocol import claimed_generation_and_owned, parse_assignment, parse_subscription
from fencewatch.streaming.ingest.consumer_offsets.records import (
    RecordDecodeError,
    decode_key,
    decode_value,
    parse_topic_id,
    uuid_to_standard_string,
)

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

MEMBER_STATES = {0: "STABLE", 1: "UNREVOKED_PARTITIONS", 2: "UNRELEASED_PARTITIONS"}
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
ABSENT_EPOCH_MODES = ("derive", "member-epoch")

_INT32 = struct.Struct(">i").unpack_from
_INT64 = struct.Struct(">q").unpack_from
_V3_HEAD = struct.Struct(">qih").unpack_from  # offset, leaderEpoch, metadata length (int16)
_V4_HEAD = struct.Struct(">qiB").unpack_from  # offset, leaderEpoch, compact metadata length (1-byte varint)

class _Fallback(Exception):
    """Leave the offset-commit fast path for the schema-driven one."""


_OFFSET_TYPES = frozenset({"offset_committed", "offset_deleted", "partition_epochs", "offset_commit",
                           "txn_offset_commit"})


def event_role(event_type: str) -> str:
    """Which input topic an event belongs on: ``offsets`` or ``heartbeats``."""
    return "offsets" if event_type in _OFFSET_TYPES else "heartbeats"


class TopicNames:
    """Topic id (16 bytes) -> name. Seeded from cluster metadata or a file
    (keys in Kafka's base64 form or as standard UUID strings), extended with
    what the records themselves reveal; an unknown id resolves to its standard
    UUID string (contract §9)."""

    __slots__ = ("_names",)

    def __init__(self, initial: Mapping[Any, str] | None = None) -> None:
        self._names: dict[bytes, str] = {}
        for k, v in (initial or {}).items():
            self._names[k if isinstance(k, bytes) else parse_topic_id(str(k))] = v

    def resolve(self, raw: bytes) -> str:
        name = self._names.get(raw)
        return name if name is not None else uuid_to_standard_string(raw)

    def learn(self, raw: bytes, name: str) -> None:
        if raw != bytes(16) and name:
            self._names[raw] = name

    def get(self, raw: bytes) -> str | None:
        return self._names.get(raw)

    def known(self, raw: bytes) -> bool:
        return raw in self._names

    def __len__(self) -> int:
        return len(self._names)


@dataclass(slots=True)
class BridgeStats:
    """Counters: records seen, events emitted, records per type, skipped
    (unknown type/version) and failed (malformed) records per code, and
    partial problems inside decodable records (e.g. a malformed embedded
    subscription)."""

    records: int = 0
    events: int = 0
    by_record_type: Counter = field(default_factory=Counter)  # see record_counts()
    fast_offset_commits: int = 0  # type-1 records counted apart on the hot path
    skipped: Counter = field(default_factory=Counter)
    errors: Counter = field(default_factory=Counter)
    problems: Counter = field(default_factory=Counter)

    def record_counts(self) -> Counter:
        counts = Counter(self.by_record_type)
        if self.fast_offset_commits:
            counts[1] += self.fast_offset_commits
        return counts

    def as_dict(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "events": self.events,
            "by_record_type": dict(self.record_counts()),
            "skipped": dict(self.skipped),
            "errors": dict(self.errors),
            "problems": dict(self.problems),
        }


@dataclass(slots=True)
class _Member:
    instance_id: str | None = None
    subscribed_topics: tuple[str, ...] | None = None
    regex: str | None = None
    classic: bool = False
    member_epoch: int = 0
    state: int = 0


@dataclass(slots=True)
class _PendingRemoval:
    member_id: str
    instance_id: str | None
    ts: int
    event_id: str


@dataclass(slots=True)
class _Group:
    group_epoch: int | None = None
    target_epoch: int | None = None
    members: dict[str, _Member] = field(default_factory=dict)
    state: str | None = None  # last derived KIP-848 state emitted
    held_state: tuple[str, int, str] | None = None  # (state, ts, event id) awaiting the end of its batch
    regex_topics: dict[str, tuple[str, ...]] = field(default_factory=dict)
    classic_members: dict[str, str | None] | None = None  # member id -> instance id
    pending: _PendingRemoval | None = None


class Bridge:
    """Turns ``__consumer_offsets`` records, in log order per partition, into
    SPEC events. ``feed`` raises ``RecordDecodeError`` for a record it cannot
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
                if self._holding or timestamp_ms is None or timestamp_ms < 0:
                    raise _Fallback
                stats = self.stats
                stats.records += 1
                stats.fast_offset_commits += 1
                stats.events += 1
                e = {"type": "offset_deleted", "ts": timestamp_ms}
                if self.cluster is not None:
                    e["cluster"] = self.cluster
                e.update(group_id=group, event_id=event_id, topic=topic, partition=partition)
                return [e]
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
            e = {"type": "offset_committed", "ts": ts, "group_id": group, "event_id": event_id, "topic": topic,
                 "partition": partition, "offset": offset, "leader_epoch": leader_epoch, "commit_ts": commit_ts}
        else:
            e = {"type": "offset_committed", "ts": ts, "cluster": self.cluster, "group_id": group,
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

    def _feed(self, key: bytes | None, value: bytes | None, timestamp_ms: int | None,
              event_id: str) -> list[dict[str, Any]]:
        stats = self.stats
        stats.records += 1
        try:
            record_type, k = decode_key(key)
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
                    out.append(self._event("group_state", held[1], group_id, held[2], state=held[0],
                                           protocol="consumer"))
            if g.pending is None and g.held_state is None:
                del self._holding[group_id]
        return out

    # -- helpers -------------------------------------------------------------

    def _event(self, type_: str, ts: int, group_id: str | None, event_id: str, **fields: Any) -> dict[str, Any]:
        e: dict[str, Any] = {"type": type_, "ts": ts}
        if self.cluster is not None:
            e["cluster"] = self.cluster
        if group_id is not None:
            e["group_id"] = group_id
        e["event_id"] = event_id
        e.update(fields)
        return e

    def _group(self, group_id: str) -> _Group:
        g = self.groups.get(group_id)
        if g is None:
            g = self.groups[group_id] = _Group()
        return g

    def _release_pending(self, group_id: str, g: _Group) -> list[dict[str, Any]]:
        p = g.pending
        g.pending = None
        if p is None:
            return []
        extra = {"instance_id": p.instance_id} if p.instance_id is not None else {}
        return [self._event("member_left", p.ts, group_id, p.event_id, member_id=p.member_id,
                            reason="leave", **extra)]

    def _before(self, group_id: str, g: _Group | None, *, replacing_instance: str | None = None,
                removing_member: str | None = None) -> list[dict[str, Any]]:
        """Resolve a held-back static removal before handling the next record of the group."""
        if g is None or g.pending is None:
            return []
        if removing_member is not None and removing_member == g.pending.member_id:
            return []  # the rest of the old member's tombstones
        if replacing_instance is not None and replacing_instance == g.pending.instance_id:
            g.pending = None  # static member replaced: a takeover, not a leave
            return []
        return self._release_pending(group_id, g)

    def _derive_state(self, group_id: str, g: _Group, ts: int, event_id: str) -> list[dict[str, Any]]:
        """Kafka's ConsumerGroup.maybeUpdateGroupState; an event when it changes."""
        if not g.members:
            new = "Empty"
        elif g.group_epoch is not None and g.group_epoch > (g.target_epoch if g.target_epoch is not None else 0):
            new = "Assigning"
        else:
            target = g.target_epoch if g.target_epoch is not None else 0
            new = "Stable"
            for m in g.members.values():
                if not (m.state == 0 and m.member_epoch == target):
                    new = "Reconciling"
                    break
        # Held until the coordinator batch ends (the next record with another
        # timestamp), so states in the middle of one batch are never emitted.
        g.held_state = (new, ts, event_id)
        self._holding[group_id] = None
        return []

    def _topic_partitions(self, items: list[dict], member_epoch: int) -> list[dict[str, Any]]:
        out = []
        resolve = self.topic_names.resolve
        for tp in items:
            name = resolve(tp["topicId"])
            parts = tp["partitions"]
            epochs = tp.get("assignmentEpochs")
            if epochs is not None and len(epochs) != len(parts):
                self.stats.problems["ASSIGNMENT_EPOCHS_LENGTH_MISMATCH"] += 1
                log.warning("topic %s: %d assignment epochs for %d partitions; ignoring them",
                            name, len(epochs), len(parts))
                epochs = None
            if epochs is None and self.fill_epochs:
                epochs = [member_epoch if member_epoch > 0 else 0] * len(parts)
            ordered = sorted(parts)
            if epochs is None:
                out.append({"topic": name, "partitions": ordered})
            elif ordered == parts:
                out.append({"topic": name, "partitions": parts, "assignment_epochs": epochs})
            else:
                pairs = sorted(zip(parts, epochs))
                out.append({"topic": name, "partitions": [p for p, _ in pairs],
                            "assignment_epochs": [e for _, e in pairs]})
        if len(out) > 1:
            out.sort(key=_by_topic)
        return out

    # -- handlers, one per record type ----------------------------------------

    def _offset_commit(self, k: dict, version: int | None, v: dict | None, ts: int, eid: str) -> list[dict]:
        group_id = k["group"]
        out = self._before(group_id, self.groups.get(group_id))
        if v is None:
            out.append(self._event("offset_deleted", ts, group_id, eid, topic=k["topic"], partition=k["partition"]))
            return out
        topic_id = v.get("topicId")
        if topic_id is not None:
            self.topic_names.learn(topic_id, k["topic"])
        e = self._event("offset_committed", ts if ts >= 0 else v["commitTimestamp"], group_id, eid,
                        topic=k["topic"], partition=k["partition"], offset=v["offset"],
                        leader_epoch=v.get("leaderEpoch", -1), commit_ts=v["commitTimestamp"])
        expire = v.get("expireTimestamp")
        if expire is not None and expire >= 0:
            e["expire_ts"] = expire
        out.append(e)
        return out

    def _group_metadata(self, k: dict, version: int | None, v: dict | None, ts: int, eid: str) -> list[dict]:
        group_id = k["group"]
        g = self.groups.get(group_id)
        out = self._before(group_id, g)
        if v is None:
            if g is not None:
                g.classic_members = None
                if g.group_epoch is None and not g.members:
                    del self.groups[group_id]
            out.append(self._event("group_state", ts, group_id, eid, state="Dead", protocol="classic"))
            return out
        g = self._group(group_id)
        previous = g.classic_members or {}
        current = {m["memberId"]: m.get("groupInstanceId") for m in v["members"]}
        for member_id, instance_id in previous.items():
            if member_id not in current:
                extra = {"instance_id": instance_id} if instance_id is not None else {}
                out.append(self._event("member_left", ts, group_id, eid, member_id=member_id, reason="leave",
                                       **extra))
        g.classic_members = current
        if not v["members"]:
            out.append(self._event("group_state", ts, group_id, eid, state="Empty", protocol="classic"))
            return out
        assignor = v["protocol"]
        if v["protocolType"] == "consumer":
            assignments: dict[str, list[dict]] = {}
            for m in v["members"]:
                member_id = m["memberId"]
                generation, owned = -1, ()
                try:
                    generation, owned = claimed_generation_and_owned(assignor, parse_subscription(m["subscription"]))
                except RecordDecodeError as exc:
                    self.stats.problems["MALFORMED_SUBSCRIPTION"] += 1
                    log.warning("[GroupId %s] member %s: %s; claiming nothing", group_id, member_id, exc)
                join = self._event("classic_join", ts, group_id, eid, member_id=member_id,
                                   generation=generation, owned=_tp_list(owned), protocol=assignor)
                if m.get("groupInstanceId") is not None:
                    join["instance_id"] = m["groupInstanceId"]
                out.append(join)
                assigned: Iterable = ()
                if m["assignment"]:
                    try:
                        assigned = parse_assignment(m["assignment"]).assigned_partitions
                    except RecordDecodeError as exc:
                        self.stats.problems["MALFORMED_ASSIGNMENT"] += 1
                        log.warning("[GroupId %s] member %s: %s; assigning nothing", group_id, member_id, exc)
                assignments[member_id] = _tp_list(assigned)
            out.append(self._event("classic_sync", ts, group_id, eid, generation=v["generation"],
                                   assignments=assignments))
        out.append(self._event("group_state", ts, group_id, eid, state="Stable", protocol="classic"))
        return out

    def _consumer_group_metadata(self, k: dict, version: int | None, v: dict | None, ts: int,
                                 eid: str) -> list[dict]:
        group_id = k["groupId"]
        g = self.groups.get(group_id)
        out = self._before(group_id, g)
        if v is None:
            if g is not None and g.classic_members is None:
                del self.groups[group_id]
            elif g is not None:
                g.group_epoch, g.target_epoch, g.members, g.state = None, None, {}, None
                g.held_state = None
            out.append(self._event("group_state", ts, group_id, eid, state="Dead", protocol="consumer"))
            return out
        g = self._group(group_id)
        g.group_epoch = v["epoch"]
        out.extend(self._derive_state(group_id, g, ts, eid))
        return out

    def _partition_metadata(self, k: dict, version: int | None, v: dict | None, ts: int, eid: str) -> list[dict]:
        group_id = k["groupId"]
        out = self._before(group_id, self.groups.get(group_id))
        if v is not None:
            for t in v["topics"]:
                self.topic_names.learn(t["topicId"], t["topicName"])
        return out

    def _member_metadata(self, k: dict, version: int | None, v: dict | None, ts: int, eid: str) -> list[dict]:
        group_id, member_id = k["groupId"], k["memberId"]
        g = self.groups.get(group_id)
        if v is None:
            out = self._before(group_id, g, removing_member=member_id)
            if g is not None and g.members.pop(member_id, None) is not None:
                out.extend(self._derive_state(group_id, g, ts, eid))
            return out
        out = self._before(group_id, g, replacing_instance=v["instanceId"])
        g = self._group(group_id)
        m = g.members.get(member_id)
        if m is None:
            m = g.members[member_id] = _Member()
        m.instance_id = v["instanceId"]
        m.subscribed_topics = tuple(sorted(set(v["subscribedTopicNames"])))
        m.regex = v["subscribedTopicRegex"]
        m.classic = v.get("classicMemberMetadata") is not None
        out.extend(self._derive_state(group_id, g, ts, eid))
        return out

    def _target_metadata(self, k: dict, version: int | None, v: dict | None, ts: int, eid: str) -> list[dict]:
        group_id = k["groupId"]
        g = self.groups.get(group_id)
        out = self._before(group_id, g)
        if v is None:
            if g is not None:
                g.target_epoch = None
            return out
        g = self._group(group_id)
        g.target_epoch = v["assignmentEpoch"]
        out.extend(self._derive_state(group_id, g, ts, eid))
        return out

    def _target_member(self, k: dict, version: int | None, v: dict | None, ts: int, eid: str) -> list[dict]:
        group_id = k["groupId"]
        return self._before(group_id, self.groups.get(group_id), removing_member=k["memberId"] if v is None else None)

    def _current_assignment(self, k: dict, version: int | None, v: dict | None, ts: int, eid: str) -> list[dict]:
        group_id, member_id = k["groupId"], k["memberId"]
        g = self.groups.get(group_id)
        if v is None:
            out = self._before(group_id, g, removing_member=member_id)
            m = g.members.get(member_id) if g is not None else None
            if g is not None and m is not None and m.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                # Held back: the next record may be the same instance rejoining under a new member id.
                g.pending = _PendingRemoval(member_id, m.instance_id, ts, eid)
                self._holding[group_id] = None
            else:
                extra = {"instance_id": m.instance_id} if m is not None and m.instance_id is not None else {}
                out.append(self._event("member_left", ts, group_id, eid, member_id=member_id, reason="leave",
                                       **extra))
            if g is not None and g.members.pop(member_id, None) is not None:
                out.extend(self._derive_state(group_id, g, ts, eid))
            return out
        out = self._before(group_id, g)
        g = self._group(group_id)
        m = g.members.get(member_id)
        if m is None:
            m = g.members[member_id] = _Member()
        epoch = v["memberEpoch"]
        m.member_epoch = epoch
        m.state = v["state"]
        if epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            extra = {"instance_id": m.instance_id} if m.instance_id is not None else {}
            out.append(self._event("member_left", ts, group_id, eid, member_id=member_id, reason="static_leave",
                                   **extra))
        else:
            e = {"type": "member_assignment", "ts": ts}
            if self.cluster is not None:
                e["cluster"] = self.cluster
            e["group_id"] = group_id
            e["event_id"] = eid
            e["member_id"] = member_id
            e["protocol"] = "classic" if m.classic else "consumer"
            e["member_epoch"] = epoch
            e["previous_member_epoch"] = v["previousMemberEpoch"]
            e["state"] = MEMBER_STATES.get(v["state"], "UNKNOWN")
            e["assigned"] = self._topic_partitions(v["assignedPartitions"], epoch)
            pending = v["partitionsPendingRevocation"]
            e["pending_revocation"] = self._topic_partitions(pending, epoch) if pending else []
            if m.subscribed_topics is not None:
                if m.regex is not None:
                    e["subscribed_topics"] = sorted(set(m.subscribed_topics).union(g.regex_topics.get(m.regex, ())))
                else:
                    e["subscribed_topics"] = list(m.subscribed_topics)
            if m.instance_id is not None:
                e["instance_id"] = m.instance_id
            if g.group_epoch is not None:
                e["group_epoch"] = g.group_epoch
            if g.target_epoch is not None:
                e["target_assignment_epoch"] = g.target_epoch
            out.append(e)
        out.extend(self._derive_state(group_id, g, ts, eid))
        return out

    def _regex(self, k: dict, version: int | None, v: dict | None, ts: int, eid: str) -> list[dict]:
        group_id = k["groupId"]
        g = self.groups.get(group_id)
        out = self._before(group_id, g)
        if v is None:
            if g is not None:
                g.regex_topics.pop(k["regularExpression"], None)
            return out
        self._group(group_id).regex_topics[k["regularExpression"]] = tuple(v["topics"])
        return out


def _by_topic(entry: dict[str, Any]) -> str:
    return entry["topic"]


def _tp_list(tps: Iterable[tuple[str, Iterable[int]]]) -> list[dict[str, Any]]:
    merged: dict[str, set[int]] = {}
    for topic, parts in tps:
        merged.setdefault(topic, set()).update(parts)
    return [{"topic": t, "partitions": sorted(merged[t])} for t in sorted(merged)]


_HANDLERS = {
    0: Bridge._offset_commit,
    1: Bridge._offset_commit,
    2: Bridge._group_metadata,
    3: Bridge._consumer_group_metadata,
    4: Bridge._partition_metadata,
    5: Bridge._member_metadata,
    6: Bridge._target_metadata,
    7: Bridge._target_member,
    8: Bridge._current_assignment,
    16: Bridge._regex,
}


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
    """One record -> its SPEC events, with no memory of earlier records (for a
    Spark pandas UDF). Without history: no ``member_left`` from generation
    diffs, no derived KIP-848 ``group_state``, no subscription join, and a
    static member's removal is a plain ``leave``. Pass a ``TopicNames`` built
    once rather than a dict, to skip re-parsing the ids per call. Raises
    ``RecordDecodeError`` (see ``.skippable``)."""
    bridge = Bridge(topic_names, cluster=cluster, absent_assignment_epochs=absent_assignment_epochs)
    events = bridge.feed(key, value, timestamp_ms, event_id)
    events.extend(bridge.flush())
    return [e for e in events if not (e["type"] == "group_state" and e.get("protocol") == "consumer"
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
