"""Broker request-log lines built as Kafka writes them, for tests and benchmarks.

Field presence per version follows Kafka's message specs
(``clients/src/main/resources/common/message/OffsetCommitRequest.json`` and
``...Response.json`` validVersions 2-10, ``TxnOffsetCommit*`` 0-6,
``ConsumerGroupHeartbeat*`` 0-1, ``JoinGroup*`` 0-9, ``SyncGroup*`` 0-5, ``LeaveGroup*`` 0-5;
confluentinc/kafka mirror @06d492d8): a field
is written only in the versions that have it (``JsonConverterGenerator``), with
camelCase keys; ``RequestConvertToJson.requestDescMetrics`` wraps the bodies.
``legacy_names`` writes ``generationId`` where brokers before 3.6 (OffsetCommit)
or 4.4 (TxnOffsetCommit) name the epoch field so.
"""

from __future__ import annotations

import base64
import json
import struct
import uuid
from typing import Any, Iterable

API_NAMES = {11: "JOIN_GROUP", 13: "LEAVE_GROUP", 14: "SYNC_GROUP", 8: "OFFSET_COMMIT", 28: "TXN_OFFSET_COMMIT", 68: "CONSUMER_GROUP_HEARTBEAT", 1: "FETCH",
             0: "PRODUCE", 12: "HEARTBEAT"}


def kafka_id(u: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString``: base64url, no padding (22 characters)."""
    return base64.urlsafe_b64encode(u.bytes).decode().rstrip("=")


def envelope(api: int, version: int, request: dict, response: dict, *, correlation_id: int = 1,
             connection: str = "10.0.0.5:9092-10.0.1.7:53312-3-77") -> dict[str, Any]:
    return {"isForwarded": False,
            "requestHeader": {"requestApiKey": api, "requestApiVersion": version, "correlationId": correlation_id,
                              "clientId": "consumer-1", "requestApiKeyName": API_NAMES.get(api, "OTHER")},
            "request": request, "response": response, "connection": connection,
            "totalTimeMs": 1.234, "requestQueueTimeMs": 0.05, "localTimeMs": 1.0, "remoteTimeMs": 0.0,
            "throttleTimeMs": 0, "responseQueueTimeMs": 0.02, "sendTimeMs": 0.1,
            "securityProtocol": "PLAINTEXT", "principal": "User:ANONYMOUS", "listener": "PLAINTEXT",
            "clientInformation": {"softwareName": "apache-kafka-java", "softwareVersion": "4.1.0"}}


def log_line(obj: dict, stamp: str = "2026-11-20 09:00:00,123", level: str = "DEBUG") -> str:
    return f"[{stamp}] {level} Completed request:{json.dumps(obj, separators=(',', ':'))} (kafka.request.logger)"


# -- OffsetCommit (8), v2-v10 ------------------------------------------------------------------

def offset_commit(version: int, group: str, epoch: int, member: str, topics: Iterable[tuple[str, list]],
                  *, codes: dict | None = None, instance: str | None = None, legacy_names: bool = False,
                  metadata: str | None = "") -> dict[str, Any]:
    """``topics``: (name or Kafka topic id, [(partition, offset, leader_epoch)]); ``codes``:
    (topic, partition) -> error code in the response (default 0)."""
    codes = codes or {}
    req: dict[str, Any] = {"groupId": group}
    req["generationId" if legacy_names else "generationIdOrMemberEpoch"] = epoch
    req["memberId"] = member
    if version >= 7:
        req["groupInstanceId"] = instance
    if 2 <= version <= 4:
        req["retentionTimeMs"] = -1
    rt, st = [], []
    for topic, parts in topics:
        tkey = {"topicId": topic} if version >= 10 else {"name": topic}
        rp, sp = [], []
        for p, off, le in parts:
            row = {"partitionIndex": p, "committedOffset": off}
            if version >= 6:
                row["committedLeaderEpoch"] = le
            row["committedMetadata"] = metadata
            rp.append(row)
            sp.append({"partitionIndex": p, "errorCode": codes.get((topic, p), 0)})
        rt.append({**tkey, "partitions": rp})
        st.append({**tkey, "partitions": sp})
    req["topics"] = rt
    resp: dict[str, Any] = {}
    if version >= 3:
        resp["throttleTimeMs"] = 0
    resp["topics"] = st
    return envelope(8, version, req, resp)


# -- TxnOffsetCommit (28), v0-v6 ---------------------------------------------------------------

def txn_offset_commit(version: int, group: str, epoch: int, member: str, topics: Iterable[tuple[str, list]],
                      *, txn: str = "tx-1", producer_id: int = 4000, producer_epoch: int = 3,
                      codes: dict | None = None, instance: str | None = None,
                      legacy_names: bool = True) -> dict[str, Any]:
    codes = codes or {}
    req: dict[str, Any] = {"transactionalId": txn, "groupId": group, "producerId": producer_id,
                           "producerEpoch": producer_epoch}
    if version >= 3:
        req["generationId" if legacy_names else "generationIdOrMemberEpoch"] = epoch
        req["memberId"] = member
        req["groupInstanceId"] = instance
    rt, st = [], []
    for topic, parts in topics:
        tkey = {"topicId": topic} if version >= 6 else {"name": topic}
        rp, sp = [], []
        for p, off, le in parts:
            row = {"partitionIndex": p, "committedOffset": off}
            if version >= 2:
                row["committedLeaderEpoch"] = le
            row["committedMetadata"] = None
            rp.append(row)
            sp.append({"partitionIndex": p, "errorCode": codes.get((topic, p), 0)})
        rt.append({**tkey, "partitions": rp})
        st.append({**tkey, "partitions": sp})
    req["topics"] = rt
    return envelope(28, version, req, {"throttleTimeMs": 0, "topics": st})


# -- ConsumerGroupHeartbeat (68), v0-v1 ---------------------------------------------------------

def heartbeat(version: int, group: str, member: str, epoch: int, *, response_epoch: int | None = None,
              error: int = 0, response_member: str | None = None, assignment: list | None = None,
              owned: list | None = None, subscribed: list | None = None, instance: str | None = None,
              regex: str | None = None) -> dict[str, Any]:
    """``assignment`` / ``owned``: [(Kafka topic id, [partitions])] or None (omitted = unchanged)."""
    req: dict[str, Any] = {"groupId": group, "memberId": member, "memberEpoch": epoch, "instanceId": instance,
                           "rackId": None, "rebalanceTimeoutMs": 300000 if epoch == 0 else -1,
                           "subscribedTopicNames": subscribed}
    if version >= 1:
        req["subscribedTopicRegex"] = regex
    req["serverAssignor"] = None
    req["topicPartitions"] = None if owned is None else [{"topicId": t, "partitions": ps} for t, ps in owned]
    resp = {"throttleTimeMs": 0, "errorCode": error, "errorMessage": None if error == 0 else "error",
            "memberId": response_member if response_member is not None else (member or None),
            "memberEpoch": epoch if response_epoch is None else response_epoch, "heartbeatIntervalMs": 5000,
            "assignment": None if assignment is None else {
                "topicPartitions": [{"topicId": t, "partitions": ps} for t, ps in assignment]}}
    return envelope(68, version, req, resp)


# -- the classic protocol: JoinGroup (11) v0-v9, SyncGroup (14) v0-v5, LeaveGroup (13) v0-v5 ----

def consumer_assignment(topics: dict[str, list[int]], version: int = 0) -> bytes:
    """ConsumerProtocolAssignment (``consumer/ConsumerProtocolAssignment.json``): version, then
    AssignedPartitions [Topic, Partitions], then UserData (nullable bytes), big-endian."""
    out = struct.pack(">hi", version, len(topics))
    for topic, parts in topics.items():
        name = topic.encode()
        out += struct.pack(">h", len(name)) + name + struct.pack(">i", len(parts))
        out += b"".join(struct.pack(">i", p) for p in parts)
    return out + struct.pack(">i", -1)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def join_group(version: int, group: str, member: str, generation: int, *, code: int = 0, leader: str = "",
               members: Iterable[tuple[str, str | None]] = (), instance: str | None = None,
               protocol: str = "range") -> dict[str, Any]:
    """A JoinGroup exchange; ``members`` ((member id, instance id), ...): the leader's response."""
    meta = _b64(b"\x00\x03\x00\x00\x00\x01\x00\x06orders\xff\xff\xff\xff\x00\x00\x00\x00")
    req: dict[str, Any] = {"groupId": group, "sessionTimeoutMs": 10000}
    if version >= 1:
        req["rebalanceTimeoutMs"] = 300000
    req["memberId"] = member
    if version >= 5:
        req["groupInstanceId"] = instance
    req.update(protocolType="consumer", protocols=[{"name": protocol, "metadata": meta}])
    if version >= 8:
        req["reason"] = None
    resp: dict[str, Any] = {"throttleTimeMs": 0} if version >= 2 else {}
    resp.update(errorCode=code, generationId=generation)
    if version >= 7:
        resp["protocolType"] = "consumer"
    resp.update(protocolName=protocol, leader=leader)
    if version >= 9:
        resp["skipAssignment"] = False
    resp["memberId"] = member
    resp["members"] = [{"memberId": m, **({"groupInstanceId": i} if version >= 5 else {}), "metadata": meta}
                       for m, i in members]
    return envelope(11, version, req, resp)


def sync_group(version: int, group: str, member: str, generation: int,
               assignments: dict[str, bytes] | None = None, *, code: int = 0, instance: str | None = None,
               assignment: bytes = b"") -> dict[str, Any]:
    """A SyncGroup exchange; ``assignments`` (member id -> bytes): the leader's request."""
    req: dict[str, Any] = {"groupId": group, "generationId": generation, "memberId": member}
    if version >= 3:
        req["groupInstanceId"] = instance
    if version >= 5:
        req.update(protocolType="consumer", protocolName="range")
    req["assignments"] = [{"memberId": m, "assignment": _b64(a)} for m, a in (assignments or {}).items()]
    resp: dict[str, Any] = {"throttleTimeMs": 0} if version >= 1 else {}
    resp["errorCode"] = code
    if version >= 5:
        resp.update(protocolType="consumer", protocolName="range")
    resp["assignment"] = _b64(assignment)
    return envelope(14, version, req, resp)


def leave_group(version: int, group: str, members: Iterable[tuple[str, str | None]], *, code: int = 0,
                codes: dict[str, int] | None = None) -> dict[str, Any]:
    """A LeaveGroup exchange: one member before v3, a batch (KIP-345) from v3."""
    members = list(members)
    req: dict[str, Any] = {"groupId": group}
    resp: dict[str, Any] = {"throttleTimeMs": 0} if version >= 1 else {}
    resp["errorCode"] = code
    if version <= 2:
        req["memberId"] = members[0][0]
    else:
        req["members"] = [{"memberId": m, "groupInstanceId": i, **({"reason": None} if version >= 5 else {})}
                          for m, i in members]
        resp["members"] = [{"memberId": m, "groupInstanceId": i, "errorCode": (codes or {}).get(m, 0)}
                           for m, i in members]
    return envelope(13, version, req, resp)
