"""The request log's JSON as Kafka writes it: the bodies the decoder reads, as msgspec Structs.

What lives here: the API keys and error codes the decoder acts on, and the shapes of an
OffsetCommit / TxnOffsetCommit / ConsumerGroupHeartbeat / JoinGroup / SyncGroup / LeaveGroup
line's ``requestHeader``, ``request`` and ``response`` (``RequestConvertToJson``: camelCase names of Kafka's message specs,
``clients/src/main/resources/common/message/*.json``; a field absent in a version has its
default here). Structs name only the fields used, so msgspec skips the rest unread and checks
types and int32/int64 ranges in C (a wrong value is ``BAD_FIELD`` with msgspec's path).
"""

from __future__ import annotations

from typing import Annotated

import msgspec

OFFSET_COMMIT, TXN_OFFSET_COMMIT, CONSUMER_GROUP_HEARTBEAT = 8, 28, 68
JOIN_GROUP, LEAVE_GROUP, SYNC_GROUP = 11, 13, 14  # the classic protocol's membership APIs
# Answers that say "not me": the exchange never reached a group (dropped, counted).
COORDINATOR_ERRORS = {14: "COORDINATOR_LOAD_IN_PROGRESS", 15: "COORDINATOR_NOT_AVAILABLE", 16: "NOT_COORDINATOR"}
UNKNOWN_MEMBER_ID = 25  # a heartbeat's answer that removes the member (contract §10.1 g)
LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH = -1, -2
_INT64 = 1 << 63

# -- the wire shapes, as Kafka's JsonConverter writes them (absent = not in this version) --------

_Long = Annotated[int, msgspec.Meta(ge=-_INT64, le=_INT64 - 1)]
_Int = Annotated[int, msgspec.Meta(ge=-(1 << 31), le=(1 << 31) - 1)]


class Header(msgspec.Struct, rename="camel", gc=False):
    request_api_key: _Int
    request_api_version: _Int = -1


class CommitPartition(msgspec.Struct, rename="camel", gc=False):
    partition_index: _Int
    committed_offset: _Long
    committed_leader_epoch: _Int = -1  # v6+ (TxnOffsetCommit v2+)
    committed_metadata: str | None = None


class CommitTopic(msgspec.Struct, rename="camel", gc=False):
    partitions: list[CommitPartition]
    name: str | None = None  # up to v9 (TxnOffsetCommit v5)
    topic_id: str | None = None  # v10 (TxnOffsetCommit v6)


class CommitRequest(msgspec.Struct, rename="camel", gc=False):
    group_id: str
    topics: list[CommitTopic]
    generation_id_or_member_epoch: _Int | None = None  # since 3.6 (TxnOffsetCommit: 4.4)
    generation_id: _Int | None = None  # the same field before
    member_id: str | None = None
    group_instance_id: str | None = None  # v7+ (TxnOffsetCommit v3+)
    transactional_id: str | None = None  # TxnOffsetCommit only
    producer_id: _Long | None = None
    producer_epoch: _Int | None = None


class ResponsePartition(msgspec.Struct, rename="camel", gc=False):
    partition_index: _Int
    error_code: _Int


class ResponseTopic(msgspec.Struct, rename="camel", gc=False):
    # The answers' text, parsed by ``commits.Commits._answers`` once per distinct text: it holds no
    # offsets, so a member's commits are answered with the same text while its partitions hold.
    partitions: msgspec.Raw
    name: str | None = None
    topic_id: str | None = None


class CommitResponse(msgspec.Struct, rename="camel", gc=False):
    topics: list[ResponseTopic] = []


class CommitLine(msgspec.Struct, rename="camel", gc=False):
    request_header: Header
    request: CommitRequest
    response: CommitResponse | None = None


class TopicPartitions(msgspec.Struct, rename="camel", gc=False):
    topic_id: str
    partitions: list[_Int]


class HeartbeatRequest(msgspec.Struct, rename="camel", gc=False):
    group_id: str
    member_epoch: _Int
    member_id: str | None = None
    instance_id: str | None = None
    subscribed_topic_names: list[str] | None = None
    subscribed_topic_regex: str | None = None  # v1
    topic_partitions: list[TopicPartitions] | None = None


class Assignment(msgspec.Struct, rename="camel", gc=False):
    topic_partitions: list[TopicPartitions]


class HeartbeatResponse(msgspec.Struct, rename="camel", gc=False):
    error_code: _Int
    member_epoch: _Int = -1
    member_id: str | None = None
    assignment: Assignment | None = None


class HeartbeatLine(msgspec.Struct, rename="camel", gc=False):
    request_header: Header
    request: HeartbeatRequest
    response: HeartbeatResponse


class VersionHeader(msgspec.Struct, rename="camel", gc=False):
    """The header of a commit whose API key was read by position: its version alone."""
    request_api_version: _Int = -1


class CommitBody(msgspec.Struct, rename="camel", gc=False):
    """``CommitLine`` for lines whose API key was read by position: the header's version only
    (a commit event says which version was sent, contract §10.1 h)."""
    request_header: VersionHeader
    request: CommitRequest
    response: CommitResponse | None = None


class HeartbeatBody(msgspec.Struct, rename="camel", gc=False):
    """``HeartbeatLine`` without the header, for lines whose API key was read by position."""
    request: HeartbeatRequest
    response: HeartbeatResponse


# -- the classic protocol: JoinGroup v0-v9, SyncGroup v0-v5, LeaveGroup v0-v5 ------------------
# Bytes fields (a protocol's metadata, an assignment) are written as base64 strings, as Jackson
# writes a BinaryNode: msgspec's ``bytes`` reads them so.


class JoinGroupRequest(msgspec.Struct, rename="camel", gc=False):
    group_id: str
    member_id: str = ""
    group_instance_id: str | None = None  # v5+
    protocol_type: str | None = None


class JoinGroupMember(msgspec.Struct, rename="camel", gc=False):
    member_id: str
    group_instance_id: str | None = None  # v5+


class JoinGroupResponse(msgspec.Struct, rename="camel", gc=False):
    error_code: _Int
    generation_id: _Int = -1
    protocol_name: str | None = None  # nullable from v7
    leader: str = ""
    member_id: str = ""
    members: list[JoinGroupMember] = []  # the leader's response only


class JoinGroupLine(msgspec.Struct, rename="camel", gc=False):
    request_header: Header
    request: JoinGroupRequest
    response: JoinGroupResponse


class SyncGroupAssignment(msgspec.Struct, rename="camel", gc=False):
    member_id: str
    assignment: bytes  # a ConsumerProtocol Assignment (protocol type "consumer")


class SyncGroupRequest(msgspec.Struct, rename="camel", gc=False):
    group_id: str
    generation_id: _Int
    member_id: str
    group_instance_id: str | None = None  # v3+
    protocol_type: str | None = None  # v5+
    assignments: list[SyncGroupAssignment] = []  # the leader's request only


class SyncGroupResponse(msgspec.Struct, rename="camel", gc=False):
    error_code: _Int


class SyncGroupLine(msgspec.Struct, rename="camel", gc=False):
    request_header: Header
    request: SyncGroupRequest
    response: SyncGroupResponse


class LeavingMember(msgspec.Struct, rename="camel", gc=False):
    member_id: str
    group_instance_id: str | None = None


class AnsweredMember(msgspec.Struct, rename="camel", gc=False):
    member_id: str
    group_instance_id: str | None = None
    error_code: _Int = 0


class LeaveGroupRequest(msgspec.Struct, rename="camel", gc=False):
    group_id: str
    member_id: str | None = None  # v0-v2: one member
    members: list[LeavingMember] | None = None  # v3+: a batch (KIP-345)


class LeaveGroupResponse(msgspec.Struct, rename="camel", gc=False):
    error_code: _Int
    members: list[AnsweredMember] | None = None  # v3+


class LeaveGroupLine(msgspec.Struct, rename="camel", gc=False):
    request_header: Header
    request: LeaveGroupRequest
    response: LeaveGroupResponse


CLASSIC_APIS = (JOIN_GROUP, LEAVE_GROUP, SYNC_GROUP)

DECODERS = {
    OFFSET_COMMIT: msgspec.json.Decoder(CommitLine).decode,
    TXN_OFFSET_COMMIT: msgspec.json.Decoder(CommitLine).decode,
    CONSUMER_GROUP_HEARTBEAT: msgspec.json.Decoder(HeartbeatLine).decode,
    JOIN_GROUP: msgspec.json.Decoder(JoinGroupLine).decode,
    LEAVE_GROUP: msgspec.json.Decoder(LeaveGroupLine).decode,
    SYNC_GROUP: msgspec.json.Decoder(SyncGroupLine).decode,
}
DECODE_ANSWERS = msgspec.json.Decoder(list[ResponsePartition]).decode
# A heartbeat's header skipped unparsed, a commit's read for its version only: the key was read at its
# fixed place (docs/request-log.md, Speed).
BODY_DECODERS = {
    OFFSET_COMMIT: msgspec.json.Decoder(CommitBody).decode,
    TXN_OFFSET_COMMIT: msgspec.json.Decoder(CommitBody).decode,
    CONSUMER_GROUP_HEARTBEAT: msgspec.json.Decoder(HeartbeatBody).decode,
}
