"""Forgetting what is gone (contract §4.4): a group Kafka deleted or would have, a group nothing
mentioned for ``group_retention_ms``, a topic watch nothing refers to. The rule is one of event
time, applied before every event, so an engine that removes states early (the stream, on a
timeout) and one that keeps them (replay) write the same outputs: checked by a property below.
Also the contract's §2 word on ``group_state`` Empty and Dead (SPEC 3.1 b)."""
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fencewatch.sinks.jsonl import alert_json, commit_verdicts_json
from fencewatch.state import group as grp
from fencewatch.state import partition as part
from fencewatch.state.config import RulesConfig
from fencewatch.state.engine import LocalEngine, is_gone, wakeup
from fencewatch.state.events import OffsetDeleted

from .helpers import assignment, commit, committed, group_state, join, left, partition_epochs, sync, tp

SEC = 1000
R = 60 * SEC  # offsets.retention
INTERVAL = 10 * SEC  # offsets.retention.check.interval
KEEP = 600 * SEC  # group_retention
CFG = RulesConfig(offsets_retention_ms=R, offsets_retention_check_interval_ms=INTERVAL, group_retention_ms=KEEP,
                  expiry_warning_ms=5 * SEC, alert_cooldown_ms=0)


def run(events, until=None, cfg=CFG):
    g = grp.new_group("default", "g")
    out = grp.Outputs()
    for ev in events:
        g = grp.process(g, ev, cfg, out)
    if until is not None:
        g = grp.advance(g, until, cfg, out)
    return g, out


def deleted(topic, partition, *, ts, group="g"):
    return OffsetDeleted(ts, "default", group, f"od{ts}", ts, topic, partition)


def joined_committed_left(commit_ts=10 * SEC, leave_ts=20 * SEC):
    return [assignment("A", 1, tp("t", 0), ts=SEC), commit("A", 1, tp("t", 0), ts=commit_ts), left("A", ts=leave_ts)]


# --------------------------------------------------------------------------- when a group goes

def test_group_whose_members_left_and_offsets_expired_goes_one_check_interval_after_expiry():
    """KIP-848: retention counts from the commit; the offsets expire at commit + R, Kafka's cleanup
    then deletes the empty group; the model forgets it one check interval after the expiry."""
    g, out = run(joined_committed_left(), until=10 * SEC + R)
    assert [a.kind for a in out.alerts] == ["OFFSETS_EXPIRING", "OFFSETS_EXPIRED"]
    assert grp.is_droppable(g)
    assert grp.drop_at(g, CFG) == 10 * SEC + R + INTERVAL
    assert not grp.drop_due(g, 10 * SEC + R + INTERVAL - 1, CFG) and grp.drop_due(g, 10 * SEC + R + INTERVAL, CFG)


def test_offsets_not_yet_expired_keep_the_group_until_they_are():
    """Members gone, offsets still there: not droppable, and no drop is planned before the
    expiry decision (the wake-up is the expiry's, then the drop's)."""
    g, _ = run(joined_committed_left(), until=30 * SEC)
    assert not grp.is_droppable(g) and grp.drop_at(g, CFG) is None
    assert grp.next_wakeup(g, CFG) == 10 * SEC + R - 5 * SEC  # OFFSETS_EXPIRING first
    g, _ = run(joined_committed_left(), until=10 * SEC + R)
    assert grp.next_wakeup(g, CFG) == 10 * SEC + R + INTERVAL


def test_group_that_never_committed_goes_one_check_interval_after_its_last_member_left():
    g, _ = run([assignment("A", 1, tp("t", 0), ts=SEC), left("A", ts=5 * SEC)])
    assert grp.drop_at(g, CFG) == 5 * SEC + INTERVAL


def test_deleted_offsets_make_the_group_droppable_from_the_deletion():
    g, _ = run(joined_committed_left() + [deleted("t", 0, ts=30 * SEC)])
    assert grp.is_droppable(g) and grp.drop_at(g, CFG) == 30 * SEC + INTERVAL


def test_pending_transactional_offset_keeps_the_group():
    events = [assignment("A", 1, tp("t", 0), ts=SEC), commit("A", 1, tp("t", 0), ts=2 * SEC, txn=True),
              left("A", ts=3 * SEC)]
    g, _ = run(events)
    assert g.pending_txn and not grp.is_droppable(g)


def test_reported_dead_group_goes_before_the_next_event():
    g, _ = run(joined_committed_left() + [group_state("Dead", ts=30 * SEC, protocol="consumer")])
    assert (g.state, grp.drop_at(g, CFG)) == ("Dead", 30 * SEC)
    assert grp.status(g, CFG)["state"] == "Dead"


def test_idle_group_with_members_goes_after_group_retention():
    """A live group nothing mentions (silent members, subscribed offsets that never expire)."""
    events = [assignment("A", 1, tp("t", 0), ts=SEC), commit("A", 1, tp("t", 0), ts=2 * SEC)]
    g, _ = run(events, until=2 * SEC + KEEP)
    assert g.members and not grp.is_droppable(g)
    assert grp.drop_at(g, CFG) == 2 * SEC + KEEP
    assert grp.drop_at(g, RulesConfig(group_retention_ms=0)) is None  # 0: never


def test_idle_group_waits_for_its_expiry_decision():
    """A retention shorter than the offsets' keeps nothing from being decided: the drop comes
    after the last expiry decision, not before."""
    cfg = RulesConfig(offsets_retention_ms=R, offsets_retention_check_interval_ms=INTERVAL,
                      group_retention_ms=R // 2, expiry_warning_ms=0, alert_cooldown_ms=0)
    g, out = run(joined_committed_left(), until=R // 2 + 20 * SEC, cfg=cfg)
    assert grp.drop_at(g, cfg) is None and out.alerts == []
    g, out = run(joined_committed_left(), until=10 * SEC + R, cfg=cfg)
    assert [a.kind for a in out.alerts] == ["OFFSETS_EXPIRING", "OFFSETS_EXPIRED"]
    assert grp.drop_at(g, cfg) == 20 * SEC + R // 2  # idle since the leave, the decisions made


def test_open_spike_window_keeps_the_group():
    cfg = RulesConfig(offsets_retention_check_interval_ms=INTERVAL, alert_cooldown_ms=0, spike_window_ms=60 * SEC)
    events = [assignment("A", 1, tp("t", 0), ts=SEC), assignment("A", 2, tp("t", 0), ts=2 * SEC),
              commit("A", 1, tp("t", 0), ts=3 * SEC, error_code=113), left("A", ts=4 * SEC)]
    g, _ = run(events, cfg=cfg)
    assert grp.is_droppable(g) and grp.drop_at(g, cfg) is None  # the window closes first
    g, _ = run(events, until=2 * 60 * SEC + 4 * SEC, cfg=cfg)
    assert grp.drop_at(g, cfg) == 4 * SEC + INTERVAL


def test_a_cooling_alert_kind_keeps_the_group_to_the_end_of_its_cooldown():
    cfg = RulesConfig(offsets_retention_check_interval_ms=SEC, alert_cooldown_ms=60 * SEC)
    events = [assignment("A", 1, tp("t", 0), ts=SEC), assignment("B", 2, tp("t", 0), ts=2 * SEC),
              left("A", ts=3 * SEC), left("B", ts=4 * SEC)]
    g, out = run(events, cfg=cfg)
    assert [a.kind for a in out.alerts] == ["DUPLICATE_ASSIGNMENT"]
    assert grp.drop_at(g, cfg) == 2 * SEC + 60 * SEC


def test_a_commit_after_the_group_is_forgotten_meets_no_group():
    """What Kafka answers once its cleanup deleted the group: GROUP_ID_NOT_FOUND (OffsetCommit
    v9+) for a commit at an epoch >= 0; before, the member is unknown to a group that exists."""
    gone = 5 * SEC + INTERVAL
    base = [assignment("A", 1, tp("t", 0), ts=SEC), left("A", ts=5 * SEC)]
    _, out = run(base + [commit("A", 1, tp("t", 0), ts=gone)])
    assert (out.verdicts[-1].strict, out.verdicts[-1].cls) == ("UNKNOWN_MEMBER_ID", "unknown_member")
    g, out = run(base + [commit("A", 1, tp("t", 0), ts=gone + 1)])
    assert (out.verdicts[-1].strict, out.verdicts[-1].cls) == ("GROUP_ID_NOT_FOUND", "other")
    assert g.first_seen_ts == gone + 1  # a new group from here


@pytest.mark.parametrize("keep", [1, KEEP], ids=["retention-1ms", "retention-10min"])
def test_an_idle_group_meets_an_event_one_retention_after_its_last_as_a_new_group(keep):
    """The boundary as ``process`` applies it: the last events at 2 s, an event at
    2 s + retention + 1 (its ``now`` is one retention after) meets a new group, one ms earlier
    the group it knew (a live member committing: accepted, or unknown to a group Kafka
    does not have)."""
    cfg = RulesConfig(group_retention_ms=keep)
    events = [assignment("A", 1, tp("t", 0), ts=2 * SEC), commit("A", 1, tp("t", 0), ts=2 * SEC)]
    _, out = run(events + [commit("A", 1, tp("t", 0), ts=2 * SEC + keep)], cfg=cfg)
    assert out.verdicts[-1].cls == "accepted"
    g, out = run(events + [commit("A", 1, tp("t", 0), ts=2 * SEC + keep + 1)], cfg=cfg)
    assert (out.verdicts[-1].cls, out.verdicts[-1].strict) == ("other", "GROUP_ID_NOT_FOUND")
    assert g.first_seen_ts == 2 * SEC + keep + 1


def test_status_of_a_forgotten_group_says_dead():
    g, _ = run(joined_committed_left())
    assert grp.status(g, CFG)["state"] == "Empty" and "forgotten" not in grp.status(g, CFG)
    last = grp.status(g, CFG, forgotten=True)
    assert last == {**grp.status(g, CFG), "state": "Dead", "forgotten": True}
    # What the exporter reads of a status (sinks/prometheus.py), a Dead one included.
    assert {k: last[k] for k in ("cluster", "group_id", "protocol", "members", "partitions_held",
                                 "group_epoch", "max_member_epoch", "rebalances_total")} == {
        "cluster": "default", "group_id": "g", "protocol": "consumer", "members": 0, "partitions_held": 0,
        "group_epoch": 1, "max_member_epoch": None, "rebalances_total": 1}


def test_group_retention_is_twice_kafkas_offset_retention_and_validated():
    """The default (docs/decisions.md): twice ``offsets.retention.minutes``' default, 14 days."""
    cfg = RulesConfig()
    assert cfg.group_retention_ms == 2 * cfg.offsets_retention_ms == 14 * 24 * 3_600_000
    assert cfg.validate() == [] and RulesConfig(group_retention_ms=0).validate() == []
    assert RulesConfig(group_retention_ms=-1).validate() == ["group_retention_ms must be >= 0, got -1"]


# --------------------------------------------------------------------------- SPEC 3.1 b: Empty and Dead

def test_empty_consumer_group_removes_every_member_and_their_commits_are_unknown():
    """The coordinator's word: a consumer group reported Empty has no members, whatever leaves the
    model missed, so a former member's next commit is ``unknown_member``."""
    events = [assignment("A", 1, tp("t", 0), ts=SEC), assignment("B", 2, tp("t", 1), ts=2 * SEC),
              group_state("Empty", ts=3 * SEC, protocol="consumer")]
    g, _ = run(events)
    assert g.members == {} and g.owners == {} and g.exists
    _, out = run(events + [commit("A", 1, tp("t", 0), ts=4 * SEC)])
    v = out.verdicts[-1]
    assert (v.cls, v.strict, v.kip1251, v.broker_epoch) == ("unknown_member", "UNKNOWN_MEMBER_ID",
                                                            "UNKNOWN_MEMBER_ID", None)


def test_dead_consumer_group_removes_every_member_and_the_group():
    """Dead: the coordinator deleted the group. Its members are gone too, and a former member's
    commit at epoch >= 0 meets a group Kafka does not know: GROUP_ID_NOT_FOUND, class ``other``
    (``OffsetMetadataManager.validateOffsetCommit``); an admin commit creates a simple group."""
    events = [assignment("A", 1, tp("t", 0), ts=SEC), commit("A", 1, tp("t", 0), ts=2 * SEC),
              group_state("Dead", ts=3 * SEC, protocol="consumer")]
    g, _ = run(events)
    assert g.members == {} and grp.committed_offsets(g) == {} and not g.exists
    _, out = run(events + [commit("A", 1, tp("t", 0), ts=4 * SEC)])
    assert (out.verdicts[-1].cls, out.verdicts[-1].strict) == ("other", "GROUP_ID_NOT_FOUND")
    g, out = run(events + [commit("", -1, tp("t", 0), ts=4 * SEC)])
    assert out.verdicts[-1].cls == "accepted" and (g.group_type, g.state) == ("simple", "Empty")


def test_the_state_a_group_is_in_is_kept_by_events_that_restate_it():
    """Only a group deleted (``Dead``) becomes ``Empty`` when something creates it again: a stored
    offset or a repeated state leaves a classic group's state, and the time it entered it (the
    base of its offsets' retention when Empty), as they were."""
    joined = [join("A", -1, (), ts=SEC), sync(1, {"A": tp("t", 0)}, ts=2 * SEC)]
    g, _ = run(joined + [committed("t", 0, 5, ts=3 * SEC)])
    assert (g.state, g.state_ts) == ("Stable", 2 * SEC)
    g, _ = run(joined + [group_state("Empty", ts=3 * SEC, protocol="classic"),
                         group_state("Empty", ts=5 * SEC, protocol="classic")])
    assert (g.state, g.state_ts) == ("Empty", 3 * SEC)


def test_a_group_met_one_ms_after_dead_is_new_and_warms_up_again():
    """Forgotten at once: an event one ms after Dead meets a new group, so warm-up (§3.5) starts
    again from it; a group it had seen long before would be past its warm-up."""
    cfg = RulesConfig(warmup_ms=45 * SEC, alert_cooldown_ms=0)
    events = [assignment("A", 1, tp("t", 0), ts=SEC), group_state("Dead", ts=100 * SEC, protocol="consumer"),
              commit("A", 1, tp("t", 0), ts=100 * SEC + 1, error_code=69)]
    g, out = run(events, cfg=cfg)
    v = out.verdicts[-1]
    assert (v.cls, v.warming_up, v.model_agrees) == ("other", True, None) and g.first_seen_ts == 100 * SEC + 1


def test_group_created_again_at_the_instant_it_was_deleted_is_not_dead():
    events = [assignment("A", 1, tp("t", 0), ts=SEC), group_state("Dead", ts=3 * SEC, protocol="consumer"),
              commit("", -1, tp("t", 0), ts=3 * SEC)]
    g, _ = run(events)
    assert (g.state, g.group_type) == ("Empty", "simple") and not grp.is_droppable(g)
    g, _ = run(events[:2] + [committed("t", 0, 5, ts=3 * SEC)])
    assert g.state == "Empty" and g.exists


# --------------------------------------------------------------------------- topic watches

def _watch(events, cfg=CFG):
    eng = LocalEngine(cfg)
    eng.feed_all(events)
    return eng, eng.states[("t", "default", "t")]


def test_topic_watch_forgets_a_group_idle_past_retention_and_then_goes():
    facts = partition_epochs("t", 0, ts=5 * SEC, log_end=100, cache=[(0, 0)])
    eng, tw = _watch([commit("", -1, tp("t", 0), ts=SEC, group="g1"),
                      commit("", -1, tp("t", 0), ts=2 * SEC, group="g2"), facts])
    assert set(tw.committed) == {"g1", "g2"} and wakeup(tw, CFG) == SEC + KEEP
    part.forget_idle(tw, SEC + KEEP - 1, KEEP)
    assert set(tw.committed) == {"g1", "g2"}
    part.forget_idle(tw, SEC + KEEP, KEEP)
    assert set(tw.committed) == {"g2"} and wakeup(tw, CFG) == 2 * SEC + KEEP
    assert not is_gone(tw, 2 * SEC + KEEP, CFG)  # g2 is gone now, the log facts are not
    assert set(tw.committed) == set() and tw.partitions
    assert is_gone(tw, 5 * SEC + KEEP, CFG) and part.is_unreferenced(tw)


def test_topic_watch_without_groups_after_deletions_is_unreferenced():
    eng, tw = _watch([commit("", -1, tp("t", 0, 1), ts=SEC, group="g1"),
                      deleted("t", 0, ts=2 * SEC, group="g1"), deleted("t", 1, ts=2 * SEC, group="g1")])
    assert tw.committed == {} and tw.group_ts == {} and part.is_unreferenced(tw)


def test_a_forgotten_group_is_no_longer_checked_for_truncation():
    """Log facts arriving after a group's commit went idle past retention check nothing of it;
    within retention they do (LOG_TRUNCATION)."""
    def alerts(facts_ts):
        eng = LocalEngine(CFG)
        eng.feed_all([commit("", -1, tp("t", 0), ts=SEC, group="g1", offset=50, leader_epoch=0),
                      partition_epochs("t", 0, ts=facts_ts, log_end=80, cache=[(0, 0), (1, 30)])])
        return [a.kind for a in eng.finish().alerts if a.kind == "LOG_TRUNCATION"]
    assert alerts(SEC + KEEP) == ["LOG_TRUNCATION"]
    assert alerts(SEC + KEEP + 1) == []


def _truncations(events, cfg=CFG, settle_at=None):
    """LOG_TRUNCATION alerts, as (group, ts), of a LocalEngine fed ``events`` (settled at
    ``settle_at`` before the last one, if given)."""
    eng = LocalEngine(cfg)
    if settle_at is not None:
        eng.feed_all(events[:-1])
        eng.settle(settle_at)
        events = events[-1:]
    eng.feed_all(events)
    return [(a.group_id, a.ts) for a in eng.finish().alerts if a.kind == "LOG_TRUNCATION"]


def _diverged(ts, partition=0):
    """Epoch 0 ended at 30: a commit at epoch 0 past 30 lost records."""
    return partition_epochs("t", partition, ts=ts, log_end=80, cache=[(0, 0), (1, 30)])


def _stored(group, ts, partitions=(0,)):
    """A group's offset of t as ``__consumer_offsets`` stores it (the truncation watch's own
    path, ``partition.process_topic``)."""
    return [committed("t", p, 50, ts=ts, group=group, leader_epoch=0) for p in partitions]


def test_every_group_a_watch_remembers_is_checked_when_facts_come():
    """Stored offsets of two groups, a second apart, through the watch's own path: new log facts
    check both."""
    events = _stored("g1", SEC) + _stored("g2", 2 * SEC) + [_diverged(3 * SEC)]
    assert sorted(_truncations(events)) == [("g1", 3 * SEC), ("g2", 3 * SEC)]


def test_a_group_one_ms_inside_the_horizon_is_still_checked():
    """Facts at g1's commit + retention + 1: g1 is forgotten, g2, committed one ms later, is not."""
    events = _stored("g1", SEC) + _stored("g2", SEC + 1) + [_diverged(SEC + KEEP + 1)]
    assert _truncations(events) == [("g2", SEC + KEEP + 1)]


def test_deleting_one_partition_keeps_the_group_checked_on_the_others():
    events = (_stored("g1", SEC, (0, 1)) + [deleted("t", 0, ts=2 * SEC, group="g1"),
                                            _diverged(3 * SEC, 0), _diverged(3 * SEC, 1)])
    assert _truncations(events) == [("g1", 3 * SEC)]


def test_a_group_forgotten_then_committing_the_same_offset_is_reported_again():
    """A finding is reported once per group; a group the watch forgot is new to it."""
    first = _stored("g1", SEC) + [_diverged(2 * SEC)]
    assert _truncations(first + _stored("g1", SEC + KEEP)) == [("g1", 2 * SEC)]
    assert _truncations(first + _stored("g1", SEC + KEEP + 1)) == [("g1", 2 * SEC), ("g1", SEC + KEEP + 1)]


def test_log_facts_alone_are_forgotten_and_the_watch_goes():
    eng = LocalEngine(CFG)
    eng.feed_all([_diverged(SEC)])
    tw = eng.states[("t", "default", "t")]
    assert wakeup(tw, CFG) == SEC + KEEP and not is_gone(tw, SEC + KEEP - 1, CFG)
    assert is_gone(tw, SEC + KEEP, CFG) and tw.partitions == {}


@pytest.mark.parametrize("keep", [1, KEEP], ids=["retention-1ms", "retention-10min"])
def test_a_watch_forgets_at_any_retention(keep):
    cfg = RulesConfig(group_retention_ms=keep)
    events = _stored("g1", SEC) + [_diverged(SEC + keep)]
    assert _truncations(events, cfg) == [("g1", SEC + keep)]
    assert _truncations(events[:-1] + [_diverged(SEC + keep + 1)], cfg) == []
    eng = LocalEngine(cfg)
    eng.feed_all(events[:-1])
    assert wakeup(eng.states[("t", "default", "t")], cfg) == SEC + keep


def test_retention_zero_forgets_nothing_and_wakes_nothing():
    cfg = RulesConfig(group_retention_ms=0)
    events = _stored("g1", SEC) + [_diverged(SEC + 100 * KEEP)]
    assert _truncations(events, cfg, settle_at=SEC + 99 * KEEP) == [("g1", SEC + 100 * KEEP)]
    eng = LocalEngine(cfg)
    eng.feed_all(events[:-1])
    assert wakeup(eng.states[("t", "default", "t")], cfg) is None


def test_a_new_watch_has_nothing_to_wake_for():
    assert wakeup(part.new_topic_watch("default", "t"), CFG) is None


# --------------------------------------------------------------------------- engines

def test_run_key_at_a_clock_is_what_settle_does_for_one_key():
    """The stream's call for one key (``engine.run_key`` with the key's clock) makes the same
    decisions and forgets the same as ``LocalEngine.settle`` does for every key."""
    from fencewatch.state.engine import run_key

    events = joined_committed_left() + [partition_epochs("t", 0, ts=30 * SEC, log_end=80, cache=[(0, 0)])]
    for clock in (30 * SEC, 10 * SEC + R, 30 * SEC + KEEP):
        eng = LocalEngine(CFG)
        eng.feed_all(events)
        eng.settle(clock)
        for key in (("g", "default", "g"), ("t", "default", "t")):
            mine = LocalEngine(CFG)
            mine.feed_all(events)
            out = grp.Outputs()
            st = run_key(key, mine.states[key], (), CFG, out, clock=clock)
            assert (key in eng.states) == (not is_gone(st, clock, CFG)), (key, clock)
            if key[0] == "g":
                assert [a.alert_id for a in out.alerts] == [a.alert_id for a in eng.out.alerts]


def test_local_engine_settle_removes_what_is_gone():
    eng = LocalEngine(CFG)
    eng.feed_all(joined_committed_left() + [assignment("B", 1, tp("u", 0), ts=SEC, group="live")])
    eng.settle(10 * SEC + R + INTERVAL)
    assert ("g", "default", "g") not in eng.states and ("g", "default", "live") in eng.states
    assert ("t", "default", "t") in eng.states  # the topic watch keeps g's commit until KEEP
    eng.settle(10 * SEC + KEEP)
    assert ("t", "default", "t") not in eng.states
    eng.settle(SEC + KEEP)  # the live group, idle as long
    assert ("g", "default", "live") not in eng.states


def _ephemeral_history(seed: int) -> list:
    """Groups that come and go: join, commit (some stored, some fenced), leave or time out,
    offsets deleted or left to expire, Dead, admin resets, zombie commits after the end, log
    facts, long silences; a few group ids come back after they were forgotten."""
    rnd = random.Random(seed)
    events, ts = [], 0
    for n in range(12):
        gid = f"g{rnd.randrange(6)}"
        ts += rnd.choice([1, SEC, INTERVAL, R, KEEP // 2, KEEP + 1])
        mid, epoch = f"m{n}", n + 1
        parts = tp(rnd.choice(["t", "u"]), *sorted(rnd.sample(range(3), 2)))
        events.append(assignment(mid, epoch, parts, ts=ts, group=gid, subscribed=(parts[0][0],)))
        for _ in range(rnd.randrange(4)):
            ts += rnd.choice([1, SEC, 3 * SEC])
            stale = rnd.random() < 0.2
            events.append(commit(mid, epoch - stale, parts, ts=ts, group=gid, error_code=113 if stale else 0,
                                 offset=rnd.randrange(100), leader_epoch=rnd.randrange(2)))
        ts += rnd.choice([SEC, INTERVAL])
        r = rnd.random()
        if r < 0.7:
            events.append(left(mid, rnd.choice(["leave", "session_timeout"]), ts=ts, group=gid))
        if r < 0.3:
            ts += 1
            events += [deleted(t, p, ts=ts, group=gid) for t, p in parts]
        elif r < 0.4:
            ts += 1
            events.append(group_state("Dead", ts=ts, group=gid, protocol="consumer"))
        if rnd.random() < 0.3:
            ts += rnd.choice([1, INTERVAL, R + INTERVAL + 1])
            events.append(commit(mid, epoch, parts, ts=ts, group=gid, offset=rnd.randrange(100)))
        if rnd.random() < 0.2:
            ts += rnd.choice([1, SEC])
            events.append(commit("", -1, parts, ts=ts, group=gid))
        if rnd.random() < 0.4:
            events.append(partition_epochs(parts[0][0], parts[0][1], ts=ts, log_end=rnd.randrange(20, 120),
                                           log_start=rnd.randrange(5), cache=[(0, 0), (1, rnd.randrange(60))]))
    return events


def _outputs(eng: LocalEngine):
    out = eng.finish()
    return ([line for cv in out.commits for line in commit_verdicts_json(cv)],
            sorted(map(alert_json, out.alerts)))


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=0, max_value=2**32))
def test_removing_states_early_changes_no_output(seed):
    """What the stream does on state timeouts (remove what is gone at a clock that never passes
    input still to come) and what replay does (keep everything to the end) write the same
    verdicts and alerts (that removals happen: the next test)."""
    cfg = RulesConfig(offsets_retention_ms=R, offsets_retention_check_interval_ms=INTERVAL, group_retention_ms=KEEP,
                      expiry_warning_ms=5 * SEC, alert_cooldown_ms=2 * SEC, spike_window_ms=5 * SEC,
                      fencing_spike_floor=1)
    events = _ephemeral_history(seed)
    kept = LocalEngine(cfg)
    kept.feed_all(events)
    early = LocalEngine(cfg)
    rnd = random.Random(seed)
    for ev, nxt in zip(events, events[1:] + [None]):
        early.feed(ev)
        if nxt is not None and nxt.ts > ev.ts and rnd.random() < 0.5:
            early.settle(rnd.randrange(ev.ts, nxt.ts))  # a timeout between two events
    assert _outputs(early) == _outputs(kept)
    assert set(early.states) <= set(kept.states)


def test_the_property_removes_states():
    """Not vacuous: on these histories early removal does remove states, groups and topics."""
    cfg = RulesConfig(offsets_retention_ms=R, offsets_retention_check_interval_ms=INTERVAL, group_retention_ms=KEEP)
    kinds = set()
    for seed in range(20):
        eng = LocalEngine(cfg)
        events = _ephemeral_history(seed)
        for ev, nxt in zip(events, events[1:]):
            eng.feed(ev)
            before = set(eng.states)
            if nxt.ts > ev.ts:
                eng.settle(nxt.ts - 1)
            kinds |= {k[0] for k in before - set(eng.states)}
    assert kinds == {"g", "t"}
