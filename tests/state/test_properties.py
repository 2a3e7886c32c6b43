"""Invariants over random legal KIP-848 histories (Hypothesis), as the rules-engine issue asks:

- strict acceptance implies kip1251 acceptance;
- the current owner committing at any epoch between its assignment epoch and its member epoch is
  accepted by kip1251 and assignment_epoch;
- when clients commit only partitions they held at the epoch they send (KAFKA-19779's assumption),
  no policy accepts a partition another member holds: ``unsafe`` is never set; illegal commits do set it;
- at most one ``assigned`` owner per partition; replay is deterministic and leaves its input unchanged;
- the judgement caches never change an answer (a cache-free copy of the group agrees on every commit).
"""
import copy
import json
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from fencewatch.sinks.jsonl import alert_json, commit_verdicts_json, verdict_json
from fencewatch.state import expiry as exp
from fencewatch.state import group as grp
from fencewatch.state import membership as ms
from fencewatch.state.config import RulesConfig
from fencewatch.state.events import CommitOffset, CommitOffsets, OffsetCommit
from fencewatch.state.model import UniformParts
from fencewatch.streaming.runtime.replay import judge_events

from .kip848_model import Coordinator

PARTITIONS = [("t", p) for p in range(6)]
CFG = RulesConfig(alert_cooldown_ms=0)


class LegalHistories(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.coord = Coordinator(PARTITIONS)
        self.g = grp.new_group("default", "g")
        self.out = grp.Outputs()
        self.commits = 0

    def feed(self, events):
        for ev in events:
            self.g = grp.process(self.g, ev, CFG, self.out)

    def commit(self, member_id, c, tps):
        n = next(self.coord.seq)
        ev = OffsetCommit(ts=self.coord._tick(), cluster="default", group_id="g", event_id=f"c{n}", seq=n,
                          transactional=False, member_id=member_id, member_epoch=c,
                          offsets=CommitOffsets.of(CommitOffset(t, p, 1) for t, p in tps))
        # The judgement caches (per partition and per request) must never change an answer:
        # the same commit judged by a copy of the group without caches says the same.
        fresh = copy.deepcopy(self.g)
        fresh.judged.clear()
        fresh_out = grp.Outputs()
        grp.process(fresh, ev, CFG, fresh_out)
        before = len(self.out.verdicts)
        self.feed([ev])
        assert self.out.commits[-1] == fresh_out.commits[-1]
        parts = self.out.commits[-1].parts
        if type(parts) is UniformParts:  # the judge's promise to writers: only partition numbers differ
            assert len({(p[0], *p[2:]) for p in parts}) == 1
        return self.out.verdicts[before:]

    @precondition(lambda self: len(self.coord.members) < 4)
    @rule()
    def join(self):
        self.feed(self.coord.join())

    @precondition(lambda self: self.coord.members)
    @rule(data=st.data())
    def leave(self, data):
        mid = data.draw(st.sampled_from(sorted(self.coord.members)))
        self.feed(self.coord.leave(mid))

    @precondition(lambda self: self.coord.members)
    @rule(data=st.data())
    def heartbeat(self, data):
        mid = data.draw(st.sampled_from(sorted(self.coord.members)))
        self.feed(self.coord.reconcile(mid))

    @precondition(lambda self: any(h for m in self.coord.members.values() for _, h in m.history))
    @rule(data=st.data())
    def legal_commit(self, data):
        """A possibly delayed commit: a partition the member held at the epoch it sends."""
        candidates = [(m.member_id, e, sorted(h)) for m in self.coord.members.values() for e, h in m.history if h]
        mid, c, held = data.draw(st.sampled_from(candidates))
        tps = data.draw(st.lists(st.sampled_from(held), min_size=1, max_size=3, unique=True))
        for v in self.commit(mid, c, tps):
            assert not v.unsafe, v
            if v.owner_member_id is not None:
                # Another member holds the partition now: every policy must fence this commit.
                assert {v.strict, v.member_revocation, v.assignment_epoch_check, v.kip1251} != {"NONE"}, v
                assert "NONE" not in (v.strict, v.member_revocation, v.assignment_epoch_check, v.kip1251), v

    @precondition(lambda self: any(m.assigned | m.pending for m in self.coord.members.values()))
    @rule(data=st.data())
    def owner_commit_in_window(self, data):
        """The current owner at any epoch in [assignment epoch, member epoch] is accepted."""
        owners = [m for m in self.coord.members.values() if m.assigned | m.pending]
        sim = data.draw(st.sampled_from(sorted(owners, key=lambda m: m.member_id)))
        member = self.g.members[sim.member_id]
        tp = data.draw(st.sampled_from(sorted(sim.assigned | sim.pending)))
        ae = member.assignment_epoch(tp)
        c = data.draw(st.integers(min_value=ae, max_value=member.member_epoch))
        (v,) = self.commit(sim.member_id, c, [tp])
        assert v.kip1251 == "NONE" and v.assignment_epoch_check == "NONE", v
        assert not v.unsafe

    @precondition(lambda self: len(self.coord.members) >= 2)
    @rule(data=st.data())
    def illegal_commit(self, data):
        """A member commits, at its current epoch, a partition another member owns: unsafe."""
        ids = sorted(self.coord.members)
        mid = data.draw(st.sampled_from(ids))
        b = self.g.members[mid].member_epoch
        foreign = sorted(tp for o in ids if o != mid for tp, ae in self.g.members[o].assigned_partitions.items()
                         if ae <= b and self.g.members[mid].assignment_epoch(tp) is None)
        if not foreign:
            return
        tp = data.draw(st.sampled_from(foreign))
        (v,) = self.commit(mid, b, [tp])
        assert v.strict == "NONE" and v.unsafe and v.owner_member_id is not None

    @invariant()
    def strict_implies_kip1251(self):
        for v in self.out.verdicts:
            assert v.strict != "NONE" or v.kip1251 == "NONE"

    @invariant()
    def one_assigned_owner_per_partition(self):
        assert all(len(holders) == 1 for holders in self.g.owners.values())
        assert not any(a.kind == "DUPLICATE_ASSIGNMENT" for a in self.out.alerts)

    @invariant()
    def model_matches_coordinator(self):
        for mid, sim in self.coord.members.items():
            m = self.g.members[mid]
            assert set(m.assigned_partitions) == sim.assigned and set(m.partitions_pending_revocation) == sim.pending
            assert all(ae <= m.member_epoch for ae in m.assigned_partitions.values())


LegalHistories.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None,
                                            suppress_health_check=[HealthCheck.too_slow])
TestLegalHistories = LegalHistories.TestCase


def random_history(seed: int, steps: int = 120) -> list[dict]:
    """A legal history with random (legal and stale) commits, as SPEC event dicts."""
    rnd = random.Random(seed)
    coord = Coordinator(PARTITIONS)
    dicts = []

    def add(events):
        for ev in events:
            d = {"type": "member_assignment" if hasattr(ev, "assigned") else "member_left", "ts": ev.ts,
                 "group_id": "g", "member_id": ev.member_id, "event_id": ev.event_id}
            if hasattr(ev, "assigned"):
                d.update(protocol="consumer", member_epoch=ev.member_epoch, state=ev.state.value,
                         assigned=[{"topic": t, "partitions": [p]} for t, p in ev.assigned],
                         pending_revocation=[{"topic": t, "partitions": [p]} for t, p in ev.pending_revocation])
            else:
                d["reason"] = ev.reason
            dicts.append(d)

    for i in range(steps):
        r = rnd.random()
        if r < 0.15 and len(coord.members) < 4:
            add(coord.join())
        elif r < 0.2 and coord.members:
            add(coord.leave(rnd.choice(sorted(coord.members))))
        elif r < 0.6 and coord.members:
            add(coord.reconcile(rnd.choice(sorted(coord.members))))
        elif coord.members:
            m = coord.members[rnd.choice(sorted(coord.members))]
            snaps = [(e, h) for e, h in m.history if h]
            if snaps:
                e, h = rnd.choice(snaps)
                tp = rnd.choice(sorted(h))
                dicts.append({"type": "txn_offset_commit" if rnd.random() < 0.3 else "offset_commit",
                              "ts": coord._tick(), "group_id": "g", "member_id": m.member_id, "member_epoch": e,
                              "offsets": [{"topic": tp[0], "partition": tp[1], "offset": i}],
                              "event_id": f"c{i}"})
    return dicts


@settings(max_examples=40, deadline=None)
@given(st.integers(min_value=0, max_value=2**32))
def test_replay_is_deterministic_and_leaves_input_unchanged(seed):
    events = random_history(seed)
    frozen = copy.deepcopy(events)
    a = judge_events(events, RulesConfig())
    b = judge_events(list(reversed(events))[::-1], RulesConfig())
    assert events == frozen
    assert [verdict_json(v) for v in a.verdict_records] == [verdict_json(v) for v in b.verdict_records]
    # The fast per-request encoder and the per-verdict one write the same bytes.
    assert [line for cv in a.commit_verdicts for line in commit_verdicts_json(cv)] == [
        verdict_json(v) for v in a.verdict_records]
    assert [alert_json(x) for x in a.alert_records] == [alert_json(x) for x in b.alert_records]
    assert all(not v["unsafe"] for v in a.verdicts)
    json.dumps(a.alerts)  # serialisable


def test_illegal_history_produces_unsafe():
    """Histories with commits of partitions the member never held at that epoch do set ``unsafe``."""
    events = random_history(7, steps=200)
    owners = {}
    extra = []
    ts = max(e["ts"] for e in events)
    # One illegal commit per member: each commits every partition at a huge epoch-equal guess is not
    # possible without the model, so reuse the engine's view to craft an equal-epoch foreign commit.
    res = judge_events(events)
    g = res.groups[0]
    for mid, m in sorted(g.members.items()):
        for tp, holders in sorted(g.owners.items()):
            if mid not in holders:
                owner = g.members[holders[0]]
                if owner.assigned_partitions[tp] <= m.member_epoch:
                    extra.append({"type": "offset_commit", "ts": ts + 1, "group_id": "g", "member_id": mid,
                                  "member_epoch": m.member_epoch,
                                  "offsets": [{"topic": tp[0], "partition": tp[1], "offset": 1}]})
                    owners[mid] = holders[0]
                    break
    assert extra, "the history should leave at least two members holding partitions"
    res = judge_events(events + extra)
    assert any(v["unsafe"] for v in res.verdicts)


def _with_other_events(seed: int) -> list[dict]:
    """A random history plus what touches the topic keys: commits of two topics in one request,
    stored commit records, deletions, log facts (some below committed offsets), heartbeats."""
    rnd = random.Random(seed)
    dicts = random_history(seed, steps=80)
    extra = []
    for i, d in enumerate(dicts):
        ts = d["ts"]
        r = rnd.random()
        if d["type"] in ("offset_commit", "txn_offset_commit") and r < 0.3:
            d = {**d, "offsets": d["offsets"] + [{"topic": "other", "partition": rnd.randrange(3), "offset": i,
                                                  "leader_epoch": 0}]}
            if rnd.random() < 0.3:
                d["error_code"] = rnd.choice([0, 22, 113])
        extra.append(d)
        if r > 0.85:
            extra.append({"type": "partition_epochs", "ts": ts, "topic": rnd.choice(["t0", "t1", "other"]),
                          "partition": rnd.randrange(3), "log_end_offset": rnd.randrange(0, 60),
                          "log_start_offset": rnd.randrange(0, 5),
                          "epochs": [{"epoch": 0, "start_offset": 0}, {"epoch": 1, "start_offset": rnd.randrange(60)}]})
        elif r > 0.8:
            extra.append({"type": "offset_committed", "ts": ts, "group_id": "g2", "topic": "other",
                          "partition": rnd.randrange(3), "offset": rnd.randrange(100), "leader_epoch": 0})
        elif r > 0.77:
            extra.append({"type": "offset_deleted", "ts": ts, "group_id": rnd.choice(["g", "g2"]), "topic": "t0",
                          "partition": rnd.randrange(3)})
        elif r > 0.72 and d.get("member_id"):
            extra.append({"type": "heartbeat", "ts": ts, "group_id": "g", "member_id": d["member_id"],
                          "request_epoch": 1, "response_epoch": 1, "error_code": rnd.choice([0, 110])})
    return extra


@settings(max_examples=40, deadline=None)
@given(st.integers(min_value=0, max_value=2**32))
def test_local_engine_hot_path_equals_keyed_processing(seed):
    """``LocalEngine.feed`` takes commits and group events straight to their keys; the Spark
    engine routes every event (``engine.route``) and runs each key on its own. Same outputs."""
    from fencewatch.state.engine import route, run_key, sort_key
    from fencewatch.streaming.runtime.replay import decode_dicts, judge

    cfg = RulesConfig(alert_cooldown_ms=0)
    typed = decode_dicts(_with_other_events(seed), [], {})
    commits, alerts, _ = judge(typed, cfg)
    per_key: dict = {}
    for ev in sorted(typed, key=sort_key):
        for key, kev in route(ev):
            per_key.setdefault(key, []).append(kev)
    out = grp.Outputs()
    clock = max(ev.ts for ev in typed)
    for key in sorted(per_key):
        run_key(key, None, per_key[key], cfg, out, clock)
    assert sorted(line for cv in commits for line in commit_verdicts_json(cv)) == sorted(
        line for cv in out.commits for line in commit_verdicts_json(cv))
    assert sorted(map(alert_json, alerts)) == sorted(map(alert_json, out.alerts))


@settings(max_examples=30, deadline=None)
@given(st.integers(min_value=0, max_value=2**32))
def test_subscribed_fast_check_implies_the_rule(seed):
    """``offsets.subscribed_to_all`` skips the expiry rule's state for a group with members; the
    rule must agree for every group state a history passes through."""
    from fencewatch.state.engine import LocalEngine
    from fencewatch.streaming.runtime.replay import decode_dicts

    engine = LocalEngine(RulesConfig())
    checked = 0
    for ev in decode_dicts(_with_other_events(seed), [], {}):
        engine.feed(ev)
        for g in engine.groups():
            for topic in (g.subscribed or ()):
                if g.members:
                    checked += 1
                    assert exp.subscribed_to_all(g.group_type or "simple", ms.derived_state(g), g.subscribed,
                                                 (topic,))
    assert checked


@settings(max_examples=30, deadline=None)
@given(st.integers(min_value=0, max_value=2**32))
def test_request_fast_check_is_the_held_by_another_member_definition(seed):
    """``judging.held_by_member_alone`` (a whole request, set operations) says what
    ``judging.other_holders`` (THE definition, one partition) says for each partition of it,
    for every member and group state a legal KIP-848 history passes through."""
    from fencewatch.state import judging
    from fencewatch.state.engine import LocalEngine
    from fencewatch.streaming.runtime.replay import decode_dicts

    rnd = random.Random(seed)
    engine = LocalEngine(RulesConfig())
    checked = 0
    for ev in decode_dicts(random_history(seed, steps=80), [], {}):
        engine.feed(ev)
        for g in engine.groups():
            held = sorted({tp for m in g.members.values() for tp in (*m.assigned_partitions,
                                                                      *m.partitions_pending_revocation)})
            for m in g.members.values():
                for _ in range(3):
                    tps = tuple(rnd.sample(held, rnd.randint(1, len(held)))) if held else ()
                    if not tps:
                        continue
                    alone = [tp in m.assigned_partitions and judging.other_holders(g, tp, m.member_id) == (None, None)
                             for tp in tps]
                    assert judging.held_by_member_alone(g, m, tps) == all(alone), (m.member_id, tps)
                    checked += 1
    assert checked
