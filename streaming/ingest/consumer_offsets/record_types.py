"""Schema tables of the group coordinator's records in ``__consumer_offsets``.

What lives here: data only. Each table is a compact transcription, written by
hand, of one of Kafka's JSON message schemas (Kafka 4.3; the streams groups' 4.4,
``group-coordinator/src/main/resources/common/message/<Name>.json`` and, for the
embedded consumer protocol, ``clients/src/main/resources/common/message/
ConsumerProtocol{Subscription,Assignment}.json``). The decoder
(``records.py``) compiles them; the tests build an encoder from the very same
tables, so a transcription error shows up as a failing golden vector, not as a
silent agreement between two hand-written codecs.

Field names are the ones Kafka's generated JSON converters print (camelCase of
the schema name), so ``records.kafka_json`` matches ``kafka-dump-log`` and the
``OffsetsMessageFormatter``/``GroupMetadataMessageFormatter`` output.

A record in ``__consumer_offsets`` is ``key = int16 record type + key message``
(always version 0, never flexible) and ``value = int16 version + value
message`` or null for a tombstone (Kafka's ``CoordinatorRecordSerde``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "Field",
    "Message",
    "RecordType",
    "RECORD_TYPES",
    "STREAMS_RECORD_TYPES",
    "CONSUMER_PROTOCOL_SUBSCRIPTION",
    "CONSUMER_PROTOCOL_ASSIGNMENT",
    "parse_versions",
    "in_versions",
]

# A version range is (lowest, highest); highest None means "and up" (Kafka's "N+").
Versions = tuple[int, int | None] | None


def parse_versions(spec: str) -> Versions:
    """Kafka's version strings: ``"0+"``, ``"3"``, ``"0-4"``, ``"none"``."""
    if spec == "none":
        return None
    if spec.endswith("+"):
        return (int(spec[:-1]), None)
    if "-" in spec:
        lo, hi = spec.split("-")
        return (int(lo), int(hi))
    return (int(spec), int(spec))


def in_versions(version: int, versions: Versions) -> bool:
    if versions is None:
        return False
    lo, hi = versions
    return version >= lo and (hi is None or version <= hi)


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a message: ``type`` is a primitive (int8, int16, uint16, int32,
    int64, uuid, string, bytes), ``[]int16``/``[]int32``/``[]string``, ``struct`` or
    ``[]struct`` (then ``fields`` holds the nested fields)."""

    name: str
    type: str
    versions: Versions
    nullable: Versions = None
    tag: int | None = None  # tagged field; in these schemas taggedVersions == versions
    default: object = None
    fields: tuple["Field", ...] = ()


def F(name: str, type_: str, versions: str, *, nullable: str = "none", tag: int | None = None,
      default: object = None, fields: tuple[Field, ...] = ()) -> Field:
    return Field(name, type_, parse_versions(versions), parse_versions(nullable), tag, default, fields)


@dataclass(frozen=True, slots=True)
class Message:
    name: str
    valid: Versions
    flexible: Versions
    fields: tuple[Field, ...]

    def is_flexible(self, version: int) -> bool:
        return in_versions(version, self.flexible)


def M(name: str, valid: str, flexible: str, *fields: Field) -> Message:
    return Message(name, parse_versions(valid), parse_versions(flexible), tuple(fields))


@dataclass(frozen=True, slots=True)
class RecordType:
    """A coordinator record type: ``id`` is the int16 written first in the key
    (the ``apiKey`` of the schema files)."""

    id: int
    key: Message
    value: Message


# --- 0, 1: offset commits (LegacyOffsetCommitKey/Value.json, OffsetCommitKey/Value.json) ---

_OFFSET_COMMIT_KEY_FIELDS = (
    F("group", "string", "0"),
    F("topic", "string", "0"),
    F("partition", "int32", "0"),
)

LEGACY_OFFSET_COMMIT = RecordType(
    0,
    M("LegacyOffsetCommitKey", "0", "none", *_OFFSET_COMMIT_KEY_FIELDS),
    M("LegacyOffsetCommitValue", "0", "none",
      F("offset", "int64", "0"),
      F("metadata", "string", "0"),
      F("commitTimestamp", "int64", "0")),
)

OFFSET_COMMIT = RecordType(
    1,
    M("OffsetCommitKey", "0", "none", *_OFFSET_COMMIT_KEY_FIELDS),
    M("OffsetCommitValue", "0-4", "4+",
      F("offset", "int64", "0+"),
      F("leaderEpoch", "int32", "3+", default=-1),
      F("metadata", "string", "0+"),
      F("commitTimestamp", "int64", "0+"),
      F("expireTimestamp", "int64", "1", default=-1),
      F("topicId", "uuid", "4+", tag=0, default=bytes(16))),
)

# --- 2: classic group metadata (GroupMetadataKey/Value.json) ---

GROUP_METADATA = RecordType(
    2,
    M("GroupMetadataKey", "0", "none", F("group", "string", "0")),
    M("GroupMetadataValue", "0-4", "4+",
      F("protocolType", "string", "0+"),
      F("generation", "int32", "0+"),
      F("protocol", "string", "0+", nullable="0+"),
      F("leader", "string", "0+", nullable="0+"),
      F("currentStateTimestamp", "int64", "2+", default=-1),
      F("members", "[]struct", "0+", fields=(
          F("memberId", "string", "0+"),
          F("groupInstanceId", "string", "3+", nullable="3+"),
          F("clientId", "string", "0+"),
          F("clientHost", "string", "0+"),
          F("rebalanceTimeout", "int32", "1+", default=-1),
          F("sessionTimeout", "int32", "0+"),
          F("subscription", "bytes", "0+"),
          F("assignment", "bytes", "0+"),
      ))),
)

# --- 3..8, 16: KIP-848 consumer groups (ConsumerGroup*Key/Value.json) ---

_GROUP_ID_KEY = (F("groupId", "string", "0"),)
_GROUP_MEMBER_KEY = (F("groupId", "string", "0"), F("memberId", "string", "0"))

CONSUMER_GROUP_METADATA = RecordType(
    3,
    M("ConsumerGroupMetadataKey", "0", "none", *_GROUP_ID_KEY),
    M("ConsumerGroupMetadataValue", "0", "0+",
      F("epoch", "int32", "0+"),
      F("metadataHash", "int64", "0+", tag=0, default=0)),  # KIP-1101, 4.1
)

CONSUMER_GROUP_PARTITION_METADATA = RecordType(  # replaced by metadataHash in 4.1
    4,
    M("ConsumerGroupPartitionMetadataKey", "0", "none", *_GROUP_ID_KEY),
    M("ConsumerGroupPartitionMetadataValue", "0", "0+",
      F("topics", "[]struct", "0+", fields=(
          F("topicId", "uuid", "0+"),
          F("topicName", "string", "0+"),
          F("numPartitions", "int32", "0+"),
          F("partitionMetadata", "[]struct", "0+", fields=(
              F("partition", "int32", "0+"),
              F("racks", "[]string", "0+"),
          )),
      ))),
)

CONSUMER_GROUP_MEMBER_METADATA = RecordType(
    5,
    M("ConsumerGroupMemberMetadataKey", "0", "none", *_GROUP_MEMBER_KEY),
    M("ConsumerGroupMemberMetadataValue", "0", "0+",
      F("instanceId", "string", "0+", nullable="0+"),
      F("rackId", "string", "0+", nullable="0+"),
      F("clientId", "string", "0+"),
      F("clientHost", "string", "0+"),
      F("subscribedTopicNames", "[]string", "0+"),
      F("subscribedTopicRegex", "string", "0+", nullable="0+"),
      F("rebalanceTimeoutMs", "int32", "0+", default=-1),
      F("serverAssignor", "string", "0+", nullable="0+"),
      F("classicMemberMetadata", "struct", "0+", nullable="0+", tag=0, fields=(
          F("sessionTimeoutMs", "int32", "0+"),
          F("supportedProtocols", "[]struct", "0+", fields=(
              F("name", "string", "0+"),
              F("metadata", "bytes", "0+"),
          )),
      ))),
)

CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = RecordType(
    6,
    M("ConsumerGroupTargetAssignmentMetadataKey", "0", "none", *_GROUP_ID_KEY),
    M("ConsumerGroupTargetAssignmentMetadataValue", "0", "0+",
      F("assignmentEpoch", "int32", "0+"),
      F("assignmentTimestamp", "int64", "0+", tag=0, default=0)),  # KIP-1263, 4.3
)

CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = RecordType(
    7,
    M("ConsumerGroupTargetAssignmentMemberKey", "0", "none", *_GROUP_MEMBER_KEY),
    M("ConsumerGroupTargetAssignmentMemberValue", "0", "0+",
      F("topicPartitions", "[]struct", "0+", fields=(
          F("topicId", "uuid", "0+"),
          F("partitions", "[]int32", "0+"),
      ))),
)

_TOPIC_PARTITIONS_WITH_EPOCHS = (
    F("topicId", "uuid", "0+"),
    F("partitions", "[]int32", "0+"),
    # KIP-1251 (4.3): epoch at which each partition was assigned; same length as partitions.
    F("assignmentEpochs", "[]int32", "0+", nullable="0+", tag=0),
)

CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = RecordType(
    8,
    M("ConsumerGroupCurrentMemberAssignmentKey", "0", "none", *_GROUP_MEMBER_KEY),
    M("ConsumerGroupCurrentMemberAssignmentValue", "0", "0+",
      F("memberEpoch", "int32", "0+"),
      F("previousMemberEpoch", "int32", "0+"),
      F("state", "int8", "0+"),
      F("assignedPartitions", "[]struct", "0+", fields=_TOPIC_PARTITIONS_WITH_EPOCHS),
      F("partitionsPendingRevocation", "[]struct", "0+", fields=_TOPIC_PARTITIONS_WITH_EPOCHS)),
)

CONSUMER_GROUP_REGULAR_EXPRESSION = RecordType(
    16,
    M("ConsumerGroupRegularExpressionKey", "0", "none",
      F("groupId", "string", "0"),
      F("regularExpression", "string", "0")),
    M("ConsumerGroupRegularExpressionValue", "0", "0+",
      F("topics", "[]string", "0+"),
      F("version", "int64", "0+"),
      F("timestamp", "int64", "0+")),
)

# --- 17, 19-23: KIP-1071 streams groups (StreamsGroup*Key/Value.json) ---
# Transcribed from Kafka 4.4; 4.2 and 4.3 write the same layouts minus tagged fields added
# later (read as their defaults): StreamsGroupTargetAssignmentMetadataValue.AssignmentTimestamp
# (4.3, KIP-1263), StreamsGroupMetadataValue.{Stored,Failed}DescriptionTopologyEpoch (4.4).
# Type 18 (StreamsGroupPartitionMetadata) was removed before 4.2 and is never written by it.

STREAMS_GROUP_METADATA = RecordType(
    17,
    M("StreamsGroupMetadataKey", "0", "none", *_GROUP_ID_KEY),
    M("StreamsGroupMetadataValue", "0", "0+",
      F("epoch", "int32", "0+"),
      F("metadataHash", "int64", "0+"),
      F("validatedTopologyEpoch", "int32", "0+", tag=0, default=-1),
      F("lastAssignmentConfigs", "[]struct", "0+", nullable="0+", tag=1, fields=(
          F("key", "string", "0+"),
          F("value", "string", "0+"),
      )),
      F("storedDescriptionTopologyEpoch", "int32", "0+", tag=2, default=-1),  # 4.4
      F("failedDescriptionTopologyEpoch", "int32", "0+", tag=3, default=-1)),  # 4.4
)

_KEY_VALUE = (F("key", "string", "0+"), F("value", "string", "0+"))

STREAMS_GROUP_MEMBER_METADATA = RecordType(
    19,
    M("StreamsGroupMemberMetadataKey", "0", "none", *_GROUP_MEMBER_KEY),
    M("StreamsGroupMemberMetadataValue", "0", "0+",
      F("instanceId", "string", "0+", nullable="0+"),
      F("rackId", "string", "0+", nullable="0+"),
      F("clientId", "string", "0+"),
      F("clientHost", "string", "0+"),
      F("rebalanceTimeoutMs", "int32", "0+", default=-1),
      F("topologyEpoch", "int32", "0+"),
      F("processId", "string", "0+"),
      F("userEndpoint", "struct", "0+", nullable="0+", fields=(
          F("host", "string", "0+"),
          F("port", "uint16", "0+"),
      )),
      F("clientTags", "[]struct", "0+", fields=_KEY_VALUE)),
)

STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA = RecordType(
    20,
    M("StreamsGroupTargetAssignmentMetadataKey", "0", "none", *_GROUP_ID_KEY),
    M("StreamsGroupTargetAssignmentMetadataValue", "0", "0+",
      F("assignmentEpoch", "int32", "0+"),
      F("assignmentTimestamp", "int64", "0+", tag=0, default=0)),  # KIP-1263, 4.3
)

_TASK_IDS = (
    F("subtopologyId", "string", "0+"),
    F("partitions", "[]int32", "0+"),
)

STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER = RecordType(
    21,
    M("StreamsGroupTargetAssignmentMemberKey", "0", "none", *_GROUP_MEMBER_KEY),
    M("StreamsGroupTargetAssignmentMemberValue", "0", "0+",
      F("activeTasks", "[]struct", "0+", fields=_TASK_IDS),
      F("standbyTasks", "[]struct", "0+", fields=_TASK_IDS),
      F("warmupTasks", "[]struct", "0+", fields=_TASK_IDS)),
)

_TASK_IDS_WITH_EPOCHS = (
    *_TASK_IDS,
    # The epoch at which each partition (task) was assigned; same length as partitions. Only
    # defined for active tasks (4.2: the relaxed commit check of streams groups, KAFKA-19779).
    F("assignmentEpochs", "[]int32", "0+", nullable="0+", tag=0),
)

STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT = RecordType(
    22,
    M("StreamsGroupCurrentMemberAssignmentKey", "0", "none", *_GROUP_MEMBER_KEY),
    M("StreamsGroupCurrentMemberAssignmentValue", "0", "0+",
      F("memberEpoch", "int32", "0+"),
      F("previousMemberEpoch", "int32", "0+"),
      F("state", "int8", "0+"),
      F("activeTasks", "[]struct", "0+", fields=_TASK_IDS_WITH_EPOCHS),
      F("standbyTasks", "[]struct", "0+", fields=_TASK_IDS_WITH_EPOCHS),
      F("warmupTasks", "[]struct", "0+", fields=_TASK_IDS_WITH_EPOCHS),
      F("activeTasksPendingRevocation", "[]struct", "0+", fields=_TASK_IDS_WITH_EPOCHS),
      F("standbyTasksPendingRevocation", "[]struct", "0+", fields=_TASK_IDS_WITH_EPOCHS),
      F("warmupTasksPendingRevocation", "[]struct", "0+", fields=_TASK_IDS_WITH_EPOCHS)),
)

_TOPIC_INFO = (
    F("name", "string", "0+"),
    F("partitions", "int32", "0+"),  # 0: no number enforced (always 0 for changelogs)
    F("replicationFactor", "int16", "0+"),  # 0: the broker's default
    F("topicConfigs", "[]struct", "0+", fields=_KEY_VALUE),
)

STREAMS_GROUP_TOPOLOGY = RecordType(
    23,
    M("StreamsGroupTopologyKey", "0", "none", *_GROUP_ID_KEY),
    M("StreamsGroupTopologyValue", "0", "0+",
      F("epoch", "int32", "0+"),
      F("subtopologies", "[]struct", "0+", fields=(
          F("subtopologyId", "string", "0+"),
          F("sourceTopics", "[]string", "0+"),
          F("sourceTopicRegex", "[]string", "0+"),
          F("stateChangelogTopics", "[]struct", "0+", fields=_TOPIC_INFO),
          F("repartitionSinkTopics", "[]string", "0+"),
          F("repartitionSourceTopics", "[]struct", "0+", fields=_TOPIC_INFO),
          # Indexes into the subtopology's sourceTopics, sourceTopicRegex, repartitionSourceTopics.
          F("copartitionGroups", "[]struct", "0+", fields=(
              F("sourceTopics", "[]int16", "0+"),
              F("sourceTopicRegex", "[]int16", "0+"),
              F("repartitionSourceTopics", "[]int16", "0+"),
          )),
      ))),
)

#: The streams groups' record types (decoded by ``records.decode``; not yet mapped to events).
STREAMS_RECORD_TYPES = frozenset({17, 19, 20, 21, 22, 23})

RECORD_TYPES: dict[int, RecordType] = {
    rt.id: rt
    for rt in (
        LEGACY_OFFSET_COMMIT,
        OFFSET_COMMIT,
        GROUP_METADATA,
        CONSUMER_GROUP_METADATA,
        CONSUMER_GROUP_PARTITION_METADATA,
        CONSUMER_GROUP_MEMBER_METADATA,
        CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
        CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
        CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
        CONSUMER_GROUP_REGULAR_EXPRESSION,
        STREAMS_GROUP_METADATA,
        STREAMS_GROUP_MEMBER_METADATA,
        STREAMS_GROUP_TARGET_ASSIGNMENT_METADATA,
        STREAMS_GROUP_TARGET_ASSIGNMENT_MEMBER,
        STREAMS_GROUP_CURRENT_MEMBER_ASSIGNMENT,
        STREAMS_GROUP_TOPOLOGY,
    )
}

# Record types Kafka writes (or wrote) to __consumer_offsets that this decoder knows by
# name only (share groups; the streams record removed before 4.2): "known, not decoded".
KNOWN_UNDECODED_TYPES: dict[int, str] = {
    9: "ShareGroupPartitionMetadata (removed)",
    10: "ShareGroupMemberMetadata",
    11: "ShareGroupMetadata",
    12: "ShareGroupTargetAssignmentMetadata",
    13: "ShareGroupTargetAssignmentMember",
    14: "ShareGroupCurrentMemberAssignment",
    15: "ShareGroupStatePartitionMetadata",
    18: "StreamsGroupPartitionMetadata (removed)",
}

# --- the embedded consumer protocol of classic groups (clients module) ---
# Both are version-prefixed, never flexible; a newer version is read with the
# newest layout known (Kafka's ConsumerProtocol.checkSubscriptionVersion).

_PROTOCOL_TOPIC_PARTITION = (
    F("topic", "string", "0+"),
    F("partitions", "[]int32", "0+"),
)

CONSUMER_PROTOCOL_SUBSCRIPTION = M(
    "ConsumerProtocolSubscription", "0-3", "none",
    F("topics", "[]string", "0+"),
    F("userData", "bytes", "0+", nullable="0+"),
    F("ownedPartitions", "[]struct", "1+", fields=tuple(
        Field(f.name, f.type, (1, None), f.nullable, f.tag, f.default, f.fields)
        for f in _PROTOCOL_TOPIC_PARTITION)),
    F("generationId", "int32", "2+", default=-1),
    F("rackId", "string", "3+", nullable="3+"),
)

CONSUMER_PROTOCOL_ASSIGNMENT = M(
    "ConsumerProtocolAssignment", "0-3", "none",
    F("assignedPartitions", "[]struct", "0+", fields=_PROTOCOL_TOPIC_PARTITION),
    F("userData", "bytes", "0+", nullable="0+"),
)
