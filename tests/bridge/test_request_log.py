"""Request-log lines -> SPEC events (SPEC §10), on vectors built from Kafka's message specs
for every version named there (see ``request_log_lines``), plus Hypothesis: no line crashes it."""

from __future__ import annotations

import json
import uuid
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fencewatch.streaming.ingest.request_log import RequestLogBridge, event_json
from fencewatch.streaming.ingest.events import DecodeError, decode_json_line
from request_log_lines import envelope, heartbeat, kafka_id, log_line, offset_commit, txn_offset_commit

TS = 1795165200123  # 2026-11-20 09:00:00,123 UTC
ORDERS_UUID = uuid.UUID("a1b2c3d4-0000-4000-8000-000000000001")
PAY_UUID = uuid.UUID("a1b2c3d4-0000-4000-8000-000000000002")
ORDERS, PAY = kafka_id(ORDERS_UUID), kafka_id(PAY_UUID)
TOPIC_IDS = {ORDERS: "orders", str(PAY_UUID): "pay"}  # both key forms


def bridge(**kw) -> RequestLogBridge:
    return RequestLogBridge(TOPIC_IDS, **kw)


def one(obj, b=None, eid="0", **kw):
    b = b or bridge()
    return b.map_line(log_line(obj, **kw), eid)


def tp(topic, *parts):
    return {"topic": topic, "partitions": list(parts)}


# -- OffsetCommit ------------------------------------------------------------------------------

@pytest.mark.parametrize("version", range(2, 11))
def test_offset_commit_each_version(version):
    topic = ORDERS if version >= 10 else "orders"
    events = one(offset_commit(version, "g", 7, "m-1", [(topic, [(3, 1200, 4), (5, 80, 4)])], instance="i-1"))
    leader_epoch = 4 if version >= 6 else -1  # committedLeaderEpoch is v6+
    expected = {"type": "offset_commit", "ts": TS, "group_id": "g", "event_id": "0", "member_id": "m-1",
                "member_epoch": 7,
                "offsets": [{"topic": "orders", "partition": 3, "offset": 1200, "leader_epoch": leader_epoch},
                            {"topic": "orders", "partition": 5, "offset": 80, "leader_epoch": leader_epoch}],
                "error_code": 0, "api_version": version}
    if version >= 7:  # groupInstanceId is v7+
        expected = {**{k: v for k, v in expected.items() if k not in ("offsets", "error_code", "api_version")},
                    "instance_id": "i-1", "offsets": expected["offsets"], "error_code": 0, "api_version": version}
    assert events == [expected]
    assert list(events[0]) == list(expected)  # field order as written


def test_offset_commit_before_3_6_names_the_epoch_generation_id():
    events = one(offset_commit(8, "g", 12, "m", [("orders", [(0, 5, 1)])], legacy_names=True))
    assert events[0]["member_epoch"] == 12


def test_offset_commit_v9_fenced_stale_member_epoch():
    events = one(offset_commit(9, "g", 7, "m-1", [("pay", [(3, 1200, 4)])], codes={("pay", 3): 113}))
    assert [(e["member_epoch"], e["error_code"], e["offsets"][0]["partition"]) for e in events] == [(7, 113, 3)]


def test_partitions_answered_differently_give_one_event_per_code_in_first_appearance_order():
    obj = offset_commit(9, "g", 7, "m", [("orders", [(0, 1, 1), (1, 2, 1), (2, 3, 1)]), ("pay", [(0, 4, 1)])],
                        codes={("orders", 1): 10, ("pay", 0): 10, ("orders", 2): 0})
    events = one(obj)
    assert [(e["error_code"], [(o["topic"], o["partition"]) for o in e["offsets"]]) for e in events] == [
        (0, [("orders", 0), ("orders", 2)]), (10, [("orders", 1), ("pay", 0)])]
    assert {e["event_id"] for e in events} == {"0"}


def test_admin_commit_has_empty_member_and_epoch_minus_one():
    events = one(offset_commit(9, "g", -1, "", [("orders", [(0, 9, -1)])]))
    assert (events[0]["member_id"], events[0]["member_epoch"]) == ("", -1)


def test_absent_epoch_and_member_default():
    obj = offset_commit(9, "g", 1, "m", [("orders", [(0, 9, 1)])])
    del obj["request"]["generationIdOrMemberEpoch"], obj["request"]["memberId"]
    events = one(obj)
    assert (events[0]["member_id"], events[0]["member_epoch"]) == ("", -1)


def test_metadata_kept_when_not_empty():
    events = one(offset_commit(9, "g", 1, "m", [("orders", [(0, 9, 1)])], metadata="ckpt-7"))
    assert events[0]["offsets"][0]["metadata"] == "ckpt-7"


def test_v10_unknown_topic_id_becomes_its_uuid_string():
    other = uuid.UUID("0f0f0f0f-1111-4222-8333-444455556666")
    b = bridge()
    events = b.map_line(log_line(offset_commit(10, "g", 3, "m", [(kafka_id(other), [(1, 2, 0)])])), "0")
    assert events[0]["offsets"][0]["topic"] == str(other)
    assert b.unresolved_ids == 1


def test_v10_topic_id_given_as_uuid_string_in_topic_ids_resolves():
    events = one(offset_commit(10, "g", 3, "m", [(PAY, [(1, 2, 0)])]))
    assert events[0]["offsets"][0]["topic"] == "pay"


def test_cluster_field_when_configured():
    events = one(offset_commit(9, "g", 1, "m", [("orders", [(0, 9, 1)])]), bridge(cluster="prod"))
    assert list(events[0])[:3] == ["type", "ts", "cluster"] and events[0]["cluster"] == "prod"


def test_response_without_the_partition_gives_no_error_code():
    obj = offset_commit(9, "g", 1, "m", [("orders", [(0, 9, 1)])])
    obj["response"]["topics"] = []
    b = bridge()
    events = one(obj, b)
    assert "error_code" not in events[0] and b.counts["problem.NO_RESPONSE_PARTITION"] == 1


# -- TxnOffsetCommit -------------------------------------------------------------------------

@pytest.mark.parametrize("version", range(0, 7))
def test_txn_offset_commit_each_version(version):
    topic = ORDERS if version >= 6 else "orders"
    events = one(txn_offset_commit(version, "g", 5, "m-2", [(topic, [(1, 300, 2)])], instance="i-2",
                                   legacy_names=version < 6, codes={(topic, 1): 22}))
    member, epoch = ("m-2", 5) if version >= 3 else ("", -1)  # generationId/memberId/groupInstanceId: v3+
    expected = {"type": "txn_offset_commit", "ts": TS, "group_id": "g", "event_id": "0", "member_id": member,
                "member_epoch": epoch}
    if version >= 3:
        expected["instance_id"] = "i-2"
    expected |= {"offsets": [{"topic": "orders", "partition": 1, "offset": 300,
                              "leader_epoch": 2 if version >= 2 else -1}],
                 "error_code": 22, "api_version": version, "transactional_id": "tx-1", "producer_id": 4000,
                 "producer_epoch": 3}
    assert events == [expected]
    assert list(events[0]) == list(expected)  # field order as written (the declaration's)


# -- ConsumerGroupHeartbeat --------------------------------------------------------------------

def hb(version=1, **kw):
    return log_line(heartbeat(version, "g", kw.pop("member", "m-1"), kw.pop("epoch"), **kw))


@pytest.mark.parametrize("version", [0, 1])
def test_join_gives_heartbeat_then_assignment(version):
    b = bridge()
    events = b.map_line(hb(version, member="" if version == 0 else "m-1", epoch=0, response_epoch=4,
                           response_member="m-1", assignment=[(PAY, [2]), (ORDERS, [1, 0])],
                           subscribed=["pay", "orders"], instance="i-1", owned=[]), "5")
    head = {"ts": TS, "group_id": "g", "event_id": "5", "member_id": "m-1"}
    assert events == [
        {"type": "heartbeat", **head, "request_epoch": 0, "response_epoch": 4, "error_code": 0},
        {"type": "member_assignment", **head, "protocol": "consumer", "member_epoch": 4,
         "assigned": [tp("orders", 0, 1), tp("pay", 2)], "pending_revocation": [],
         "subscribed_topics": ["orders", "pay"], "instance_id": "i-1"}]


def joined(b):
    b.map_line(hb(epoch=0, response_epoch=4, assignment=[(ORDERS, [0, 1])], subscribed=["orders"], owned=[]), "0")
    return b


def test_steady_heartbeat_changes_nothing():
    b = joined(bridge())
    events = b.map_line(hb(epoch=4, owned=[(ORDERS, [0, 1])]), "1")
    assert [e["type"] for e in events] == ["heartbeat"]


def test_new_epoch_without_assignment_carries_the_last_one():
    b = joined(bridge())
    events = b.map_line(hb(epoch=4, response_epoch=6), "1")
    assert events[1] == {"type": "member_assignment", "ts": TS, "group_id": "g", "event_id": "1",
                         "member_id": "m-1", "protocol": "consumer", "member_epoch": 6,
                         "previous_member_epoch": 4, "assigned": [tp("orders", 0, 1)],
                         "pending_revocation": [], "subscribed_topics": ["orders"]}


def test_revocation_partitions_still_owned_are_pending():
    b = joined(bridge())
    b.map_line(hb(epoch=4, owned=[(ORDERS, [0, 1])]), "1")
    events = b.map_line(hb(epoch=4, response_epoch=4, assignment=[(ORDERS, [0])]), "2")
    assert events[1]["assigned"] == [tp("orders", 0)]
    assert events[1]["pending_revocation"] == [tp("orders", 1)]  # the owned set carried from line 1
    events = b.map_line(hb(epoch=4, response_epoch=5, owned=[(ORDERS, [0])]), "3")
    assert (events[1]["member_epoch"], events[1]["pending_revocation"]) == (5, [])


@pytest.mark.parametrize("epoch, reason", [(-1, "leave"), (-2, "static_leave")])
def test_leave(epoch, reason):
    b = joined(bridge())
    events = b.map_line(hb(epoch=epoch, instance="i-1" if epoch == -2 else None), "9")
    assert [e["type"] for e in events] == ["heartbeat", "member_left"]
    assert events[1]["reason"] == reason and ("g", "m-1") not in b.members
    assert events[1].get("instance_id") == ("i-1" if epoch == -2 else None)


@pytest.mark.parametrize("code, name", [(16, "NOT_COORDINATOR"), (14, "COORDINATOR_LOAD_IN_PROGRESS"),
                                        (15, "COORDINATOR_NOT_AVAILABLE")])
def test_coordinator_errors_are_dropped_and_counted(code, name):
    b = bridge()
    assert b.map_line(hb(epoch=4, error=code), "0") == []
    assert b.counts[f"dropped.{name}"] == 1
    assert b.routing == {("ConsumerGroupHeartbeat", name): 1}  # per API and error: the bridge's metric


@pytest.mark.parametrize("code, name", [(16, "NOT_COORDINATOR"), (14, "COORDINATOR_LOAD_IN_PROGRESS"),
                                        (15, "COORDINATOR_NOT_AVAILABLE")])
@pytest.mark.parametrize("transactional", [False, True])
def test_commits_answered_with_coordinator_errors_give_no_event(code, name, transactional):
    """Contract §10.1 a, for APIs 8 and 28 as for 68 (a fresh Apache Kafka answers a commit sent
    before ``__consumer_offsets`` exists so: ``tests/fixtures/kafka``). A partition answered
    otherwise in the same request still gives its event."""
    make = txn_offset_commit if transactional else offset_commit
    b = bridge()
    routed = make(9 if not transactional else 3, "g", 4, "m-1", [("orders", [(0, 10, 1), (1, 11, 1)])],
                  codes={("orders", 0): code, ("orders", 1): code})
    assert b.map_line(log_line(routed), "0") == []
    assert b.counts[f"dropped.{name}"] == 1
    mixed = make(9 if not transactional else 3, "g", 4, "m-1", [("orders", [(0, 10, 1), (1, 11, 1)])],
                 codes={("orders", 0): code})
    events = b.map_line(log_line(mixed), "1")
    assert [(e["error_code"], [o["partition"] for o in e["offsets"]]) for e in events] == [(0, [1])]
    assert b.counts[f"dropped.{name}"] == 2


def test_fenced_member_epoch_is_a_heartbeat_and_the_member_stays():
    """Contract §10.1 g: FENCED_MEMBER_EPOCH (110) keeps the member (the coordinator still holds
    it); its rejoin at epoch 0 under the same id is a change from the epoch it had."""
    b = joined(bridge())
    events = b.map_line(hb(epoch=3, response_epoch=-1, error=110), "1")
    assert events == [{"type": "heartbeat", "ts": TS, "group_id": "g", "event_id": "1", "member_id": "m-1",
                       "request_epoch": 3, "response_epoch": -1, "error_code": 110}]
    assert b.members[("g", "m-1")].epoch == 4
    events = b.map_line(hb(epoch=0, response_epoch=4, assignment=[(ORDERS, [0, 1])], owned=[]), "2")
    assert [e["type"] for e in events] == ["heartbeat", "member_assignment"]
    assert (events[1]["member_epoch"], events[1]["previous_member_epoch"]) == (4, 4)


def test_unknown_member_id_gives_member_left_fenced_once():
    """Contract §10.1 g: UNKNOWN_MEMBER_ID (25) means the coordinator has no such member (removed
    by a session timeout, which is no request): after the heartbeat, a ``member_left`` ``fenced``,
    once, for a member the bridge knew; the instance id of a static member remembered."""
    b = joined(bridge())
    b.map_line(hb(member="s-1", epoch=0, response_epoch=5, assignment=[(ORDERS, [2])], owned=[], instance="i-9"), "1")
    events = b.map_line(hb(epoch=4, response_epoch=0, error=25), "2")
    assert events == [{"type": "heartbeat", "ts": TS, "group_id": "g", "event_id": "2", "member_id": "m-1",
                       "request_epoch": 4, "response_epoch": 0, "error_code": 25},
                      {"type": "member_left", "ts": TS, "group_id": "g", "event_id": "2", "member_id": "m-1",
                       "reason": "fenced"}]
    assert ("g", "m-1") not in b.members
    # its leave, answered 25 too: the member has left already
    assert [e["type"] for e in b.map_line(hb(epoch=-1, response_epoch=0, error=25), "3")] == ["heartbeat"]
    # a member the bridge never saw
    assert [e["type"] for e in b.map_line(hb(member="x-1", epoch=7, response_epoch=0, error=25), "4")] == ["heartbeat"]
    events = b.map_line(hb(member="s-1", epoch=5, response_epoch=0, error=25), "5")
    assert events[1] == {"type": "member_left", "ts": TS, "group_id": "g", "event_id": "5", "member_id": "s-1",
                         "reason": "fenced", "instance_id": "i-9"}


def test_unknown_member_id_without_the_tracker_gives_member_left_each_time():
    """``carry=False`` cannot know whether it saw the member: every heartbeat answered 25 gives
    ``member_left`` ``fenced`` (the group state ignores one for a member it does not hold)."""
    b = bridge(carry=False)
    for n, epoch in enumerate((4, -1)):
        events = b.map_line(hb(epoch=epoch, response_epoch=0, error=25), str(n))
        assert [(e["type"], e.get("reason")) for e in events] == [("heartbeat", None), ("member_left", "fenced")]
    assert [e["type"] for e in b.map_line(hb(epoch=4, response_epoch=0, error=110), "2")] == ["heartbeat"]


def test_member_seen_first_mid_life_gets_no_assignment_until_one_arrives():
    b = bridge()
    assert [e["type"] for e in b.map_line(hb(epoch=8), "0")] == ["heartbeat"]
    assert b.counts["problem.ASSIGNMENT_NOT_SEEN"] == 1
    events = b.map_line(hb(epoch=8, response_epoch=9, assignment=[(ORDERS, [3])]), "1")
    assert events[1]["assigned"] == [tp("orders", 3)] and events[1]["previous_member_epoch"] == 8


def test_stateless_mode_says_unchanged_as_null():
    b = bridge(carry=False)
    events = b.map_line(hb(epoch=4, response_epoch=6), "1")
    assert events[1] == {"type": "member_assignment", "ts": TS, "group_id": "g", "event_id": "1",
                         "member_id": "m-1", "protocol": "consumer", "member_epoch": 6, "assigned": None,
                         "pending_revocation": []}
    events = b.map_line(hb(epoch=4, response_epoch=4, assignment=[(ORDERS, [0])], owned=[(ORDERS, [0, 1])]), "2")
    assert (events[1]["assigned"], events[1]["pending_revocation"]) == ([tp("orders", 0)], [tp("orders", 1)])
    assert b.members == {}


# -- the line around the JSON --------------------------------------------------------------------

COMMIT = offset_commit(9, "g", 1, "m", [("orders", [(0, 9, 1)])])


def test_message_only_line_and_bare_json_take_the_record_timestamp():
    b = bridge()
    body = json.dumps(COMMIT)
    assert b.map_line("Completed request:" + body, "0", ts=77)[0]["ts"] == 77
    assert b.map_line(body, "1", ts=78)[0]["ts"] == 78
    assert b.map_line(body, "2") == [] and b.counts["broken.MISSING_TIMESTAMP"] == 1


def test_bytes_input():
    assert bridge().map_line(log_line(COMMIT).encode(), "0")[0]["ts"] == TS


def test_log_timezone_and_iso_offsets():
    assert one(COMMIT, bridge(tz=ZoneInfo("Europe/Paris")))[0]["ts"] == TS - 3_600_000
    assert one(COMMIT, stamp="2026-11-20T10:00:00,123+01:00")[0]["ts"] == TS
    assert one(COMMIT, stamp="2026-11-20T09:00:00.123Z")[0]["ts"] == TS
    assert one(COMMIT, bridge(tz=ZoneInfo("Europe/Paris")), stamp="2026-11-20T09:00:00,123Z")[0]["ts"] == TS


def test_other_apis_and_loggers_are_skipped_and_counted():
    b = bridge()
    fetch = envelope(1, 17, {"replicaId": -1, "topics": []}, {"errorCode": 0, "responses": []})
    assert b.map_line(log_line(fetch), "0") == []
    assert b.map_line("[2026-11-20 09:00:00,123] INFO [KafkaServer id=1] started (kafka.server.KafkaServer)",
                      "1") == []
    assert b.map_line("", "2") == []
    assert b.map_line("[2026-11-20 09:00:00,123] DEBUG Completed request:{} (kafka.other)", "3") == []
    assert (b.counts["skipped.OTHER_API"], b.counts["skipped.OTHER_LOGGER"], b.counts["skipped.EMPTY"]) == (1, 2, 1)
    assert not b.problems


@pytest.mark.parametrize("line, code", [
    ("[2026-11-20 09:00:00,123] DEBUG Completed request:{\"requestHeader\":{\"requestApiKey\":8 (kafka.request.logger)",
     "BAD_JSON"),
    ("[2026-11-20 09:00:00,123] DEBUG Completed request:{\"a\":1} (kafka.request.logger)", "MISSING_FIELD"),
    ("[yesterday] DEBUG Completed request:{} (kafka.request.logger)", "BAD_TIMESTAMP"),
    ("[2026-13-20 09:00:00,123] DEBUG Completed request:{} (kafka.request.logger)", "BAD_TIMESTAMP"),
    (log_line(offset_commit(9, "g", "seven", "m", [("orders", [(0, 9, 1)])])), "BAD_FIELD"),
    (log_line(offset_commit(10, "g", 1, "m", [("not-an-id", [(0, 9, 1)])])), "BAD_TOPIC_ID"),
    (log_line(offset_commit(9, "g", 1, "m", [("orders", [(0, 1 << 64, 1)])])), "BAD_FIELD"),
    (b"\xff\xfe[", "BAD_ENCODING"),
])
def test_broken_lines_are_reported_with_a_reason(line, code):
    b = bridge()
    assert b.map_line(line, "4") == []
    assert b.counts[f"broken.{code}"] == 1
    eid, got, detail = b.problems[-1]
    assert (eid, got) == ("4", code) and detail


def test_events_are_what_the_job_decodes():
    """Every event kind the bridge writes passes the job's own input decoder."""
    b = bridge()
    lines = [log_line(offset_commit(10, "g", 7, "m-1", [(ORDERS, [(0, 5, 1)])], codes={(ORDERS, 0): 113},
                                    instance="i")),
             log_line(txn_offset_commit(5, "g", 7, "m-1", [("orders", [(0, 5, 1)])])),
             hb(epoch=0, response_epoch=4, assignment=[(ORDERS, [0])], owned=[], subscribed=["orders"]),
             hb(epoch=4, response_epoch=5),
             hb(epoch=-1)]
    events = [e for n, line in enumerate(lines) for e in b.map_line(line, str(n))]
    assert [e["type"] for e in events] == ["offset_commit", "txn_offset_commit", "heartbeat", "member_assignment",
                                           "heartbeat", "member_assignment", "heartbeat", "member_left"]
    for seq, e in enumerate(events):
        decoded = decode_json_line(json.dumps(e), seq=seq, default_event_id="x", coords="c")
        assert not isinstance(decoded, DecodeError), (e, decoded)


# -- arbitrary input never crashes it --------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(1 << 70), max_value=1 << 70) | st.floats() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20)
field_names = st.sampled_from(["requestHeader", "requestApiKey", "request", "response", "topics", "partitions",
                               "groupId", "memberId", "memberEpoch", "assignment", "topicPartitions", "topicId",
                               "name", "errorCode", "partitionIndex", "committedOffset", "generationId"])


def mutate(obj, draw):
    """A valid body with one value somewhere replaced by arbitrary JSON."""
    if isinstance(obj, dict) and obj:
        k = draw(st.sampled_from(sorted(obj)))
        if draw(st.booleans()):
            return {**obj, k: draw(json_values)}
        return {**obj, k: mutate(obj[k], draw)}
    if isinstance(obj, list) and obj:
        i = draw(st.integers(0, len(obj) - 1))
        return obj[:i] + [mutate(obj[i], draw)] + obj[i + 1:]
    return draw(json_values)


VALID = [offset_commit(10, "g", 1, "m", [(ORDERS, [(0, 1, 1)])]), txn_offset_commit(2, "g", 1, "m", [("o", [(0, 1, 1)])]),
         heartbeat(1, "g", "m", 0, response_epoch=1, assignment=[(ORDERS, [0])], owned=[])]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.text(), st.text(st.characters(codec=None, categories=None)), st.binary()), st.sampled_from(["", "[2026-11-20 09:00:00,123] DEBUG Completed request:",
                                                          "Completed request:"]))
def test_arbitrary_lines_never_crash(text, prefix):
    b = bridge()
    line = prefix + text if isinstance(text, str) else prefix.encode() + text
    assert isinstance(b.map_line(line, "0", ts=1), list)
    assert b.counts["lines"] == 1


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_arbitrary_json_never_crashes(data):
    b = bridge()
    obj = mutate(data.draw(st.sampled_from(VALID)), data.draw)
    if data.draw(st.booleans()):
        obj = data.draw(st.dictionaries(field_names, json_values, max_size=5))
    events = b.map_line(log_line(obj) if isinstance(obj, dict) else json.dumps(obj), "0", ts=1)
    assert isinstance(events, list)
    assert b.counts["broken.INTERNAL"] == 0, b.problems
    for e in events:
        json.dumps(e)  # what the bridge writes


def test_lone_surrogates_are_a_bad_encoding():
    b = bridge()
    body = json.dumps(COMMIT, ensure_ascii=False).replace('"g"', '"\udcff"')
    assert b.map_line(body, "0", ts=1) == [] and b.counts["broken.BAD_ENCODING"] == 1


def test_topics_without_partitions_give_no_event():
    b = bridge()
    assert b.map_line(log_line(offset_commit(9, "g", 1, "m", [("orders", [])])), "0") == []
    assert b.counts["skipped.EMPTY_COMMIT"] == 1
    events = b.map_line(log_line(offset_commit(9, "g", 1, "m", [("pay", []), ("orders", [(0, 1, 1)])])), "1")
    assert [o["topic"] for e in events for o in e["offsets"]] == ["orders"]


def test_a_shippers_prefix_before_the_line_is_ignored():
    line = "<15>1 2026-11-20T09:00:00Z broker-1 kafka[42]: " + log_line(COMMIT)
    assert bridge().map_line(line, "0")[0]["ts"] == TS


@pytest.mark.parametrize("api, version", [(8, 9), (8, 10), (28, 3), (28, 6)])
@pytest.mark.parametrize("carry", [True, False])
def test_api_version_reaches_the_typed_commit(api, version, carry):
    """Contract §10.1 h: the request's ``requestApiVersion`` is the commit event's ``api_version``
    and, through the JSON the commands write (``event_json``, as the Spark mapper and the bridges
    do), ``state.events.OffsetCommit.api_version`` where the rules read it."""
    topic = ORDERS if version >= (10 if api == 8 else 6) else "orders"
    obj = (offset_commit(version, "g", 4, "m-1", [(topic, [(0, 5, 1)])]) if api == 8 else
           txn_offset_commit(version, "g", 4, "m-1", [(topic, [(0, 5, 1)])], legacy_names=version < 6))
    (event,) = bridge(carry=carry).events(log_line(obj), "0")
    assert event.api_version == version
    typed = decode_json_line(event_json(event), seq=0, default_event_id="0", coords="line 1")
    assert (typed.api_version, typed.transactional, typed.member_epoch) == (version, api == 28, 4)


def test_a_commit_line_without_its_version_gives_none():
    line = log_line(offset_commit(9, "g", 4, "m-1", [("orders", [(0, 5, 1)])])).replace('"requestApiVersion":9,', "")
    (event,) = bridge().map_line(line, "0")
    assert "api_version" not in event
    assert decode_json_line(json.dumps(event), seq=0, default_event_id="0", coords="line 1").api_version is None
