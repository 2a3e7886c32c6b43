"""The simulator's sticky assignor and classic group (KIP-341 claim resolution).

Properties mirror Kafka's ``AbstractStickyAssignorTest``: every partition is
assigned exactly once, the assignment is balanced, and members keep what they
had up to their quota. Claim resolution follows ``StickyAssignor`` with user
data v1 (KIP-341): the higher generation keeps a contested partition, equal
generations keep it for nobody.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fencewatch.sim.assignor import sticky_assign
from fencewatch.sim.classic import ClassicGroup
from fencewatch.sim.coordinator import ILLEGAL_GENERATION, NONE, UNKNOWN_MEMBER_ID


@settings(max_examples=200, deadline=None)
@given(
    members=st.lists(st.sampled_from("ABCDEFGH"), min_size=1, max_size=8, unique=True),
    partitions=st.integers(min_value=0, max_value=40),
    previous_owner=st.lists(st.sampled_from("ABCDEFGHXYZ"), max_size=40),
)
def test_sticky_assign_is_complete_balanced_and_sticky(members, partitions, previous_owner):
    previous: dict[str, set[int]] = {}
    for p, owner in enumerate(previous_owner[:partitions]):
        previous.setdefault(owner, set()).add(p)
    result = sticky_assign(members, range(partitions), previous)
    assigned = [p for parts in result.values() for p in parts]
    assert sorted(assigned) == list(range(partitions))
    sizes = [len(result[m]) for m in members]
    assert max(sizes) - min(sizes) <= 1
    for m in members:
        had = previous.get(m, set()) & set(range(partitions))
        # Sticky: a member keeps all it had, up to its balanced quota.
        assert len(result[m] & had) == min(len(had), len(result[m]))
    assert sticky_assign(members, range(partitions), previous) == result


def test_sticky_assign_moves_only_what_a_new_member_needs():
    before = sticky_assign(["A", "B"], range(6), {})
    after = sticky_assign(["A", "B", "C"], range(6), before)
    moved = sum(len(after[m] - before[m]) for m in ("A", "B"))
    assert moved == 0 and len(after["C"]) == 2


def test_classic_stale_claim_loses_to_the_newer_generation():
    """KIP-341: a member that was away claims its old partitions with its old generation."""
    g = ClassicGroup("g", 4)
    g.rebalance([("A", (), -1), ("B", (), -1)])
    assert g.generation == 1
    a_parts = g.members["A"].assignment
    # A is removed (session timeout): B takes everything in generation 2.
    g.rebalance(leaving=["A"])
    assert g.members["B"].assignment == (0, 1, 2, 3)
    # A rejoins under a new member id, claiming its generation-1 partitions.
    result = g.rebalance([("A2", a_parts, 1)])
    assert result.stale_claims == {"A2": list(a_parts)}
    assert result.duplicate_claims == {}
    assert g.generation == 3
    assert set(result.assignments["A2"]) | set(result.assignments["B"]) == {0, 1, 2, 3}


def test_classic_equal_generation_claims_keep_the_partition_for_nobody():
    """Old clients (user data v0, no generation): a double claim is resolved by reassignment."""
    g = ClassicGroup("g", 2, user_data_v0=True)
    g.rebalance([("A", (), -1)])
    g.rebalance(leaving=["A"], joining=[("B", (), -1)])
    result = g.rebalance([("A2", (0, 1), -1)])
    assert result.duplicate_claims == {"A2": [0, 1], "B": [0, 1]}
    assert result.stale_claims == {}


def test_classic_offset_commit_validation():
    """ClassicGroup.validateOffsetCommit: unknown member, then generation."""
    g = ClassicGroup("g", 2)
    assert g.validate_offset_commit("", -1) == NONE  # empty group: admin commit
    g.rebalance([("A", (), -1)])
    assert g.validate_offset_commit("A", 1) == NONE
    assert g.validate_offset_commit("A", 0) == ILLEGAL_GENERATION
    assert g.validate_offset_commit("Z", 1) == UNKNOWN_MEMBER_ID
    assert g.validate_offset_commit("", -1) == UNKNOWN_MEMBER_ID
    g.rebalance([("B", (), 1)])
    # One generation behind is never avoidable for a classic member (contract §3.2): a zombie's
    # commit where B took the partition, a stale one where A still holds it.
    for p in (0, 1):
        expected = ["zombie"] if g.owner_of(p) == "B" else ["stale"]
        assert g.commit_truth("A", 1, (p,))[3] == expected
    assert g.commit_truth("A", 2, (0,))[3] == ["accepted"]


def test_classic_offsets_expire_retention_after_the_group_became_empty():
    g = ClassicGroup("g", 2)
    g.rebalance([("A", (), -1)])
    g.offsets.record("A", (0, 1), [5, 6], [0, 0], now=100)
    g.rebalance(leaving=["A"])
    assert g.expire_offsets(now=1_000, retention_ms=5_000, empty_since_ms=200) == []
    assert g.expire_offsets(now=5_200, retention_ms=5_000, empty_since_ms=200) == [0, 1]
    assert g.committed == {}
