"""Commit judging (SPEC 3), mirroring Kafka's ``ConsumerGroupTest.testValidateOffsetCommit*``
and ``OffsetMetadataManagerTest`` commit validation, plus one row per SPEC 3 case."""
import pytest

from fencewatch.state import group as grp
from fencewatch.state.config import RulesConfig
from fencewatch.state.fencing import POLICIES, POLICY_ORDER, PolicyOutcomes, classify, evaluate
from fencewatch.state.model import CommitClass, MemberState, Policy, Protocol

from .helpers import assignment, commit, group_state, join, left, sync, tp

CFG = RulesConfig(alert_cooldown_ms=0)


def run(events, cfg=CFG):
    g = grp.new_group("default", "g")
    out = grp.Outputs()
    for ev in events:
        g = grp.process(g, ev, cfg, out)
    return g, out


def verdict(events, cfg=CFG):
    _, out = run(events, cfg)
    return out.verdicts[-1]


# --------------------------------------------------------------------------- policy table

@pytest.mark.parametrize("c,b,rev,ae,expected", [
    # c, b, revocation epoch, assignment epoch (None = not held) -> strict, member_revocation, assignment_epoch, kip1251
    pytest.param(5, 5, 0, 3, (True, True, True, True), id="current-epoch-held"),
    pytest.param(4, 5, 0, 3, (False, True, True, True), id="stale-epoch-held-since-3"),
    pytest.param(4, 5, 4, 3, (False, False, True, True), id="stale-epoch-at-revocation-epoch"),
    pytest.param(2, 5, 0, 3, (False, True, False, False), id="epoch-before-assignment"),
    pytest.param(5, 5, 0, None, (True, True, False, True), id="current-epoch-not-held-kip1251-equal-path"),
    pytest.param(4, 5, 0, None, (False, True, False, False), id="stale-epoch-not-held"),
    pytest.param(6, 5, 0, 3, (False, False, False, False), id="future-epoch"),
    pytest.param(3, 5, 0, 3, (False, True, True, True), id="epoch-equal-to-assignment-epoch"),
])
def test_policy_table(c, b, rev, ae, expected):
    assert evaluate(c, b, rev, ae) == expected
    assert tuple(POLICIES[p](c, b, rev, ae) for p in POLICY_ORDER) == expected


def test_strict_acceptance_implies_kip1251_on_the_table():
    for c in range(-1, 8):
        for b in range(0, 8):
            for ae in (None, *range(0, 8)):
                res = evaluate(c, b, 0, ae)
                assert not res.strict or res.kip1251


@pytest.mark.parametrize("outcomes,c,b,other,expected", [
    ((True, True, True, True), 5, 5, False, CommitClass.ACCEPTED),
    ((False, True, True, True), 4, 5, False, CommitClass.AVOIDABLE),
    ((False, False, False, False), 6, 5, False, CommitClass.FUTURE_EPOCH),
    ((False, True, False, False), 4, 5, True, CommitClass.ZOMBIE),
    ((False, True, False, False), 4, 5, False, CommitClass.STALE),
    ((False, False, False, False), 6, 5, True, CommitClass.FUTURE_EPOCH),
], ids=["accepted", "avoidable", "future", "zombie", "stale", "future-on-a-partition-another-member-holds"])
def test_classify(outcomes, c, b, other, expected):
    assert classify(PolicyOutcomes(*outcomes), c, b, other) is expected


# --------------------------------------------------------------------------- narratives (ConsumerGroupTest)

def test_validate_offset_commit_unknown_member():
    """ConsumerGroupTest.testValidateOffsetCommit: unknown member id -> UNKNOWN_MEMBER_ID."""
    v = verdict([assignment("A", 1, tp("t", 0)), commit("B", 1, tp("t", 0))])
    assert (v.strict, v.kip1251, v.cls, v.broker_epoch) == ("UNKNOWN_MEMBER_ID", "UNKNOWN_MEMBER_ID",
                                                             "unknown_member", None)


def test_validate_offset_commit_stale_member_epoch():
    """ConsumerGroupTest.testValidateOffsetCommit: consumer member, wrong epoch -> STALE_MEMBER_EPOCH."""
    v = verdict([assignment("A", 1, tp("t", 0)), assignment("A", 2, tp("t", 0)), commit("A", 1, tp("t", 0))])
    assert v.strict == "STALE_MEMBER_EPOCH"
    assert v.kip1251 == "NONE" and v.cls == "avoidable"


def test_validate_offset_commit_classic_member_gets_illegal_generation():
    """ConsumerGroupTest.testValidateOffsetCommit: classic-protocol member -> ILLEGAL_GENERATION."""
    v = verdict([assignment("A", 1, tp("t", 0), protocol=Protocol.CLASSIC), assignment("A", 2, tp("t", 0), protocol=Protocol.CLASSIC),
                 commit("A", 3, tp("t", 0))])
    assert v.strict == "ILLEGAL_GENERATION" and v.cls == "future_epoch"


def test_validate_transactional_offset_commit_illegal_generation():
    """ConsumerGroupTest.testValidateTransactionalOffsetCommit: TxnOffsetCommit -> ILLEGAL_GENERATION."""
    v = verdict([assignment("A", 1, tp("t", 0)), assignment("A", 2, tp("t", 0)), commit("A", 1, tp("t", 0), txn=True)])
    assert v.strict == "ILLEGAL_GENERATION" and v.kind == "txn_commit"


def test_validate_offset_commit_admin_into_empty_group():
    """ConsumerGroupTest.testValidateOffsetCommit: epoch -1 and no member id in an empty group is accepted."""
    events = [assignment("A", 1, tp("t", 0)), left("A"), commit("", -1, tp("t", 0))]
    v = verdict(events)
    assert (v.strict, v.cls) == ("NONE", "accepted")


def test_a_left_members_commit_at_epoch_minus_one_into_the_empty_group_is_accepted():
    """ConsumerGroup.validateOffsetCommit: ``memberEpoch < 0 && members().isEmpty()`` accepts
    before any member lookup, so a member id does not matter: Kafka's Java consumer, closing
    after its leave, commits so (the bar run of 2026-12-04 on 4.2.2: the broker accepted seven
    such partitions the model had answered UNKNOWN_MEMBER_ID). Into a group that still has
    members, the same commit is the member's lookup (unknown) or its stale epoch (known)."""
    events = [assignment("A", 1, tp("t", 0)), left("A"), commit("A", -1, tp("t", 0), error_code=0)]
    v = verdict(events)
    assert (v.strict, v.kip1251, v.cls, v.model_agrees) == ("NONE", "NONE", "accepted", True)
    others = [assignment("A", 1, tp("t", 0)), assignment("B", 2, tp("t", 1)), left("A"), commit("A", -1, tp("t", 0))]
    assert verdict(others).strict == "UNKNOWN_MEMBER_ID"
    classic_empty = [join("A", 1, ()), group_state("Empty", ts=1400, protocol="classic"), commit("A", -1, tp("t", 0))]
    assert verdict(classic_empty).strict == "NONE"


def test_validate_offset_commit_admin_into_group_with_members():
    v = verdict([assignment("A", 1, tp("t", 0)), commit("", -1, tp("t", 0))])
    assert (v.strict, v.cls) == ("UNKNOWN_MEMBER_ID", "unknown_member")


def test_offset_commit_unknown_group():
    """OffsetMetadataManagerTest.testOffsetCommitWithUnknownGroup: GROUP_ID_NOT_FOUND (txn: ILLEGAL_GENERATION)."""
    v = verdict([commit("A", 3, tp("t", 0))])
    assert (v.strict, v.cls) == ("GROUP_ID_NOT_FOUND", "other")
    v = verdict([commit("A", 3, tp("t", 0), txn=True)])
    assert v.strict == "ILLEGAL_GENERATION"


def test_offset_commit_simple_group_created_with_generation_minus_one():
    """OffsetMetadataManagerTest.testSimpleGroupOffsetCommit: -1 into an unknown group creates it."""
    g, out = run([commit("", -1, tp("t", 0))])
    assert out.verdicts[-1].cls == "accepted" and g.exists and g.group_type == "simple"
    assert ("t", 0) in grp.committed_offsets(g)


# --------------------------------------------------------------------------- KAFKA-19779 scenarios

def revoke_p1_to_b():
    """A owns t-0,t-1 at epoch 1; t-1 is revoked from A (epoch 2) and assigned to B at epoch 3."""
    return [
        assignment("A", 1, tp("t", 0, 1), ts=100),
        assignment("A", 1, tp("t", 0), pending=tp("t", 1), state=MemberState.UNREVOKED_PARTITIONS, ts=110),
        assignment("A", 3, tp("t", 0), ts=120),
        assignment("B", 3, tp("t", 1), ts=130),
    ]


def test_zombie_commit_of_revoked_partition():
    v = verdict(revoke_p1_to_b() + [commit("A", 1, tp("t", 1))])
    assert (v.strict, v.member_revocation, v.assignment_epoch_check, v.kip1251) == ("STALE_MEMBER_EPOCH",) * 4
    assert v.cls == "zombie" and v.owner_member_id == "B" and not v.unsafe


def test_future_epoch_commit_of_a_partition_another_member_holds_is_no_zombie():
    """Contract §3.3's class order: ``future_epoch`` is tried before ``zombie``. A's client is at
    epoch 4, ahead of the broker's 3 for A, and commits t-1, which B holds: every policy rejects
    it, the class is ``future_epoch`` (B still named as the owner), and no ZOMBIE_COMMIT."""
    _, out = run(revoke_p1_to_b() + [commit("A", 4, tp("t", 1))])
    v = out.verdicts[-1]
    assert (v.strict, v.member_revocation, v.assignment_epoch_check, v.kip1251) == ("STALE_MEMBER_EPOCH",) * 4
    assert (v.cls, v.owner_member_id, v.unsafe) == ("future_epoch", "B", False)
    assert [a.kind for a in out.alerts] == []
    # The same commit one epoch lower (stale, B holds it) is a zombie and raises the alert.
    _, out = run(revoke_p1_to_b() + [commit("A", 2, tp("t", 1))])
    assert out.verdicts[-1].cls == "zombie" and [a.kind for a in out.alerts] == ["ZOMBIE_COMMIT"]


def test_commit_at_the_broker_epoch_is_accepted_not_future():
    """The boundary of the first class tried: c == b is no future epoch (strict accepts it)."""
    v = verdict(revoke_p1_to_b() + [commit("A", 3, tp("t", 0))])
    assert (v.cls, v.strict) == ("accepted", "NONE")


def test_member_revocation_rejects_other_partition_during_revocation_race():
    """KAFKA-19779: the member-level design fences a commit of a kept partition at the revocation epoch."""
    v = verdict(revoke_p1_to_b() + [commit("A", 1, tp("t", 0))])
    assert v.member_revocation == "STALE_MEMBER_EPOCH"  # revocation epoch is 1
    assert v.assignment_epoch_check == "NONE" and v.kip1251 == "NONE" and v.cls == "avoidable"


def test_stale_commit_nobody_holds():
    events = revoke_p1_to_b()[:3] + [commit("A", 1, tp("t", 1))]
    v = verdict(events)
    assert v.cls == "stale" and v.owner_member_id is None


def test_unsafe_equal_epoch_path_for_unheld_partition():
    """KIP-1251's equal-epoch path accepts a partition the member does not hold: unsafe if B owns it."""
    v = verdict(revoke_p1_to_b() + [commit("A", 3, tp("t", 1))])
    assert v.strict == "NONE" and v.kip1251 == "NONE" and v.assignment_epoch_check == "STALE_MEMBER_EPOCH"
    assert v.unsafe and v.owner_member_id == "B"


def test_request_outcome_rejects_whole_request_and_model_agrees():
    """Kafka fails the whole request on one bad partition; model_agrees compares request outcomes."""
    events = revoke_p1_to_b() + [commit("A", 1, tp("t", 0, 1), error_code=113)]
    g, out = run(events)
    v0, v1 = out.verdicts[-2:]
    # t-0 alone KIP-1251 would accept, but t-1 fails the request under it too: the class follows
    # the request (contract §3.3, issue 44), so t-0 is stale, not avoidable; its own answer stays.
    assert (v0.cls, v1.cls) == ("stale", "zombie") and v0.kip1251 == "NONE" and v1.kip1251 != "NONE"
    assert v0.model_agrees is True and v1.model_agrees is True
    kinds = [a.kind for a in out.alerts]
    assert "ZOMBIE_COMMIT" in kinds
    assert "AVOIDABLE_FENCING" not in kinds  # kip1251 rejects the request too (t-1 is a zombie)


def test_model_divergence_when_broker_disagrees():
    events = [assignment("A", 1, tp("t", 0)), commit("A", 1, tp("t", 0), error_code=113)]
    g, out = run(events)
    assert out.verdicts[-1].model_agrees is False
    assert [a.kind for a in out.alerts] == ["MODEL_DIVERGENCE"]
    assert g.counters.divergences == 1


def test_transient_broker_errors_are_not_divergence():
    events = [assignment("A", 1, tp("t", 0)), commit("A", 1, tp("t", 0), error_code=16)]
    _, out = run(events)
    assert out.verdicts[-1].model_agrees is None and out.alerts == []


def test_broker_policy_kip1251_agrees_with_kip1251_broker():
    cfg = RulesConfig(broker_policy=Policy.KIP1251, alert_cooldown_ms=0)
    events = [assignment("A", 1, tp("t", 0)), assignment("A", 2, tp("t", 0)), commit("A", 1, tp("t", 0), error_code=0)]
    assert verdict(events, cfg).model_agrees is True
    assert verdict(events, CFG).model_agrees is False


# Kafka's StreamsGroup.validateOffsetCommit (4.2-4.4): equal epochs pass, a newer one is
# STALE_MEMBER_EPOCH, an older one goes to createAssignmentEpochValidator: the committed topic's
# subtopology, then the partition among the member's active tasks (assigned or pending
# revocation) with its assignment epoch <= the commit's (cf. StreamsGroupTest.testValidateOffsetCommit).
# So a streams group is judged by kip1251 from Kafka 4.2, a consumer group only from 4.3.

def _lagging_streams_commit(code, protocol=Protocol.STREAMS):
    """Member A holds t-0 since epoch 1 and t-1 since epoch 2 (its active tasks' partitions);
    its EOS producer commits t-0 at epoch 1, one behind, and the broker answered ``code``."""
    return [assignment("A", 1, tp("t", 0), protocol=protocol),
            assignment("A", 2, tp("t", 0, 1), protocol=protocol, assigned_epochs=(1, 2)),
            commit("A", 1, tp("t", 0), txn=True, api_version=5, error_code=code)]


def test_streams_group_is_judged_by_the_streams_broker_policy():
    """A Kafka 4.2 broker (broker_policy strict, streams_broker_policy kip1251, the defaults)
    accepts a streams member's commit one epoch behind on a partition it holds: the model agrees,
    and the same commit in a consumer group (4.2: strict) is a divergence."""
    cfg = RulesConfig(alert_cooldown_ms=0)
    assert (cfg.broker_policy, cfg.streams_broker_policy) == (Policy.STRICT, Policy.KIP1251)
    g, out = run(_lagging_streams_commit(0), cfg)
    assert g.group_type == "streams"
    v = out.verdicts[-1]
    assert (v.cls, v.strict, v.kip1251, v.model_agrees) == ("avoidable", "ILLEGAL_GENERATION", "NONE", True)
    assert "MODEL_DIVERGENCE" not in [a.kind for a in out.alerts]
    _, out = run(_lagging_streams_commit(0, Protocol.CONSUMER), cfg)
    assert out.verdicts[-1].model_agrees is False
    assert [a for a in out.alerts if a.kind == "MODEL_DIVERGENCE"]


def test_streams_broker_policy_strict_diverges_on_the_relaxed_accept():
    """A broker whose streams groups ran the exact check (Kafka 4.1's early access) would have
    rejected that commit: configured so, the broker's real acceptance is a MODEL_DIVERGENCE naming
    the streams policy."""
    cfg = RulesConfig(alert_cooldown_ms=0, broker_policy=Policy.KIP1251, streams_broker_policy=Policy.STRICT)
    g, out = run(_lagging_streams_commit(0), cfg)
    assert out.verdicts[-1].model_agrees is False
    (alert,) = [a for a in out.alerts if a.kind == "MODEL_DIVERGENCE"]
    assert "strict" in str(alert) and g.counters.divergences == 1


def test_streams_commit_behind_a_partitions_assignment_epoch_is_rejected():
    """createAssignmentEpochValidator: epoch 1 on t-1, assigned at epoch 2, is refused (a v5
    TxnOffsetCommit answers ILLEGAL_GENERATION; STALE_MEMBER_EPOCH from v6, KIP-1319)."""
    events = _lagging_streams_commit(22)[:2] + [commit("A", 1, tp("t", 1), txn=True, api_version=5, error_code=22)]
    v = verdict(events)
    assert (v.kip1251, v.model_agrees) == ("ILLEGAL_GENERATION", True)


@pytest.mark.parametrize("release, consumer, streams", [
    ("4.1", Policy.STRICT, Policy.STRICT), ("4.2.2", Policy.STRICT, Policy.KIP1251),
    ("4.3.1", Policy.KIP1251, Policy.KIP1251), ("4.4", Policy.KIP1251, Policy.KIP1251),
    ("5.0", Policy.KIP1251, Policy.KIP1251)])
def test_release_policy_by_group_type(release, consumer, streams):
    from fencewatch.state.fencing import release_policy
    assert (release_policy(release), release_policy(release, "streams")) == (consumer, streams)


def test_release_policy_bad_input_is_one_error():
    from fencewatch.state.fencing import release_policy
    with pytest.raises(ValueError, match="cannot read Kafka release 'four'"):
        release_policy("four")
    with pytest.raises(ValueError, match="unknown group type 'share'; valid: consumer, streams"):
        release_policy("4.2", "share")


def test_streams_broker_policy_is_validated_like_broker_policy():
    assert RulesConfig(streams_broker_policy="lenient").validate() == [
        "unknown policy 'lenient'; valid: strict, member_revocation, assignment_epoch, kip1251"]


def test_avoidable_txn_abort_counted():
    events = [assignment("A", 1, tp("t", 0)), assignment("A", 2, tp("t", 0)),
              commit("A", 1, tp("t", 0), txn=True, error_code=22, transactional_id="tx-1")]
    g, out = run(events)
    assert g.counters.txn_aborts == 1 and g.counters.txn_avoidable_aborts == 1
    assert g.txn_aborts_by_id == {"tx-1": (1, 1)}
    assert [a.kind for a in out.alerts] == ["AVOIDABLE_FENCING"]


def test_warmup_unknown_member_is_other():
    cfg = RulesConfig(warmup_ms=45_000, alert_cooldown_ms=0)
    events = [assignment("A", 1, tp("t", 0), ts=1000), commit("Z", 7, tp("t", 0), ts=2000, error_code=0)]
    g, out = run(events, cfg)
    v = out.verdicts[-1]
    assert (v.cls, v.warming_up, v.model_agrees) == ("other", True, None)
    assert out.alerts == []
    late = [assignment("A", 1, tp("t", 0), ts=1000), commit("Z", 7, tp("t", 0), ts=50_000)]
    assert verdict(late, cfg).cls == "unknown_member"


@pytest.mark.parametrize("removal", [
    [left("A", ts=1500)],
    [group_state("Empty", ts=1500)],
    [assignment("B", 2, tp("t", 0), ts=1400), left("A", ts=1500)],
], ids=["leave", "group-empty", "leave-after-heir"])
def test_a_member_seen_gone_during_the_warmup_is_judged_unknown(removal):
    """contract §3.5: the warm-up excuses members the monitor may not have seen join; one it saw
    join and then removed is known gone, its commit UNKNOWN_MEMBER_ID as outside the warm-up
    (the live scripted zombie: stopped past its session, removed, resumes and commits)."""
    cfg = RulesConfig(warmup_ms=45_000, alert_cooldown_ms=0)
    events = [assignment("A", 1, tp("t", 0), ts=1000), *removal,
              commit("A", 1, tp("t", 0), ts=2000, error_code=25)]
    v = verdict(events, cfg)
    assert (v.cls, v.warming_up, v.strict, v.model_agrees) == ("unknown_member", False, "UNKNOWN_MEMBER_ID", True)
    # a member never seen in the same group is still excused
    unseen = verdict(events[:-1] + [commit("Z", 1, tp("t", 0), ts=2000)], cfg)
    assert (unseen.cls, unseen.warming_up) == ("other", True)


def test_a_static_instance_replaced_during_the_warmup_is_judged_unknown():
    """The old instance's member id, replaced by a new one with the same ``group.instance.id``,
    is known gone too: its commit is UNKNOWN_MEMBER_ID, not excused by the warm-up."""
    cfg = RulesConfig(warmup_ms=45_000, alert_cooldown_ms=0)
    events = [assignment("A", 5, tp("t", 0), instance_id="i-1", ts=1000),
              assignment("A2", 6, tp("t", 0), instance_id="i-1", ts=1500),
              commit("A", 5, tp("t", 0), ts=2000)]
    g, out = run(events, cfg)
    assert set(g.members) == {"A2"} and g.departed == ("A",)
    v = out.verdicts[-1]
    assert (v.cls, v.warming_up, v.strict) == ("unknown_member", False, "UNKNOWN_MEMBER_ID")


def test_the_departed_members_are_kept_only_during_the_warmup():
    """The record of removed members lives as long as the warm-up, so state does not grow with churn."""
    cfg = RulesConfig(warmup_ms=45_000)
    g, _ = run([assignment("A", 1, tp("t", 0), ts=1000), left("A", ts=1500)], cfg)
    assert g.departed == ("A",)
    g, _ = run([assignment("A", 1, tp("t", 0), ts=1000), left("A", ts=1500),
                assignment("B", 2, tp("t", 0), ts=46_000), left("B", ts=46_500)], cfg)
    assert g.departed is None
    g, _ = run([assignment("A", 1, tp("t", 0), ts=1000), left("A", ts=1500)], RulesConfig())
    assert g.departed is None
    # an update of the same member is no departure
    g, _ = run([assignment("A", 1, tp("t", 0), ts=1000), assignment("A", 2, tp("t", 0, 1), ts=1200)], cfg)
    assert g.departed == ()


def test_static_member_takeover_keeps_zero_epochs():
    """SPEC 2: a static leave keeps the partitions at epoch 0; the rejoining instance takes them over."""
    events = [assignment("A", 5, tp("t", 0, 1), instance_id="i-1", ts=100), left("A", "static_leave", ts=200),
              assignment("A2", 6, tp("t", 0, 1), instance_id="i-1", ts=300)]
    g, _ = run(events)
    assert set(g.members) == {"A2"}
    assert g.members["A2"].assigned_partitions == {("t", 0): 0, ("t", 1): 0}
    v = verdict(events + [commit("A2", 3, tp("t", 0))])
    assert v.cls == "avoidable"  # 0 <= 3 < 6


def test_static_left_member_still_holds_partitions():
    events = [assignment("A", 5, tp("t", 0), instance_id="i-1"), left("A", "static_leave"),
              commit("A", 5, tp("t", 0))]
    v = verdict(events)
    assert v.broker_epoch == -2 and v.strict == "STALE_MEMBER_EPOCH" and v.cls == "future_epoch"


def test_duplicate_assignment_alert_and_both_claims_kept():
    events = [assignment("A", 1, tp("t", 0)), assignment("B", 2, tp("t", 0))]
    g, out = run(events)
    assert [a.kind for a in out.alerts] == ["DUPLICATE_ASSIGNMENT"]
    assert g.owners[("t", 0)] == ("A", "B")


def test_alert_cooldown_folds_repeats():
    cfg = RulesConfig(alert_cooldown_ms=60_000)
    events = revoke_p1_to_b() + [commit("A", 1, tp("t", 1), ts=1000 + i) for i in range(5)] + [
        commit("A", 1, tp("t", 1), ts=70_000)]
    _, out = run(events, cfg)
    zombies = [a for a in out.alerts if a.kind == "ZOMBIE_COMMIT"]
    assert len(zombies) == 2 and zombies[1].details["suppressed_before"] == "4"


def test_alert_exactly_one_cooldown_after_the_last_fires():
    """Contract §8.2: the cool-down is the half-open window [last alert, last alert + cool-down):
    one ms before its end a repeat is folded into the count, at its end the next alert fires and
    carries the count folded since."""
    cfg = RulesConfig(alert_cooldown_ms=60_000)
    zombie = revoke_p1_to_b()

    def zombie_alerts(*stamps):
        _, out = run(zombie + [commit("A", 1, tp("t", 1), ts=ts) for ts in stamps], cfg)
        return [(a.ts, a.details["suppressed_before"]) for a in out.alerts if a.kind == "ZOMBIE_COMMIT"]

    assert zombie_alerts(1000, 61_000) == [(1000, "0"), (61_000, "0")]
    assert zombie_alerts(1000, 60_999) == [(1000, "0")]
    assert zombie_alerts(1000, 60_999, 61_000) == [(1000, "0"), (61_000, "1")]
    # The window restarts at the alert emitted, not at a folded one.
    assert zombie_alerts(1000, 60_999, 61_000, 120_999, 121_000) == [(1000, "0"), (61_000, "1"), (121_000, "1")]


def test_fencing_spike_from_broker_answers_fires_and_resolves_without_input():
    """A storm of STALE_MEMBER_EPOCH answers fires FENCING_SPIKE; the group's clock resolves it."""
    cfg = RulesConfig(alert_cooldown_ms=10**9, spike_window_ms=10_000, fencing_spike_floor=5)
    events = [assignment("A", 1, tp("t", 0), ts=0), assignment("A", 2, tp("t", 0), ts=1)]
    events += [commit("A", 1, tp("t", 0), ts=20_000 + i * 10, error_code=113) for i in range(30)]
    g, out = run(events, cfg)
    assert not [a for a in out.alerts if a.kind == "FENCING_SPIKE"]  # the window is still open
    assert grp.next_wakeup(g, cfg) == 30_000
    g = grp.advance(g, 100_000, cfg, out)
    spikes = [a for a in out.alerts if a.kind == "FENCING_SPIKE"]
    assert [a.details["status"] for a in spikes] == ["firing", "resolved"]


def test_commit_of_partition_pending_revocation_is_judged_at_its_kept_epoch():
    """A partition moving to pending revocation keeps the epoch it was assigned at (3), so a commit at
    epoch 4 by the member now at epoch 6 is within [assignment epoch, broker epoch): stale under the
    strict check, accepted by the relaxed ones (KIP-1251), i.e. avoidable. With the partition's epoch
    lost (not held) or replaced by the member's (6), the relaxed checks would fence it."""
    events = [assignment("A", 3, tp("t", 0), ts=100), assignment("A", 5, tp("t", 0, 1), ts=110),
              assignment("A", 6, tp("t", 1), pending=tp("t", 0), state=MemberState.UNREVOKED_PARTITIONS, ts=120)]
    v = verdict(events + [commit("A", 4, tp("t", 0), ts=130)])
    assert (v.assignment_epoch, v.broker_epoch) == (3, 6)
    assert (v.strict, v.assignment_epoch_check, v.kip1251) == ("STALE_MEMBER_EPOCH", "NONE", "NONE")
    assert v.cls == "avoidable"


def test_offset_commit_unknown_group_at_epoch_zero_is_not_a_simple_group():
    """OffsetMetadataManager.validateOffsetCommit: only a negative epoch creates a simple group; epoch 0
    into an unknown group is GROUP_ID_NOT_FOUND like any other member epoch."""
    v = verdict([commit("", 0, tp("t", 0))])
    assert (v.strict, v.cls) == ("GROUP_ID_NOT_FOUND", "other")


def test_commit_at_epoch_zero_without_member_id_is_not_an_admin_commit():
    """ConsumerGroup.validateOffsetCommit: the admin path needs epoch < 0; epoch 0 with no member id
    falls through to the member lookup, which fails even in an empty group."""
    v = verdict([assignment("A", 1, tp("t", 0)), left("A"), commit("", 0, tp("t", 0))])
    assert (v.strict, v.cls) == ("UNKNOWN_MEMBER_ID", "unknown_member")


def test_known_member_committing_at_epoch_minus_one_is_judged_by_epoch():
    """The admin path needs both epoch < 0 and no member id: a known member sending -1 is a stale
    epoch for the policies, not an unknown member."""
    v = verdict([assignment("A", 2, tp("t", 0)), commit("A", -1, tp("t", 0))])
    assert (v.strict, v.kip1251, v.cls) == ("STALE_MEMBER_EPOCH", "STALE_MEMBER_EPOCH", "stale")


def test_member_of_a_classic_group_is_fenced_with_illegal_generation():
    """A group the coordinator reported as classic keeps that type when a member's record comes
    with the consumer protocol; its rejections are ILLEGAL_GENERATION, as for classic members
    (``ConsumerGroup.validateOffsetCommit`` vs ``ClassicGroup.validateOffsetCommit``)."""
    v = verdict([group_state("PreparingRebalance", ts=10, protocol="classic"), assignment("A", 5, tp("t", 0), ts=20),
                 commit("A", 4, tp("t", 0), ts=30)])
    assert (v.strict, v.kip1251) == ("ILLEGAL_GENERATION", "ILLEGAL_GENERATION")


def test_a_partition_every_policy_accepts_does_not_end_the_request():
    """The request's answer per policy is its first rejection anywhere in it: t-0 passes every
    check, t-1 (not held) fails ``assignment_epoch`` only, so a broker running that policy
    fails the request and its answer 0 diverges from the model."""
    cfg = RulesConfig(alert_cooldown_ms=0, broker_policy=Policy.ASSIGNMENT_EPOCH)
    _, out = run([assignment("A", 5, tp("t", 0)), commit("A", 5, tp("t", 0, 1), error_code=0)], cfg)
    v0, v1 = out.verdicts[-2:]
    assert (v0.assignment_epoch_check, v1.assignment_epoch_check) == ("NONE", "STALE_MEMBER_EPOCH")
    assert v0.model_agrees is False and [a.kind for a in out.alerts] == ["MODEL_DIVERGENCE"]


def test_unsafe_accepted_commit_raises_unsafe_accept():
    """Two members hold t-0 in ``assigned`` (a model break): A's commit at its own epoch passes the
    strict check and is unsafe, which must reach the alert, not only the verdict's flag."""
    _, out = run([assignment("A", 1, tp("t", 0), ts=1), assignment("B", 1, tp("t", 0), ts=2),
                  commit("A", 1, tp("t", 0), ts=3)])
    v = out.verdicts[-1]
    assert (v.cls, v.unsafe) == ("accepted", True)
    assert "UNSAFE_ACCEPT" in [a.kind for a in out.alerts]


def test_unknown_member_verdict_names_the_partition_and_its_holder():
    """Decided before any policy, the verdict still says which partition it is, who holds it now,
    and is never unsafe (no policy accepted it)."""
    v = verdict([assignment("B", 3, tp("t", 0), ts=1), commit("gone", 2, tp("t", 0), ts=2)])
    assert (v.topic, v.partition, v.cls, v.strict) == ("t", 0, "unknown_member", "UNKNOWN_MEMBER_ID")
    assert (v.owner_member_id, v.unsafe, v.assignment_epoch) == ("B", False, None)


# --------------------------------------------------------------------------- classic members (docs/fidelity.md)

def test_a_classic_member_keeps_the_exact_generation_check_under_every_policy():
    """Kafka's ``ClassicGroup.validateOffsetCommit`` is unchanged by KAFKA-19779 and KIP-1251 (seen
    on 4.3 and 4.4 brokers): a classic member one generation behind on a partition it still holds
    is rejected by every policy, so the relaxed policies never call it avoidable."""
    events = [join("A", -1, (), ts=10), sync(5, {"A": [("t", 0)]}, ts=20), commit("A", 4, tp("t", 0), ts=30)]
    v = verdict(events)
    assert (v.strict, v.member_revocation, v.assignment_epoch_check, v.kip1251) == ("ILLEGAL_GENERATION",) * 4
    assert v.cls == "stale"


def test_the_same_commit_by_a_consumer_member_is_avoidable():
    """The contrast: a KIP-848 member one epoch behind on a partition it holds since an older
    epoch is what KIP-1251 accepts."""
    v = verdict([assignment("A", 4, tp("t", 0), ts=10), assignment("A", 5, tp("t", 0), ts=20),
                 commit("A", 4, tp("t", 0), ts=30)])
    assert (v.strict, v.kip1251, v.cls) == ("STALE_MEMBER_EPOCH", "NONE", "avoidable")


def test_a_classic_member_of_a_group_reported_classic_is_exact_too():
    v = verdict([group_state("Stable", ts=5, protocol="classic"), assignment("A", 4, tp("t", 0), ts=10),
                 assignment("A", 5, tp("t", 0), ts=20), commit("A", 4, tp("t", 0), ts=30)])
    assert (v.strict, v.kip1251, v.cls) == ("ILLEGAL_GENERATION", "ILLEGAL_GENERATION", "stale")


# --------------------------------------------------------------------------- KIP-1319 (Kafka 4.4)

@pytest.mark.parametrize("api_version,error", [(None, "ILLEGAL_GENERATION"), (5, "ILLEGAL_GENERATION"),
                                               (6, "STALE_MEMBER_EPOCH"), (7, "STALE_MEMBER_EPOCH")])
def test_txn_offset_commit_v6_answers_with_offset_commits_error(api_version, error):
    """TxnOffsetCommit v6 (KIP-1319) rejects a stale member epoch with STALE_MEMBER_EPOCH; older
    versions, and an event that does not say its version, with ILLEGAL_GENERATION."""
    v = verdict([assignment("A", 5, tp("t", 0), ts=10),
                 commit("A", 3, tp("t", 0), ts=30, txn=True, api_version=api_version)])
    assert (v.strict, v.kip1251) == (error, error)


@pytest.mark.parametrize("api_version,error", [(5, "ILLEGAL_GENERATION"), (6, "GROUP_ID_NOT_FOUND")])
def test_txn_offset_commit_v6_to_an_unknown_group_is_group_id_not_found(api_version, error):
    v = verdict([commit("A", 3, tp("t", 0), ts=30, txn=True, api_version=api_version)])
    assert v.strict == error and v.cls == "other"


def test_a_classic_member_keeps_illegal_generation_in_txn_offset_commit_v6():
    v = verdict([join("A", -1, (), ts=10), sync(5, {"A": [("t", 0)]}, ts=20),
                 commit("A", 4, tp("t", 0), ts=30, txn=True, api_version=6)])
    assert v.strict == "ILLEGAL_GENERATION"


def test_judgements_of_v5_and_v6_txn_commits_are_not_mixed_up():
    """The judgement cache keys a request by its kind as well: the same member, epoch and
    partitions in v5 and then v6 get each version's error."""
    base = [assignment("A", 5, tp("t", 0), ts=10)]
    _, out = run(base + [commit("A", 3, tp("t", 0), ts=30, txn=True, api_version=5),
                         commit("A", 3, tp("t", 0), ts=31, txn=True, api_version=6)])
    assert [v.strict for v in out.verdicts[-2:]] == ["ILLEGAL_GENERATION", "STALE_MEMBER_EPOCH"]


def test_a_request_kip1251_rejects_classes_its_saved_partitions_by_their_holder():
    """The class follows the request (contract §3.3): where KIP-1251 rejects one partition, one it
    alone would accept is a zombie when another member holds it, else stale, and only that
    zombie is named in the request's zombies."""
    from fencewatch.state.judging import _summarise
    from fencewatch.state.model import PartitionJudgement

    S, N = "STALE_MEMBER_EPOCH", "NONE"
    held_by_b = PartitionJudgement("t", 0, 3, 3, S, S, N, N, "avoidable", True, "B")
    mine = PartitionJudgement("t", 1, 3, 3, S, S, N, N, "avoidable", False, None)
    lost = PartitionJudgement("t", 2, None, 3, S, S, S, S, "stale", False, None)
    tps = (("t", 0), ("t", 1), ("t", 2))
    judged = _summarise((held_by_b, mine, lost), tps)
    assert [p.cls for p in judged.parts] == ["zombie", "stale", "stale"]
    assert judged.zombies == (("t", 0),) and judged.avoidable == () and judged.unsafe == (("t", 0),)
    assert judged.answers.kip1251.value == S
    alone = _summarise((held_by_b, mine), tps[:2])  # KIP-1251 accepts the whole request: both saved
    assert [p.cls for p in alone.parts] == ["avoidable", "avoidable"] and alone.avoidable == tps[:2]
