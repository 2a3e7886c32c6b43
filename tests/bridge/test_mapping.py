"""Coordinator records -> SPEC events. Record sequences follow what Kafka's
GroupMetadataManager writes (consumerGroupHeartbeat, consumerGroupStaticMemberGroupLeave,
replaceMember, removeMember, classic storeGroup)."""

from __future__ import annotations

import struct
import uuid

import pytest

from bridge_encoder import encode_record, sticky_user_data, version_prefixed
from fencewatch.streaming.ingest.consumer_offsets.mapping import Bridge, TopicNames, decode_record, event_role, map_records
from fencewatch.streaming.ingest.consumer_offsets.records import RecordDecodeError, uuid_to_kafka_string
from fencewatch.streaming.ingest.consumer_offsets.record_types import CONSUMER_PROTOCOL_ASSIGNMENT, CONSUMER_PROTOCOL_SUBSCRIPTION

ORDERS = uuid.UUID(int=0xA1).bytes
PAYMENTS = uuid.UUID(int=0xB2).bytes
NAMES = {ORDERS: "orders", PAYMENTS: "payments"}


def member_md(g, m, instance=None, topics=("orders",), regex=None, classic=False):
    value = {"instanceId": instance, "rackId": None, "clientId": "c", "clientHost": "h",
             "subscribedTopicNames": list(topics), "subscribedTopicRegex": regex, "rebalanceTimeoutMs": 1000,
             "serverAssignor": None}
    if classic:
        value["classicMemberMetadata"] = {"sessionTimeoutMs": 45000, "supportedProtocols": []}
    return encode_record(5, {"groupId": g, "memberId": m}, 0, value)


def group_epoch(g, epoch):
    return encode_record(3, {"groupId": g}, 0, {"epoch": epoch})


def target_epoch(g, epoch):
    return encode_record(6, {"groupId": g}, 0, {"assignmentEpoch": epoch})


def target_member(g, m, tps=()):
    return encode_record(7, {"groupId": g, "memberId": m}, 0,
                         {"topicPartitions": [{"topicId": t, "partitions": list(p)} for t, p in tps]})


def tps_(items, epochs=None):
    out = []
    for i, (t, parts) in enumerate(items):
        tp = {"topicId": t, "partitions": list(parts)}
        if epochs is not None and epochs[i] is not None:
            tp["assignmentEpochs"] = list(epochs[i])
        out.append(tp)
    return out


def current(g, m, epoch, prev, assigned=(), pending=(), state=0, epochs=None, pending_epochs=None):
    return encode_record(8, {"groupId": g, "memberId": m}, 0, {
        "memberEpoch": epoch, "previousMemberEpoch": prev, "state": state,
        "assignedPartitions": tps_(assigned, epochs), "partitionsPendingRevocation": tps_(pending, pending_epochs)})


def tomb(record_type, **key):
    return encode_record(record_type, key)


def offset_commit(g, topic, p, offset, version=3, leader_epoch=4, ts=1000, expire=-1, topic_id=None, rtype=1):
    value = {"offset": offset, "leaderEpoch": leader_epoch, "metadata": "", "commitTimestamp": ts,
             "expireTimestamp": expire}
    if topic_id is not None:
        value["topicId"] = topic_id
    return encode_record(rtype, {"group": g, "topic": topic, "partition": p}, version, value)


def feed(bridge, batches, start_ts=1000):
    """batches: list of lists of (key, value); each batch shares one timestamp, like a coordinator batch."""
    out = []
    n = 0
    for b, batch in enumerate(batches):
        for key, value in batch:
            out.extend(bridge.feed(key, value, start_ts + b, f"__consumer_offsets/0/{n}"))
            n += 1
    out.extend(bridge.flush())
    return out


def of(events, *types):
    return [e for e in events if e["type"] in types]


# --- offsets ---------------------------------------------------------------------------

@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_offset_commit_every_version(version):
    key, value = offset_commit("g", "orders", 3, 42, version=version, leader_epoch=7, ts=555, expire=999,
                               topic_id=ORDERS)
    [e] = decode_record(key, value, 1234, "__consumer_offsets/5/10")
    expected = {"type": "offset_committed", "ts": 1234, "group_id": "g", "event_id": "__consumer_offsets/5/10",
                "topic": "orders", "partition": 3, "offset": 42,
                "leader_epoch": 7 if version >= 3 else -1, "commit_ts": 555}
    if version == 1:
        expected["expire_ts"] = 999
    assert e == expected


def test_legacy_offset_commit_type_0_and_tombstone():
    key, value = offset_commit("g", "orders", 0, 1, version=0, rtype=0)
    assert decode_record(key, value, 5, "x")[0]["type"] == "offset_committed"
    assert decode_record(key, None, 6, "y") == [
        {"type": "offset_deleted", "ts": 6, "group_id": "g", "event_id": "y", "topic": "orders", "partition": 0}]


def test_offset_commit_without_record_timestamp_uses_commit_time():
    key, value = offset_commit("g", "orders", 0, 1, ts=777)
    assert decode_record(key, value, None, "x")[0]["ts"] == 777


def test_cluster_field_and_roles():
    key, value = offset_commit("g", "orders", 0, 1)
    assert decode_record(key, value, 1, "x", cluster="east")[0]["cluster"] == "east"
    assert event_role("offset_committed") == "offsets" and event_role("partition_epochs") == "offsets"
    assert event_role("member_assignment") == "heartbeats" and event_role("group_state") == "heartbeats"


# --- KIP-848 consumer groups ---------------------------------------------------------------

def test_member_assignment_with_kip1251_epochs_joined_with_metadata():
    b = Bridge(NAMES)
    events = feed(b, [[
        member_md("g", "m1", instance="i-1", topics=("orders", "payments")),
        group_epoch("g", 5),
        target_member("g", "m1", [(ORDERS, [0, 1, 2])]),
        target_epoch("g", 5),
        current("g", "m1", 5, 4, assigned=[(PAYMENTS, [1]), (ORDERS, [2, 0, 1])], epochs=[[5], [5, 3, 4]],
                pending=[(ORDERS, [7])], pending_epochs=[[2]], state=1),
    ]])
    [ma] = of(events, "member_assignment")
    assert ma == {
        "type": "member_assignment", "ts": 1000, "group_id": "g", "event_id": "__consumer_offsets/0/4",
        "member_id": "m1", "protocol": "consumer", "member_epoch": 5, "previous_member_epoch": 4,
        "state": "UNREVOKED_PARTITIONS",
        "assigned": [{"topic": "orders", "partitions": [0, 1, 2], "assignment_epochs": [3, 4, 5]},
                     {"topic": "payments", "partitions": [1], "assignment_epochs": [5]}],
        "pending_revocation": [{"topic": "orders", "partitions": [7], "assignment_epochs": [2]}],
        "subscribed_topics": ["orders", "payments"], "instance_id": "i-1", "group_epoch": 5,
        "target_assignment_epoch": 5,
    }


def test_absent_assignment_epochs_derive_mode_omits_them():
    events = decode_record(*current("g", "m1", 6, 5, assigned=[(ORDERS, [1, 0])]), 1, "x", NAMES)
    assert events[0]["assigned"] == [{"topic": "orders", "partitions": [0, 1]}]


@pytest.mark.parametrize("member_epoch,expected", [(6, 6), (0, 0)])
def test_absent_assignment_epochs_member_epoch_mode_is_kafkas_loader(member_epoch, expected):
    # Utils.assignmentFromTopicPartitions: every partition gets max(member epoch, 0).
    events = decode_record(*current("g", "m1", member_epoch, 5, assigned=[(ORDERS, [1, 0])],
                                    pending=[(PAYMENTS, [3])]), 1, "x", NAMES,
                           absent_assignment_epochs="member-epoch")
    assert events[0]["assigned"] == [{"topic": "orders", "partitions": [0, 1], "assignment_epochs": [expected] * 2}]
    assert events[0]["pending_revocation"] == [{"topic": "payments", "partitions": [3],
                                                "assignment_epochs": [expected]}]


def test_assignment_epochs_of_wrong_length_are_ignored_and_counted():
    b = Bridge(NAMES, absent_assignment_epochs="member-epoch")
    events = b.feed(*current("g", "m1", 8, 7, assigned=[(ORDERS, [0, 1])], epochs=[[3]]), 1, "x")
    assert events[0]["assigned"] == [{"topic": "orders", "partitions": [0, 1], "assignment_epochs": [8, 8]}]
    assert b.stats.problems["ASSIGNMENT_EPOCHS_LENGTH_MISMATCH"] == 1


def test_unknown_topic_id_is_written_as_standard_uuid():
    events = decode_record(*current("g", "m1", 1, 0, assigned=[(uuid.UUID(int=7).bytes, [0])]), 1, "x", NAMES)
    assert events[0]["assigned"][0]["topic"] == "00000000-0000-0000-0000-000000000007"


def test_topic_ids_from_file_forms_and_learned_from_records():
    names = TopicNames({uuid_to_kafka_string(ORDERS): "orders", str(uuid.UUID(bytes=PAYMENTS)): "payments"})
    assert names.resolve(ORDERS) == "orders" and names.resolve(PAYMENTS) == "payments"
    b = Bridge()
    other = uuid.UUID(int=0xC3).bytes
    b.feed(*offset_commit("g", "refunds", 0, 1, version=4, topic_id=other), 1, "a")
    third = uuid.UUID(int=0xD4).bytes
    b.feed(*encode_record(4, {"groupId": "g"}, 0, {"topics": [
        {"topicId": third, "topicName": "audit", "numPartitions": 3, "partitionMetadata": []}]}), 2, "b")
    events = b.feed(*current("g", "m", 3, 2, assigned=[(other, [0]), (third, [1])]), 3, "c")
    assert [tp["topic"] for tp in of(events, "member_assignment")[0]["assigned"]] == ["audit", "refunds"]


def test_regex_subscription_joins_resolved_topics():
    b = Bridge(NAMES)
    events = feed(b, [[
        encode_record(16, {"groupId": "g", "regularExpression": "pay.*"}, 0,
                      {"topics": ["payments", "payouts"], "version": 1, "timestamp": 5}),
        member_md("g", "m1", topics=("orders",), regex="pay.*"),
        current("g", "m1", 1, 0, assigned=[(ORDERS, [0])]),
    ]])
    assert of(events, "member_assignment")[0]["subscribed_topics"] == ["orders", "payments", "payouts"]


def test_classic_member_of_consumer_group_is_protocol_classic():
    events = feed(Bridge(NAMES), [[member_md("g", "m1", classic=True), current("g", "m1", 3, 2)]])
    assert of(events, "member_assignment")[0]["protocol"] == "classic"


def test_leave_writes_tombstones_and_one_member_left():
    b = Bridge(NAMES)
    events = feed(b, [
        [member_md("g", "m1"), group_epoch("g", 1), target_member("g", "m1", [(ORDERS, [0])]), target_epoch("g", 1),
         current("g", "m1", 1, 0, assigned=[(ORDERS, [0])])],
        # removeMember: current assignment, target assignment, subscription tombstones; then the epoch bump
        [tomb(8, groupId="g", memberId="m1"), tomb(7, groupId="g", memberId="m1"),
         tomb(5, groupId="g", memberId="m1"), group_epoch("g", 2), target_epoch("g", 2)],
    ])
    left = of(events, "member_left")
    assert left == [{"type": "member_left", "ts": 1001, "group_id": "g", "event_id": "__consumer_offsets/0/5",
                     "member_id": "m1", "reason": "leave"}]


def test_derived_group_state_is_emitted_once_per_coordinator_batch():
    b = Bridge(NAMES)
    events = feed(b, [
        # a member joins: Kafka's batch leaves the group Reconciling (member at epoch 1 but UNRELEASED? no: state 0)
        [member_md("g", "m1"), group_epoch("g", 1), target_member("g", "m1", [(ORDERS, [0])]), target_epoch("g", 1),
         current("g", "m1", 1, 0, assigned=[(ORDERS, [0])])],
        # a second member joins: group epoch 2, new target; m2 gets nothing yet (waits for m1 to revoke)
        [member_md("g", "m2"), group_epoch("g", 2), target_member("g", "m2", [(ORDERS, [1])]), target_epoch("g", 2),
         current("g", "m2", 2, 0, state=2)],
        # m1 reconciles to epoch 2
        [current("g", "m1", 2, 1, assigned=[(ORDERS, [0])])],
        # m2 gets its partition
        [current("g", "m2", 2, 0, assigned=[(ORDERS, [1])])],
        # both leave
        [tomb(8, groupId="g", memberId="m1"), tomb(7, groupId="g", memberId="m1"), tomb(5, groupId="g", memberId="m1"),
         tomb(8, groupId="g", memberId="m2"), tomb(7, groupId="g", memberId="m2"), tomb(5, groupId="g", memberId="m2"),
         group_epoch("g", 3), target_epoch("g", 3)],
        # the group is deleted
        [tomb(6, groupId="g"), tomb(3, groupId="g")],
    ])
    states = [(e["ts"], e["state"]) for e in of(events, "group_state")]
    assert states == [(1000, "Stable"), (1001, "Reconciling"), (1003, "Stable"), (1004, "Empty"), (1005, "Dead")]
    assert [e["member_id"] for e in of(events, "member_left")] == ["m1", "m2"]


def test_static_leave_then_takeover_by_new_member_id():
    b = Bridge(NAMES)
    events = feed(b, [
        [member_md("g", "m1", instance="i-1"), group_epoch("g", 4), target_epoch("g", 4),
         current("g", "m1", 4, 3, assigned=[(ORDERS, [0, 1])], epochs=[[2, 4]])],
        # consumerGroupStaticMemberGroupLeave: one record, epoch -2, epochs reset to 0
        [current("g", "m1", -2, 4, assigned=[(ORDERS, [0, 1])], epochs=[[0, 0]])],
        # the instance comes back as m9: replaceMember = old tombstones + new member records, one batch
        [tomb(8, groupId="g", memberId="m1"), tomb(7, groupId="g", memberId="m1"), tomb(5, groupId="g", memberId="m1"),
         member_md("g", "m9", instance="i-1"), target_member("g", "m9", [(ORDERS, [0, 1])]),
         current("g", "m9", 4, 4, assigned=[(ORDERS, [0, 1])], epochs=[[0, 0]])],
    ])
    left = of(events, "member_left")
    assert [(e["member_id"], e["reason"], e.get("instance_id")) for e in left] == [("m1", "static_leave", "i-1")]
    [ma] = [e for e in of(events, "member_assignment") if e["member_id"] == "m9"]
    assert ma["instance_id"] == "i-1" and ma["assigned"][0]["assignment_epochs"] == [0, 0]


def test_static_member_that_never_returns_leaves_when_its_batch_ends():
    b = Bridge(NAMES)
    events = feed(b, [
        [member_md("g", "m1", instance="i-1"), current("g", "m1", 4, 3, assigned=[(ORDERS, [0])])],
        [current("g", "m1", -2, 4, assigned=[(ORDERS, [0])])],
        [tomb(8, groupId="g", memberId="m1"), tomb(7, groupId="g", memberId="m1"), tomb(5, groupId="g", memberId="m1"),
         group_epoch("g", 5)],
        [offset_commit("other", "orders", 0, 1)],
    ])
    left = of(events, "member_left")
    assert [(e["member_id"], e["reason"], e["ts"]) for e in left] == [("m1", "static_leave", 1001), ("m1", "leave", 1002)]
    # The removal is emitted before anything of a later batch.
    assert events.index(left[1]) < events.index(of(events, "offset_committed")[0])


def test_static_removal_is_released_by_flush():
    b = Bridge(NAMES)
    b.feed(*member_md("g", "m1", instance="i-1"), 1, "a")
    b.feed(*current("g", "m1", -2, 4), 2, "b")
    assert of(b.feed(*tomb(8, groupId="g", memberId="m1"), 3, "c"), "member_left") == []
    assert [(e["type"], e["reason"]) for e in b.flush() if e["type"] == "member_left"] == [("member_left", "leave")]


def test_stateless_decode_record_maps_static_leave_and_tombstone():
    [e] = decode_record(*current("g", "m1", -2, 4), 1, "x")
    assert (e["type"], e["reason"]) == ("member_left", "static_leave")
    [e] = decode_record(*tomb(8, groupId="g", memberId="m1"), 2, "y")
    assert (e["type"], e["reason"]) == ("member_left", "leave")
    assert decode_record(*group_epoch("g", 3), 3, "z") == []  # no derived state without history
    assert decode_record(*tomb(3, groupId="g"), 4, "w")[0]["state"] == "Dead"


# --- classic groups ----------------------------------------------------------------------------

def sub_bytes(version=3, owned=(), generation=-1, user_data=None):
    return version_prefixed(CONSUMER_PROTOCOL_SUBSCRIPTION, version, {
        "topics": ["orders"], "userData": user_data,
        "ownedPartitions": [{"topic": t, "partitions": list(p)} for t, p in owned],
        "generationId": generation, "rackId": None})


def asg_bytes(assigned):
    return version_prefixed(CONSUMER_PROTOCOL_ASSIGNMENT, 3, {
        "assignedPartitions": [{"topic": t, "partitions": list(p)} for t, p in assigned], "userData": None})


def group_md(g, generation, members, protocol="cooperative-sticky", version=3, protocol_type="consumer"):
    return encode_record(2, {"group": g}, version, {
        "protocolType": protocol_type, "generation": generation, "protocol": protocol,
        "leader": members[0]["memberId"] if members else None, "currentStateTimestamp": 1,
        "members": [dict({"clientId": "c", "clientHost": "h", "rebalanceTimeout": 1, "sessionTimeout": 1,
                          "groupInstanceId": None}, **m) for m in members]})


def test_classic_generations_joins_syncs_leaves_and_empty():
    b = Bridge()
    events = feed(b, [
        [group_md("cg", 1, [
            {"memberId": "a", "subscription": sub_bytes(), "assignment": asg_bytes([("orders", [0, 1])])},
            {"memberId": "b", "subscription": sub_bytes(), "assignment": asg_bytes([("orders", [2])])}])],
        [group_md("cg", 2, [
            {"memberId": "a", "subscription": sub_bytes(owned=[("orders", [1, 0])], generation=1),
             "assignment": asg_bytes([("orders", [0, 1, 2])])}])],
        [group_md("cg", 3, [])],
        [tomb(2, group="cg")],
    ])
    assert [(e["type"], e.get("member_id"), e.get("generation"), e.get("state")) for e in events] == [
        ("classic_join", "a", -1, None), ("classic_join", "b", -1, None), ("classic_sync", None, 1, None),
        ("group_state", None, None, "Stable"),
        ("member_left", "b", None, None), ("classic_join", "a", 1, None), ("classic_sync", None, 2, None),
        ("group_state", None, None, "Stable"),
        ("member_left", "a", None, None), ("group_state", None, None, "Empty"),
        ("group_state", None, None, "Dead"),
    ]
    join = of(events, "classic_join")[2]
    assert join["owned"] == [{"topic": "orders", "partitions": [0, 1]}] and join["protocol"] == "cooperative-sticky"
    assert of(events, "classic_sync")[0]["assignments"] == {
        "a": [{"topic": "orders", "partitions": [0, 1]}], "b": [{"topic": "orders", "partitions": [2]}]}
    assert all(e["protocol"] == "classic" for e in of(events, "group_state"))


def test_classic_sticky_claims_from_kip341_user_data():
    events = decode_record(*group_md("cg", 7, [
        {"memberId": "a", "subscription": sub_bytes(version=1, user_data=sticky_user_data([("orders", [0])], 5)),
         "assignment": b""},
        {"memberId": "b", "subscription": sub_bytes(version=1, user_data=sticky_user_data([("orders", [0])], 6)),
         "assignment": b""},
        {"memberId": "c", "subscription": sub_bytes(version=0, user_data=sticky_user_data([("orders", [1])], None)),
         "assignment": b""}], protocol="sticky", version=0), 1, "x")
    joins = {e["member_id"]: (e["generation"], e["owned"]) for e in of(events, "classic_join")}
    assert joins == {"a": (5, [{"topic": "orders", "partitions": [0]}]),
                     "b": (6, [{"topic": "orders", "partitions": [0]}]),
                     "c": (-1, [{"topic": "orders", "partitions": [1]}])}
    assert of(events, "classic_sync")[0]["assignments"] == {"a": [], "b": [], "c": []}


def test_malformed_embedded_subscription_is_counted_and_member_still_joins():
    b = Bridge()
    events = b.feed(*group_md("cg", 2, [{"memberId": "a", "subscription": b"\x00\x03\xff",
                                         "assignment": b"\x00"}]), 1, "x")
    [join] = of(events, "classic_join")
    assert (join["generation"], join["owned"]) == (-1, [])
    assert b.stats.problems["MALFORMED_SUBSCRIPTION"] == 1 and b.stats.problems["MALFORMED_ASSIGNMENT"] == 1


def test_non_consumer_protocol_type_gives_state_only():
    events = decode_record(*group_md("connect-cluster", 4, [
        {"memberId": "w1", "subscription": b"connect-bytes", "assignment": b"x"}], protocol="sessioned",
        protocol_type="connect"), 1, "x")
    assert [(e["type"], e.get("state")) for e in events] == [("group_state", "Stable")]


# --- bad input -----------------------------------------------------------------------------------

def test_bad_records_raise_and_are_counted_bridge_survives():
    b = Bridge()
    with pytest.raises(RecordDecodeError) as exc:
        b.feed(struct.pack(">h", 14) + b"\x00\x01g\x00\x01m", b"\x00\x00", 1, "a")  # a share group's
    assert exc.value.skippable
    with pytest.raises(RecordDecodeError) as exc:
        b.feed(struct.pack(">h", 1) + b"\x00", b"", 2, "b")
    assert not exc.value.skippable
    with pytest.raises(RecordDecodeError):
        b.feed(None, None, 3, "c")
    assert b.feed(*offset_commit("g", "orders", 0, 1), 4, "d")[0]["type"] == "offset_committed"
    assert b.stats.skipped == {"UNKNOWN_RECORD_TYPE": 1}
    assert b.stats.errors == {"MALFORMED_KEY": 1, "MISSING_KEY": 1}
    assert b.stats.records == 4 and b.stats.events == 1


def test_inputs_are_not_modified_and_bridge_options_validated():
    with pytest.raises(ValueError, match="valid: derive, member-epoch"):
        Bridge(absent_assignment_epochs="zero")
    names = {uuid_to_kafka_string(ORDERS): "orders"}
    before = dict(names)
    decode_record(*current("g", "m", 1, 0, assigned=[(ORDERS, [0])]), 1, "x", names)
    assert names == before


def test_map_records_batches_and_bridge_pickles_between_batches():
    import pickle

    bridge = Bridge(NAMES)
    first = [(*member_md("g", "m1", instance="i-1"), 1, "0"), (*current("g", "m1", -2, 4), 2, "1"),
             (struct.pack(">h", 14) + b"\x00\x01g\x00\x01m", b"\x00\x00", 3, "2")]
    events, problems = map_records(first, bridge, flush=False)
    assert [e["type"] for e in events] == ["group_state", "member_left"]
    assert problems == [("2", "UNKNOWN_RECORD_TYPE", "ShareGroupCurrentMemberAssignment (type 14) is not decoded")]
    restored = pickle.loads(pickle.dumps(bridge))  # e.g. Spark state between micro-batches
    second = [(*tomb(8, groupId="g", memberId="m1"), 4, "3"), (*member_md("g", "m2", instance="i-1"), 4, "4")]
    events, problems = map_records(second, restored)
    assert not problems and of(events, "member_left") == []  # the takeover spans the two batches
    assert restored.stats.records == 5 and restored.stats.skipped == {"UNKNOWN_RECORD_TYPE": 1}


# --- the offset-commit fast path agrees with the schema-driven path ---------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=200, deadline=None)
@given(version=st.integers(0, 4), offset=st.integers(-2**63, 2**63 - 1), epoch=st.integers(-2**31, 2**31 - 1),
       meta=st.text(max_size=300), commit_ts=st.integers(-2**63, 2**63 - 1),
       tid=st.one_of(st.none(), st.binary(min_size=16, max_size=16)), group=st.text(max_size=20),
       topic=st.text(max_size=20), partition=st.integers(-2**31, 2**31 - 1),
       ts=st.one_of(st.none(), st.integers(-5, 2**41)), tombstone=st.booleans(), cluster=st.sampled_from([None, "c"]))
def test_offset_commit_fast_path_matches_schema_path(version, offset, epoch, meta, commit_ts, tid, group, topic,
                                                     partition, ts, tombstone, cluster):
    key, value = offset_commit(group, topic, partition, offset, version=version, leader_epoch=epoch, ts=commit_ts,
                               topic_id=tid)
    if tombstone:
        value = None
    fast, slow = Bridge(cluster=cluster), Bridge(cluster=cluster)
    assert fast.feed(key, value, ts, "e") == slow._feed(key, value, ts, "e")
    assert fast.stats.records == slow.stats.records == 1
    assert fast.stats.record_counts() == slow.stats.record_counts()
    assert fast.topic_names.get(tid or bytes(16)) == slow.topic_names.get(tid or bytes(16))


def test_offset_commit_fast_path_falls_back_on_truncation():
    key, value = offset_commit("g", "orders", 0, 1, version=4, topic_id=ORDERS)
    b = Bridge()
    for cut in range(len(value)):
        with pytest.raises(RecordDecodeError):
            b.feed(key, value[:cut], 1, "x")
    assert b.stats.errors == {"MALFORMED_VALUE": len(value)} and b.stats.records == len(value)


def test_bridged_events_decode_with_the_monitors_own_decoder():
    """Every event type the bridge writes passes streaming.decoding (the run/replay input path), and
    writes the declared fields of its type (``state.records``: a renamed key fails, naming it)."""
    from fencewatch.state.records import check_event
    from fencewatch.streaming.ingest.events import event_from_dict

    b = Bridge(NAMES)
    events = feed(b, [
        [member_md("g", "m1", instance="i-1"), group_epoch("g", 1), target_epoch("g", 1),
         current("g", "m1", 1, 0, assigned=[(ORDERS, [0])], epochs=[[1]], pending=[(PAYMENTS, [2])])],
        [offset_commit("g", "orders", 0, 5, version=1, expire=99)],
        [current("g", "m1", -2, 1)],
        [tomb(8, groupId="g", memberId="m1"), tomb(1, group="g", topic="orders", partition=0)],
        [group_md("cg", 3, [{"memberId": "a", "groupInstanceId": "ia", "subscription": sub_bytes(generation=2),
                             "assignment": asg_bytes([("orders", [1])])}])],
        [group_md("cg", 4, []), tomb(2, group="cg"), tomb(3, groupId="g")],
    ])
    types = set()
    for i, e in enumerate(events):
        decoded = event_from_dict(e, seq=i, default_event_id=str(i), coords=f"line {i}")
        assert type(decoded).__name__ not in ("DecodeError", "UnknownType"), (e, decoded)
        check_event("bridge", e)
        types.add(e["type"])
    assert types == {"member_assignment", "member_left", "group_state", "offset_committed", "offset_deleted",
                     "classic_join", "classic_sync"}
    assert of(events, "classic_join")[0]["instance_id"] == "ia"
