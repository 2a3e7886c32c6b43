"""Decoding SPEC events: every bad-input path gives a stable code, the field, and the coordinates."""
import json

import pytest

from fencewatch.state.events import MemberAssignment, OffsetCommit, PartitionEpochs
from fencewatch.state.model import MemberState
from fencewatch.streaming.ingest.events import DecodeError, UnknownType, decode_json_line, event_from_dict


def dec(obj, n=0):
    line = obj if isinstance(obj, str) else json.dumps(obj)
    return decode_json_line(line, seq=n, default_event_id=str(n), coords=f"line {n + 1}")


def test_member_assignment_with_assignment_epochs():
    ev = dec({"type": "member_assignment", "ts": 5, "group_id": "g", "member_id": "m", "member_epoch": 9,
              "state": "UNREVOKED_PARTITIONS",
              "assigned": [{"topic": "o", "partitions": [0, 1], "assignment_epochs": [7, 9]}],
              "pending_revocation": [{"topic": "o", "partitions": [2]}]})
    assert isinstance(ev, MemberAssignment)
    assert ev.assigned == (("o", 0), ("o", 1)) and ev.assigned_epochs == (7, 9)
    assert ev.pending_epochs is None and ev.state is MemberState.UNREVOKED_PARTITIONS
    assert ev.cluster == "default" and ev.event_id == "0"


def test_unknown_member_state_is_forward_compatible():
    ev = dec({"type": "member_assignment", "ts": 5, "group_id": "g", "member_id": "m", "member_epoch": 9,
              "state": "SOMETHING_NEW", "assigned": []})
    assert ev.state is MemberState.UNKNOWN


def test_commit_defaults_and_event_id():
    ev = dec({"type": "txn_offset_commit", "ts": 5, "group_id": "g", "event_id": "x-1", "cluster": "c1",
              "offsets": [{"topic": "o", "partition": 1, "offset": 3}], "transactional_id": "t"})
    assert isinstance(ev, OffsetCommit) and ev.transactional and ev.member_id == "" and ev.member_epoch == -1
    assert ev.offsets.rows()[0].leader_epoch == -1 and ev.event_id == "x-1" and ev.cluster == "c1"


def test_partition_epochs_sorted():
    ev = dec({"type": "partition_epochs", "ts": 1, "topic": "o", "partition": 0, "log_end_offset": 9,
              "epochs": [{"epoch": 3, "start_offset": 5}, {"epoch": 1, "start_offset": 0}]})
    assert isinstance(ev, PartitionEpochs) and ev.epochs == ((1, 0), (3, 5))


_STREAMS = {"type": "member_assignment", "ts": 1, "group_id": "g", "member_id": "m", "member_epoch": 3,
            "protocol": "streams", "assigned": []}


def test_a_streams_assignment_and_topology_decode_alike_on_both_paths():
    """The typed line (msgspec) and the dict path give the same tasks and subtopologies."""
    from fencewatch.state.events import StreamsTask, StreamsTopology, Subtopology

    obj = {**_STREAMS, "active_tasks": [{"subtopology_id": "1", "partitions": [2, 0], "assignment_epochs": [3, 1]},
                                        {"subtopology_id": "0", "partitions": [1]}],
           "active_tasks_pending_revocation": []}
    line, parsed = dec(obj), event_from_dict(obj, seq=0, default_event_id="0", coords="event 0")
    assert line == parsed
    assert line.active_tasks == (StreamsTask("1", (2, 0), (3, 1)), StreamsTask("0", (1,), None))
    assert line.active_tasks_pending_revocation == () and line.has_tasks
    assert not dec({**_STREAMS, "protocol": "consumer"}).has_tasks
    topo = dec({"type": "streams_topology", "ts": 1, "group_id": "g", "topology_epoch": 4,
                "subtopologies": [{"subtopology_id": "0", "source_topics": ["in"]},
                                  {"subtopology_id": "1", "repartition_source_topics": ["rep"]}]})
    assert topo == StreamsTopology(1, "default", "g", "0", 0, 4, (Subtopology("0", ("in",), ()),
                                                                  Subtopology("1", (), ("rep",))))


def test_unknown_type_is_counted_not_an_error():
    assert isinstance(dec({"type": "shiny_new", "ts": 1}), UnknownType)


@pytest.mark.parametrize("obj,code,field", [
    ("{not json", "INVALID_JSON", None),
    ("[1, 2]", "NOT_AN_OBJECT", None),
    ({"ts": 1}, "MISSING_FIELD", "type"),
    ({"type": "offset_commit", "group_id": "g", "offsets": []}, "MISSING_FIELD", "ts"),
    ({"type": "offset_commit", "ts": "soon", "group_id": "g", "offsets": []}, "WRONG_TYPE", "ts"),
    ({"type": "offset_commit", "ts": 1, "offsets": []}, "MISSING_FIELD", "group_id"),
    ({"type": "offset_commit", "ts": 1, "group_id": "g", "offsets": [{"topic": "o", "offset": 1}]},
     "MISSING_FIELD", "offsets[0].partition"),
    ({"type": "offset_commit", "ts": 1, "group_id": "g", "offsets": [{"topic": "o", "partition": "1", "offset": 1}]},
     "WRONG_TYPE", "offsets[0].partition"),
    ({"type": "member_assignment", "ts": 1, "group_id": "g", "member_id": "m", "member_epoch": 1,
      "assigned": [{"topic": "o", "partitions": [0], "assignment_epochs": [1, 2]}]}, "INVALID_VALUE",
     "assigned[0].assignment_epochs"),
    ({"type": "member_assignment", "ts": 1, "group_id": "g", "member_id": "m", "member_epoch": 1,
      "assigned": [{"topic": "o", "partitions": [0]}], "protocol": "kafka9"}, "INVALID_VALUE", "protocol"),
    ({"type": "member_left", "ts": 1, "group_id": "g", "member_id": "m", "reason": "bored"}, "INVALID_VALUE", "reason"),
    ({"type": "classic_sync", "ts": 1, "group_id": "g", "generation": 1, "assignments": []}, "WRONG_TYPE",
     "assignments"),
    # Not a Kafka long: beyond 64 bits on every path (the typed commit line steps aside).
    ({"type": "offset_commit", "ts": 1, "group_id": "g", "offsets": [
        {"topic": "o", "partition": 0, "offset": 2**63, "leader_epoch": 0}]}, "WRONG_TYPE", "offsets[0].offset"),
    ({"type": "offset_commit", "ts": -2**63 - 1, "group_id": "g", "offsets": []}, "WRONG_TYPE", "ts"),
    ({"type": "member_assignment", "ts": 1, "group_id": "g", "member_id": "m", "member_epoch": 1,
      "assigned": [{"topic": "o", "partitions": [2**64]}]}, "WRONG_TYPE", "assigned[0].partitions"),
    ('{"type": "offset_commit", "ts": NaN, "group_id": "g", "offsets": []}', "INVALID_JSON", None),
    # A streams member's tasks and a topology's subtopologies (contract §1.1)
    ({**_STREAMS, "active_tasks": [{"subtopology_id": "0", "partitions": [0, 1], "assignment_epochs": [2]}]},
     "INVALID_VALUE", "active_tasks[0].assignment_epochs"),
    ({**_STREAMS, "active_tasks": [{"partitions": [0]}]}, "MISSING_FIELD", "subtopology_id"),
    ({**_STREAMS, "active_tasks": [{"subtopology_id": 0, "partitions": [0]}]}, "WRONG_TYPE", "subtopology_id"),
    ({**_STREAMS, "active_tasks_pending_revocation": [{"subtopology_id": "0", "partitions": [2**64]}]},
     "WRONG_TYPE", "active_tasks_pending_revocation[0].partitions"),
    ({**_STREAMS, "active_tasks": [{"subtopology_id": "0", "partitions": [0], "standby": True}]},
     "INVALID_VALUE", "active_tasks[0].standby"),
    ({**_STREAMS, "active_tasks": {"0": [0]}}, "WRONG_TYPE", "active_tasks"),
    ({"type": "streams_topology", "ts": 1, "group_id": "g", "topology_epoch": 0}, "MISSING_FIELD", "subtopologies"),
    ({"type": "streams_topology", "ts": 1, "group_id": "g", "topology_epoch": 0, "subtopologies": ["0"]},
     "WRONG_TYPE", "subtopologies[0]"),
    ({"type": "streams_topology", "ts": 1, "group_id": "g", "topology_epoch": 0,
      "subtopologies": [{"subtopology_id": "0", "source_topics": [1]}]}, "WRONG_TYPE", "subtopologies[0].source_topics"),
])
def test_bad_input_has_code_field_and_coordinates(obj, code, field):
    res = dec(obj, n=41)
    assert isinstance(res, DecodeError)
    assert res.code == code
    if field is not None:
        assert res.params["field"] == field
    assert res.coords == "line 42"
    assert res.reason.startswith(code)


def test_never_raises_on_odd_shapes():
    for odd in (None, 3, "x", [], {"type": None}, {"type": "offset_commit", "ts": 1, "group_id": "g", "offsets": None},
                {"type": "member_assignment", "ts": 1, "group_id": "g", "member_id": "m", "member_epoch": 1,
                 "assigned": [7]}):
        res = event_from_dict(odd, seq=0, default_event_id="0", coords="event 0")
        assert isinstance(res, DecodeError), odd
