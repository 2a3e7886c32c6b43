"""A classic group's join phase as the request log shows it (``classic_generation``), and the
commit answers it decides: Kafka's ``ClassicGroup.validateOffsetCommit`` (state/classic.py).

The narrative test mirrors ``ClassicGroupTest.testValidateOffsetCommit`` (Kafka's
group-coordinator module): a member, a completed join phase (``initNextGeneration``), then an
unknown member, an old generation, the new generation while CompletingRebalance, and the same
once Stable; transactional commits are not held to the group's state."""
from __future__ import annotations

import pytest

from fencewatch.state import classic
from fencewatch.state import group as grp
from fencewatch.state.config import RulesConfig
from fencewatch.state.judging import model_agrees
from fencewatch.state.model import KafkaError

from .helpers import assignment, commit, generation, group_state, left, sync, tp

CFG = RulesConfig(alert_cooldown_ms=0, warmup_ms=0)
RIP = KafkaError.REBALANCE_IN_PROGRESS


def run(events):
    g = grp.new_group("default", "g")
    out = grp.Outputs()
    for ev in events:
        g = grp.process(g, ev, CFG, out)
    return g, out


def answers(out) -> list[tuple[str, str | None]]:
    """(strict's answer for the request, model_agrees) per commit, in order."""
    return [(cv.parts[0].strict, cv.model_agrees) for cv in out.commits]


def test_validate_offset_commit():
    """ClassicGroupTest.testValidateOffsetCommit."""
    g, out = run([
        generation("member-id", 1, ["member-id"], ts=100, instance_id="instance-id"),  # initNextGeneration
        commit("unknown", 1, tp("t", 0), ts=110),  # the member id does not exist
        commit("member-id", 0, tp("t", 0), ts=120),  # the generation id is invalid
        commit("member-id", 1, tp("t", 0), ts=130),  # CompletingRebalance: the assignment is not known yet
        commit("member-id", 1, tp("t", 0), ts=140, txn=True),  # the group state is not enforced for those
        sync(1, {"member-id": tp("t", 0, 1)}, ts=150),  # the leader's SyncGroup: Stable
        commit("member-id", 1, tp("t", 0), ts=160),
    ])
    assert [a for a, _ in answers(out)] == ["UNKNOWN_MEMBER_ID", "ILLEGAL_GENERATION", "REBALANCE_IN_PROGRESS",
                                            "NONE", "NONE"]
    assert g.state == "Stable" and g.group_epoch == 1


def test_preparing_rebalance_accepts_the_current_generation():
    """GroupCoordinator.handleCommitOffsets: "During PreparingRebalance phase, we still allow a
    commit request": a member leaving starts a rebalance, the generation is unchanged until the
    join phase completes."""
    g, out = run([
        generation("a", 1, ["a", "b"], ts=100), generation("b", 1, ts=100),
        sync(1, {"a": tp("t", 0), "b": tp("t", 1)}, ts=110),
        left("b", ts=120),
        commit("a", 1, tp("t", 0), ts=130),
        generation("a", 2, ["a"], ts=140),
        commit("a", 1, tp("t", 0), ts=150),  # the last generation: stale now
        commit("a", 2, tp("t", 0), ts=160),
    ])
    assert [a for a, _ in answers(out)] == ["NONE", "ILLEGAL_GENERATION", "REBALANCE_IN_PROGRESS"]
    assert g.state == "CompletingRebalance" and set(g.members) == {"a"}


def test_the_leaders_response_removes_members_that_did_not_rejoin():
    """completeClassicGroupJoin removes the members that did not rejoin before the new generation."""
    g, out = run([
        generation("a", 1, ["a", "b"], ts=100),
        sync(1, {"a": tp("t", 0), "b": tp("t", 1)}, ts=110),
        generation("a", 2, ["a", "c"], ts=200),
        commit("b", 1, tp("t", 1), ts=210),
        commit("c", 2, tp("t", 1), ts=220),
    ])
    assert set(g.members) == {"a", "c"}
    assert [a for a, _ in answers(out)] == ["UNKNOWN_MEMBER_ID", "REBALANCE_IN_PROGRESS"]
    assert g.members["a"].assigned_partitions == {("t", 0): 1}  # kept until the new assignment


def test_a_follower_response_before_the_leaders_moves_the_group():
    """Lines are written as responses are sent: a follower's may come first. The generation
    moves with it; members the model holds are taken to have rejoined until the leader's list."""
    g, out = run([
        generation("a", 1, ["a", "b"], ts=100),
        sync(1, {"a": tp("t", 0), "b": tp("t", 1)}, ts=110),
        generation("b", 2, ts=200),
        commit("a", 1, tp("t", 0), ts=201),
        generation("a", 2, ["a", "b"], ts=202),
    ])
    assert [a for a, _ in answers(out)] == ["ILLEGAL_GENERATION"]
    assert g.group_epoch == 2 and {m.member_epoch for m in g.members.values()} == {2}


def test_a_member_leaving_during_completing_rebalance_starts_a_new_rebalance():
    """ClassicGroup's member removal in CompletingRebalance: prepareRebalance. The generation stays,
    so its commits pass again (seen on 4.2.2: the leader's SyncGroup answered REBALANCE_IN_PROGRESS,
    the members' commits at that generation accepted until the next join phase completed)."""
    g, out = run([
        generation("a", 2, ["a", "b"], ts=100), generation("b", 2, ts=100),
        commit("a", 2, tp("t", 0), ts=110),
        left("b", ts=120),
        commit("a", 2, tp("t", 0), ts=130),
    ])
    assert [a for a, _ in answers(out)] == ["REBALANCE_IN_PROGRESS", "NONE"]
    assert g.state == "PreparingRebalance" and g.group_epoch == 2


def test_a_classic_members_join_and_sync_in_a_consumer_group_change_nothing():
    """KIP-848's upgrade path: a consumer group answers its classic members' JoinGroup and SyncGroup
    itself (member epochs, not a generation); its own records hold the membership."""
    g, out = run([
        assignment("a", 5, tp("t", 0, 1), ts=100),
        generation("c", 6, ["c"], ts=110), sync(6, {"c": tp("t", 1)}, ts=120),
        commit("a", 5, tp("t", 0), ts=130),
    ])
    assert set(g.members) == {"a"} and g.group_type == "consumer" and g.state != "CompletingRebalance"
    assert [a for a, _ in answers(out)] == ["NONE"]


def test_a_late_response_of_an_older_generation_changes_nothing():
    g, _ = run([generation("a", 2, ["a"], ts=100), sync(2, {"a": tp("t", 0)}, ts=110),
                generation("b", 1, ts=120)])
    assert set(g.members) == {"a"} and g.state == "Stable" and g.group_epoch == 2


def test_a_static_member_rejoining_under_a_new_id_takes_over_its_partitions():
    g, _ = run([generation("s-1", 1, ["s-1"], ts=100, instance_id="s"), sync(1, {"s-1": tp("t", 0)}, ts=110),
                generation("s-2", 1, ts=200, instance_id="s")])
    assert set(g.members) == {"s-2"} and g.members["s-2"].assigned_partitions == {("t", 0): 1}


@pytest.mark.parametrize("broker, predicted, sees, want", [
    (RIP, RIP, True, True),
    (RIP, KafkaError.NONE, True, False),  # foreseeable, missed: a disagreement
    (RIP, KafkaError.NONE, False, None),  # join phases not in the input: not judged
    (KafkaError.NONE, RIP, True, False),
    (KafkaError.NOT_COORDINATOR, RIP, True, None),
], ids=["foreseen", "missed", "unseen", "predicted-wrongly", "routing"])
def test_rebalance_in_progress_is_judged_where_the_model_foresees_it(broker, predicted, sees, want):
    assert model_agrees(broker, predicted, False, classic.foreseen_errors(sees)) is want


def test_completing_rebalance_guard():
    ok = dict(transactional=False, generation_ok=True)
    assert classic.completing_rebalance("classic", "CompletingRebalance", **ok) is classic.REBALANCE_IN_PROGRESS
    assert classic.completing_rebalance("classic", "PreparingRebalance", **ok) is None
    assert classic.completing_rebalance("consumer", "CompletingRebalance", **ok) is None
    assert classic.completing_rebalance("classic", "CompletingRebalance", transactional=True,
                                        generation_ok=True) is None
    assert classic.completing_rebalance("classic", "CompletingRebalance", transactional=False,
                                        generation_ok=False) is None


def test_verdicts_judge_a_broker_rebalance_in_progress_once_join_phases_are_seen():
    _, out = run([generation("a", 1, ["a"], ts=100), commit("a", 1, tp("t", 0), ts=110, error_code=27)])
    assert answers(out) == [("REBALANCE_IN_PROGRESS", True)]
    _, out = run([sync(1, {"a": tp("t", 0)}, ts=100), commit("a", 1, tp("t", 0), ts=110, error_code=27)])
    assert answers(out) == [("NONE", None)]


def test_a_sync_answered_rebalance_in_progress_ends_completing_rebalance():
    """The request log's SyncGroup answered REBALANCE_IN_PROGRESS (group_state PreparingRebalance):
    a joiner began a new join phase; the generation's commits pass until it completes."""
    g, out = run([
        generation("a", 3, ["a"], ts=100),
        group_state("PreparingRebalance", ts=110, protocol="classic"),
        commit("a", 3, tp("t", 0), ts=120),
        generation("a", 4, ["a", "b"], ts=130),
        commit("a", 3, tp("t", 0), ts=140),
    ])
    assert [a for a, _ in answers(out)] == ["NONE", "ILLEGAL_GENERATION"]
