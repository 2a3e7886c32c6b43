"""JoinGroup (11), SyncGroup (14) and LeaveGroup (13) lines -> a classic group's events (contract
§10): vectors for every version of Kafka's message specs (``request_log_lines``), broken lines,
and the captures of real brokers in ``tests/fixtures/kafka/classic/`` (librdkafka and Apache
Kafka's own ``KafkaConsumer``), decoded and judged."""

from __future__ import annotations

import base64
import json
import os

import pytest

from fencewatch.state.config import RulesConfig
from fencewatch.state.engine import LocalEngine
from fencewatch.streaming.ingest.events import decode_json_line, decode_json_lines
from fencewatch.streaming.ingest.request_log import RequestLogBridge, event_json
from fencewatch.streaming.ingest.request_log.classic import assigned_partitions
from request_log_lines import consumer_assignment, join_group, leave_group, log_line, sync_group

CAPTURES = os.path.join(os.path.dirname(__file__), "..", "fixtures", "kafka", "classic")
VERSIONS = sorted(v for v in os.listdir(CAPTURES) if os.path.isdir(os.path.join(CAPTURES, v)))


def one(obj, b=None):
    b = b or RequestLogBridge()
    return b.map_line(log_line(obj), "0")


def broken(obj_or_line) -> tuple[list, RequestLogBridge]:
    b = RequestLogBridge()
    line = obj_or_line if isinstance(obj_or_line, str) else log_line(obj_or_line)
    return b.events(line, "7"), b


# -- JoinGroup ---------------------------------------------------------------------------------

@pytest.mark.parametrize("version", range(10))
def test_join_group_each_version(version):
    leader = one(join_group(version, "g", "m-1", 4, leader="m-1", members=[("m-1", "i-1"), ("m-2", None)],
                            instance="i-1"))
    follower = one(join_group(version, "g", "m-2", 4, leader="m-1"))
    head = {"type": "classic_generation", "ts": 1795165200123, "group_id": "g", "event_id": "0"}
    instance = {"instance_id": "i-1"} if version >= 5 else {}  # groupInstanceId is v5+
    assert leader == [{**head, "member_id": "m-1", "generation": 4, "protocol": "range", **instance,
                       "members": ["m-1", "m-2"]}]
    assert follower == [{**head, "member_id": "m-2", "generation": 4, "protocol": "range"}]


@pytest.mark.parametrize("code, count", [(79, "skipped.JOIN_GROUP_ANSWERED"), (25, "skipped.JOIN_GROUP_ANSWERED"),
                                         (16, "dropped.NOT_COORDINATOR")])
def test_a_join_group_answered_with_an_error_gives_no_generation(code, count):
    b = RequestLogBridge()
    assert one(join_group(5, "g", "m-1", -1, code=code), b) == []
    assert b.counts[count] == 1


def test_a_join_group_of_another_protocol_type_is_skipped():
    obj = join_group(7, "connect-cluster", "w-1", 3, leader="w-1", members=[("w-1", None)])
    obj["request"]["protocolType"] = "connect"
    b = RequestLogBridge()
    assert one(obj, b) == [] and b.counts["skipped.NOT_CONSUMER_PROTOCOL"] == 1


# -- SyncGroup ---------------------------------------------------------------------------------

@pytest.mark.parametrize("version", range(6))
def test_sync_group_each_version(version):
    given = {"m-1": consumer_assignment({"orders": [0, 1], "pay": [3]}),
             "m-2": consumer_assignment({"orders": [2]}, version=3), "m-3": b""}
    events = one(sync_group(version, "g", "m-1", 4, given, assignment=given["m-1"]))
    assert events == [{"type": "classic_sync", "ts": 1795165200123, "group_id": "g", "event_id": "0", "generation": 4,
                       "assignments": {"m-1": [{"topic": "orders", "partitions": [0, 1]},
                                               {"topic": "pay", "partitions": [3]}],
                                       "m-2": [{"topic": "orders", "partitions": [2]}], "m-3": []}}]
    typed = decode_json_line(event_json(RequestLogBridge().events(log_line(sync_group(version, "g", "m-1", 4, given)),
                                                                  "0")[0]), seq=0, default_event_id="0", coords="-")
    assert dict(typed.assignments)["m-2"] == (("orders", 2),)


def test_a_followers_sync_group_and_a_rejected_one_give_no_assignment():
    b = RequestLogBridge()
    assert one(sync_group(5, "g", "m-2", 4, assignment=consumer_assignment({"orders": [2]})), b) == []
    assert one(sync_group(5, "g", "m-1", 4, {"m-1": b""}, code=22), b) == []  # ILLEGAL_GENERATION
    assert b.counts["skipped.SYNC_GROUP_FOLLOWER"] == 1 and b.counts["skipped.SYNC_GROUP_ANSWERED"] == 1


@pytest.mark.parametrize("version", [0, 3, 5])
def test_a_sync_group_answered_rebalance_in_progress_says_a_join_phase_began(version):
    """ClassicGroup.prepareRebalance answers the pending SyncGroups REBALANCE_IN_PROGRESS."""
    events = one(sync_group(version, "g", "m-1", 4, {"m-1": b""}, code=27))
    assert events == [{"type": "group_state", "ts": 1795165200123, "group_id": "g", "event_id": "0",
                       "state": "PreparingRebalance", "protocol": "classic"}]


# -- LeaveGroup --------------------------------------------------------------------------------

@pytest.mark.parametrize("version", range(6))
def test_leave_group_each_version(version):
    members = [("m-1", None), ("", "i-2")] if version >= 3 else [("m-1", None)]
    obj = leave_group(version, "g", members)
    if version >= 3:  # the coordinator answers a static member under its member id
        obj["response"]["members"][1]["memberId"] = "m-2"
    head = {"type": "member_left", "ts": 1795165200123, "group_id": "g", "event_id": "0", "reason": "leave"}
    want = [{**head, "member_id": "m-1"}]
    if version >= 3:
        want.append({**head, "member_id": "m-2", "instance_id": "i-2"})
    assert [{k: e[k] for k in want[0] | e} for e in one(obj)] == want


def test_leave_group_answers_each_member_on_its_own():
    obj = leave_group(5, "g", [("m-1", None), ("m-2", None)], codes={"m-2": 25})
    assert [e["member_id"] for e in one(obj)] == ["m-1"]


# -- broken lines: one problem each, never a traceback -------------------------------------------

def _bad_assignment():
    obj = sync_group(5, "g", "m-1", 4, {"m-1": b""})
    obj["request"]["assignments"][0]["assignment"] = base64.b64encode(b"\x00\x00\x00\x00\x00\x09or").decode()
    return obj


def _not_base64():
    obj = sync_group(5, "g", "m-1", 4, {"m-1": b""})
    obj["request"]["assignments"][0]["assignment"] = "not base64!"
    return obj


def _no_response():
    obj = join_group(5, "g", "m-1", 3)
    del obj["response"]
    return obj


def _leave_v1_without_member():
    obj = leave_group(1, "g", [("m-1", None)])
    obj["request"]["memberId"] = ""
    return obj


@pytest.mark.parametrize("make, code", [(_bad_assignment, "BAD_FIELD"), (_not_base64, "BAD_FIELD"),
                                        (_no_response, "BAD_FIELD"), (_leave_v1_without_member, "MISSING_FIELD")],
                         ids=["truncated-assignment", "not-base64", "no-response", "leave-without-member"])
def test_a_malformed_classic_line_is_one_problem(make, code):
    events, b = broken(make())
    assert events == [] and b.counts[f"broken.{code}"] == 1 and b.counts["broken.INTERNAL"] == 0
    [(eid, got, detail)] = list(b.problems)
    assert (eid, got) == ("7", code) and "\n" not in detail and detail


# -- real brokers ------------------------------------------------------------------------------

def _capture(version):
    with open(os.path.join(CAPTURES, version, "request-log.txt"), encoding="utf-8") as f:
        return f.readlines()


@pytest.mark.parametrize("version", VERSIONS)
def test_every_classic_line_of_the_captures_decodes(version):
    b = RequestLogBridge()
    for n, line in enumerate(_capture(version)):
        b.events(line, str(n))
    c = b.counts
    assert not [k for k in c if k.startswith("broken.")], list(b.problems)
    assert c["JOIN_GROUP"] and c["SYNC_GROUP"] and c["LEAVE_GROUP"]


@pytest.mark.parametrize("version", VERSIONS)
def test_the_leaders_assignment_is_what_each_follower_was_sent(version):
    """The leader's SyncGroup request (decoded) against each follower's SyncGroup response (the
    coordinator's copy of it): the same partitions, member by member."""
    b = RequestLogBridge()
    given: dict[tuple[str, int], dict] = {}
    received: dict[tuple[str, int, str], list] = {}
    for n, line in enumerate(_capture(version)):
        for e in b.map_line(line, str(n)):
            if e["type"] == "classic_sync":
                given[(e["group_id"], e["generation"])] = e["assignments"]
        body = json.loads(line[line.index("{"):line.rindex("}") + 1])
        if body["requestHeader"]["requestApiKey"] == 14 and body["response"]["errorCode"] == 0:
            req = body["request"]
            mine = assigned_partitions(req["memberId"], base64.b64decode(body["response"]["assignment"]))
            received[(req["groupId"], req["generationId"], req["memberId"])] = mine
    assert given and received
    for (group, gen, member), tps in received.items():
        assert given[(group, gen)][member] == tps, (group, gen, member)


@pytest.mark.parametrize("version", VERSIONS)
def test_the_captures_commits_are_judged_as_the_broker_answered(version):
    """The request log alone (commits, joins, syncs, leaves), replayed: every commit the model
    judges, it judges as the broker answered."""
    b = RequestLogBridge()
    lines = [event_json(e) for n, line in enumerate(_capture(version)) for e in b.events(line, str(n))]
    errors: list = []
    events = decode_json_lines(lines, errors, {})
    assert not errors
    eng = LocalEngine(RulesConfig(warmup_ms=0))
    eng.feed_all(events)
    judged = [cv for cv in eng.out.commits if cv.model_agrees is not None]
    assert judged and all(cv.model_agrees for cv in judged), [
        (cv.event_id, cv.broker_error, cv.parts[0].strict) for cv in judged if not cv.model_agrees]
    if version.startswith("load-"):  # the group under churn: the rejections are judged too
        assert {cv.broker_error for cv in judged} == {"NONE", "ILLEGAL_GENERATION", "REBALANCE_IN_PROGRESS"}
