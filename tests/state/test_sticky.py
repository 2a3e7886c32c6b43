"""Classic sticky claims (SPEC 7), mirroring ``AbstractStickyAssignorTest``."""
from fencewatch.state import group as grp
from fencewatch.state.config import RulesConfig
from fencewatch.state.sticky import add_claims, resolve

from .helpers import join, sync, tp

CFG = RulesConfig(alert_cooldown_ms=0)


def run(events):
    g = grp.new_group("default", "g")
    out = grp.Outputs()
    for ev in events:
        g = grp.process(g, ev, CFG, out)
    return g, out


def test_owned_partitions_invalidated_for_consumers_with_stale_generation():
    """AbstractStickyAssignorTest.testOwnedPartitionsInvalidatedForConsumersWithStaleGeneration."""
    conflict = resolve(("t", 0), (("c1", 1), ("c2", 2)))
    assert conflict.winner == "c2" and conflict.losers == (("c1", 1),)


def test_partition_claimed_by_multiple_consumers_in_same_generation():
    """AbstractStickyAssignorTest.testPartitionsTransferringOwnershipIncludeThePartitionClaimedByMultipleConsumersInSameGeneration."""
    conflict = resolve(("t", 0), (("c1", 3), ("c2", 3)))
    assert conflict.winner is None and {m for m, _ in conflict.losers} == {"c1", "c2"}


def test_no_conflict_without_shared_claims():
    """AbstractStickyAssignorTest.testNoReassignmentOnCurrentMembers: disjoint claims, nothing to resolve."""
    claims, conflicts = add_claims({}, "c1", 2, tp("t", 0, 1))
    claims, conflicts = add_claims(claims, "c2", 2, tp("t", 2))
    assert conflicts == []


def test_stale_owned_claim_alert_from_joins():
    _, out = run([join("c1", 2, tp("t", 0, 1), ts=10), join("c2", 1, tp("t", 1), ts=11)])
    assert [a.kind for a in out.alerts] == ["STALE_OWNED_CLAIM"]
    d = out.alerts[0].details
    assert d["losing_members"] == "c2" and d["winners"] == "c1@2" and d["partitions"] == "t-1"


def test_rejoining_member_does_not_conflict_with_itself():
    _, out = run([join("c1", 2, tp("t", 0), ts=10), join("c1", 2, tp("t", 0), ts=11)])
    assert out.alerts == []


def test_claims_reset_each_generation():
    _, out = run([join("c1", 2, tp("t", 0), ts=10), sync(3, {"c1": tp("t", 0)}, ts=11),
                  join("c2", 1, tp("t", 0), ts=12)])
    assert out.alerts == []


def test_sync_giving_partition_twice_is_duplicate_assignment():
    g, out = run([join("c1", -1, (), ts=1), join("c2", -1, (), ts=2),
                  sync(1, {"c1": tp("t", 0), "c2": tp("t", 0, 1)}, ts=3)])
    assert [a.kind for a in out.alerts] == ["DUPLICATE_ASSIGNMENT"]
    assert g.members["c1"].member_epoch == 1 and g.owners[("t", 0)] == ("c1", "c2")


def test_classic_commit_judged_against_generation():
    from .helpers import commit
    g, out = run([join("c1", -1, (), ts=1), sync(4, {"c1": tp("t", 0)}, ts=3), commit("c1", 3, tp("t", 0), ts=5)])
    v = out.verdicts[-1]
    assert v.strict == "ILLEGAL_GENERATION" and v.broker_epoch == 4
