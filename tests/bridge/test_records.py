"""Golden tests of the coordinator record decoder.

Three independent checks:
1. Kafka's own expectations: the byte vectors of ``OffsetMessageFormatterTest``,
   ``GroupMetadataMessageFormatterTest`` and ``DumpLogSegmentsTest`` (tools module,
   Kafka 4.3) rebuilt with the test encoder, decoded, and printed with
   ``kafka_json``, must give the JSON those tests expect, character for character.
2. Hand-assembled bytes (struct.pack, not the encoder) for one non-flexible and one
   flexible record, so encoder and decoder cannot agree on a shared mistake.
3. Round trips of every record type and every value version, including both
   ``AssignmentEpochs`` layouts, unknown tagged fields, and malformed input.
"""

from __future__ import annotations

import base64
import json
import re
import struct
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bridge_encoder import encode_message, encode_record, uvarint, version_prefixed
from fencewatch.streaming.ingest.consumer_offsets.records import (
    RecordDecodeError,
    decode,
    decode_key,
    kafka_json,
    parse_topic_id,
    uuid_to_kafka_string,
    uuid_to_standard_string,
)
from fencewatch.streaming.ingest.consumer_offsets.record_types import (
    CONSUMER_PROTOCOL_ASSIGNMENT,
    CONSUMER_PROTOCOL_SUBSCRIPTION,
    RECORD_TYPES,
    Field,
    in_versions,
)


def compact(text: str) -> str:
    return re.sub(r"\s+", "", text)


def dump(record) -> str:
    return json.dumps(kafka_json(record), separators=(",", ":"))


TOPIC_ID = parse_topic_id("MKXx1fIkQy2J9jXHhK8m1w")

# --- 1. Kafka's formatter tests ------------------------------------------------

OFFSET_COMMIT_KEY = {"group": "group-id", "topic": "foo", "partition": 1}
OFFSET_COMMIT_VALUE = {"offset": 100, "leaderEpoch": 10, "metadata": "metadata", "commitTimestamp": 1234,
                       "expireTimestamp": 5678, "topicId": TOPIC_ID}

# OffsetMessageFormatterTest.parameters(): (key type, value version, expected output)
OFFSET_FORMATTER_CASES = [
    (0, 0, '{"key":{"type":0,"data":{"group":"group-id","topic":"foo","partition":1}},'
           '"value":{"version":0,"data":{"offset":100,"metadata":"metadata","commitTimestamp":1234}}}'),
    (1, 0, '{"key":{"type":1,"data":{"group":"group-id","topic":"foo","partition":1}},'
           '"value":{"version":0,"data":{"offset":100,"metadata":"metadata","commitTimestamp":1234}}}'),
    (1, 1, '{"key":{"type":1,"data":{"group":"group-id","topic":"foo","partition":1}},'
           '"value":{"version":1,"data":{"offset":100,"metadata":"metadata","commitTimestamp":1234,'
           '"expireTimestamp":5678}}}'),
    (1, 2, '{"key":{"type":1,"data":{"group":"group-id","topic":"foo","partition":1}},'
           '"value":{"version":2,"data":{"offset":100,"metadata":"metadata","commitTimestamp":1234}}}'),
    (1, 3, '{"key":{"type":1,"data":{"group":"group-id","topic":"foo","partition":1}},'
           '"value":{"version":3,"data":{"offset":100,"leaderEpoch":10,"metadata":"metadata",'
           '"commitTimestamp":1234}}}'),
    (1, 4, '{"key":{"type":1,"data":{"group":"group-id","topic":"foo","partition":1}},'
           '"value":{"version":4,"data":{"offset":100,"leaderEpoch":10,"metadata":"metadata",'
           '"commitTimestamp":1234,"topicId":"MKXx1fIkQy2J9jXHhK8m1w"}}}'),
]


@pytest.mark.parametrize("record_type,version,expected", OFFSET_FORMATTER_CASES,
                         ids=[f"type{t}-v{v}" for t, v, _ in OFFSET_FORMATTER_CASES])
def test_offset_message_formatter_vectors(record_type, version, expected):
    key, value = encode_record(record_type, OFFSET_COMMIT_KEY, version, OFFSET_COMMIT_VALUE)
    assert dump(decode(key, value)) == compact(expected)


def test_offset_commit_tombstone_prints_null_value():
    key, _ = encode_record(1, OFFSET_COMMIT_KEY)
    assert dump(decode(key, None)) == compact(
        '{"key":{"type":1,"data":{"group":"group-id","topic":"foo","partition":1}},"value":null}')


MEMBER = {"memberId": "member-1", "clientId": "client-1", "clientHost": "host-1", "rebalanceTimeout": 1000,
          "sessionTimeout": 1500, "groupInstanceId": "group-instance-1", "subscription": bytes([0, 1]),
          "assignment": bytes([1, 2])}
GROUP_VALUE = {"protocolType": "consumer", "generation": 1, "protocol": "range", "leader": "leader",
               "members": [MEMBER], "currentStateTimestamp": 1234}
_M0 = '{"memberId":"member-1","clientId":"client-1","clientHost":"host-1",'
_M_TAIL = '"sessionTimeout":1500,"subscription":"AAE=","assignment":"AQI="}'
_G_HEAD = '{"key":{"type":2,"data":{"group":"group-id"}},"value":{"version":%d,"data":{"protocolType":"consumer",' \
          '"generation":1,"protocol":"range","leader":"leader",'
# GroupMetadataMessageFormatterTest.parameters()
GROUP_FORMATTER_CASES = [
    (0, _G_HEAD % 0 + '"members":[' + _M0 + _M_TAIL + ']}}}'),
    (1, _G_HEAD % 1 + '"members":[' + _M0 + '"rebalanceTimeout":1000,' + _M_TAIL + ']}}}'),
    (2, _G_HEAD % 2 + '"currentStateTimestamp":1234,"members":[' + _M0 + '"rebalanceTimeout":1000,' + _M_TAIL
     + ']}}}'),
    (3, _G_HEAD % 3 + '"currentStateTimestamp":1234,"members":[{"memberId":"member-1",'
     '"groupInstanceId":"group-instance-1","clientId":"client-1","clientHost":"host-1","rebalanceTimeout":1000,'
     + _M_TAIL + ']}}}'),
    (4, _G_HEAD % 4 + '"currentStateTimestamp":1234,"members":[{"memberId":"member-1",'
     '"groupInstanceId":"group-instance-1","clientId":"client-1","clientHost":"host-1","rebalanceTimeout":1000,'
     + _M_TAIL + ']}}}'),
]


@pytest.mark.parametrize("version,expected", GROUP_FORMATTER_CASES, ids=[f"v{v}" for v, _ in GROUP_FORMATTER_CASES])
def test_group_metadata_message_formatter_vectors(version, expected):
    key, value = encode_record(2, {"group": "group-id"}, version, GROUP_VALUE)
    assert dump(decode(key, value)) == compact(expected)


def test_group_metadata_tombstone_prints_null_value():
    key, _ = encode_record(2, {"group": "group-id"})
    assert dump(decode(key, None)) == '{"key":{"type":2,"data":{"group":"group-id"}},"value":null}'


def test_dump_log_segments_consumer_group_metadata():
    # DumpLogSegmentsTest.testOffsetsMessageParser: {"type":"3","data":{"groupId":"group"}} / {"epoch":10}
    key, value = encode_record(3, {"groupId": "group"}, 0, {"epoch": 10})
    j = kafka_json(decode(key, value))
    assert j["key"]["data"] == {"groupId": "group"}
    assert json.dumps(j["value"]["data"], separators=(",", ":")) == '{"epoch":10}'
    assert decode(key, None).is_tombstone


def test_dump_log_segments_group_metadata_v4_with_raw_protocol_bytes():
    key, value = encode_record(2, {"group": "group"}, 4, {
        "protocolType": "consumer", "protocol": "range", "leader": "member", "generation": 10,
        "members": [{"memberId": "member", "clientId": "client", "clientHost": "host", "groupInstanceId": "instance",
                     "sessionTimeout": 100, "rebalanceTimeout": 1000, "subscription": b"Subscription",
                     "assignment": b"Assignment"}]})
    assert json.dumps(kafka_json(decode(key, value))["value"]["data"], separators=(",", ":")) == compact(
        '{"protocolType":"consumer","generation":10,"protocol":"range","leader":"member",'
        '"currentStateTimestamp":-1,"members":[{"memberId":"member","groupInstanceId":"instance",'
        '"clientId":"client","clientHost":"host","rebalanceTimeout":1000,"sessionTimeout":100,'
        '"subscription":"U3Vic2NyaXB0aW9u","assignment":"QXNzaWdubWVudA=="}]}')


def test_dump_log_segments_unknown_record_type_is_skipped():
    with pytest.raises(RecordDecodeError) as exc:
        decode(struct.pack(">h", 32767), b"\x00\x00")
    assert exc.value.code == "UNKNOWN_RECORD_TYPE" and exc.value.skippable


def test_dump_log_segments_malformed_value_is_reported_not_raised_raw():
    # DumpLogSegmentsTest: a ConsumerGroupMemberMetadataValue under a ConsumerGroupMetadataKey fails to parse.
    key, _ = encode_record(3, {"groupId": "group"})
    _, value = encode_record(5, {"groupId": "g", "memberId": "m"}, 0, {"clientId": "", "clientHost": ""})
    with pytest.raises(RecordDecodeError) as exc:
        decode(key, value)
    # ConsumerGroupMetadataValue reads epoch from the member value's first bytes, then a bad tag section.
    assert exc.value.code == "MALFORMED_VALUE" and not exc.value.skippable


# --- 2. hand-assembled bytes ------------------------------------------------------

def s16(text: str) -> bytes:
    raw = text.encode()
    return struct.pack(">h", len(raw)) + raw


def cs(text: str) -> bytes:
    raw = text.encode()
    return uvarint(len(raw) + 1) + raw


def test_hand_built_offset_commit_v3():
    key = struct.pack(">h", 1) + s16("orders-app") + s16("orders") + struct.pack(">i", 7)
    value = struct.pack(">hqi", 3, 4242, 5) + s16("") + struct.pack(">q", 1_700_000_000_000)
    rec = decode(key, value)
    assert rec.record_type == 1 and rec.version == 3
    assert rec.key == {"group": "orders-app", "topic": "orders", "partition": 7}
    assert rec.value == {"offset": 4242, "leaderEpoch": 5, "metadata": "", "commitTimestamp": 1_700_000_000_000}
    assert encode_record(1, rec.key, 3, rec.value) == (key, value)


def test_hand_built_current_member_assignment_with_assignment_epochs_tag():
    tid = uuid.UUID("12345678-1234-5678-1234-567812345678").bytes
    key = struct.pack(">h", 8) + s16("g") + s16("m-1")
    epochs = uvarint(3) + struct.pack(">ii", 4, 6)  # compact array of 2
    tp = tid + uvarint(3) + struct.pack(">ii", 0, 3) + uvarint(1) + uvarint(0) + uvarint(len(epochs)) + epochs
    value = (struct.pack(">hiib", 0, 6, 5, 1) + uvarint(2) + tp + uvarint(1) + uvarint(0))
    rec = decode(key, value)
    assert rec.value == {"memberEpoch": 6, "previousMemberEpoch": 5, "state": 1,
                         "assignedPartitions": [{"topicId": tid, "partitions": [0, 3], "assignmentEpochs": [4, 6]}],
                         "partitionsPendingRevocation": []}
    assert encode_record(8, rec.key, 0, rec.value) == (key, value)


def test_hand_built_offset_commit_v4_topic_id_tag_and_unknown_tag():
    value = (struct.pack(">hqi", 4, 9, -1) + cs("m") + struct.pack(">q", 5)
             + uvarint(2) + uvarint(0) + uvarint(16) + TOPIC_ID + uvarint(7) + uvarint(3) + b"xyz")
    key = struct.pack(">h", 1) + s16("g") + s16("t") + struct.pack(">i", 0)
    rec = decode(key, value)
    assert rec.value == {"offset": 9, "leaderEpoch": -1, "metadata": "m", "commitTimestamp": 5, "topicId": TOPIC_ID}


# --- 3. round trips of every type and version ----------------------------------------

def sample(f: Field, version: int, seed: int):
    """A non-default value for a field, deterministic per seed."""
    t = f.type
    if t == "int8":
        return seed % 3
    if t == "int16":
        return 300 + seed
    if t == "uint16":
        return 40_000 + seed  # above int16's range: read unsigned
    if t == "int32":
        return 70_000 + seed
    if t == "int64":
        return 5_000_000_000 + seed
    if t == "uuid":
        return uuid.UUID(int=seed + 1).bytes
    if t == "string":
        return f"{f.name}-é{seed}"
    if t == "bytes":
        return bytes([seed % 256, 1, 2])
    if t == "[]int32":
        return [seed, seed + 1, seed + 2]
    if t == "[]int16":
        return [seed % 7, seed % 7 + 1]
    if t == "[]string":
        return [f"s{seed}", f"t{seed}"]
    if t == "struct":
        return sample_struct(f.fields, version, seed)
    if t == "[]struct":
        return [sample_struct(f.fields, version, seed + i) for i in range(2)]
    raise AssertionError(t)


def sample_struct(fields, version: int, seed: int) -> dict:
    out = {}
    for i, f in enumerate(fields):
        if in_versions(version, f.versions):
            out[f.name] = sample(f, version, seed + i)
    if "partitions" in out and "assignmentEpochs" in out:
        out["assignmentEpochs"] = [e + 1 for e in out["partitions"]]
    return out


ALL_VERSIONS = [(t, v) for t, rt in sorted(RECORD_TYPES.items())
                for v in range(rt.value.valid[0], rt.value.valid[1] + 1)]


@pytest.mark.parametrize("record_type,version", ALL_VERSIONS,
                         ids=[f"{RECORD_TYPES[t].value.name}-v{v}" for t, v in ALL_VERSIONS])
def test_round_trip_every_type_and_version(record_type, version):
    rt = RECORD_TYPES[record_type]
    key = sample_struct(rt.key.fields, 0, 3)
    value = sample_struct(rt.value.fields, version, 11)
    k, v = encode_record(record_type, key, version, value)
    rec = decode(k, v)
    assert (rec.record_type, rec.key, rec.version, rec.value) == (record_type, key, version, value)
    tomb = decode(k, None)
    assert tomb.is_tombstone and tomb.key == key


def _assignment(epochs: bool, member_epoch=7):
    tid = uuid.UUID(int=99).bytes
    tp = {"topicId": tid, "partitions": [0, 1, 2]}
    if epochs:
        tp["assignmentEpochs"] = [3, 5, 7]
    return {"memberEpoch": member_epoch, "previousMemberEpoch": 6, "state": 0, "assignedPartitions": [tp],
            "partitionsPendingRevocation": [dict(tp, partitions=[9], **({"assignmentEpochs": [2]} if epochs else {}))]}


@pytest.mark.parametrize("with_epochs", [True, False], ids=["kip1251-epochs", "no-epochs"])
def test_current_member_assignment_both_assignment_epochs_layouts(with_epochs):
    value = _assignment(with_epochs)
    k, v = encode_record(8, {"groupId": "g", "memberId": "m"}, 0, value)
    rec = decode(k, v)
    assert rec.value == value
    assert ("assignmentEpochs" in rec.value["assignedPartitions"][0]) is with_epochs
    # The tag costs bytes only when present.
    _, v_other = encode_record(8, {"groupId": "g", "memberId": "m"}, 0, _assignment(not with_epochs))
    assert (len(v) > len(v_other)) is with_epochs


def test_kafka_json_prints_assignment_epochs_only_when_present():
    k, v = encode_record(8, {"groupId": "g", "memberId": "m"}, 0, _assignment(True))
    tps = kafka_json(decode(k, v))["value"]["data"]["assignedPartitions"]
    assert tps == [{"topicId": uuid_to_kafka_string(uuid.UUID(int=99).bytes), "partitions": [0, 1, 2],
                    "assignmentEpochs": [3, 5, 7]}]
    k, v = encode_record(8, {"groupId": "g", "memberId": "m"}, 0, _assignment(False))
    assert "assignmentEpochs" not in kafka_json(decode(k, v))["value"]["data"]["assignedPartitions"][0]


def test_member_metadata_classic_member_tagged_struct_round_trip():
    value = {"instanceId": None, "rackId": "r1", "clientId": "c", "clientHost": "/10.0.0.1",
             "subscribedTopicNames": ["a", "b"], "subscribedTopicRegex": None, "rebalanceTimeoutMs": 30000,
             "serverAssignor": None,
             "classicMemberMetadata": {"sessionTimeoutMs": 45000,
                                       "supportedProtocols": [{"name": "range", "metadata": b"\x00\x03"}]}}
    k, v = encode_record(5, {"groupId": "g", "memberId": "m"}, 0, value)
    assert decode(k, v).value == value
    value_consumer = dict(value, classicMemberMetadata=None)
    k, v = encode_record(5, {"groupId": "g", "memberId": "m"}, 0, value_consumer)
    assert "classicMemberMetadata" not in decode(k, v).value  # absent tag: consumer protocol member


def test_unknown_tagged_fields_are_skipped_at_every_level():
    value = _assignment(True)
    value["_unknown_tags"] = [(5, b"future")]
    value["assignedPartitions"][0]["_unknown_tags"] = [(1, b"\x01\x02"), (9, b"")]
    k, v = encode_record(8, {"groupId": "g", "memberId": "m"}, 0, value)
    assert decode(k, v).value == _assignment(True)


def test_embedded_protocol_messages_round_trip():
    for version in range(4):
        sub = sample_struct(CONSUMER_PROTOCOL_SUBSCRIPTION.fields, version, 1)
        data = version_prefixed(CONSUMER_PROTOCOL_SUBSCRIPTION, version, sub)
        from fencewatch.streaming.ingest.consumer_offsets.records import decode_message
        assert decode_message(CONSUMER_PROTOCOL_SUBSCRIPTION, version, data, 2) == sub
        asg = sample_struct(CONSUMER_PROTOCOL_ASSIGNMENT.fields, version, 2)
        assert decode_message(CONSUMER_PROTOCOL_ASSIGNMENT, version,
                              encode_message(CONSUMER_PROTOCOL_ASSIGNMENT, version, asg)) == asg


# --- malformed and unknown input ---------------------------------------------------------

@pytest.mark.parametrize("record_type,version", [(1, 3), (1, 4), (2, 3), (8, 0), (5, 0)])
def test_every_truncation_is_a_clear_error(record_type, version):
    rt = RECORD_TYPES[record_type]
    k, v = encode_record(record_type, sample_struct(rt.key.fields, 0, 1), version,
                         sample_struct(rt.value.fields, version, 2))
    for cut in range(len(v)):
        with pytest.raises(RecordDecodeError) as exc:
            decode(k, v[:cut])
        assert exc.value.code == "MALFORMED_VALUE" and not exc.value.skippable, cut
    for cut in range(len(k)):
        with pytest.raises(RecordDecodeError) as exc:
            decode(k[:cut], v)
        assert exc.value.code in ("MISSING_KEY", "MALFORMED_KEY"), cut


def test_unknown_value_version_is_skippable():
    k, _ = encode_record(1, OFFSET_COMMIT_KEY)
    with pytest.raises(RecordDecodeError) as exc:
        decode(k, struct.pack(">h", 5) + b"\x00" * 30)
    assert exc.value.code == "UNKNOWN_VALUE_VERSION" and exc.value.skippable
    assert "OffsetCommitValue version 5" in exc.value.detail


@pytest.mark.parametrize("record_type", [9, 10, 14, 18, 24, 1000, -1])
def test_share_removed_streams_and_future_types_are_skippable(record_type):
    with pytest.raises(RecordDecodeError) as exc:
        decode_key(struct.pack(">h", record_type) + s16("g"))
    assert exc.value.code == "UNKNOWN_RECORD_TYPE" and exc.value.skippable
    assert exc.value.record_type == record_type


def test_null_in_non_nullable_string_and_bad_utf8_are_malformed():
    key = struct.pack(">h", 1) + struct.pack(">h", -1) + s16("t") + struct.pack(">i", 0)
    with pytest.raises(RecordDecodeError, match="non-nullable field group"):
        decode(key, None)
    key = struct.pack(">h", 1) + struct.pack(">h", 2) + b"\xff\xfe" + s16("t") + struct.pack(">i", 0)
    with pytest.raises(RecordDecodeError, match="UTF-8"):
        decode(key, None)


def test_huge_array_count_fails_fast():
    value = struct.pack(">hiib", 0, 1, 0, 0) + uvarint(2**31 - 2)
    key, _ = encode_record(8, {"groupId": "g", "memberId": "m"})
    with pytest.raises(RecordDecodeError, match="claims"):
        decode(key, value)


def test_topic_id_forms():
    raw = uuid.UUID("30a5f1d5-f224-432d-89f6-35c784af26d7").bytes
    assert uuid_to_kafka_string(raw) == "MKXx1fIkQy2J9jXHhK8m1w"
    assert parse_topic_id("MKXx1fIkQy2J9jXHhK8m1w") == raw
    assert parse_topic_id("30a5f1d5-f224-432d-89f6-35c784af26d7") == raw
    assert uuid_to_standard_string(raw) == "30a5f1d5-f224-432d-89f6-35c784af26d7"
    std_b64 = base64.b64encode(raw).decode().rstrip("=")  # confluent-kafka prints standard base64
    assert parse_topic_id(std_b64) == raw


# --- property: random OffsetCommit and CurrentMemberAssignment values round-trip -------------

int32 = st.integers(-2**31, 2**31 - 1)
int64 = st.integers(-2**63, 2**63 - 1)
text = st.text(max_size=40)


@settings(max_examples=150, deadline=None)
@given(version=st.integers(0, 4), offset=int64, epoch=int32, meta=text, ts=int64, exp=int64,
       tid=st.binary(min_size=16, max_size=16), group=text, topic=text, partition=int32)
def test_offset_commit_round_trip_property(version, offset, epoch, meta, ts, exp, tid, group, topic, partition):
    key = {"group": group, "topic": topic, "partition": partition}
    value = {"offset": offset, "metadata": meta, "commitTimestamp": ts}
    if version >= 3:
        value["leaderEpoch"] = epoch
    if version == 1:
        value["expireTimestamp"] = exp
    if version >= 4 and tid != bytes(16):
        value["topicId"] = tid
    rec = decode(*encode_record(1, key, version, value))
    assert rec.key == key and rec.value == value


tp_strategy = st.lists(st.integers(0, 10_000), max_size=12, unique=True).flatmap(
    lambda parts: st.fixed_dictionaries({
        "topicId": st.binary(min_size=16, max_size=16),
        "partitions": st.just(parts),
    }, optional={"assignmentEpochs": st.lists(int32, min_size=len(parts), max_size=len(parts))}))


@settings(max_examples=150, deadline=None)
@given(member_epoch=int32, prev=int32, state=st.integers(-128, 127),
       assigned=st.lists(tp_strategy, max_size=5), pending=st.lists(tp_strategy, max_size=3))
def test_current_member_assignment_round_trip_property(member_epoch, prev, state, assigned, pending):
    value = {"memberEpoch": member_epoch, "previousMemberEpoch": prev, "state": state,
             "assignedPartitions": assigned, "partitionsPendingRevocation": pending}
    rec = decode(*encode_record(8, {"groupId": "g", "memberId": "m"}, 0, value))
    assert rec.value == value
