"""The per-member view of a group (state/group_view.py): what it shows, and when a step changed it."""
import json

from fencewatch.state import group as grp
from fencewatch.state.config import RulesConfig
from fencewatch.state.group_view import VIEW_FORMAT, count_verdicts, group_view, view_changed, view_key
from fencewatch.state.model import MemberState
from fencewatch.state.status import summarize_commit_verdicts

from .helpers import assignment, commit, left, tp

CFG = RulesConfig()


def run(g, *events):
    out = grp.Outputs()
    for ev in events:
        g = grp.process(g, ev, CFG, out)
    return g, out


def two_members():
    g, _ = run(grp.new_group("default", "g"),
               assignment("b", 5, tp("orders", 2), ts=1000, instance_id="i-b"),
               assignment("a", 5, tp("orders", 0, 1), ts=1100))
    return g


def test_view_lists_members_sorted_with_epochs_and_partitions():
    view = group_view(two_members())
    assert view == {
        "format": VIEW_FORMAT, "cluster": "default", "group_id": "g", "group_type": "consumer", "state": "Stable",
        "group_epoch": 5, "changed_ts": 1100,
        "members": [
            {"member_id": "a", "instance_id": None, "protocol": "consumer", "member_epoch": 5,
             "previous_member_epoch": -1, "state": "STABLE",
             "assigned_partitions": [{"topic": "orders", "partition": 0, "assignment_epoch": 5},
                                     {"topic": "orders", "partition": 1, "assignment_epoch": 5}],
             "partitions_pending_revocation": []},
            {"member_id": "b", "instance_id": "i-b", "protocol": "consumer", "member_epoch": 5,
             "previous_member_epoch": -1, "state": "STABLE",
             "assigned_partitions": [{"topic": "orders", "partition": 2, "assignment_epoch": 5}],
             "partitions_pending_revocation": []}],
        "verdicts": {"by_class": {}, "rejected_by": {}}}
    json.dumps(view)  # JSON-able as it is


def test_pending_revocation_keeps_its_assignment_epoch():
    g = two_members()
    g, _ = run(g, assignment("a", 6, tp("orders", 0), tp("orders", 1), ts=1200,
                             state=MemberState.UNREVOKED_PARTITIONS))
    a = group_view(g)["members"][0]
    assert a["member_epoch"] == 6 and a["previous_member_epoch"] == 5
    assert a["assigned_partitions"] == [{"topic": "orders", "partition": 0, "assignment_epoch": 5}]
    assert a["partitions_pending_revocation"] == [{"topic": "orders", "partition": 1, "assignment_epoch": 5}]
    assert a["state"] == "UNREVOKED_PARTITIONS"


def test_unchanged_step_is_not_a_change():
    g = two_members()
    before = view_key(g)
    g, _ = run(g, commit("a", 5, tp("orders", 0), ts=1300))
    assert not view_changed(before, g)


def test_member_epoch_bump_is_a_change():
    g = two_members()
    before = view_key(g)
    g, _ = run(g, assignment("a", 6, tp("orders", 0, 1), ts=1300))
    assert view_changed(before, g)


def test_member_leaving_is_a_change_and_leaves_the_view():
    g = two_members()
    before = view_key(g)
    g, _ = run(g, left("b", ts=1400))
    assert view_changed(before, g)
    assert [m["member_id"] for m in group_view(g)["members"]] == ["a"]


def test_last_member_leaving_empties_the_group():
    g, _ = run(grp.new_group("default", "g"), assignment("a", 1, tp("t", 0), ts=10))
    before = view_key(g)
    g, _ = run(g, left("a", ts=20))
    assert view_changed(before, g)
    assert group_view(g)["state"] == "Empty" and group_view(g)["members"] == []


def test_new_group_changed_only_when_it_exists():
    assert not view_changed(None, grp.new_group("default", "g"))
    assert view_changed(None, two_members())


def test_verdict_counts_by_class_and_rejecting_policy():
    g = two_members()
    g, out = run(g, commit("a", 5, tp("orders", 0, 1), ts=1300), commit("a", 4, tp("orders", 0), ts=1310))
    counts = count_verdicts(summarize_commit_verdicts(out.commits)[0])
    assert sum(counts["by_class"].values()) == 3
    assert counts["by_class"]["accepted"] == 2
    assert counts["rejected_by"].get("strict") == 1  # a stale member epoch: strict rejects it
    view = group_view(g, counts)
    assert view["verdicts"]["by_class"] == dict(sorted(counts["by_class"].items()))


def test_no_commits_no_counts():
    assert count_verdicts(summarize_commit_verdicts([])[0]) == {"by_class": {}, "rejected_by": {}}
