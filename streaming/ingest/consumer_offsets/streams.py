"""Streams groups' records (KIP-1071, types 17 and 19-23) as typed values.

What lives here: a decoded ``CoordinatorRecord`` of a streams group -> a frozen dataclass
(:func:`streams_record`). No I/O. ``streams_handlers`` maps the values to contract events
(``streams_topology``, ``member_assignment`` of the active tasks, ``member_left``,
``group_state``; docs/contract.md §1.1); which partitions tasks own is the rules'
(``state.streams.task_partitions``).

Sources (Kafka 4.2-4.4, group-coordinator): the ``StreamsGroup*Value.json`` schemas
(``record_types.py``); ``streams.MemberState`` (STABLE 1, UNREVOKED_TASKS 2, UNRELEASED_TASKS 3,
UNKNOWN 127: one more than the consumer groups' ``modern.MemberState``, which starts at 0); ``streams.TasksTupleWithEpochs.fromCurrentAssignmentRecord`` (4.2): an active
task's assignment epoch is the one written beside it, or the record's member epoch when the
record has none (a record written before 4.2), and a list of epochs whose length is not the
partitions' is an error (``IllegalStateException`` there, ``MALFORMED_VALUE`` here). A task
``(subtopology, p)`` reads partition ``p`` of each of its subtopology's source topics and
repartition source topics (``streams.TopologyMetadata``; co-partitioned by construction).
Kafka's own server-side assignor (``StickyTaskAssignor``, 4.2-4.4) assigns no warm-up tasks:
they are decoded, and empty in every capture.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fencewatch.streaming.ingest.consumer_offsets.record_types import STREAMS_RECORD_TYPES
from fencewatch.streaming.ingest.consumer_offsets.records import CoordinatorRecord, RecordDecodeError

__all__ = [
    "MEMBER_STATES",
    "TaskIds",
    "TopicInfo",
    "Subtopology",
    "StreamsTopology",
    "StreamsGroupMetadata",
    "StreamsMemberMetadata",
    "StreamsTargetAssignmentMetadata",
    "StreamsTargetAssignment",
    "StreamsCurrentAssignment",
    "streams_record",
    "streams_value",
]

#: ``streams.MemberState`` by its int8 value (not the consumer groups' values); anything else
#: is UNKNOWN.
MEMBER_STATES = {1: "STABLE", 2: "UNREVOKED_TASKS", 3: "UNRELEASED_TASKS", 127: "UNKNOWN"}

KeyValues = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class TaskIds:
    """The tasks of one subtopology: ``(subtopology_id, p)`` for each partition ``p``."""

    subtopology_id: str
    partitions: tuple[int, ...]
    #: Active tasks (4.2+): the epoch each was assigned at, one per partition; None when absent.
    assignment_epochs: tuple[int, ...] | None = None


Tasks = tuple[TaskIds, ...]


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """An internal topic of the topology (a changelog or a repartition topic)."""

    name: str
    partitions: int  # 0: no number enforced (always 0 for changelogs)
    replication_factor: int  # 0: the broker's default
    topic_configs: KeyValues


@dataclass(frozen=True, slots=True)
class Subtopology:
    subtopology_id: str
    source_topics: tuple[str, ...]
    source_topic_regex: tuple[str, ...]
    state_changelog_topics: tuple[TopicInfo, ...]
    repartition_sink_topics: tuple[str, ...]
    repartition_source_topics: tuple[TopicInfo, ...]

    @property
    def input_topics(self) -> tuple[str, ...]:
        """The topics its tasks read by name (source, then repartition source topics); topics a
        ``source_topic_regex`` matches are the broker's to resolve and not listed here."""
        return self.source_topics + tuple(t.name for t in self.repartition_source_topics)


@dataclass(frozen=True, slots=True)
class StreamsTopology:
    """``StreamsGroupTopologyValue`` (type 23): the topology a member's heartbeat declared."""

    group_id: str
    epoch: int
    subtopologies: tuple[Subtopology, ...]

    def subtopology(self, subtopology_id: str) -> Subtopology | None:
        for s in self.subtopologies:
            if s.subtopology_id == subtopology_id:
                return s
        return None


@dataclass(frozen=True, slots=True)
class StreamsGroupMetadata:
    """``StreamsGroupMetadataValue`` (type 17): the group epoch."""

    group_id: str
    epoch: int
    metadata_hash: int
    validated_topology_epoch: int
    last_assignment_configs: KeyValues | None


@dataclass(frozen=True, slots=True)
class StreamsMemberMetadata:
    """``StreamsGroupMemberMetadataValue`` (type 19). A member is one stream thread's consumer;
    ``process_id`` names the application instance its threads share."""

    group_id: str
    member_id: str
    instance_id: str | None
    rack_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    topology_epoch: int
    process_id: str
    user_endpoint: tuple[str, int] | None
    client_tags: KeyValues


@dataclass(frozen=True, slots=True)
class StreamsTargetAssignmentMetadata:
    """``StreamsGroupTargetAssignmentMetadataValue`` (type 20)."""

    group_id: str
    assignment_epoch: int
    assignment_timestamp: int  # KIP-1263 (4.3); 0 when absent


@dataclass(frozen=True, slots=True)
class StreamsTargetAssignment:
    """``StreamsGroupTargetAssignmentMemberValue`` (type 21): what the assignor gave a member."""

    group_id: str
    member_id: str
    active_tasks: Tasks
    standby_tasks: Tasks
    warmup_tasks: Tasks


@dataclass(frozen=True, slots=True)
class StreamsCurrentAssignment:
    """``StreamsGroupCurrentMemberAssignmentValue`` (type 22): a member's epochs and tasks."""

    group_id: str
    member_id: str
    member_epoch: int
    previous_member_epoch: int
    state: str  # MEMBER_STATES
    active_tasks: Tasks
    standby_tasks: Tasks
    warmup_tasks: Tasks
    active_tasks_pending_revocation: Tasks
    standby_tasks_pending_revocation: Tasks
    warmup_tasks_pending_revocation: Tasks

    def active_task_epochs(self) -> dict[tuple[str, int], int]:
        """``(subtopology_id, partition) -> assignment epoch`` of the active tasks, as Kafka's
        ``TasksTupleWithEpochs.fromCurrentAssignmentRecord`` reads them (the member epoch
        where the record has no epochs)."""
        return {(t.subtopology_id, p): (e if t.assignment_epochs is not None else self.member_epoch)
                for t in self.active_tasks
                for p, e in zip(t.partitions, t.assignment_epochs or t.partitions)}


# --------------------------------------------------------------------------- reading


def _key_values(items: list[dict[str, Any]] | None) -> KeyValues:
    return tuple((kv["key"], kv["value"]) for kv in items or ())


def _tasks(items: list[dict[str, Any]], what: str) -> Tasks:
    out = []
    for t in items:
        epochs = t.get("assignmentEpochs")
        partitions = tuple(t["partitions"])
        if epochs is not None and len(epochs) == 0:
            epochs = None  # Kafka reads an empty list as "no epochs" too
        if epochs is not None and len(epochs) != len(partitions):
            raise RecordDecodeError("MALFORMED_VALUE", f"{what} of subtopology {t['subtopologyId']}: "
                                    f"{len(epochs)} assignment epochs for {len(partitions)} partitions")
        out.append(TaskIds(t["subtopologyId"], partitions, None if epochs is None else tuple(epochs)))
    return tuple(out)


def _topic_info(t: dict[str, Any]) -> TopicInfo:
    return TopicInfo(t["name"], t["partitions"], t["replicationFactor"], _key_values(t["topicConfigs"]))


def _topology(k: dict[str, Any], v: dict[str, Any]) -> StreamsTopology:
    subs = tuple(Subtopology(
        s["subtopologyId"], tuple(s["sourceTopics"]), tuple(s["sourceTopicRegex"]),
        tuple(_topic_info(t) for t in s["stateChangelogTopics"]), tuple(s["repartitionSinkTopics"]),
        tuple(_topic_info(t) for t in s["repartitionSourceTopics"])) for s in v["subtopologies"])
    return StreamsTopology(k["groupId"], v["epoch"], subs)


def _group(k: dict[str, Any], v: dict[str, Any]) -> StreamsGroupMetadata:
    configs = v.get("lastAssignmentConfigs")
    # Tagged fields are in ``v`` only when written (records.py); absent ones are their defaults.
    return StreamsGroupMetadata(k["groupId"], v["epoch"], v["metadataHash"], v.get("validatedTopologyEpoch", -1),
                                None if configs is None else _key_values(configs))


def _member(k: dict[str, Any], v: dict[str, Any]) -> StreamsMemberMetadata:
    endpoint = v["userEndpoint"]
    return StreamsMemberMetadata(
        k["groupId"], k["memberId"], v["instanceId"], v["rackId"], v["clientId"], v["clientHost"],
        v["rebalanceTimeoutMs"], v["topologyEpoch"], v["processId"],
        None if endpoint is None else (endpoint["host"], endpoint["port"]), _key_values(v["clientTags"]))


def _target_metadata(k: dict[str, Any], v: dict[str, Any]) -> StreamsTargetAssignmentMetadata:
    return StreamsTargetAssignmentMetadata(k["groupId"], v["assignmentEpoch"], v.get("assignmentTimestamp", 0))


def _target(k: dict[str, Any], v: dict[str, Any]) -> StreamsTargetAssignment:
    return StreamsTargetAssignment(k["groupId"], k["memberId"], _tasks(v["activeTasks"], "activeTasks"),
                                   _tasks(v["standbyTasks"], "standbyTasks"), _tasks(v["warmupTasks"], "warmupTasks"))


def _current(k: dict[str, Any], v: dict[str, Any]) -> StreamsCurrentAssignment:
    names = ("activeTasks", "standbyTasks", "warmupTasks", "activeTasksPendingRevocation",
             "standbyTasksPendingRevocation", "warmupTasksPendingRevocation")
    tasks = [_tasks(v[n], n) for n in names]
    return StreamsCurrentAssignment(k["groupId"], k["memberId"], v["memberEpoch"], v["previousMemberEpoch"],
                                    MEMBER_STATES.get(v["state"], "UNKNOWN"), *tasks)


_READERS = {17: _group, 19: _member, 20: _target_metadata, 21: _target, 22: _current, 23: _topology}
assert set(_READERS) == STREAMS_RECORD_TYPES

StreamsValue = (StreamsGroupMetadata | StreamsMemberMetadata | StreamsTargetAssignmentMetadata
                | StreamsTargetAssignment | StreamsCurrentAssignment | StreamsTopology)


def streams_value(record_type: int, key: dict[str, Any], value: dict[str, Any]) -> StreamsValue:
    """The typed value of a decoded streams record's ``key`` and non-null ``value`` (the
    bridge's handlers get them as dicts); ``RecordDecodeError`` as :func:`streams_record`."""
    return _READERS[record_type](key, value)


def streams_record(record: CoordinatorRecord) -> StreamsValue | None:
    """The typed value of a streams group's record; None for a tombstone (the key says whose).
    Raises ``ValueError`` for a record of another group type, ``RecordDecodeError`` for
    assignment epochs that do not match their partitions."""
    reader = _READERS.get(record.record_type)
    if reader is None:
        raise ValueError(f"{record.name} (type {record.record_type}) is not a streams group record")
    if record.value is None:
        return None
    return reader(record.key, record.value)
