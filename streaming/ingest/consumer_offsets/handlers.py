"""How each ``__consumer_offsets`` record type changes what the bridge holds, and the events it
gives (contract §1, §9); the table is in :mod:`.mapping`'s docstring.

What lives here: :class:`RecordHandlers`, the base of ``mapping.Bridge``: one handler per record
type (:data:`HANDLERS`), the helpers they share (held-back static removals, the derived KIP-848
group state, topic-partition lists), what the bridge remembers per group and member, and its
counters (:class:`BridgeStats`). Events are plain dicts with the declared fields of their type
(``state.records``; a test compares the keys). No I/O, no clock.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable

from fencewatch.state.records import EventType
from fencewatch.streaming.ingest.consumer_offsets.protocol import (claimed_generation_and_owned, parse_assignment,
                                                                   parse_subscription)
from fencewatch.streaming.ingest.consumer_offsets.records import RecordDecodeError
from fencewatch.streaming.ingest.consumer_offsets.topic_names import TopicNames

__all__ = ["BridgeStats", "HANDLERS", "MEMBER_STATES", "RecordHandlers"]

log = logging.getLogger(__name__)

MEMBER_STATES = {0: "STABLE", 1: "UNREVOKED_PARTITIONS", 2: "UNRELEASED_PARTITIONS"}
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
_OFFSET_COMMITTED = EventType.OFFSET_COMMITTED.value
_OFFSET_DELETED = EventType.OFFSET_DELETED.value
_GROUP_STATE = EventType.GROUP_STATE.value
_MEMBER_LEFT = EventType.MEMBER_LEFT.value
_MEMBER_ASSIGNMENT = EventType.MEMBER_ASSIGNMENT.value
_CLASSIC_JOIN = EventType.CLASSIC_JOIN.value
_CLASSIC_SYNC = EventType.CLASSIC_SYNC.value


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
    # KIP-848 groups: "consumer", or "streams" (set by a streams record; streams_handlers)
    protocol: str = "consumer"
    # streams groups: the topology (type 23), kept for the derived state (NotReady without one);
    # the rules make tasks partitions through their own copy (streams_handlers, state.streams)
    topology: Any = None


class RecordHandlers:
    """The per-record-type half of ``mapping.Bridge`` (which owns the entry points): handlers
    and their helpers over the bridge's ``groups``, ``topic_names``, ``cluster``, ``stats``."""

    groups: dict[str, _Group]
    topic_names: TopicNames
    cluster: str | None
    fill_epochs: bool
    stats: BridgeStats
    _holding: dict[str, None]

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
        return [self._event(_MEMBER_LEFT, p.ts, group_id, p.event_id, member_id=p.member_id,
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
        """Kafka's ConsumerGroup.maybeUpdateGroupState (and StreamsGroup's, which adds NotReady:
        members but no topology); an event when it changes."""
        if not g.members:
            new = "Empty"
        elif g.protocol == "streams" and g.topology is None:
            new = "NotReady"
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

    # -- one handler per record type -----------------------------------------

    def _offset_commit(self, k: dict, version: int | None, v: dict | None, ts: int, eid: str) -> list[dict]:
        group_id = k["group"]
        out = self._before(group_id, self.groups.get(group_id))
        if v is None:
            out.append(self._event(_OFFSET_DELETED, ts, group_id, eid, topic=k["topic"], partition=k["partition"]))
            return out
        topic_id = v.get("topicId")
        if topic_id is not None:
            self.topic_names.learn(topic_id, k["topic"])
        e = self._event(_OFFSET_COMMITTED, ts if ts >= 0 else v["commitTimestamp"], group_id, eid,
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
            out.append(self._event(_GROUP_STATE, ts, group_id, eid, state="Dead", protocol="classic"))
            return out
        g = self._group(group_id)
        previous = g.classic_members or {}
        current = {m["memberId"]: m.get("groupInstanceId") for m in v["members"]}
        for member_id, instance_id in previous.items():
            if member_id not in current:
                extra = {"instance_id": instance_id} if instance_id is not None else {}
                out.append(self._event(_MEMBER_LEFT, ts, group_id, eid, member_id=member_id, reason="leave",
                                       **extra))
        g.classic_members = current
        if not v["members"]:
            out.append(self._event(_GROUP_STATE, ts, group_id, eid, state="Empty", protocol="classic"))
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
                join = self._event(_CLASSIC_JOIN, ts, group_id, eid, member_id=member_id,
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
            out.append(self._event(_CLASSIC_SYNC, ts, group_id, eid, generation=v["generation"],
                                   assignments=assignments))
        out.append(self._event(_GROUP_STATE, ts, group_id, eid, state="Stable", protocol="classic"))
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
            out.append(self._event(_GROUP_STATE, ts, group_id, eid, state="Dead", protocol="consumer"))
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
                out.append(self._event(_MEMBER_LEFT, ts, group_id, eid, member_id=member_id, reason="leave",
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
            out.append(self._event(_MEMBER_LEFT, ts, group_id, eid, member_id=member_id, reason="static_leave",
                                   **extra))
        else:
            e = {"type": _MEMBER_ASSIGNMENT, "ts": ts}
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


HANDLERS = {
    0: RecordHandlers._offset_commit,
    1: RecordHandlers._offset_commit,
    2: RecordHandlers._group_metadata,
    3: RecordHandlers._consumer_group_metadata,
    4: RecordHandlers._partition_metadata,
    5: RecordHandlers._member_metadata,
    6: RecordHandlers._target_metadata,
    7: RecordHandlers._target_member,
    8: RecordHandlers._current_assignment,
    16: RecordHandlers._regex,
}
