"""The state function's group snapshots (``sinks.groups_topic``) and the driver's view of them (no Spark).

A snapshot is written when a step changes what the view shows or judges a fence: the last one of
each group must be the local engine's final state of that group, and a step of plain accepted
commits writes none (the cost follows membership events and fences, not commits).
"""
from __future__ import annotations

import json
from dataclasses import replace

from fencewatch.sim.profiles import profile
from fencewatch.sim.world import SimConfig, simulate
from fencewatch.sinks.group_views import GroupViews, render_html, render_text
from fencewatch.state.group_view import group_view
from fencewatch.streaming.runtime.outputs import read_frame
from fencewatch.streaming.runtime.replay import judge_events
from reliability_harness import stream_events


def _rows(events, *, emit_groups: bool, batch: int = 400):
    return [r for frame in stream_events(events, batch=batch, emit_groups=emit_groups) for r in read_frame(frame)]


def _events():
    return simulate(SimConfig(knobs=replace(profile("mixed"), groups=4), seed=11, duration_ms=None,
                              max_events=3_000, event_id_prefix="e-", labels=False))


def test_the_last_snapshot_of_each_group_is_the_engines_final_state():
    events = _events()
    rows = _rows(events, emit_groups=True)
    snapshots = [r for r in rows if r.record == "group"]
    views = GroupViews()
    views.apply((r.cluster, r.group_id, r.json) for r in snapshots)
    final = {(g.cluster, g.group_id): g for g in judge_events(events).groups}
    assert len(views) == len(final) >= 4
    for v in views.snapshot():
        g = final[(v["cluster"], v["group_id"])]
        expected = group_view(g)
        # the membership the view shows is the engine's, member by member, partition by partition
        assert v["members"] == expected["members"] and v["members"]
        assert (v["state"], v["group_epoch"], v["group_type"]) == (expected["state"], expected["group_epoch"],
                                                                  expected["group_type"])
    # Written on change, not every call: far fewer snapshots than the group's calls with commits.
    calls_with_commits = sum(1 for r in rows if r.record == "verdicts")
    assert 0 < len(snapshots) < calls_with_commits + len(final)
    # A fence is seen in the snapshot of the step that judged it.
    rejected = [json.loads(r.json)["verdicts"]["rejected_by"] for r in snapshots]
    assert any(rejected), "the mixed profile scripts fences: some snapshot must count a rejection"


def test_no_snapshot_without_a_groups_topic_and_verdicts_unchanged():
    events = _events()
    off, on = _rows(events, emit_groups=False), _rows(events, emit_groups=True)
    assert not [r for r in off if r.record == "group"]
    assert [r for r in on if r.record != "group"] == off  # the other outputs are byte for byte the same


def test_a_forgotten_group_tombstone_removes_it_and_pages_render():
    views = GroupViews()
    v = {"format": 1, "cluster": "prod", "group_id": "g<1>", "group_type": "consumer", "state": "Stable",
         "group_epoch": 7, "changed_ts": 1_700_000_000_000,
         "members": [{"member_id": "m1", "instance_id": None, "protocol": "consumer", "member_epoch": 7,
                      "previous_member_epoch": 6, "state": "stable",
                      "assigned_partitions": [{"topic": "t", "partition": 0, "assignment_epoch": 5}],
                      "partitions_pending_revocation": [{"topic": "t", "partition": 1, "assignment_epoch": 3}]}],
         "verdicts": {"by_class": {"accepted": 2, "zombie": 1}, "rejected_by": {"strict": 1}}}
    views.apply([("prod", "g<1>", json.dumps(v)), ("prod", "other", json.dumps({**v, "group_id": "other"})),
                 ("prod", "bad", b"{not json"), ("prod", "newer", json.dumps({**v, "format": 99}))])
    assert [x["group_id"] for x in views.snapshot()] == ["g<1>", "other"] and views.refused == 2
    text = render_text(views.snapshot(group="g<1>"), members=True)
    assert "t-0@5" in text and "t-1@3" in text and "zombie=1" in text and "strict=1" in text
    page = render_html(views.snapshot()).decode()
    assert "g&lt;1&gt;" in page and "<script" not in page and "g<1>" not in page  # escaped
    views.apply([("prod", "g<1>", None)])
    assert [x["group_id"] for x in views.snapshot()] == ["other"]


def test_no_membership_change_is_missed(monkeypatch):
    """Every distinct membership a group went through, as a snapshot at every step shows it, is
    also in the snapshots the rule wrote: the rule skips only steps that changed nothing."""

    def memberships(rows):
        seen: dict = {}
        for r in rows:
            if r.record == "group" and r.json:
                v = json.loads(r.json)
                if not v["members"] and not v["group_epoch"]:
                    continue  # a group no event has created yet: not shown (view_changed)
                shown = json.dumps([v["members"], v["state"], v["group_epoch"]])
                runs = seen.setdefault((r.cluster, r.group_id), [])
                if not runs or runs[-1] != shown:
                    runs.append(shown)
        return seen

    events = simulate(SimConfig(knobs=replace(profile("rolling-restart"), groups=3), seed=5, duration_ms=None,
                                max_events=3_000, event_id_prefix="e-", labels=False))
    ruled = memberships(_rows(events, emit_groups=True, batch=50))
    monkeypatch.setattr("fencewatch.streaming.runtime.state_fn.snapshot_due", lambda before, g, shapes: True)
    every = memberships(_rows(events, emit_groups=True, batch=50))
    assert ruled == every and sum(map(len, every.values())) > 2 * len(every)  # groups did change, several times


def test_the_groups_topic_key_round_trips_and_refuses_what_it_did_not_write():
    from fencewatch.sinks.group_views import group_view_key, parse_group_view_key

    assert parse_group_view_key(group_view_key("prod/eu", "a/b\"c")) == ("prod/eu", "a/b\"c")
    assert [parse_group_view_key(k) for k in (None, b"prod/g", b"[1, 2]", b'["only"]')] == [None] * 4


def _lagging_txn_commits() -> list[dict]:
    """A streams group and a consumer group, each with a member at epoch 3 holding ``in``-0 since
    epoch 2 and a TxnOffsetCommit of it at epoch 2 the broker's answer of which the input lacks:
    strict rejects it (the transaction aborts), kip1251 accepts it (stored)."""
    head = {"ts": 1_000, "cluster": "c1"}
    return [
        {**head, "type": "streams_topology", "group_id": "s", "topology_epoch": 0,
         "subtopologies": [{"subtopology_id": "0", "source_topics": ["in"]}]},
        {**head, "type": "member_assignment", "group_id": "s", "member_id": "m", "protocol": "streams",
         "member_epoch": 3, "assigned": [], "active_tasks": [{"subtopology_id": "0", "partitions": [0],
                                                              "assignment_epochs": [2]}]},
        {**head, "type": "member_assignment", "group_id": "c", "member_id": "m", "member_epoch": 3,
         "assigned": [{"topic": "in", "partitions": [0], "assignment_epochs": [2]}]},
        *({"type": "txn_offset_commit", "ts": 2_000, "cluster": "c1", "group_id": g, "member_id": "m",
           "member_epoch": 2, "transactional_id": f"t-{g}", "offsets": [{"topic": "in", "partition": 0, "offset": 5}]}
          for g in ("s", "c"))]


def test_the_metrics_summary_takes_each_group_types_broker_policy():
    """``summarize_commit_verdicts`` in the state function (the status rows' summary and the group
    snapshot's) with the broker's policy of the group's type (``RulesConfig.policy_for``): with
    ``broker_policy: strict`` and ``streams_broker_policy: kip1251`` a lagging transactional commit
    aborts in the consumer group and is stored in the streams group, as the verdicts say."""
    from fencewatch.state.config import RulesConfig
    from fencewatch.state.model import Policy
    from fencewatch.streaming.runtime.outputs import read_status

    cfg = RulesConfig(broker_policy=Policy.STRICT, streams_broker_policy=Policy.KIP1251)
    verdicts = {v["group_id"]: v for v in judge_events(_lagging_txn_commits(), cfg).verdicts}
    assert (verdicts["s"]["kip1251"], verdicts["c"]["strict"]) == ("NONE", "ILLEGAL_GENERATION")
    assert verdicts["s"]["strict"] == "ILLEGAL_GENERATION"  # what broker_policy for every group made of it
    for emit_groups in (False, True):
        aborted = {}
        for frame in stream_events(_lagging_txn_commits(), batch=10, emit_groups=emit_groups, cfg=cfg):
            for row in read_frame(frame):
                if row.record == "status":
                    _, summary = read_status(row.raw)
                    for facts, n in (summary[1] if summary else {}).items():
                        aborted[facts.group_id] = (facts.aborted, n)
        assert aborted == {"s": (False, 1), "c": (True, 1)}, emit_groups
