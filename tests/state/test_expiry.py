"""Offset expiry (contract §4), mirroring ``OffsetMetadataManagerTest.testCleanupExpiredOffsets*`` and
``OffsetExpirationConditionImplTest``; plus the KIP-211 text and the pre-2.1 rule side by side."""

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from fencewatch.state import expiry as exp
from fencewatch.state import folding
from fencewatch.state import group as grp
from fencewatch.state.config import RulesConfig
from fencewatch.state.events import OffsetDeleted

from .helpers import assignment, commit, committed, group_state, join, left, sync, tp

MIN = 60_000
R = 100 * MIN
CFG = RulesConfig(offsets_retention_ms=R, expiry_warning_ms=10 * MIN, alert_cooldown_ms=0)


def run(events, until=None, cfg=CFG):
    g = grp.new_group("default", "g")
    out = grp.Outputs()
    for ev in events:
        g = grp.process(g, ev, cfg, out)
    if until is not None:
        g = grp.advance(g, until, cfg, out)
    return g, out


def kinds(out):
    return [a.kind for a in out.alerts]


def test_is_offset_expired_uses_base_timestamp():
    """OffsetExpirationConditionImplTest.testIsOffsetExpired."""
    view = exp.ExpiryView("consumer", "Empty", None, frozenset())
    off = exp.CommittedOffset(commit_ts=1000)
    assert exp.shipped_deadline(view, ("t", 0), off, R) == 1000 + R
    assert exp.expired_at(view, {("t", 0): off}, 1000 + R - 1, R) == []
    assert exp.expired_at(view, {("t", 0): off}, 1000 + R, R) == [("t", 0)]


def test_cleanup_expired_offsets_group_has_no_offsets():
    """OffsetMetadataManagerTest.testCleanupExpiredOffsetsGroupHasNoOffsets."""
    g, out = run([assignment("A", 1, tp("t", 0), ts=0)], until=10 * R)
    assert out.alerts == [] and g.expiry.deadline is None


def test_consumer_group_subscribed_topic_never_expires():
    """OffsetMetadataManagerTest.testCleanupExpiredOffsets: a subscribed topic's offsets stay."""
    g, out = run([assignment("A", 1, tp("t", 0), ts=0), commit("A", 1, tp("t", 0), ts=10)], until=5 * R)
    assert out.alerts == [] and ("t", 0) in grp.committed_offsets(g)


def test_kip848_group_going_empty_loses_offsets_older_than_retention():
    """SPEC 4: a KIP-848 group counts from the commit time, so going empty late expires at once."""
    events = [assignment("A", 1, tp("t", 0), ts=0), commit("A", 1, tp("t", 0), ts=10),
              left("A", ts=10 + 2 * R)]  # empty long after retention passed
    g, out = run(events, until=10 + 2 * R)
    assert kinds(out) == ["OFFSETS_EXPIRING", "OFFSETS_EXPIRED"]
    expiring, expired = out.alerts
    # Deadline is commit time + R, reached before the group even became empty: due immediately.
    assert expired.ts == 10 + R and expired.details["expired_partitions"] == "t-0"
    assert expired.details["kip211_deadline_ms"] == str(10 + 2 * R + R)  # KIP-211: from the empty time
    assert expired.details["pre21_deadline_ms"] == str(10 + R)
    assert grp.committed_offsets(g) == {} and g.counters.expired_offsets == 1


def test_topic_a_live_member_subscribes_to_but_holds_no_partition_of_never_expires():
    """Contract §4.1: the group's subscription decides, not what its members hold. B commits u-0
    and leaves; A, still in the group, subscribes to u but holds none of it (the assignor has
    not given it out yet): u-0 stays however long the group stays so. With A subscribed to t
    alone, the same offset expires at commit time + R."""
    def events(a_subscribes):
        return [assignment("A", 1, tp("t", 0), ts=0, subscribed=a_subscribes),
                assignment("B", 2, tp("u", 0), ts=1, subscribed=("t", "u")),
                commit("B", 2, tp("u", 0), ts=10), left("B", ts=20)]
    g, out = run(events(("t", "u")), until=5 * R)
    assert out.alerts == [] and ("u", 0) in grp.committed_offsets(g) and g.expiry.deadline is None
    assert grp.deadlines(g, CFG).shipped is None
    g, out = run(events(("t",)), until=5 * R)
    assert kinds(out) == ["OFFSETS_EXPIRING", "OFFSETS_EXPIRED"] and out.alerts[1].ts == 10 + R
    assert ("u", 0) not in grp.committed_offsets(g)


def test_unsubscribed_topic_of_consumer_group_expires():
    """OffsetMetadataManagerTest.testCleanupExpiredOffsetsWithUnsubscribedTopic (KIP-848 groups)."""
    events = [assignment("A", 1, tp("t", 0), ts=0, subscribed=("t",)), commit("A", 1, tp("t", 0) + tp("old", 0), ts=10)]
    g, out = run(events, until=10 + R)
    assert kinds(out) == ["OFFSETS_EXPIRING", "OFFSETS_EXPIRED"]
    assert set(grp.committed_offsets(g)) == {("t", 0)}


def test_expiring_warning_before_deadline_only():
    events = [assignment("A", 1, tp("t", 0), ts=0), commit("A", 1, tp("t", 0), ts=10), left("A", ts=20)]
    _, out = run(events, until=10 + R - 10 * MIN - 1)
    assert out.alerts == []
    _, out = run(events, until=10 + R - 10 * MIN)
    assert kinds(out) == ["OFFSETS_EXPIRING"] and out.alerts[0].ts == 10 + R - 10 * MIN


def test_new_commit_pushes_deadline():
    events = [commit("", -1, tp("t", 0), ts=0), commit("", -1, tp("t", 0), ts=R // 2)]
    g, out = run(events, until=R + 1)
    assert out.alerts == []
    assert grp.deadlines(g, CFG).shipped == R // 2 + R


def test_pending_transactional_offsets_block_expiry():
    """OffsetMetadataManagerTest.testCleanupExpiredOffsetsWithPendingTransactionalOffsets."""
    cfg = RulesConfig(offsets_retention_ms=R, expiry_warning_ms=0, txn_timeout_ms=3 * R, alert_cooldown_ms=0)
    events = [assignment("A", 1, tp("t", 0), ts=0), commit("A", 1, tp("t", 0), ts=10, txn=True), left("A", ts=20)]
    g, out = run(events, until=2 * R, cfg=cfg)
    assert out.alerts == [] and ("t", 0) in grp.committed_offsets(g)
    # After the transaction timeout the pending marker is gone and cleanup proceeds.
    g, out = run(events, until=3 * R + 10, cfg=cfg)
    assert kinds(out) == ["OFFSETS_EXPIRING", "OFFSETS_EXPIRED"]


def test_committed_pending_transaction_clears_pending():
    cfg = RulesConfig(offsets_retention_ms=R, expiry_warning_ms=0, alert_cooldown_ms=0)
    events = [assignment("A", 1, tp("t", 0), ts=0), commit("A", 1, tp("t", 0), ts=10, txn=True), left("A", ts=20),
              committed("t", 0, 10, ts=30, commit_ts=10)]
    g, out = run(events, until=10 + R, cfg=cfg)
    assert "OFFSETS_EXPIRED" in kinds(out)


def test_classic_empty_group_counts_from_empty_time():
    """ClassicGroup.offsetExpirationCondition: Empty -> base is the time the group became empty."""
    events = [join("A", -1, (), ts=0), sync(1, {"A": tp("t", 0)}, ts=5), commit("A", 1, tp("t", 0), ts=10),
              group_state("Empty", ts=50 * MIN, protocol="classic")]
    g, out = run(events, until=50 * MIN + R - 1)
    assert "OFFSETS_EXPIRED" not in kinds(out)
    g, out = run(events, until=50 * MIN + R)
    assert "OFFSETS_EXPIRED" in kinds(out)


def test_classic_rebalancing_group_never_expires():
    events = [join("A", -1, (), ts=0), sync(1, {"A": tp("t", 0)}, ts=5), commit("A", 1, tp("t", 0), ts=10),
              group_state("PreparingRebalance", ts=20, protocol="classic")]
    g, out = run(events, until=10 * R)
    assert out.alerts == []


def test_simple_group_counts_from_commit_time():
    g, out = run([commit("", -1, tp("t", 0), ts=0)], until=R)
    assert kinds(out) == ["OFFSETS_EXPIRING", "OFFSETS_EXPIRED"]


def test_v1_expire_timestamp_wins():
    events = [committed("t", 0, 5, ts=0, commit_ts=0, expire_ts=1000)]
    g, out = run(events, until=1000)
    assert kinds(out)[-1] == "OFFSETS_EXPIRED" and out.alerts[-1].ts == 1000


def test_expiry_decisions_independent_of_when_clock_advances():
    """Decisions carry the deadline as ts: advancing in one step or many gives the same alerts."""
    events = [assignment("A", 1, tp("t", 0), ts=0), commit("A", 1, tp("t", 0) + tp("t", 1), ts=10),
              commit("A", 1, tp("t", 1), ts=R // 3), left("A", ts=20 + R // 3)]
    _, one = run(events, until=3 * R)
    g = grp.new_group("default", "g")
    many = grp.Outputs()
    for ev in events:
        g = grp.process(g, ev, CFG, many)
    for t in range(0, 3 * R, R // 7):
        g = grp.advance(g, t, CFG, many)
    g = grp.advance(g, 3 * R, CFG, many)
    assert [(a.alert_id, a.ts) for a in one.alerts] == [(a.alert_id, a.ts) for a in many.alerts]
    assert len([a for a in one.alerts if a.kind == "OFFSETS_EXPIRED"]) == 2


def test_pre21_rule_differs_for_active_group():
    """KAFKA-4682: before 2.1 an active group's idle partition expired; Kafka as shipped keeps it."""
    g, _ = run([assignment("A", 1, tp("t", 0), ts=0), commit("A", 1, tp("t", 0), ts=10)])
    d = grp.deadlines(g, CFG)
    assert d.shipped is None and d.kip211 is None and d.pre21 == 10 + R


# --- commits stored lazily (``grp.committed_offsets``) decide what storing each at once does

_SHAPES = (tp("a", 0, 1), tp("a", 1), tp("b", 0), tp("a", 0) + tp("b", 0))  # one tuple each: shared, as decoded
_ops = st.lists(st.tuples(
    st.sampled_from(["commit", "commit", "commit", "assign", "left", "committed", "deleted"]),
    st.sampled_from(["", "A"]), st.integers(0, len(_SHAPES) - 1), st.integers(1, R // 8)), max_size=30)


def _events(ops):
    ts, epoch = 0, 1
    for op, member, shape, step in ops:
        ts += step
        tps = _SHAPES[shape]
        if op == "commit":  # by A at its epoch (stored, and A subscribes to "a": often lazily), or an admin
            ev = commit(member, epoch if member else -1, tps, ts=ts, offset=ts)
            yield ev._replace(offsets=ev.offsets._replace(tps=tps))
        elif op == "assign":
            epoch += 1
            yield assignment("A", epoch, tp("a", 0), ts=ts, subscribed=("a",) if shape == 3 else ("a", "b"))
        elif op == "left":
            yield left("A", ts=ts)
        elif op == "committed":
            yield committed(*tps[0], ts, ts=ts)
        else:
            yield OffsetDeleted(ts, "default", "g", f"d{ts}", ts, *tps[0])


def _run_with_limit(events, limit):
    """(offsets when the events are in, offsets, alert ids and verdicts after 3 retention periods)."""
    old = folding.UNFOLDED_LIMIT
    folding.UNFOLDED_LIMIT = limit
    try:
        g, out = run(events)
        before = dict(grp.committed_offsets(g))
        g = grp.advance(g, (events[-1].ts if events else 0) + 3 * R, CFG, out)
        return before, g, [a.alert_id for a in out.alerts], out.verdicts
    finally:
        folding.UNFOLDED_LIMIT = old


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=_ops, limit=st.integers(1, 4))
@example(ops=[("assign", "A", 0, 1)] + [("commit", "A", s, 1) for s in (0, 1, 0)], limit=4)  # overlapping
@example(ops=[("assign", "A", 0, 1), ("commit", "A", 0, 1), ("committed", "", 0, 1)], limit=4)
def test_unfolded_commits_expire_as_stored_ones(ops, limit):
    """Expiry warnings, expiries and verdicts are those of storing every commit at once (limit
    0), whatever the limit; the topics the group keeps for the 'subscribed to all' shortcut are
    exactly its offsets' topics."""
    events = list(_events(ops))
    before, g, alerts, verdicts = _run_with_limit(events, limit)
    eager_before, eager, eager_alerts, eager_verdicts = _run_with_limit(events, 0)
    assert before == eager_before and alerts == eager_alerts and verdicts == eager_verdicts
    assert dict(grp.committed_offsets(g)) == dict(grp.committed_offsets(eager))
    assert g.committed_topics == {t for t, _ in grp.committed_offsets(g)}


# --------------------------------------------------------------------------- the rule's parts, one by one
# Added after mutation testing (tests/README.md): each test below failed on a surviving mutant.

def view(group_type, state, subscribed=frozenset(), state_ts=None):
    return exp.ExpiryView(group_type=group_type, state=state, state_ts=state_ts, subscribed_topics=subscribed)


OFF = exp.CommittedOffset(commit_ts=5 * MIN)


def test_classic_stable_group_with_known_subscriptions_counts_from_commit_time():
    """``OffsetExpirationConditionImpl`` with ``ClassicGroup``'s base: Stable + known protocol -> commit time."""
    assert exp.shipped_base(view("classic", "Stable", frozenset({"other"})), OFF) == OFF.commit_ts
    assert exp.shipped_deadline(view("classic", "Stable", frozenset({"other"})), ("t", 0), OFF, R) == OFF.commit_ts + R


def test_classic_stable_group_with_unknown_subscriptions_keeps_offsets():
    assert exp.shipped_base(view("classic", "Stable", None), OFF) is None


def test_classic_rebalancing_group_with_known_subscriptions_keeps_offsets():
    assert exp.shipped_base(view("classic", "PreparingRebalance", frozenset({"other"})), OFF) is None


def test_empty_kip848_groups_subscribe_to_nothing_classic_ones_keep_their_subscription():
    for group_type in ("consumer", "streams"):
        assert not exp.subscribed_to_all(group_type, "Empty", frozenset({"t"}), ["t"])
        assert exp.subscribed_to_all(group_type, "Stable", frozenset({"t"}), ["t"])
    assert exp.subscribed_to_all("classic", "Empty", frozenset({"t"}), ["t"])


def test_kip211_text_counts_a_simple_group_from_commit_time_whatever_its_state():
    assert exp.kip211_deadline(view("simple", "Stable"), OFF, R) == OFF.commit_ts + R
    assert exp.kip211_deadline(view("simple", "Empty", state_ts=MIN), OFF, R) == OFF.commit_ts + R


def test_shipped_partitions_counts_those_expiring_first_only():
    offsets = {("a", 0): exp.CommittedOffset(0), ("a", 1): exp.CommittedOffset(0), ("b", 0): exp.CommittedOffset(MIN),
               ("sub", 0): exp.CommittedOffset(0)}
    d = exp.group_deadlines(view("consumer", "Stable", frozenset({"sub"})), offsets, R)
    assert (d.shipped, d.shipped_partitions) == (R, 2)


def _deadlines_partition_by_partition(view, offsets, retention_ms):
    """Each rule over every partition, one by one: what ``group_deadlines`` computes."""
    shipped = [exp.shipped_deadline(view, tp, off, retention_ms) for tp, off in offsets.items()]
    first = min((d for d in shipped if d is not None), default=None)
    return exp.Deadlines(
        shipped=first,
        kip211=min((d for off in offsets.values() if (d := exp.kip211_deadline(view, off, retention_ms)) is not None),
                   default=None),
        pre21=min((exp.pre21_deadline(off, retention_ms) for off in offsets.values()), default=None),
        shipped_partitions=sum(1 for d in shipped if d is not None and d == first))


_topics = st.sampled_from(["a", "b", "c"])
_off = st.builds(exp.CommittedOffset, st.integers(0, 5) .map(lambda i: i * MIN),
                 st.one_of(st.none(), st.integers(0, 5).map(lambda i: i * MIN + 7)))


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(group_type=st.sampled_from(["consumer", "streams", "classic", "simple"]),
       state=st.sampled_from(["Empty", "Stable", "PreparingRebalance", "Dead"]),
       state_ts=st.one_of(st.none(), st.integers(0, 5).map(lambda i: i * MIN + 3)),
       subscribed=st.one_of(st.none(), st.frozensets(_topics)),
       offsets=st.dictionaries(st.tuples(_topics, st.integers(0, 3)), _off, max_size=10),
       pending=st.frozensets(st.tuples(_topics, st.integers(0, 3)), max_size=3))
def test_group_deadlines_are_each_rules_first_over_every_partition(group_type, state, state_ts, subscribed, offsets,
                                                                   pending):
    """The first deadline of each rule, and how many partitions expire at the shipped one: the
    same as each rule applied to every partition (the function skips subscribed topics and
    shares a request's committed value among its partitions)."""
    view = exp.ExpiryView(group_type, state, state_ts, subscribed, pending)
    assert exp.group_deadlines(view, offsets, R) == _deadlines_partition_by_partition(view, offsets, R)
