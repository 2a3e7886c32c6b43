"""Request-log events judged by the rules: the stateful bridge (``bridge --from-request-log``)
and the stateless mapper the Spark job uses (``carry=False``: an unchanged assignment is
``"assigned": null``, resolved by the group state from the member it models) give the same
verdicts; a commit the broker fenced with STALE_MEMBER_EPOCH is judged, and agrees."""

from __future__ import annotations

import json
import uuid

from fencewatch.sinks.jsonl import alert_json, commit_verdicts_block
from fencewatch.state.assignment import Member, resolve_unchanged_assignment
from fencewatch.state.model import Protocol
from fencewatch.streaming.ingest.request_log import RequestLogBridge
from fencewatch.streaming.runtime.replay import judge_events
from fencewatch.state.events import MemberAssignment
from request_log_lines import heartbeat, kafka_id, log_line, offset_commit

ORDERS = kafka_id(uuid.UUID(int=0xA1))
STALE_MEMBER_EPOCH = 113


def scenario() -> list[str]:
    """Two members of group g share orders-0..3; m-2 joins later and m-1 gives up 2 and 3."""
    lines = []
    sec = iter(range(10, 60))

    def add(obj):
        lines.append(log_line(obj, stamp=f"2026-11-20 09:00:{next(sec):02d},000"))

    add(heartbeat(1, "g", "m-1", 0, response_epoch=1, assignment=[(ORDERS, [0, 1, 2, 3])], owned=[],
                  subscribed=["orders"]))
    add(heartbeat(1, "g", "m-1", 1, owned=[(ORDERS, [0, 1, 2, 3])]))
    add(offset_commit(9, "g", 1, "m-1", [("orders", [(0, 10, 0), (1, 10, 0), (2, 10, 0), (3, 10, 0)])]))
    add(heartbeat(1, "g", "m-2", 0, response_epoch=2, assignment=[], owned=[], subscribed=["orders"]))
    add(heartbeat(1, "g", "m-1", 1, response_epoch=1, assignment=[(ORDERS, [0, 1])]))  # revoke 2 and 3
    add(heartbeat(1, "g", "m-1", 1, response_epoch=2, owned=[(ORDERS, [0, 1])]))  # revoked: new epoch, same set
    add(heartbeat(1, "g", "m-2", 2, response_epoch=2, assignment=[(ORDERS, [2, 3])]))
    add(offset_commit(9, "g", 1, "m-1", [("orders", [(0, 20, 0)])], codes={("orders", 0): STALE_MEMBER_EPOCH}))
    add(offset_commit(9, "g", 2, "m-1", [("orders", [(0, 21, 0), (1, 21, 0)])]))
    add(offset_commit(9, "g", 2, "m-2", [("orders", [(2, 30, 0), (3, 30, 0)])]))
    add(heartbeat(1, "g", "m-1", 2, response_epoch=3))  # epoch bump, assignment omitted
    add(offset_commit(9, "g", 3, "m-1", [("orders", [(1, 22, 0)])]))
    return lines


def judged(carry: bool):
    b = RequestLogBridge({ORDERS: "orders"}, carry=carry)
    events = [e for n, line in enumerate(scenario()) for e in b.map_line(line, str(n))]
    assert not b.problems
    result = judge_events(events)
    assert not result.errors, result.errors
    verdicts = [json.loads(x) for cv in result.commit_verdicts for x in commit_verdicts_block(cv).split("\n")]
    return events, verdicts, [alert_json(a) for a in result.alert_records]


def test_stateless_mapper_and_stateful_bridge_agree():
    events_carry, verdicts_carry, alerts_carry = judged(True)
    events_free, verdicts_free, alerts_free = judged(False)
    assert sum(e["type"] == "member_assignment" for e in events_free) > sum(
        e["type"] == "member_assignment" for e in events_carry)  # one per successful heartbeat
    assert verdicts_free == verdicts_carry
    assert alerts_free == alerts_carry


def test_fenced_commit_is_judged_and_agrees_with_the_broker():
    _, verdicts, alerts = judged(False)
    by_event: dict[str, list] = {}
    for v in verdicts:
        by_event.setdefault(v["event_id"], []).append(v)
    (fenced,) = by_event["7"]  # m-1 still at epoch 1 after it moved to 2
    assert (fenced["client_epoch"], fenced["broker_epoch"], fenced["strict"], fenced["kip1251"], fenced["class"],
            fenced["broker_error"], fenced["model_agrees"]) == (1, 2, "STALE_MEMBER_EPOCH", "NONE",
                                                                "avoidable", "STALE_MEMBER_EPOCH", True)
    assert fenced["revocation_epoch"] == 1  # the revocation of orders-2/3, derived from the heartbeats
    assert all(v["class"] == "accepted" and v["model_agrees"] for e in ("2", "8", "9", "11") for v in by_event[e])
    assert [json.loads(a)["kind"] for a in alerts] == ["AVOIDABLE_FENCING"]


def test_unchanged_assignment_is_resolved_from_the_modelled_member():
    m = Member("m", Protocol.CONSUMER, 4, assigned_partitions={("orders", 1): 4, ("orders", 0): 2},
               instance_id="i")
    ev = MemberAssignment(1, "default", "g", "e", 0, "m", Protocol.CONSUMER, 5, None, ())
    whole = resolve_unchanged_assignment(m, ev)
    assert (whole.assigned, whole.pending_revocation, whole.previous_member_epoch, whole.instance_id) == (
        (("orders", 0), ("orders", 1)), (), 4, "i")
    assert resolve_unchanged_assignment(m, ev._replace(member_epoch=4)) is None  # steady
    assert resolve_unchanged_assignment(None, ev) is None  # never seen: nothing to build on


UNKNOWN_MEMBER_ID = 25


def zombie() -> list[str]:
    """m-1 holds orders-0..1 and stalls past its session timeout (no request: the coordinator
    removes it); m-2 takes orders-1; m-1 resumes: its heartbeat is answered UNKNOWN_MEMBER_ID,
    then its commit at its old epoch too (the ``zombie`` case of the captures, 4.2.2 / 4.4.0 order)."""
    lines = []
    sec = iter(range(10, 60))

    def add(obj):
        lines.append(log_line(obj, stamp=f"2026-11-20 09:00:{next(sec):02d},000"))

    add(heartbeat(1, "g", "m-1", 0, response_epoch=1, assignment=[(ORDERS, [0, 1])], owned=[], subscribed=["orders"]))
    add(offset_commit(9, "g", 1, "m-1", [("orders", [(0, 10, 0), (1, 10, 0)])]))
    add(heartbeat(1, "g", "m-2", 0, response_epoch=3, assignment=[(ORDERS, [0, 1])], owned=[], subscribed=["orders"]))
    add(offset_commit(9, "g", 3, "m-2", [("orders", [(1, 20, 0)])]))
    add(heartbeat(1, "g", "m-1", 1, response_epoch=0, error=UNKNOWN_MEMBER_ID))
    add(offset_commit(9, "g", 1, "m-1", [("orders", [(1, 11, 0)])], codes={("orders", 1): UNKNOWN_MEMBER_ID}))
    add(heartbeat(1, "g", "m-1", -1, response_epoch=0, error=UNKNOWN_MEMBER_ID))  # its leave on close
    return lines


def judged_lines(lines: list[str], carry: bool):
    b = RequestLogBridge({ORDERS: "orders"}, carry=carry)
    events = [e for n, line in enumerate(lines) for e in b.map_line(line, str(n))]
    result = judge_events(events)
    assert not result.errors and not b.problems
    verdicts = [json.loads(x) for cv in result.commit_verdicts for x in commit_verdicts_block(cv).split("\n")]
    return events, verdicts, [json.loads(alert_json(a))["kind"] for a in result.alert_records]


def test_a_member_the_coordinator_dropped_is_gone_before_its_commit():
    """Contract §10.1 g: the heartbeat answered UNKNOWN_MEMBER_ID removes the zombie from the
    model, so its commit is judged as an unknown member's, as the broker answered; both modes
    of the decoder give the same verdicts (the stateless one writes a second ``member_left``
    for the leave, which the group state ignores)."""
    events, verdicts, alerts = judged_lines(zombie(), carry=True)
    assert [(e["event_id"], e["reason"]) for e in events if e["type"] == "member_left"] == [("4", "fenced")]
    (commit,) = [v for v in verdicts if v["event_id"] == "5"]
    assert (commit["class"], commit["strict"], commit["broker_error"], commit["model_agrees"]) == (
        "unknown_member", "UNKNOWN_MEMBER_ID", "UNKNOWN_MEMBER_ID", True)
    # Until that heartbeat the log cannot show the removal: m-2's assignment overlaps m-1's.
    assert "MODEL_DIVERGENCE" not in alerts and "DUPLICATE_ASSIGNMENT" in alerts
    free_events, free_verdicts, free_alerts = judged_lines(zombie(), carry=False)
    assert [(e["event_id"], e["reason"]) for e in free_events if e["type"] == "member_left"] == [
        ("4", "fenced"), ("6", "fenced")]
    assert free_verdicts == verdicts and free_alerts == alerts


def test_without_that_heartbeat_the_zombie_commit_diverges():
    """The same lines without the heartbeat answered 25 (what the log showed before contract
    §10.1 g was read): the stale member still holds its partitions, and the model disagrees with
    the broker's UNKNOWN_MEMBER_ID. This is what the decision fixes."""
    lines = zombie()
    del lines[4]
    _, verdicts, alerts = judged_lines(lines, carry=True)
    (commit,) = [v for v in verdicts if v["event_id"] == "4"]
    assert (commit["class"], commit["broker_error"], commit["model_agrees"]) == ("accepted", "UNKNOWN_MEMBER_ID",
                                                                                False)
    assert "MODEL_DIVERGENCE" in alerts
