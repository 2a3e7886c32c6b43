"""The assignment model, one test per edge of Kafka's ``CurrentAssignmentBuilderTest``.

Kafka's test drives the builder with a target assignment; we observe the
records the builder wrote and check the assignment epochs (KIP-1251) that
follow from them, with whole-object equality.
"""

from fencewatch.state.assignment import Member, apply_classic_generation, apply_member_assignment, apply_static_leave
from fencewatch.state.model import MemberState, Protocol

from .helpers import assignment, tp

T1, T2 = "topic1", "topic2"


def stable_member(epoch=10, assigned=None) -> Member:
    assigned = assigned if assigned is not None else {**{x: 10 for x in tp(T1, 1, 2, 3)}, **{x: 10 for x in tp(T2, 4, 5, 6)}}
    return Member("member", Protocol.CONSUMER, epoch, previous_member_epoch=10, state=MemberState.STABLE,
                  assigned_partitions=assigned)


def test_stable_to_stable():
    """CurrentAssignmentBuilderTest.testStableToStable: kept partitions keep their epoch."""
    m = stable_member()
    ev = assignment("member", 11, tp(T1, 1, 2, 3) + tp(T2, 4, 5, 6))
    assert apply_member_assignment(m, ev) == m._replace(member_epoch=11, previous_member_epoch=10)


def test_stable_to_stable_with_new_partitions():
    """CurrentAssignmentBuilderTest.testStableToStableWithNewPartitions: new partitions get the new epoch."""
    m = stable_member()
    ev = assignment("member", 11, tp(T1, 1, 2, 3, 4) + tp(T2, 4, 5, 6, 7))
    got = apply_member_assignment(m, ev)
    assert got.assigned_partitions == {**m.assigned_partitions, (T1, 4): 11, (T2, 7): 11}
    assert got.member_epoch == 11 and got.revocation_epoch == 0


def test_stable_to_unrevoked_partitions():
    """CurrentAssignmentBuilderTest.testStableToUnrevokedPartitions: revoked partitions keep their epoch."""
    m = stable_member()
    ev = assignment("member", 10, tp(T1, 2, 3) + tp(T2, 5, 6), pending=tp(T1, 1) + tp(T2, 4),
                    state=MemberState.UNREVOKED_PARTITIONS)
    got = apply_member_assignment(m, ev)
    assert got == Member("member", Protocol.CONSUMER, 10, previous_member_epoch=10,
                         state=MemberState.UNREVOKED_PARTITIONS,
                         assigned_partitions={x: 10 for x in tp(T1, 2, 3) + tp(T2, 5, 6)},
                         partitions_pending_revocation={(T1, 1): 10, (T2, 4): 10})


def test_stable_to_unreleased_partitions():
    """CurrentAssignmentBuilderTest.testStableToUnreleasedPartitions: epoch bumps, unreleased ones not yet held."""
    m = stable_member()
    ev = assignment("member", 11, tp(T1, 1, 2, 3) + tp(T2, 4, 5, 6), state=MemberState.UNRELEASED_PARTITIONS)
    got = apply_member_assignment(m, ev)
    assert got.state is MemberState.UNRELEASED_PARTITIONS
    assert got.assigned_partitions == m.assigned_partitions and got.member_epoch == 11


def test_unrevoked_partitions_to_stable_sets_revocation_epoch():
    """CurrentAssignmentBuilderTest.testUnrevokedPartitionsToStable, plus KAFKA-19779's RevocationEpoch."""
    m = apply_member_assignment(stable_member(), assignment(
        "member", 10, tp(T1, 2, 3) + tp(T2, 5, 6), pending=tp(T1, 1) + tp(T2, 4),
        state=MemberState.UNREVOKED_PARTITIONS))
    got = apply_member_assignment(m, assignment("member", 11, tp(T1, 2, 3) + tp(T2, 5, 6)))
    assert got.partitions_pending_revocation == {}
    assert got.assigned_partitions == {x: 10 for x in tp(T1, 2, 3) + tp(T2, 5, 6)}
    assert got.revocation_epoch == 10
    assert got.member_epoch == 11


def test_remains_in_unrevoked_partitions_returns_same_object():
    """CurrentAssignmentBuilderTest.testRemainsInUnrevokedPartitions: nothing changed -> same member."""
    m = apply_member_assignment(stable_member(), assignment(
        "member", 10, tp(T1, 2, 3) + tp(T2, 5, 6), pending=tp(T1, 1) + tp(T2, 4),
        state=MemberState.UNREVOKED_PARTITIONS))
    again = assignment("member", 10, tp(T1, 2, 3) + tp(T2, 5, 6), pending=tp(T1, 1) + tp(T2, 4),
                       state=MemberState.UNREVOKED_PARTITIONS)
    assert apply_member_assignment(m, again) is m


def test_unrevoked_partitions_to_unrevoked_partitions():
    """CurrentAssignmentBuilderTest.testUnrevokedPartitionsToUnrevokedPartitions: more to revoke, epoch kept."""
    m = apply_member_assignment(stable_member(), assignment(
        "member", 10, tp(T1, 2, 3) + tp(T2, 5, 6), pending=tp(T1, 1) + tp(T2, 4),
        state=MemberState.UNREVOKED_PARTITIONS))
    got = apply_member_assignment(m, assignment("member", 10, tp(T1, 3) + tp(T2, 6),
                                                pending=tp(T1, 1, 2) + tp(T2, 4, 5),
                                                state=MemberState.UNREVOKED_PARTITIONS))
    assert got.partitions_pending_revocation == {x: 10 for x in tp(T1, 1, 2) + tp(T2, 4, 5)}
    assert got.revocation_epoch == 0


def test_unreleased_partitions_to_stable_new_partition_gets_current_epoch():
    """CurrentAssignmentBuilderTest.testUnreleasedPartitionsToStable: a released partition arrives at epoch 11."""
    m = apply_member_assignment(stable_member(), assignment(
        "member", 11, tp(T1, 1, 2, 3) + tp(T2, 4, 5, 6), state=MemberState.UNRELEASED_PARTITIONS))
    got = apply_member_assignment(m, assignment("member", 11, tp(T1, 1, 2, 3, 4) + tp(T2, 4, 5, 6, 7)))
    assert got.assigned_partitions[(T1, 4)] == 11 and got.assigned_partitions[(T1, 1)] == 10
    assert got.state is MemberState.STABLE


def test_partition_returning_from_pending_to_assigned_gets_new_epoch():
    """SPEC 2: a partition back from pending revocation counts as newly added."""
    m = apply_member_assignment(stable_member(), assignment(
        "member", 10, tp(T1, 2, 3) + tp(T2, 4, 5, 6), pending=tp(T1, 1), state=MemberState.UNREVOKED_PARTITIONS))
    got = apply_member_assignment(m, assignment("member", 12, tp(T1, 1, 2, 3) + tp(T2, 4, 5, 6)))
    assert got.assigned_partitions[(T1, 1)] == 12
    # The revocation completed (the partition was released and re-added at epoch 12):
    # found by the property test, a revoked partition's zombie commit at epoch 10 must stay fenced.
    assert got.revocation_epoch == 10


def test_target_assignment_epoch_is_used_for_new_partitions():
    m = stable_member()
    got = apply_member_assignment(m, assignment("member", 12, tp(T1, 1, 2, 3, 9) + tp(T2, 4, 5, 6), target_epoch=11))
    assert got.assigned_partitions[(T1, 9)] == 11


def test_explicit_assignment_epochs_take_precedence():
    """KIP-1251 brokers write AssignmentEpochs: they are the truth, not derived."""
    m = stable_member()
    got = apply_member_assignment(m, assignment("member", 12, tp(T1, 1, 2), assigned_epochs=(3, 7),
                                                pending=tp(T2, 4), pending_epochs=(5,)))
    assert got.assigned_partitions == {(T1, 1): 3, (T1, 2): 7}
    assert got.partitions_pending_revocation == {(T2, 4): 5}


def test_new_member_gets_its_epoch():
    got = apply_member_assignment(None, assignment("m", 5, tp(T1, 0, 1)))
    assert got == Member("m", Protocol.CONSUMER, 5, previous_member_epoch=-1,
                         assigned_partitions={(T1, 0): 5, (T1, 1): 5})


def test_static_leave_resets_epochs_to_zero():
    m = stable_member()
    got = apply_static_leave(m)
    assert got.member_epoch == -2
    assert set(got.assigned_partitions) == set(m.assigned_partitions)
    assert set(got.assigned_partitions.values()) == {0}
    assert m.assigned_partitions[(T1, 1)] == 10  # input unmodified


# Members whose partitions carry epochs unlike their member epoch: a rule that keeps a
# partition's epoch cannot pass by handing out the member epoch instead (the fixture above
# holds every partition at epoch 10, the member's own epoch, and let such mutants live).

def mixed_member() -> Member:
    """Member at epoch 12 holding topic1-1 since epoch 7 and topic1-2 since epoch 9."""
    return Member("member", Protocol.CONSUMER, 12, previous_member_epoch=11, state=MemberState.STABLE,
                  assigned_partitions={(T1, 1): 7, (T1, 2): 9})


def test_partition_moving_to_pending_revocation_keeps_its_own_epoch():
    """SPEC 2 / CurrentAssignmentBuilder: a partition moving from assigned to pending revocation keeps
    the epoch it was assigned at, not the member's (nor the new) epoch."""
    got = apply_member_assignment(mixed_member(), assignment(
        "member", 13, tp(T1, 2), pending=tp(T1, 1), state=MemberState.UNREVOKED_PARTITIONS))
    assert got.partitions_pending_revocation == {(T1, 1): 7}
    assert got.assigned_partitions == {(T1, 2): 9}


def test_partition_staying_in_pending_revocation_keeps_its_epoch():
    """A partition still pending revocation in the next record keeps the epoch it had."""
    m = apply_member_assignment(mixed_member(), assignment(
        "member", 12, tp(T1, 2), pending=tp(T1, 1), state=MemberState.UNREVOKED_PARTITIONS))
    got = apply_member_assignment(m, assignment(
        "member", 12, (), pending=tp(T1, 1, 2), state=MemberState.UNREVOKED_PARTITIONS))
    assert got.partitions_pending_revocation == {(T1, 1): 7, (T1, 2): 9}
    assert got.assigned_partitions == {}


def test_pending_partition_unknown_before_gets_the_added_epoch():
    """A partition reported pending that the member never held (we missed a record) gets the
    epoch a new partition would get: the target assignment epoch when given, else the new epoch."""
    got = apply_member_assignment(mixed_member(), assignment(
        "member", 13, tp(T1, 1, 2), pending=tp(T2, 4), state=MemberState.UNREVOKED_PARTITIONS))
    assert got.partitions_pending_revocation == {(T2, 4): 13}
    got = apply_member_assignment(mixed_member(), assignment(
        "member", 13, tp(T1, 1, 2), pending=tp(T2, 4), target_epoch=12, state=MemberState.UNREVOKED_PARTITIONS))
    assert got.partitions_pending_revocation == {(T2, 4): 12}


def test_kept_partitions_keep_distinct_epochs_when_member_epoch_bumps():
    got = apply_member_assignment(mixed_member(), assignment("member", 14, tp(T1, 1, 2, 3)))
    assert got.assigned_partitions == {(T1, 1): 7, (T1, 2): 9, (T1, 3): 14}
    assert got.previous_member_epoch == 12


def test_revocation_epoch_unchanged_while_revocation_is_incomplete():
    """A higher epoch with a partition still pending: the revocation has not completed."""
    m = apply_member_assignment(mixed_member(), assignment(
        "member", 12, tp(T1, 2), pending=tp(T1, 1), state=MemberState.UNREVOKED_PARTITIONS))
    got = apply_member_assignment(m, assignment(
        "member", 13, tp(T1, 2), pending=tp(T1, 1), state=MemberState.UNREVOKED_PARTITIONS))
    assert got.revocation_epoch == 0
    done = apply_member_assignment(got, assignment("member", 14, tp(T1, 2)))
    assert done.revocation_epoch == 13


def test_revocation_epoch_needs_a_higher_member_epoch():
    """Pending partitions gone at the same epoch (Kafka never writes this; defensive): no completed revocation."""
    m = apply_member_assignment(mixed_member(), assignment(
        "member", 12, tp(T1, 2), pending=tp(T1, 1), state=MemberState.UNREVOKED_PARTITIONS))
    got = apply_member_assignment(m, assignment("member", 12, tp(T1, 2)))
    assert got.revocation_epoch == 0


def test_static_leave_resets_pending_revocation_epochs_too():
    """Kafka's static leave (epoch -2) keeps the member's partitions, assigned AND pending revocation,
    every assignment epoch reset to 0; the epoch it left at becomes the previous epoch."""
    m = apply_member_assignment(mixed_member(), assignment(
        "member", 12, tp(T1, 2), pending=tp(T1, 1), state=MemberState.UNREVOKED_PARTITIONS, instance_id="i-1"))
    got = apply_static_leave(m)
    assert got == m._replace(member_epoch=-2, previous_member_epoch=12, assigned_partitions={(T1, 2): 0},
                             partitions_pending_revocation={(T1, 1): 0})
    assert got.instance_id == "i-1"
    assert m.partitions_pending_revocation == {(T1, 1): 7}  # input unmodified


def test_new_member_keeps_given_instance_and_subscription():
    got = apply_member_assignment(None, assignment("m", 5, tp(T1, 0), instance_id="i-9", subscribed=(T1,)))
    assert got.instance_id == "i-9" and got.subscribed_topics == frozenset({T1})
    again = apply_member_assignment(got, assignment("m", 6, tp(T1, 0)))
    assert again.instance_id == "i-9" and again.subscribed_topics == frozenset({T1})


def test_assignment_epoch_reads_pending_revocation_too():
    """A partition pending revocation is still held: its assignment epoch is the one it kept."""
    m = apply_member_assignment(mixed_member(), assignment(
        "member", 13, tp(T1, 2), pending=tp(T1, 1), state=MemberState.UNREVOKED_PARTITIONS))
    assert m.assignment_epoch((T1, 1)) == 7
    assert m.assignment_epoch((T1, 2)) == 9
    assert m.assignment_epoch((T1, 3)) is None


# --------------------------------------------------------------------------- classic generations

def test_classic_generation_keeps_epochs_of_kept_partitions():
    """KIP-341 classic groups: a partition kept across generations keeps the generation it arrived in."""
    first = apply_classic_generation(None, "c1", 4, tp(T1, 0, 1), Protocol.CLASSIC)
    assert first == Member("c1", Protocol.CLASSIC, 4, previous_member_epoch=-1,
                           assigned_partitions={(T1, 0): 4, (T1, 1): 4})
    second = apply_classic_generation(first, "c1", 5, tp(T1, 1, 2), Protocol.CLASSIC)
    assert second.assigned_partitions == {(T1, 1): 4, (T1, 2): 5}
    assert second.member_epoch == 5 and second.previous_member_epoch == 4
    assert second.partitions_pending_revocation == {}


def test_classic_generation_carries_member_facts():
    prev = Member("c1", Protocol.CLASSIC, 4, previous_member_epoch=3, assigned_partitions={(T1, 0): 2},
                  revocation_epoch=3, instance_id="i-1", subscribed_topics=frozenset({T1}))
    got = apply_classic_generation(prev, "c1", 6, tp(T1, 0), Protocol.CLASSIC)
    assert got == Member("c1", Protocol.CLASSIC, 6, previous_member_epoch=4, assigned_partitions={(T1, 0): 2},
                         revocation_epoch=3, instance_id="i-1", subscribed_topics=frozenset({T1}))
