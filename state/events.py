"""Typed input events (contract §1): what the coordinator saw, one class per ``type``.

``streaming.ingest`` builds these from JSON/Avro; the rules only ever see these classes.
Their fields are the declared ones (``records.EVENTS``), checked at import
(:data:`EVENT_CLASSES`), plus what decoding adds: ``seq`` is the input order, the
tie-breaker after ``ts``; ``transactional`` tells the two commit types apart; assignment
epochs come out of the partition lists as columns of their own.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, NamedTuple

from fencewatch.state.model import MemberState, Protocol, TopicPartition
from fencewatch.state.records import EVENTS, PARTITION_OFFSET, STREAMS_TASKS, SUBTOPOLOGY, EventType, check_names


class CommitOffset(NamedTuple):
    """One partition of a commit request (a tuple: built per committed partition)."""

    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = None


class CommitOffsets(NamedTuple):
    """The partitions of one commit request, column by column.

    A request commits many partitions and the engine reads them as columns (the
    (topic, partition) keys, the offsets), so the decoder builds columns with C-level
    ``zip`` instead of one object per partition (:meth:`rows` gives them back as rows).
    A NamedTuple: one is built per commit line.
    """

    tps: tuple[TopicPartition, ...]
    offsets: tuple[int, ...]
    leader_epochs: tuple[int, ...]
    metadata: tuple[str | None, ...] | None  # None: no partition carries metadata
    # A request almost always commits one topic: its name and the partition column spare
    # the engine a per-topic split.
    partitions: tuple[int, ...]
    topic: str | None  # None: several topics (or none)

    @classmethod
    def of(cls, rows: Iterable[CommitOffset]) -> "CommitOffsets":
        rows = tuple(rows)
        metadata = tuple(r.metadata for r in rows)
        topics = {r.topic for r in rows}
        return cls(tuple((r.topic, r.partition) for r in rows), tuple(r.offset for r in rows),
                   tuple(r.leader_epoch for r in rows), metadata if any(m is not None for m in metadata) else None,
                   tuple(r.partition for r in rows), topics.pop() if len(topics) == 1 else None)

    def rows(self) -> list[CommitOffset]:
        md = self.metadata if self.metadata is not None else (None,) * len(self.tps)
        return [CommitOffset(t, p, off, le, m)
                for (t, p), off, le, m in zip(self.tps, self.offsets, self.leader_epochs, md)]


NO_OFFSETS = CommitOffsets((), (), (), None, (), None)


class StreamsTask(NamedTuple):
    """A streams member's tasks of one subtopology (``STREAMS_TASKS``): task ``(subtopology_id, p)``
    for each partition ``p``, with each active task's assignment epoch (None: the record had none)."""

    subtopology_id: str
    partitions: tuple[int, ...]
    assignment_epochs: tuple[int, ...] | None = None


class Subtopology(NamedTuple):
    """One subtopology of a streams group's topology (``SUBTOPOLOGY``): the topics its tasks read."""

    subtopology_id: str
    source_topics: tuple[str, ...] = ()
    repartition_source_topics: tuple[str, ...] = ()


class MemberAssignment(NamedTuple):
    """``ConsumerGroupCurrentMemberAssignmentValue`` plus member metadata.

    A NamedTuple like :class:`OffsetCommit`: after commits it is the most frequent event,
    and a frozen dataclass of nineteen fields cost more to build than decoding its line.
    """

    ts: int
    cluster: str
    group_id: str
    event_id: str
    seq: int
    member_id: str
    protocol: Protocol
    member_epoch: int
    assigned: tuple[TopicPartition, ...] | None  # None: "unchanged" (request log), see group._member_assignment
    pending_revocation: tuple[TopicPartition, ...] | None  # None: derive it (request log), as ``assigned``
    # KIP-1251 AssignmentEpochs, parallel to the lists above, when the broker has them.
    assigned_epochs: tuple[int, ...] | None = None
    pending_epochs: tuple[int, ...] | None = None
    previous_member_epoch: int | None = None
    state: MemberState = MemberState.STABLE
    subscribed_topics: tuple[str, ...] | None = None
    instance_id: str | None = None
    group_epoch: int | None = None
    target_assignment_epoch: int | None = None
    # A streams member (KIP-1071): its active tasks, made partitions through the group's topology
    # by the rules (``state.streams``); None: the event names partitions only.
    active_tasks: tuple[StreamsTask, ...] | None = None
    active_tasks_pending_revocation: tuple[StreamsTask, ...] | None = None

    @property
    def has_tasks(self) -> bool:
        """Whether the event names tasks (a streams member's, resolved through the topology)."""
        return self.active_tasks is not None or self.active_tasks_pending_revocation is not None


@dataclass(frozen=True, slots=True)
class _GroupRecord:
    """What every group event of a dataclass carries first (contract §1's envelope), declared once;
    the NamedTuple events (the frequent ones, built fastest as tuples) repeat it in the same order."""

    ts: int
    cluster: str
    group_id: str
    event_id: str
    seq: int


@dataclass(frozen=True, slots=True)
class MemberLeft(_GroupRecord):
    member_id: str
    reason: str  # leave | static_leave | fenced | session_timeout | rebalance_timeout


@dataclass(frozen=True, slots=True)
class Heartbeat(_GroupRecord):
    member_id: str
    request_epoch: int
    response_epoch: int
    error_code: int = 0


@dataclass(frozen=True, slots=True)
class ClassicJoin(_GroupRecord):
    member_id: str
    generation: int  # from the subscription / sticky user data; -1 if none (KIP-341)
    owned: tuple[TopicPartition, ...]
    protocol: str | None = None
    instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class ClassicGeneration(_GroupRecord):
    member_id: str
    generation: int  # the generation the completed join phase gave (the JoinGroup response's)
    protocol: str | None = None
    instance_id: str | None = None
    members: tuple[str, ...] | None = None  # the leader's response: every member of the generation


@dataclass(frozen=True, slots=True)
class ClassicSync(_GroupRecord):
    generation: int
    assignments: tuple[tuple[str, tuple[TopicPartition, ...]], ...]


@dataclass(frozen=True, slots=True)
class GroupStateChange(_GroupRecord):
    state: str  # Empty, PreparingRebalance, CompletingRebalance, Stable, Dead, Assigning, Reconciling
    protocol: str | None = None


@dataclass(frozen=True, slots=True)
class StreamsTopology(_GroupRecord):
    """A streams group's topology (``StreamsGroupTopologyValue``): what its tasks read."""

    topology_epoch: int
    subtopologies: tuple[Subtopology, ...]


class OffsetCommit(NamedTuple):
    """An OffsetCommit or TxnOffsetCommit request as the coordinator received it.

    A NamedTuple, unlike the other events: it is by far the most frequent one, and a
    frozen dataclass of this many fields cost more to build than judging it.
    """

    ts: int
    cluster: str
    group_id: str
    event_id: str
    seq: int
    transactional: bool
    member_id: str
    member_epoch: int
    offsets: CommitOffsets
    instance_id: str | None = None
    error_code: int | None = None
    transactional_id: str | None = None
    producer_id: int | None = None
    producer_epoch: int | None = None
    api_version: int | None = None  # the request's API version when the input says it (request log)


@dataclass(frozen=True, slots=True)
class OffsetCommitted(_GroupRecord):
    """An accepted commit as stored in ``__consumer_offsets`` (OffsetCommitValue)."""

    topic: str
    partition: int
    offset: int
    leader_epoch: int = -1
    commit_ts: int | None = None
    expire_ts: int | None = None


@dataclass(frozen=True, slots=True)
class OffsetDeleted(_GroupRecord):
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class PartitionEpochs:
    """Facts about one partition's log: start/end offsets and the leader epoch cache."""

    ts: int
    cluster: str
    event_id: str
    seq: int
    topic: str
    partition: int
    log_start_offset: int
    log_end_offset: int
    epochs: tuple[tuple[int, int], ...]  # (epoch, start_offset), ascending


GroupEvent = (MemberAssignment | MemberLeft | Heartbeat | ClassicJoin | ClassicGeneration | ClassicSync
              | GroupStateChange | StreamsTopology | OffsetCommit | OffsetCommitted | OffsetDeleted)
Event = GroupEvent | PartitionEpochs


EVENT_CLASSES: dict[EventType, type] = {
    EventType.MEMBER_ASSIGNMENT: MemberAssignment, EventType.MEMBER_LEFT: MemberLeft,
    EventType.HEARTBEAT: Heartbeat, EventType.CLASSIC_JOIN: ClassicJoin,
    EventType.CLASSIC_GENERATION: ClassicGeneration, EventType.CLASSIC_SYNC: ClassicSync,
    EventType.GROUP_STATE: GroupStateChange, EventType.STREAMS_TOPOLOGY: StreamsTopology,
    EventType.OFFSET_COMMIT: OffsetCommit,
    EventType.TXN_OFFSET_COMMIT: OffsetCommit, EventType.OFFSET_COMMITTED: OffsetCommitted,
    EventType.OFFSET_DELETED: OffsetDeleted, EventType.PARTITION_EPOCHS: PartitionEpochs,
}
"""The class each event type decodes to (both commit types share :class:`OffsetCommit`)."""

# Fields decoding adds to the declared ones (see the module docstring).
_ADDED = {"seq", "transactional", "assigned_epochs", "pending_epochs"}


def _field_names(cls: type) -> tuple[str, ...]:
    return cls._fields if hasattr(cls, "_fields") else cls.__dataclass_fields__.keys()


def _check_classes() -> None:
    """Each class has the fields its types declare for readers (``type`` is the class itself)."""
    check_names(f"{__name__}.EVENT_CLASSES", EVENT_CLASSES, EventType)
    for cls in set(EVENT_CLASSES.values()):
        declared = {n for t, c in EVENT_CLASSES.items() if c is cls for n in EVENTS[t].read_names} - {"type"}
        check_names(f"{__name__}.{cls.__name__}", [n for n in _field_names(cls) if n not in _ADDED],
                    sorted(declared), record=" / ".join(t for t, c in EVENT_CLASSES.items() if c is cls))
    for cls, record in ((CommitOffset, PARTITION_OFFSET), (StreamsTask, STREAMS_TASKS), (Subtopology, SUBTOPOLOGY)):
        check_names(f"{__name__}.{cls.__name__}", cls._fields, record.names, record=record.name)


_check_classes()
