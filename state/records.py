"""The one declaration of the input records (contract §1): each event type, and each field's
name, type, meaning, and whether an event requires it or what its absence means.

Owns: :class:`EventType`, the field table :data:`FIELDS` (a name has one type and one
meaning wherever it appears), the nested records (:data:`TOPIC_PARTITIONS`,
:data:`STREAMS_TASKS`, :data:`SUBTOPOLOGY`, :data:`PARTITION_OFFSET`, :data:`EPOCH_ENTRY`, the simulator's :data:`SIM_TRUTH`), each
event's fields (:data:`EVENTS`), the Avro schemas as plain dicts (events here, alerts from
``model.Alert``), and :func:`check_names`, which every hand-written mirror of a record
(a fast path, an output struct) calls at import so that drift fails loudly, naming the field.

Types use Avro's names, which are Kafka's: ``int`` is an int32, ``long`` an int64. The JSON
decoders accept any Kafka long for either, as they always have. Pure data: no I/O, stdlib only.
"""
from __future__ import annotations

import collections.abc
import enum
import typing
from dataclasses import dataclass
from dataclasses import fields as dataclass_fields
from typing import Any, Iterable, Mapping, Union

from fencewatch.state.model import Alert, Protocol

STRING, INT, LONG, BOOLEAN = "string", "int", "long", "boolean"


class EventType(enum.StrEnum):
    """The ``type`` of an input event (contract §1.1, §1.2), in the contract's order."""

    MEMBER_ASSIGNMENT = "member_assignment"
    MEMBER_LEFT = "member_left"
    HEARTBEAT = "heartbeat"
    CLASSIC_JOIN = "classic_join"
    CLASSIC_GENERATION = "classic_generation"
    CLASSIC_SYNC = "classic_sync"
    GROUP_STATE = "group_state"
    STREAMS_TOPOLOGY = "streams_topology"
    OFFSET_COMMIT = "offset_commit"
    TXN_OFFSET_COMMIT = "txn_offset_commit"
    OFFSET_COMMITTED = "offset_committed"
    OFFSET_DELETED = "offset_deleted"
    PARTITION_EPOCHS = "partition_epochs"


class InputTopic(enum.StrEnum):
    """The two input topics (contract §1): membership, and commits with partition facts."""

    HEARTBEATS = "heartbeats"
    OFFSETS = "offsets"


# --------------------------------------------------------------------------- types

@dataclass(frozen=True, slots=True)
class Array:
    items: FieldType


@dataclass(frozen=True, slots=True)
class MapOf:
    """A map from strings (Avro's only map key) to ``values``."""

    values: FieldType


@dataclass(frozen=True, slots=True)
class Nullable:
    """An item that may be null (inside an array); a record's optional fields are nullable anyway."""

    type: FieldType


@dataclass(frozen=True, slots=True)
class Field:
    """A field name: one type and one meaning in every record that has it."""

    name: str
    type: FieldType
    meaning: str
    avro: bool = True  # False: JSON only (the Avro schema, id 1, is fixed: see event_avro_schema)


@dataclass(frozen=True, slots=True)
class Slot:
    """A field as one record has it."""

    field: Field
    required: bool = False
    default: Any = None  # the wire value an absent optional field stands for; None: nothing
    values: tuple[str, ...] | None = None  # a closed set of valid values, in the order errors list them
    null_means: str | None = None  # an explicit null is a value meaning this, not "absent"
    read: bool = True  # False: some producers write it, no rule reads it

    @property
    def name(self) -> str:
        return self.field.name


@dataclass(frozen=True, slots=True)
class Record:
    """A record's fields in order; events are records whose name is their ``type``."""

    name: str
    doc: str
    slots: tuple[Slot, ...]
    topic: InputTopic | None = None  # the input topic an event type comes on; None: a nested record

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.slots)

    @property
    def read_names(self) -> tuple[str, ...]:
        """The fields a reader of this record takes (those some producer writes for people only excluded)."""
        return tuple(s.name for s in self.slots if s.read)

    def slot(self, name: str) -> Slot:
        for s in self.slots:
            if s.name == name:
                return s
        raise KeyError(f"{self.name} has no field {name!r}; fields: {', '.join(self.names)}")


FieldType = Union[str, Array, MapOf, Nullable, Record]


def required(f: Field, **kw: Any) -> Slot:
    return Slot(f, required=True, **kw)


def optional(f: Field, default: Any = None, **kw: Any) -> Slot:
    return Slot(f, default=default, **kw)


def informational(f: Field) -> Slot:
    return Slot(f, read=False)


# --------------------------------------------------------------------------- fields

def _table(*fields: Field) -> dict[str, Field]:
    table: dict[str, Field] = {}
    for f in fields:
        if f.name in table:
            raise ValueError(f"field {f.name!r} declared twice")
        table[f.name] = f
    return table


TOPIC = Field("topic", STRING, "a topic's name")
PARTITION = Field("partition", INT, "a partition of the topic")
OFFSET = Field("offset", LONG, "the committed offset")
LEADER_EPOCH = Field("leader_epoch", INT, "the leader epoch of the committed offset's record; -1 unknown")
METADATA = Field("metadata", STRING, "the commit's metadata string")

PARTITIONS = Field("partitions", Array(INT), "partition numbers")
ASSIGNMENT_EPOCHS = Field("assignment_epochs", Array(INT), "KIP-1251 AssignmentEpochs: one per partition, same order")
SUBTOPOLOGY_ID = Field("subtopology_id", STRING, "a subtopology of a streams group's topology (KIP-1071)")

TOPIC_PARTITIONS = Record(
    "TopicPartitions", "A topic and some of its partitions; assignment_epochs (KIP-1251) align with partitions.", (
        required(TOPIC), required(PARTITIONS), optional(ASSIGNMENT_EPOCHS),
    ))

STREAMS_TASKS = Record(
    "StreamsTasks", "A streams member's tasks of one subtopology: task (subtopology_id, p) for each partition p; "
    "assignment_epochs (Kafka 4.2+, active tasks) align with partitions, absent: the member epoch.", (
        required(SUBTOPOLOGY_ID), required(PARTITIONS), optional(ASSIGNMENT_EPOCHS),
    ))

SUBTOPOLOGY = Record(
    "Subtopology", "One subtopology of a streams group's topology: the topics its tasks read by name (a task "
    "(subtopology_id, p) reads partition p of each).", (
        required(SUBTOPOLOGY_ID),
        optional(Field("source_topics", Array(STRING), "the subtopology's source topics"), []),
        optional(Field("repartition_source_topics", Array(STRING), "the repartition topics the subtopology reads"),
                 []),
    ))

PARTITION_OFFSET = Record("PartitionOffset", "One partition of an OffsetCommit / TxnOffsetCommit request.", (
    required(TOPIC), required(PARTITION), required(OFFSET), optional(LEADER_EPOCH, -1), optional(METADATA),
))

EPOCH_ENTRY = Record("EpochEntry", "One entry of a partition's leader epoch cache (KIP-101/KIP-320).", (
    required(Field("epoch", INT, "a leader epoch")),
    required(Field("start_offset", LONG, "the first offset written under that epoch")),
))

SIM_TRUTH = Record(
    "SimTruth", "The simulator's ground truth for one event (docs/simulator.md); ignored by the monitor.", (
        required(Field("scenario", STRING, "the scenario the event belongs to")),
        optional(Field("cause", STRING, "why the event happens")),
        optional(Field("current_owner", BOOLEAN, "whether the committing client owns the partitions now")),
        optional(Field("owners", Array(Nullable(STRING)), "the coordinator's owner of each committed partition")),
        optional(Field("expect", Array(STRING), "the alert kinds the event should raise")),
        optional(Field("details", MapOf(STRING), "scenario-specific facts")),
    ))

# In the order of the Avro schema's fields (fixed: see event_avro_schema).
FIELDS = _table(
    Field("type", STRING, "which event it is (EventType); an unknown type is counted and skipped"),
    Field("ts", LONG, "the coordinator's time in epoch milliseconds, the only clock the rules use"),
    Field("cluster", STRING, "the Kafka cluster the event comes from"),
    Field("group_id", STRING, "the consumer group; absent only on partition-scoped events"),
    Field("event_id", STRING, "echoed on every output derived from the event; when absent, "
          "'<topic>/<partition>/<offset>' of its Kafka record or its 0-based line number in a file"),
    Field("member_id", STRING, "the member's id; '' for admin and simple commits"),
    Field("protocol", STRING, "the group's protocol: consumer, streams or classic; on classic_join the "
          "assignor's protocol name"),
    Field("member_epoch", INT, "the member epoch the coordinator holds, or the member epoch or classic "
          "generation a commit's client sent (-1 for admin and simple commits)"),
    Field("previous_member_epoch", INT, "the member's epoch before this change"),
    Field("state", STRING, "the member's state (STABLE, UNREVOKED_PARTITIONS, UNRELEASED_PARTITIONS; UNKNOWN "
          "for anything newer), or the group's on group_state"),
    Field("assigned", Array(TOPIC_PARTITIONS), "the partitions assigned to the member"),
    Field("pending_revocation", Array(TOPIC_PARTITIONS), "the member's partitions pending revocation"),
    Field("subscribed_topics", Array(STRING), "the topics the member subscribes to"),
    Field("instance_id", STRING, "the static member's group.instance.id (KIP-345)"),
    Field("group_epoch", INT, "the group's epoch"),
    Field("target_assignment_epoch", INT, "the epoch of the group's target assignment: the assignment "
          "epoch of a partition new to the member"),
    Field("reason", STRING, "why the member left"),
    Field("request_epoch", INT, "the member epoch a ConsumerGroupHeartbeat request sent"),
    Field("response_epoch", INT, "the member epoch the heartbeat's response gave"),
    Field("error_code", INT, "the Kafka error code the broker answered (0 = none)"),
    Field("generation", INT, "classic_join: the generation the member claims (from its subscription or "
          "sticky user data; -1 when absent, KIP-341); classic_generation: the generation the completed join phase "
          "gave; classic_sync: the new generation"),
    Field("owned", Array(TOPIC_PARTITIONS), "the partitions a classic member claims to own"),
    Field("assignments", MapOf(Array(TOPIC_PARTITIONS)), "the leader's assignment: member id -> partitions"),
    Field("offsets", Array(PARTITION_OFFSET), "the partitions a commit request commits"),
    Field("transactional_id", STRING, "the committing producer's transactional.id (KIP-447)"),
    Field("producer_id", LONG, "the committing producer's id"),
    Field("producer_epoch", INT, "the committing producer's epoch"),
    TOPIC, PARTITION, OFFSET, LEADER_EPOCH, METADATA,
    Field("commit_ts", LONG, "when the offset was committed, epoch milliseconds"),
    Field("expire_ts", LONG, "when the offset expires, epoch milliseconds (OffsetCommitValue v1 only)"),
    Field("log_start_offset", LONG, "the partition's log start offset"),
    Field("log_end_offset", LONG, "the partition's log end offset"),
    Field("epochs", Array(EPOCH_ENTRY), "the partition's leader epoch cache, ascending"),
    Field("truth", SIM_TRUTH, "the simulator's ground truth (docs/simulator.md); not part of the contract"),
    Field("epochs_complete", BOOLEAN, "false when the partition facts poller could not read the whole leader "
          "epoch cache (docs/bridge.md)", avro=False),
    Field("members", Array(STRING), "the member ids of a classic generation, as the leader's JoinGroup response "
          "lists them (absent: a follower's response, which does not)", avro=False),
    Field("api_version", INT, "the commit request's API version (the request log's requestApiVersion): Kafka "
          "4.4's TxnOffsetCommit v6 (KIP-1319) answers a stale epoch differently from v5 and older", avro=False),
    Field("active_tasks", Array(STREAMS_TASKS), "a streams member's active tasks (KIP-1071), with their assignment "
          "epochs; the group's topology makes them partitions (contract §1.1)", avro=False),
    Field("active_tasks_pending_revocation", Array(STREAMS_TASKS), "a streams member's active tasks pending "
          "revocation, as active_tasks", avro=False),
    Field("topology_epoch", INT, "the epoch of a streams group's topology (StreamsGroupTopologyValue)", avro=False),
    Field("subtopologies", Array(SUBTOPOLOGY), "a streams group's subtopologies and the topics each reads",
          avro=False),
)

LEAVE_REASONS = ("fenced", "leave", "rebalance_timeout", "session_timeout", "static_leave")
DEFAULT_CLUSTER = "default"

_f = FIELDS


def _head(group: bool) -> tuple[Slot, ...]:
    """The fields every event has (contract §1); ``group_id`` on all but partition-scoped ones."""
    return (required(_f["type"]), required(_f["ts"]), optional(_f["cluster"], DEFAULT_CLUSTER),
            *((required(_f["group_id"]),) if group else ()), optional(_f["event_id"]))


def _event(etype: EventType, topic: InputTopic, doc: str, *slots: Slot, group: bool = True) -> Record:
    """An event: the header, its own fields, and the simulator's label that readers ignore."""
    return Record(etype.value, doc, (*_head(group), *slots, informational(_f["truth"])), topic)


_COMMIT = (optional(_f["member_id"], ""), optional(_f["member_epoch"], -1), optional(_f["instance_id"]),
           required(_f["offsets"]), optional(_f["error_code"]), optional(_f["api_version"]))

EVENTS: dict[EventType, Record] = {EventType(r.name): r for r in (
    _event(EventType.MEMBER_ASSIGNMENT, InputTopic.HEARTBEATS,
           "One member as the coordinator holds it after a change (ConsumerGroupCurrentMemberAssignmentValue "
           "plus the member's metadata).",
           required(_f["member_id"]), optional(_f["protocol"], Protocol.CONSUMER.value,
                                               values=tuple(p.value for p in Protocol)),
           required(_f["member_epoch"]), optional(_f["previous_member_epoch"]), optional(_f["state"], "STABLE"),
           required(_f["assigned"], null_means="unchanged: the member's last known assignment (request log)"),
           optional(_f["pending_revocation"], [], null_means="derive it from the assignment (request log)"),
           optional(_f["subscribed_topics"]), optional(_f["instance_id"]), optional(_f["group_epoch"]),
           optional(_f["target_assignment_epoch"]), optional(_f["active_tasks"]),
           optional(_f["active_tasks_pending_revocation"])),
    _event(EventType.MEMBER_LEFT, InputTopic.HEARTBEATS, "A member leaving the group.",
           required(_f["member_id"]), optional(_f["reason"], "leave", values=LEAVE_REASONS),
           informational(_f["instance_id"]), informational(_f["member_epoch"])),
    _event(EventType.HEARTBEAT, InputTopic.HEARTBEATS, "One ConsumerGroupHeartbeat exchange.",
           required(_f["member_id"]), optional(_f["request_epoch"], -1), optional(_f["response_epoch"], -1),
           optional(_f["error_code"], 0)),
    _event(EventType.CLASSIC_JOIN, InputTopic.HEARTBEATS, "A JoinGroup of a classic group.",
           required(_f["member_id"]), optional(_f["generation"], -1), optional(_f["owned"], []),
           optional(_f["protocol"]), optional(_f["instance_id"])),
    _event(EventType.CLASSIC_GENERATION, InputTopic.HEARTBEATS,
           "A classic group's join phase completed: the JoinGroup response giving a member the group's new "
           "generation (Kafka's ClassicGroup.initNextGeneration); the group is CompletingRebalance until the "
           "leader's SyncGroup.",
           required(_f["member_id"]), required(_f["generation"]), optional(_f["protocol"]),
           optional(_f["instance_id"]), optional(_f["members"])),
    _event(EventType.CLASSIC_SYNC, InputTopic.HEARTBEATS, "The leader's assignment of a new classic generation.",
           required(_f["generation"]), required(_f["assignments"])),
    _event(EventType.GROUP_STATE, InputTopic.HEARTBEATS, "A group changing state.",
           required(_f["state"]), optional(_f["protocol"])),
    _event(EventType.STREAMS_TOPOLOGY, InputTopic.HEARTBEATS,
           "A streams group's topology (StreamsGroupTopologyValue, KIP-1071): what its members' tasks read.",
           required(_f["topology_epoch"]), required(_f["subtopologies"])),
    _event(EventType.OFFSET_COMMIT, InputTopic.OFFSETS, "An OffsetCommit request as the coordinator got it.",
           *_COMMIT),
    _event(EventType.TXN_OFFSET_COMMIT, InputTopic.OFFSETS, "A TxnOffsetCommit request as the coordinator got it.",
           *_COMMIT, optional(_f["transactional_id"]), optional(_f["producer_id"]), optional(_f["producer_epoch"])),
    _event(EventType.OFFSET_COMMITTED, InputTopic.OFFSETS, "A commit as __consumer_offsets stored it.",
           required(_f["topic"]), required(_f["partition"]), required(_f["offset"]), optional(_f["leader_epoch"], -1),
           informational(_f["metadata"]), optional(_f["commit_ts"]), optional(_f["expire_ts"])),
    _event(EventType.OFFSET_DELETED, InputTopic.OFFSETS, "The tombstone of a stored commit.",
           required(_f["topic"]), required(_f["partition"])),
    _event(EventType.PARTITION_EPOCHS, InputTopic.OFFSETS, "Facts about one partition's log (truncation check).",
           required(_f["topic"]), required(_f["partition"]), optional(_f["log_start_offset"], 0),
           required(_f["log_end_offset"]), optional(_f["epochs"], []), informational(_f["epochs_complete"]),
           group=False),
)}

EVENT_TYPES_ON: dict[InputTopic, frozenset[EventType]] = {
    t: frozenset(e for e, r in EVENTS.items() if r.topic is t) for t in InputTopic}
"""The event types each input topic carries."""

HEADER: tuple[str, ...] = tuple(s.name for s in _head(group=False))
"""The fields every event has; ``group_id`` too, but on partition-scoped events."""


# --------------------------------------------------------------------------- checks

class RecordDrift(Exception):
    """Code mirroring a declared record no longer matches the declaration."""


def check_names(where: str, names: Iterable[str], declared: Iterable[str], *, record: str = "") -> None:
    """Raise :class:`RecordDrift` unless ``names`` are exactly ``declared`` (any order)."""
    names, declared = tuple(names), tuple(declared)
    extra = [n for n in names if n not in declared]
    missing = [n for n in declared if n not in names]
    if extra or missing:
        what = f" of {record}" if record else ""
        problems = [f"field {n!r} is not a declared field{what}" for n in extra]
        problems += [f"declared field {n!r}{what} is missing" for n in missing]
        raise RecordDrift(f"{where}: {'; '.join(problems)} (declared in fencewatch.state.records)")


def check_written(where: str, etype: str, keys: Iterable[str]) -> None:
    """Raise :class:`RecordDrift` unless ``keys`` (an event someone writes) are fields of ``etype``
    with every required one among them."""
    record = EVENTS.get(etype)
    if record is None:
        raise RecordDrift(f"{where}: {etype!r} is not an event type; valid: {', '.join(EventType)}")
    keys = tuple(keys)
    extra = [k for k in keys if k not in record.names]
    missing = [s.name for s in record.slots if s.required and s.name not in keys]
    if extra or missing:
        problems = [f"field {k!r} is not a declared field of {etype}" for k in extra]
        problems += [f"required field {k!r} of {etype} is missing" for k in missing]
        raise RecordDrift(f"{where}: {'; '.join(problems)} (declared in fencewatch.state.records)")


def check_event(where: str, event: Mapping[str, Any]) -> None:
    """:func:`check_written` for a whole event dict, nested records included (the offsets of a
    commit, the partition lists, the epochs, the simulator's label)."""
    check_written(where, event.get("type"), event)
    for key, value in event.items():
        _check_nested(f"{where}: {event['type']}.{key}", FIELDS[key].type, value)


def _check_nested(where: str, t: FieldType, value: Any) -> None:
    if value is None:
        return
    if isinstance(t, Nullable):
        _check_nested(where, t.type, value)
    elif isinstance(t, Array) and isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            _check_nested(f"{where}[{i}]", t.items, item)
    elif isinstance(t, MapOf) and isinstance(value, Mapping):
        for k, item in value.items():
            _check_nested(f"{where}[{k}]", t.values, item)
    elif isinstance(t, Record) and isinstance(value, Mapping):
        missing = [s.name for s in t.slots if s.required and s.name not in value]
        extra = [k for k in value if k not in t.names]
        if extra or missing:
            problems = [f"field {k!r} is not a declared field of {t.name}" for k in extra]
            problems += [f"required field {k!r} of {t.name} is missing" for k in missing]
            raise RecordDrift(f"{where}: {'; '.join(problems)} (declared in fencewatch.state.records)")
        for s in t.slots:
            _check_nested(f"{where}.{s.name}", s.field.type, value.get(s.name))


# --------------------------------------------------------------------------- Avro

def _avro_type(t: FieldType, named: set[str]) -> Any:
    """Avro's form of a declared type; a record is written whole once, then by name."""
    if isinstance(t, str):
        return t
    if isinstance(t, Array):
        return {"type": "array", "items": _avro_type(t.items, named)}
    if isinstance(t, MapOf):
        return {"type": "map", "values": _avro_type(t.values, named)}
    if isinstance(t, Nullable):
        return ["null", _avro_type(t.type, named)]
    if t.name in named:
        return t.name
    named.add(t.name)
    return {"type": "record", "name": t.name, "doc": t.doc,
            "fields": [_avro_field(s.field, s.required, named) for s in t.slots]}


def _avro_field(f: Field, req: bool, named: set[str], doc: bool = False) -> dict[str, Any]:
    t = _avro_type(f.type, named)
    out: dict[str, Any] = {"name": f.name, "type": t} if req else {"name": f.name, "type": ["null", t], "default": None}
    if doc:
        out["doc"] = f.meaning
    return out


def event_avro_schema() -> dict[str, Any]:
    """The Avro schema of every input event (schema id 1): one record, ``FencewatchEvent``, with
    every field of every event type in :data:`FIELDS` order; ``type`` and ``ts`` are required,
    every other field is a ``["null", T]`` union defaulting to null, so a record of any type, or
    from a producer that writes fewer fields, decodes. Readers decode bodies with this schema as it
    is (no resolution), so its fields and their order never change; a field added to the
    declaration later is JSON only (``Field.avro=False``) until a new schema id."""
    always = {s.name for s in next(iter(EVENTS.values())).slots if s.required}
    for r in EVENTS.values():
        always &= {s.name for s in r.slots if s.required}
    named: set[str] = set()
    return {"type": "record", "name": "FencewatchEvent", "namespace": "io.fencewatch",
            "doc": "Any fencewatch input event (contract §1); dispatch is by `type`.",
            "fields": [_avro_field(f, f.name in always, named, doc=True) for f in FIELDS.values() if f.avro]}


_AVRO_BY_PYTHON = {str: STRING, int: LONG, bool: BOOLEAN, float: "double"}


def _alert_field_type(hint: Any) -> FieldType:
    if typing.get_origin(hint) is collections.abc.Mapping:
        key, value = typing.get_args(hint)
        if key is str:
            return MapOf(_alert_field_type(value))
    if hint in _AVRO_BY_PYTHON:
        return _AVRO_BY_PYTHON[hint]
    raise RecordDrift(f"fencewatch.state.model.Alert: no Avro type for {hint!r}")


def alert_avro_schema() -> dict[str, Any]:
    """The Avro schema of an alert (contract §8.2), from ``model.Alert``'s fields in their order."""
    hints = typing.get_type_hints(Alert)
    named: set[str] = set()
    return {"type": "record", "name": "FencewatchAlert", "namespace": "io.fencewatch",
            "doc": "An alert (contract §8.2); alert_id is deterministic: the same input gives the same id.",
            "fields": [{"name": f.name, "type": _avro_type(_alert_field_type(hints[f.name]), named)}
                       for f in dataclass_fields(Alert)]}


ALERT_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclass_fields(Alert))
"""The keys of an alert record, in output order."""
