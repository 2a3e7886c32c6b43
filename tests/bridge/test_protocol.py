"""Embedded consumer protocol and KIP-341 user data (mirrors ConsumerProtocolTest,
StickyAssignorTest's user-data cases and DumpLogSegmentsTest's embedded-protocol case)."""

from __future__ import annotations

import struct

import pytest

from bridge_encoder import sticky_user_data, version_prefixed
from fencewatch.streaming.ingest.consumer_offsets.protocol import (
    DEFAULT_GENERATION,
    claimed_generation_and_owned,
    parse_assignment,
    parse_cooperative_sticky_user_data,
    parse_sticky_user_data,
    parse_subscription,
)
from fencewatch.streaming.ingest.consumer_offsets.records import RecordDecodeError
from fencewatch.streaming.ingest.consumer_offsets.record_types import CONSUMER_PROTOCOL_ASSIGNMENT, CONSUMER_PROTOCOL_SUBSCRIPTION


def subscription(version, **fields):
    data = {"topics": ["foo"], "userData": None, "ownedPartitions": [], "generationId": -1, "rackId": None}
    data.update(fields)
    return version_prefixed(CONSUMER_PROTOCOL_SUBSCRIPTION, version, data)


def test_dump_log_segments_embedded_subscription_and_assignment():
    # ConsumerProtocol.serializeSubscription(new Subscription([foo], null, [foo-0], 0, "rack")) at v3, and
    # serializeAssignment([foo-0]); DumpLogSegmentsTest expects topics [foo], owned foo[0], generation 0, rack.
    sub = parse_subscription(subscription(3, ownedPartitions=[{"topic": "foo", "partitions": [0]}],
                                          generationId=0, rackId="rack"))
    assert (sub.topics, sub.user_data, sub.owned_partitions, sub.generation_id, sub.rack_id) == (
        ("foo",), None, (("foo", (0,)),), 0, "rack")
    asg = parse_assignment(version_prefixed(CONSUMER_PROTOCOL_ASSIGNMENT, 3, {
        "assignedPartitions": [{"topic": "foo", "partitions": [0]}], "userData": None}))
    assert asg.assigned_partitions == (("foo", (0,)),) and asg.user_data is None


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_subscription_versions(version):
    sub = parse_subscription(subscription(version, ownedPartitions=[{"topic": "foo", "partitions": [1, 2]}],
                                          generationId=5, rackId="r", userData=b"u"))
    assert sub.topics == ("foo",) and sub.user_data == b"u"
    assert sub.owned_partitions == ((("foo", (1, 2)),) if version >= 1 else ())
    assert sub.generation_id == (5 if version >= 2 else -1)
    assert sub.rack_id == ("r" if version >= 3 else None)


def test_newer_subscription_version_is_read_with_newest_layout():
    body = subscription(3, generationId=9)[2:]
    sub = parse_subscription(struct.pack(">h", 7) + body + b"future-fields")
    assert sub.generation_id == 9 and sub.version == 3


@pytest.mark.parametrize("data", [b"", b"\x00", b"\xff\xff", b"\x00\x01\x00\x00\x00\x05"])
def test_malformed_subscription_is_a_clear_error(data):
    with pytest.raises(RecordDecodeError) as exc:
        parse_subscription(data)
    assert exc.value.code == "MALFORMED_PROTOCOL"


def test_sticky_user_data_v1_v0_and_garbage():
    v1 = parse_sticky_user_data(sticky_user_data([("foo", [0, 2]), ("bar", [1])], 4))
    assert v1.previous_assignment == (("foo", (0, 2)), ("bar", (1,))) and v1.generation == 4
    v0 = parse_sticky_user_data(sticky_user_data([("foo", [3])], None))
    assert v0.previous_assignment == (("foo", (3,)),) and v0.generation is None
    bad = parse_sticky_user_data(b"\x00\x00\x00\x09\x00")
    assert bad.previous_assignment == () and bad.generation == DEFAULT_GENERATION
    assert parse_sticky_user_data(None).generation is None


def test_cooperative_sticky_user_data():
    assert parse_cooperative_sticky_user_data(struct.pack(">i", 12)) == 12
    assert parse_cooperative_sticky_user_data(b"\x01") == DEFAULT_GENERATION
    assert parse_cooperative_sticky_user_data(None) is None


def test_claims_per_assignor():
    # sticky (eager): ownership and generation from the user data, even when the subscription has both
    sub = parse_subscription(subscription(3, userData=sticky_user_data([("foo", [1])], 3),
                                          ownedPartitions=[{"topic": "foo", "partitions": [0]}], generationId=8))
    assert claimed_generation_and_owned("sticky", sub) == (3, (("foo", (1,)),))
    # cooperative-sticky with a v2+ subscription: the subscription's fields
    assert claimed_generation_and_owned("cooperative-sticky", sub) == (8, (("foo", (0,)),))
    # cooperative-sticky with a v1 subscription: generation from the user data
    sub1 = parse_subscription(subscription(1, userData=struct.pack(">i", 6),
                                           ownedPartitions=[{"topic": "foo", "partitions": [0]}]))
    assert claimed_generation_and_owned("cooperative-sticky", sub1) == (6, (("foo", (0,)),))
    # range: subscription generation or -1
    assert claimed_generation_and_owned("range", sub1) == (-1, (("foo", (0,)),))
    assert claimed_generation_and_owned("range", sub) == (8, (("foo", (0,)),))
    # sticky without user data: nothing owned, no generation
    assert claimed_generation_and_owned("sticky", parse_subscription(subscription(0))) == (-1, ())
