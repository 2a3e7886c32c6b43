"""The simulated KIP-848 coordinator, one test per reconciliation edge.

Mirrors the transitions of Kafka's ``CurrentAssignmentBuilderTest`` and the
commit checks of ``ConsumerGroupTest.testValidateOffsetCommit`` on the
simulator's :class:`ConsumerGroup`; assignment epochs follow Kafka 4.3
(KIP-1251): kept partitions keep their epoch, added ones get the new epoch.
"""

from __future__ import annotations

import pytest

from fencewatch.sim.coordinator import (
    FENCED_MEMBER_EPOCH,
    HB_BUMPED,
    HB_CHANGED,
    HB_JOINED,
    HB_UNREVOKED,
    ILLEGAL_GENERATION,
    NONE,
    STABLE,
    STALE_MEMBER_EPOCH,
    UNKNOWN_MEMBER_ID,
    UNRELEASED_INSTANCE_ID,
    UNRELEASED_PARTITIONS,
    UNREVOKED_PARTITIONS,
    CommittedOffsets,
    ConsumerGroup,
)

ALL = (0, 1, 2, 3)


def group_with_a() -> ConsumerGroup:
    """Member A alone at epoch 1 with partitions 0-3."""
    g = ConsumerGroup("g", 4)
    error, epoch, flags = g.heartbeat("A", 0, (), now=0)
    assert (error, epoch) == (NONE, 1)
    assert flags & HB_JOINED and flags & HB_BUMPED
    return g


def group_a_b_unrevoked() -> ConsumerGroup:
    """B joined (group epoch 2); A was asked to revoke two partitions and has not yet."""
    g = group_with_a()
    g.heartbeat("B", 0, (), now=10)
    g.heartbeat("A", 1, ALL, now=20)
    return g


def test_first_member_gets_every_partition_at_the_group_epoch():
    g = group_with_a()
    a = g.members["A"]
    assert (a.member_epoch, a.previous_member_epoch, a.state) == (1, 0, STABLE)
    assert a.assigned == {0: 1, 1: 1, 2: 1, 3: 1}
    assert g.owner == {p: "A" for p in ALL}
    assert g.refresh_state(0) == "Stable"


def test_new_member_waits_for_unreleased_partitions():
    """A joining member whose target partitions are still held moves to UNRELEASED_PARTITIONS."""
    g = group_with_a()
    error, epoch, flags = g.heartbeat("B", 0, (), now=10)
    b = g.members["B"]
    assert (error, epoch, b.state, b.assigned) == (NONE, 2, UNRELEASED_PARTITIONS, {})
    assert g.group_epoch == g.target_assignment_epoch == 2
    assert len(g.target["A"]) == len(g.target["B"]) == 2


def test_stable_to_unrevoked_partitions():
    """testStableToUnrevokedPartitions: the epoch stays; revoked partitions keep their epoch, pending."""
    g = group_with_a()
    g.heartbeat("B", 0, (), now=10)
    error, epoch, flags = g.heartbeat("A", 1, ALL, now=20)
    a = g.members["A"]
    kept = set(g.target["A"])
    assert (error, epoch, a.state) == (NONE, 1, UNREVOKED_PARTITIONS)
    assert flags & HB_UNREVOKED and flags & HB_CHANGED
    assert a.assigned == {p: 1 for p in kept}
    assert a.pending_revocation == {p: 1 for p in set(ALL) - kept}
    assert a.unrevoked_since_ms == 20
    # Pending partitions are still A's: B cannot have them yet.
    assert all(g.owner[p] == "A" for p in ALL)
    assert g.refresh_state(20) == "Reconciling"


def test_remains_in_unrevoked_partitions_while_the_client_owns_them():
    """testRemainsInUnrevokedPartitions: nothing changes until the client stops reporting them."""
    g = group_a_b_unrevoked()
    before = dict(g.members["A"].pending_revocation)
    error, epoch, flags = g.heartbeat("A", 1, ALL, now=30)
    assert (error, epoch, flags) == (NONE, 1, 0)
    assert g.members["A"].pending_revocation == before


def test_unrevoked_to_stable_after_the_revocation_is_acknowledged():
    """testUnrevokedPartitionsToStable: the epoch moves on; kept partitions keep epoch 1."""
    g = group_a_b_unrevoked()
    kept = tuple(sorted(g.target["A"]))
    error, epoch, flags = g.heartbeat("A", 1, kept, now=40)
    a = g.members["A"]
    assert (error, epoch, a.state, a.previous_member_epoch) == (NONE, 2, STABLE, 1)
    assert a.assigned == {p: 1 for p in kept}
    assert a.pending_revocation == {}
    assert all(p not in g.owner for p in set(ALL) - set(kept))


def test_unreleased_to_stable_when_partitions_are_released():
    """testUnreleasedPartitionsToStable: released partitions arrive with the member's epoch."""
    g = group_a_b_unrevoked()
    g.heartbeat("A", 1, tuple(sorted(g.target["A"])), now=40)
    error, epoch, flags = g.heartbeat("B", 2, (), now=50)
    b = g.members["B"]
    assert (error, epoch, b.state) == (NONE, 2, STABLE)
    assert b.assigned == {p: 2 for p in g.target["B"]}
    assert g.refresh_state(50) == "Stable"
    g.check_invariants()


def test_stable_to_stable_keeps_old_assignment_epochs_and_gives_new_ones_the_new_epoch():
    """testStableToStableWithNewPartitions: a leave gives A more partitions without revocation."""
    g = group_a_b_unrevoked()
    g.heartbeat("A", 1, tuple(sorted(g.target["A"])), now=40)
    g.heartbeat("B", 2, (), now=50)
    a_before = dict(g.members["A"].assigned)
    error, epoch, flags = g.heartbeat("B", -1, None, now=60)
    assert (error, epoch) == (NONE, -1) and "B" not in g.members and g.group_epoch == 3
    error, epoch, flags = g.heartbeat("A", 2, tuple(sorted(a_before)), now=70)
    a = g.members["A"]
    assert (error, epoch, a.state) == (NONE, 3, STABLE)
    assert a.assigned == {**a_before, **{p: 3 for p in set(ALL) - set(a_before)}}


def test_revocation_is_skipped_when_the_client_no_longer_owns_the_partitions():
    """computeNextAssignment: no UNREVOKED_PARTITIONS if the owned set already excludes them."""
    g = group_with_a()
    g.heartbeat("B", 0, (), now=10)
    kept = tuple(sorted(g.target["A"]))
    error, epoch, flags = g.heartbeat("A", 1, kept, now=20)
    a = g.members["A"]
    assert (epoch, a.state, a.pending_revocation) == (2, STABLE, {})
    assert not flags & HB_UNREVOKED


def test_unknown_member_must_rejoin():
    g = group_with_a()
    assert g.heartbeat("ghost", 3, (), now=5)[0] == UNKNOWN_MEMBER_ID


def test_wrong_epoch_fences_the_member_but_the_previous_epoch_is_tolerated():
    """throwIfMemberEpochIsInvalid: a lost response (previous epoch, owned within assignment) is fine."""
    g = group_a_b_unrevoked()
    kept = tuple(sorted(g.target["A"]))
    g.heartbeat("A", 1, kept, now=40)  # A moves to epoch 2; pretend the response was lost
    assert g.heartbeat("A", 1, kept, now=45)[0] == NONE
    error, _, _ = g.heartbeat("A", 7, kept, now=50)
    assert error == FENCED_MEMBER_EPOCH and "A" not in g.members


def test_static_leave_keeps_partitions_and_the_next_instance_takes_them_without_a_rebalance():
    g = ConsumerGroup("g", 4)
    g.heartbeat("A", 0, (), now=0, instance_id="i-0")
    g.heartbeat("B", 0, (), now=1, instance_id="i-1")
    g.heartbeat("A", 1, tuple(sorted(g.target["A"])), now=2)
    g.heartbeat("B", 2, (), now=3)
    b_partitions = set(g.members["B"].assigned)
    epoch_before = g.group_epoch
    error, epoch, _ = g.heartbeat("B", -2, None, now=4)
    assert (error, epoch) == (NONE, -2)
    departed = g.members["B"]
    assert departed.member_epoch == -2 and departed.assigned == {p: 0 for p in b_partitions}
    assert g.group_epoch == epoch_before
    # A second live member with the same instance id is refused while B1 is live...
    g2 = ConsumerGroup("g2", 2)
    g2.heartbeat("X", 0, (), now=0, instance_id="i-0")
    assert g2.heartbeat("Y", 0, (), now=1, instance_id="i-0")[0] == UNRELEASED_INSTANCE_ID
    # ...but after a static leave the new incarnation replaces it, epochs 0 kept.
    error, epoch, flags = g.heartbeat("B2", 0, (), now=5, instance_id="i-1")
    assert error == NONE and "B" not in g.members
    b2 = g.members["B2"]
    assert b2.assigned == {p: 0 for p in b_partitions} and b2.member_epoch == g.target_assignment_epoch
    assert g.group_epoch == epoch_before
    g.check_invariants()


def test_remove_member_releases_partitions_and_bumps_the_group_epoch():
    g = group_a_b_unrevoked()
    epoch = g.group_epoch
    g.remove_member(g.members["A"])
    assert g.group_epoch == epoch + 1 and g.owner == {} and list(g.target) == ["B"]
    error, _, _ = g.heartbeat("B", 2, (), now=100)
    assert g.members["B"].assigned == {p: 3 for p in ALL}


@pytest.mark.parametrize(
    "member_id, epoch, transactional, expected",
    [
        pytest.param("A", 2, False, NONE, id="current epoch"),
        pytest.param("A", 1, False, STALE_MEMBER_EPOCH, id="stale epoch: STALE_MEMBER_EPOCH"),
        pytest.param("A", 1, True, ILLEGAL_GENERATION, id="stale epoch, txn: ILLEGAL_GENERATION"),
        pytest.param("A", 3, False, STALE_MEMBER_EPOCH, id="future epoch"),
        pytest.param("ghost", 2, False, UNKNOWN_MEMBER_ID, id="unknown member"),
        pytest.param("", -1, False, UNKNOWN_MEMBER_ID, id="admin commit into a non-empty group"),
    ],
)
def test_validate_offset_commit_is_strict(member_id, epoch, transactional, expected):
    """ConsumerGroupTest.testValidateOffsetCommit (Kafka <= 4.2): client epoch must equal member epoch."""
    g = group_a_b_unrevoked()
    g.heartbeat("A", 1, tuple(sorted(g.target["A"])), now=40)
    assert g.validate_offset_commit(member_id, epoch, transactional) == expected


def test_admin_commit_into_an_empty_group_is_accepted():
    g = ConsumerGroup("g", 2)
    assert g.validate_offset_commit("", -1, False) == NONE
    assert g.commit_truth("", -1, (0, 1))[3] == ["accepted", "accepted"]
    # epoch -1 into an empty group whatever the member id (a member's last commit after its leave)
    assert g.validate_offset_commit("left-member", -1, False) == NONE
    assert g.commit_truth("left-member", -1, (0, 1))[3] == ["accepted", "accepted"]


def test_commit_truth_tells_avoidable_zombie_and_stale_apart():
    """KAFKA-19779: same epoch race vs. a partition that moved to another member."""
    g = group_a_b_unrevoked()
    kept = tuple(sorted(g.target["A"]))
    moved = tuple(sorted(set(ALL) - set(kept)))
    g.heartbeat("A", 1, kept, now=40)  # A: epoch 2, kept at ae 1; moved partitions released
    # Before B picks them up, nobody holds the moved partitions: a delayed commit is stale.
    scenario, current_owner, owners, expect = g.commit_truth("A", 1, kept + moved)
    # the class follows the request (contract §3.3): the moved partitions fail it under KIP-1251
    # too, so the kept ones are not saved by it: stale (A holds them), not avoidable
    assert expect == ["stale"] * len(kept) + ["stale"] * len(moved)
    assert g.commit_truth("A", 1, kept)[3] == ["avoidable"] * len(kept)
    assert owners == ["A"] * len(kept) + [None] * len(moved) and not current_owner
    g.heartbeat("B", 2, (), now=50)
    scenario, current_owner, owners, expect = g.commit_truth("A", 1, kept + moved)
    assert scenario == "zombie"
    assert expect == ["stale"] * len(kept) + ["zombie"] * len(moved)
    assert owners == ["A"] * len(kept) + ["B"] * len(moved)
    assert g.commit_truth("A", 1, kept)[:2] == ("heartbeat_race", True)
    assert g.commit_truth("A", 2, kept) == ("owner", True, ["A"] * len(kept), ["accepted"] * len(kept))
    assert g.commit_truth("gone", 2, kept)[0] == "fenced_zombie"


def test_committed_offsets_newest_commit_wins_per_partition():
    offsets = CommittedOffsets()
    first = (0, 1)
    offsets.record("A", first, [10, 20], [0, 0], 100)
    offsets.record("A", (0,), [11], [0], 150)  # a different partition set flushes the previous one
    offsets.record("B", (1,), [25], [1], 200)
    offsets.record("A", first, [5, 5], [0, 0], 120)  # an older (delayed) commit does not win
    assert offsets.snapshot() == {0: (11, 0, 150), 1: (25, 1, 200)}
    offsets.drop([0])
    assert offsets.snapshot() == {1: (25, 1, 200)}


def test_a_request_delayed_past_a_static_leave_meets_the_departed_member():
    """The departed static member (epoch -2) is still a member: STALE_MEMBER_EPOCH, class future_epoch."""
    g = ConsumerGroup("g", 2)
    g.heartbeat("A", 0, (), now=0, instance_id="i-0")
    g.heartbeat("A", -2, None, now=10)
    assert g.validate_offset_commit("A", 1, False) == STALE_MEMBER_EPOCH
    assert g.commit_truth("A", 1, (0, 1)) == ("future_epoch", True, ["A", "A"], ["future_epoch", "future_epoch"])
