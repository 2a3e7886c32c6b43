"""Streams groups' records (KIP-1071) -> contract events, one edge at a time. Record sequences
follow what Kafka's ``GroupMetadataManager.streamsGroupHeartbeat`` writes (member metadata,
topology, group epoch, target assignment, current assignment) and what a compacted log may hold
(a current assignment before its topology), and what the rules (``state.streams``) make of the
events: the partitions each member's active tasks own through the topology. The real sequences
are the captures' (``test_streams_captures.py``, ``test_streams_model.py``)."""

from __future__ import annotations

import pickle

import pytest

from bridge_encoder import encode_record
from fencewatch.streaming.ingest.consumer_offsets.mapping import Bridge, map_records
from fencewatch.streaming.ingest.consumer_offsets.records import RecordDecodeError
from fencewatch.streaming.runtime.replay import judge_events

APP = "app"
IN, REP = "app-in", "app-by-key-repartition"


def topology(group=APP):
    """Subtopology 0 reads ``IN`` (and writes the repartition topic), 1 reads ``REP``."""
    return encode_record(23, {"groupId": group}, 0, {"epoch": 0, "subtopologies": [
        {"subtopologyId": "0", "sourceTopics": [IN], "repartitionSinkTopics": [REP]},
        {"subtopologyId": "1", "repartitionSourceTopics": [
            {"name": REP, "partitions": 4, "replicationFactor": 0, "topicConfigs": []}]}]})


def member(m, instance=None, group=APP):
    return encode_record(19, {"groupId": group, "memberId": m}, 0, {
        "instanceId": instance, "rackId": None, "clientId": f"{m}-consumer", "clientHost": "/127.0.0.1",
        "rebalanceTimeoutMs": 1000, "topologyEpoch": 0, "processId": f"p-{m}", "userEndpoint": None,
        "clientTags": []})


def group_epoch(epoch, group=APP):
    return encode_record(17, {"groupId": group}, 0, {"epoch": epoch, "metadataHash": 1})


def target_epoch(epoch, group=APP):
    return encode_record(20, {"groupId": group}, 0, {"assignmentEpoch": epoch})


def tasks(*items):
    """``("0", [0, 1], [3, 4])``: subtopology, partitions, assignment epochs (or None)."""
    out = []
    for sub, parts, *epochs in items:
        t = {"subtopologyId": sub, "partitions": list(parts)}
        if epochs and epochs[0] is not None:
            t["assignmentEpochs"] = list(epochs[0])
        out.append(t)
    return out


def current(m, epoch, prev=0, state=1, active=(), standby=(), pending=(), group=APP):
    return encode_record(22, {"groupId": group, "memberId": m}, 0, {
        "memberEpoch": epoch, "previousMemberEpoch": prev, "state": state, "activeTasks": tasks(*active),
        "standbyTasks": tasks(*standby), "activeTasksPendingRevocation": tasks(*pending)})


def tomb(record_type, **key):
    return encode_record(record_type, key)


def run(records, bridge=None, *, one_batch=True):
    """The records through ``bridge``, as one coordinator batch (one timestamp) or one a batch."""
    bridge = bridge or Bridge()
    events, problems = map_records([(k, v, 1000 + (0 if one_batch else n), str(n)) for n, (k, v) in enumerate(records)],
                                   bridge)
    assert problems == []
    return events, bridge


def of(events, kind):
    return [e for e in events if e["type"] == kind]


def model(events):
    """The events through the rules (``state``): the group as the model then holds it."""
    result = judge_events(events)
    assert not result.errors and not result.unknown_types, result.errors[:3]
    (g,) = result.groups
    return g


def test_a_current_assignment_is_its_active_tasks_and_the_topology_their_partitions():
    """The bridge writes the active tasks with their epochs (standby tasks own no partition for
    commits: Kafka's ``StreamsGroup.createAssignmentEpochValidator`` looks among active tasks only)
    and the topology as ``streams_topology``; the rules make task (s, p) partition p of each of
    s's source and repartition source topics, at the task's assignment epoch."""
    events, _ = run([member("m1"), topology(), group_epoch(5), target_epoch(5),
                     current("m1", 5, 4, active=[("0", [2, 0], [5, 3]), ("1", [1], [4])],
                             standby=[("1", [0, 2])])])
    (t,) = of(events, "streams_topology")
    assert (t["topology_epoch"], t["subtopologies"]) == (0, [
        {"subtopology_id": "0", "source_topics": [IN], "repartition_source_topics": []},
        {"subtopology_id": "1", "source_topics": [], "repartition_source_topics": [REP]}])
    (a,) = of(events, "member_assignment")
    assert a["protocol"] == "streams" and (a["member_epoch"], a["previous_member_epoch"]) == (5, 4)
    assert a["assigned"] == [] and a["active_tasks_pending_revocation"] == []
    assert a["active_tasks"] == [{"subtopology_id": "0", "partitions": [2, 0], "assignment_epochs": [5, 3]},
                                 {"subtopology_id": "1", "partitions": [1], "assignment_epochs": [4]}]
    assert a["state"] == "STABLE" and "subscribed_topics" not in a
    assert (a["group_epoch"], a["target_assignment_epoch"]) == (5, 5)
    assert [e["state"] for e in of(events, "group_state")] == ["Stable"]
    assert {e["protocol"] for e in of(events, "group_state")} == {"streams"}
    m = model(events).members["m1"]
    assert dict(m.assigned_partitions) == {(IN, 0): 3, (IN, 2): 5, (REP, 1): 4}
    assert m.subscribed_topics == {IN, REP}


def test_tasks_pending_revocation_and_the_member_epoch_for_tasks_without_epochs():
    """UNREVOKED_TASKS reads as the contract's UNREVOKED_PARTITIONS; an active task without an
    epoch (a record written before 4.2) is written without one and reads the member epoch
    (``TasksTupleWithEpochs.fromCurrentAssignmentRecord``)."""
    events, _ = run([member("m1"), topology(), group_epoch(6),
                     current("m1", 6, 5, state=2, active=[("0", [0])], pending=[("0", [1], [2])])])
    (a,) = of(events, "member_assignment")
    assert a["state"] == "UNREVOKED_PARTITIONS"
    assert a["active_tasks"] == [{"subtopology_id": "0", "partitions": [0]}]
    assert a["active_tasks_pending_revocation"] == [{"subtopology_id": "0", "partitions": [1],
                                                     "assignment_epochs": [2]}]
    m = model(events).members["m1"]
    assert (dict(m.assigned_partitions), dict(m.partitions_pending_revocation)) == ({(IN, 0): 6}, {(IN, 1): 2})


def test_an_assignment_before_its_topology_maps_and_the_rules_hold_it_until_the_topology():
    """Each record maps alone (nothing held in the bridge, nothing counted); the rules keep the
    member's latest tasks while the group has no topology (the member is not yet known: its
    partitions are not) and apply them when the topology arrives."""
    records = [member("m1"), group_epoch(3), current("m1", 2, 0, active=[("0", [0])]),
               current("m1", 3, 2, active=[("0", [0, 1], [2, 3])])]
    events, bridge = run(records, one_batch=False)
    assert [e["member_epoch"] for e in of(events, "member_assignment")] == [2, 3]
    assert not bridge.stats.problems
    assert [e["state"] for e in of(events, "group_state")] == ["NotReady"]
    g = model(events)
    assert g.members == {} and g.topology is None and list(g.member_tasks) == ["m1"]
    bridge = pickle.loads(pickle.dumps(bridge))  # the bridge across batches (the Spark state store)
    later, _ = run([topology()], bridge)
    g = model(events + later)
    assert dict(g.members["m1"].assigned_partitions) == {(IN, 0): 2, (IN, 1): 3}
    assert g.members["m1"].member_epoch == 3


def test_a_tombstone_drops_a_held_assignment_and_the_member_leaves():
    events, _ = run([member("m1"), current("m1", 2, 0, active=[("0", [0])]), tomb(22, groupId=APP, memberId="m1"),
                     tomb(19, groupId=APP, memberId="m1"), topology()])
    assert [(e["member_id"], e["reason"]) for e in of(events, "member_left")] == [("m1", "leave")]
    g = model(events)
    assert g.members == {} and g.member_tasks == {} and g.topology is not None


def test_a_static_leave_and_the_group_s_deletion():
    events, _ = run([member("m1", instance="i1"), topology(), group_epoch(2), current("m1", 2, active=[("0", [0])]),
                     current("m1", -2, 2), tomb(22, groupId=APP, memberId="m1"), tomb(19, groupId=APP, memberId="m1"),
                     tomb(17, groupId=APP), tomb(23, groupId=APP)])
    left = of(events, "member_left")
    assert [(e["reason"], e.get("instance_id")) for e in left][0] == ("static_leave", "i1")
    assert of(events, "group_state")[-1]["state"] == "Dead"
    assert of(events, "group_state")[-1]["protocol"] == "streams"


def test_assignment_epochs_not_matching_their_partitions_fail_the_record_and_the_bridge_goes_on():
    bridge = Bridge()
    run([member("m1"), topology()], bridge)
    bad = encode_record(22, {"groupId": APP, "memberId": "m1"}, 0, {
        "memberEpoch": 2, "previousMemberEpoch": 0, "state": 1,
        "activeTasks": [{"subtopologyId": "0", "partitions": [0, 1], "assignmentEpochs": [2]}]})
    with pytest.raises(RecordDecodeError, match="1 assignment epochs for 2 partitions"):
        bridge.feed(*bad, 5000, "x")
    assert bridge.stats.errors == {"MALFORMED_VALUE": 1}
    events, _ = run([current("m1", 2, active=[("1", [3], [2])])], bridge)
    assert of(events, "member_assignment")[0]["active_tasks"] == [{"subtopology_id": "1", "partitions": [3],
                                                                   "assignment_epochs": [2]}]


# -- StreamsGroupHeartbeat lines (request log) ------------------------------------------------------

def hb_line(member_id, req_epoch, resp_epoch, code=0, *, joining=False, instance=None, second=0):
    import json
    obj = {"requestHeader": {"requestApiKey": 88, "requestApiVersion": 0, "correlationId": 1, "clientId": "c"},
           "request": {"groupId": APP, "memberId": "" if joining else member_id, "memberEpoch": req_epoch,
                       "instanceId": instance, "processId": "p", "topology": None, "activeTasks": None,
                       "standbyTasks": None, "warmupTasks": None},
           "response": {"errorCode": code, "memberId": member_id, "memberEpoch": resp_epoch, "activeTasks": None,
                        "standbyTasks": None, "warmupTasks": None}}
    return f"[2026-12-04 10:00:{second:02d},000] DEBUG Completed request:{json.dumps(obj)} (kafka.request.logger)"


@pytest.mark.parametrize("carry", [True, False])
def test_streams_heartbeats_give_heartbeats_leaves_and_fences(carry):
    """Each line a ``heartbeat``; a leave answered 0 a ``member_left`` ``leave`` (-2:
    ``static_leave``); UNKNOWN_MEMBER_ID a ``member_left`` ``fenced`` once for a member seen
    (every time without the tracker, as for ConsumerGroupHeartbeat); a routing answer nothing;
    no ``member_assignment`` (tasks need the topology: ``__consumer_offsets``)."""
    from fencewatch.streaming.ingest.request_log import RequestLogBridge
    bridge = RequestLogBridge(carry=carry)
    lines = [hb_line("a", 0, 1, joining=True), hb_line("a", 1, 1), hb_line("a", 1, -1, 25),
             hb_line("a", 1, -1, 25), hb_line("b", 0, 2, joining=True), hb_line("b", -1, -1),
             hb_line("c", 0, 0, 14, joining=True), hb_line("s", 0, 3, joining=True, instance="i"),
             hb_line("s", -2, -2, instance="i")]
    events = [(n, e) for n, line in enumerate(lines) for e in bridge.map_line(line, str(n))]
    assert [n for n, e in events if e["type"] == "heartbeat"] == [0, 1, 2, 3, 4, 5, 7, 8]
    left = [(n, e["member_id"], e["reason"]) for n, e in events if e["type"] == "member_left"]
    fenced_again = [(3, "a", "fenced")] if not carry else []
    assert left == [(2, "a", "fenced"), *fenced_again, (5, "b", "leave"), (8, "s", "static_leave")]
    assert not [e for _, e in events if e["type"] == "member_assignment"]
    counts = bridge.counts
    assert counts["STREAMS_GROUP_HEARTBEAT"] == 9 and counts["dropped.COORDINATOR_LOAD_IN_PROGRESS"] == 1
    assert [e["member_id"] for _, e in events][:1] == ["a"]  # a joining member is named by the answer


def test_a_broken_streams_heartbeat_line_is_counted_not_raised():
    from fencewatch.streaming.ingest.request_log import RequestLogBridge
    bridge = RequestLogBridge()
    bad = hb_line("a", 1, 1).replace('"memberEpoch": 1,', '"memberEpoch": "x",', 1)
    assert bridge.map_line(bad, "0") == []
    assert bridge.counts["broken.BAD_FIELD"] == 1 and bridge.problems[0][1] == "BAD_FIELD"


def test_the_stateless_decoder_maps_every_streams_record_alone():
    """``decode_record`` (one record, no memory: the Spark job's decoder) gives a streams current
    assignment's tasks and a topology's subtopologies as the stateful bridge does (less the
    instance id and group epochs history adds, and the derived group states): the rules join them."""
    from fencewatch.streaming.ingest.consumer_offsets.mapping import decode_record
    [a] = decode_record(*current("m1", 2, active=[("0", [0], [2])]), 1, "x")
    assert (a["type"], a["protocol"], a["active_tasks"]) == ("member_assignment", "streams", [
        {"subtopology_id": "0", "partitions": [0], "assignment_epochs": [2]}])
    [t] = decode_record(*topology(), 1, "y")
    stateful, _ = run([topology()])
    assert t == of(stateful, "streams_topology")[0] | {"ts": 1, "event_id": "y"}
    assert [e["state"] for e in decode_record(*tomb(17, groupId=APP), 1, "z")] == ["Dead"]
    assert decode_record(*tomb(23, groupId=APP), 1, "w") == []
    g = model([a, t])
    assert dict(g.members["m1"].assigned_partitions) == {(IN, 0): 2}
