"""A topic created after the job started: the job's ``__consumer_offsets`` mapper meets its id in a
KIP-848 member's assignment record and learns its name from the broker's metadata, instead of
holding the member's partitions under a UUID (the fidelity bar's live run: every false rejection
on 4.3.1 and 4.4.0 was such a topic, docs/fidelity.md). Real Apache Kafka broker."""
from __future__ import annotations

import json
import time
import uuid

import pandas as pd
import pytest
from confluent_kafka import TopicCollection
from confluent_kafka.admin import AdminClient

from bridge_encoder import encode_record
from fencewatch.streaming.sources import topic_metadata
from fencewatch.streaming.runtime.state_fn import make_bridge_mapper
from fencewatch.streaming.sources.topic_metadata import _uuid_bytes

pytestmark = pytest.mark.broker


def _assignment(topic_id: bytes) -> tuple[bytes, bytes]:
    return encode_record(8, {"groupId": "g", "memberId": "m"}, 0, {
        "memberEpoch": 3, "previousMemberEpoch": 2, "state": 0,
        "assignedPartitions": [{"topicId": topic_id, "partitions": [0], "assignmentEpochs": [3]}],
        "partitionsPendingRevocation": []})


def _assigned(mapper, key: bytes, value: bytes, offset: int) -> list[str]:
    frame = pd.DataFrame({"key": [key], "value": [value], "topic": "__consumer_offsets", "partition": 0,
                          "offset": [offset], "record_ts": [1_000 + offset]})
    (out,) = list(mapper(iter([frame])))
    events = [json.loads(v) for v in out["value"] if v is not None]
    return [tp["topic"] for e in events if e["type"] == "member_assignment" for tp in e["assigned"]]


def test_a_topic_created_after_the_start_is_learned_by_its_id(broker, topic_factory, monkeypatch):
    monkeypatch.setattr(topic_metadata, "TOPIC_REFRESH_S", 0.0)
    learning = make_bridge_mapper({}, metadata={"bootstrap.servers": broker})
    frozen = make_bridge_mapper({})  # as the job was: the names of its start only
    topic = topic_factory(1, "late")  # created after both mappers
    admin = AdminClient({"bootstrap.servers": broker})
    topic_id = admin.describe_topics(TopicCollection([topic]))[topic].result().topic_id
    raw = _uuid_bytes(topic_id)
    key, value = _assignment(raw)
    assert _assigned(frozen, key, value, 1) == [str(uuid.UUID(bytes=raw))]  # held under its UUID
    assert _assigned(learning, key, value, 1) == [topic]
    # an id no topic has stays a UUID, and asking again is bounded by TOPIC_REFRESH_S
    monkeypatch.setattr(topic_metadata, "TOPIC_REFRESH_S", 3600.0)
    ghost = uuid.uuid4().bytes
    assert _assigned(learning, *_assignment(ghost), 2) == [str(uuid.UUID(bytes=ghost))]


def test_a_worker_that_has_just_asked_asks_again_for_an_id_it_has_not_asked_about(broker, topic_factory):
    """Each of the job's workers learns ids on its own: one that asked metadata a moment ago (about
    an id no topic has) asks at once about a new topic's id, instead of holding its partitions
    under a UUID until TOPIC_REFRESH_S (10 s) passed; the ghost id alone does not make it ask again."""
    learning = make_bridge_mapper({}, metadata={"bootstrap.servers": broker})
    ghost = uuid.uuid4().bytes
    assert _assigned(learning, *_assignment(ghost), 1) == [str(uuid.UUID(bytes=ghost))]  # asked now
    topic = topic_factory(1, "late")
    admin = AdminClient({"bootstrap.servers": broker})  # kept: a handle collected mid-call is destroyed
    raw = _uuid_bytes(admin.describe_topics(TopicCollection([topic]))[topic].result().topic_id)
    time.sleep(topic_metadata.NEW_ID_REFRESH_S)
    assert _assigned(learning, *_assignment(raw), 2) == [topic]  # well within TOPIC_REFRESH_S
    assert _assigned(learning, *_assignment(ghost), 3) == [str(uuid.UUID(bytes=ghost))]


def _commit_v10(topic_id: bytes) -> bytes:
    """An OffsetCommit v10 line (topics by id, base64url as Kafka writes them), answered 0."""
    import base64

    b64 = base64.urlsafe_b64encode(topic_id).rstrip(b"=").decode()
    body = {"requestHeader": {"requestApiKey": 8, "requestApiVersion": 10, "correlationId": 1, "clientId": "c"},
            "request": {"groupId": "g", "generationIdOrMemberEpoch": 3, "memberId": "m", "groupInstanceId": None,
                        "topics": [{"topicId": b64, "partitions": [{"partitionIndex": 0, "committedOffset": 5,
                                                                    "committedLeaderEpoch": -1,
                                                                    "committedMetadata": None}]}]},
            "response": {"throttleTimeMs": 0, "topics": [{"topicId": b64, "partitions": [
                {"partitionIndex": 0, "errorCode": 0}]}]}}
    text = json.dumps(body, separators=(",", ":"))
    return f"[2026-12-04 13:11:49,511] DEBUG Completed request:{text} (kafka.request.logger)".encode()


def test_a_commit_line_naming_a_later_topic_by_id_is_learned(broker, topic_factory, monkeypatch):
    from fencewatch.streaming.runtime.request_log_input import make_request_log_mapper

    monkeypatch.setattr(topic_metadata, "TOPIC_REFRESH_S", 0.0)
    learning = make_request_log_mapper({}, metadata={"bootstrap.servers": broker}, membership=False)
    frozen = make_request_log_mapper({}, membership=False)
    topic = topic_factory(1, "late")
    admin = AdminClient({"bootstrap.servers": broker})
    raw = _uuid_bytes(admin.describe_topics(TopicCollection([topic]))[topic].result().topic_id)
    frame = pd.DataFrame({"value": [_commit_v10(raw)], "topic": "rl", "partition": 0, "offset": [7],
                          "record_ts": [5]})

    def committed(mapper) -> list[str]:
        (out,) = list(mapper(iter([frame])))
        return [o["topic"] for v in out["value"] if v is not None
                for e in [json.loads(v)] if e["type"] == "offset_commit" for o in e["offsets"]]

    assert committed(frozen) == [str(uuid.UUID(bytes=raw))]
    assert committed(learning) == [topic]
