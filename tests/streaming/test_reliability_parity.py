"""The job's outputs do not depend on micro-batch boundaries (no Spark): the same records read in
the chunkings the Kafka source plans (``rate_limit``; a batch 0 cut by ``checkpoint bound``)
through the job's own router and state function give the local engine's verdicts and alerts.

Before the fix (``streaming/runtime/hold.py``) a group's held events went after ``max_skew`` of wall time
even while the other topic was still being read from a backlog, and a source that had delivered
nothing for a group yet counted as read: events were applied out of (ts, seq) order, 5,042 of
41,395 verdict lines differed and 3 of the engine's 5 alerts were not raised (the slow tests saw
"4 of 5" after ``checkpoint bound`` and "1 of 2" on the standalone cluster). A first fix still
released an event after 60 s of wall time alone: micro-batches of 70 s (an executor lost on a host
at load 20) made 1,532 verdict lines of a 6,000-event trace differ.
"""
from __future__ import annotations

import copy
import json
import time
from dataclasses import replace

import pytest

from fencewatch.sim.world import SimConfig, simulate
from fencewatch.sim.profiles import profile
from fencewatch.sinks.jsonl import alert_json, commit_verdicts_block
from fencewatch.state import group as grp
from fencewatch.state.config import RulesConfig
from fencewatch.state.engine import KeyKind, LocalEngine, group_key, sort_key
from fencewatch.streaming.ingest.events import MEMBERSHIP_TYPES, DecodeError, UnknownType, decode_json_line
from fencewatch.streaming.runtime.inputs import group_sources
from fencewatch.streaming.sources.kafka import rate_limit
from fencewatch.streaming.runtime.outputs import read_frame, read_status, unpack_lines
from fencewatch.streaming.runtime.state_codec import decode_bucket, decode_hold, decode_state
from fencewatch.streaming.runtime.state_fn import make_stream_fn
from reliability_harness import SparkGroupStateStub, micro_batch
from fencewatch.streaming.runtime.routing import make_router, parse_key

SOURCES = ("heartbeats", "offsets")
RANK = {"heartbeats": 0, "offsets": 1}


@pytest.fixture(scope="module")
def records() -> dict[str, list[bytes]]:
    """A zombie storm's records as produced to one partition of each topic (the job's seq: offset * 4 + rank)."""
    knobs = replace(profile("zombie-storm"), groups=3)
    events = simulate(SimConfig(knobs=knobs, seed=9, duration_ms=None, max_events=6_000, event_id_prefix="e-",
                                labels=False))
    recs: dict[str, list[bytes]] = {s: [] for s in SOURCES}
    for e in events:
        recs["heartbeats" if e["type"] in MEMBERSHIP_TYPES else "offsets"].append(json.dumps(e).encode())
    return recs


def engine_outputs(recs, cfg) -> tuple[set, set]:
    """(verdict lines, alert lines) of ``replay --engine local`` on the records in (ts, seq) order."""
    typed = []
    for src in SOURCES:
        for off, value in enumerate(recs[src]):
            ev = decode_json_line(value, seq=off * 4 + RANK[src], default_event_id=f"{src}/0/{off}", coords="")
            if not isinstance(ev, (DecodeError, UnknownType)):
                typed.append(ev)
    engine = LocalEngine(cfg)
    engine.feed_all(sorted(typed, key=sort_key))
    verdicts = {line for cv in engine.out.commits if cv.parts for line in commit_verdicts_block(cv).split("\n")}
    return verdicts, {alert_json(a) for a in engine.out.alerts}


def stored_by_key(states: dict) -> dict[tuple, tuple]:
    """The stored (rules value, hold value) of every group key and topic bucket, a group bucket's
    groups each under its own group key: what the job keeps, whatever ``group_buckets`` it ran with."""
    out = {}
    for key, st in states.items():
        pkey = parse_key(key)
        if pkey.kind is KeyKind.GROUP_BUCKET:
            out.update({group_key(pkey.cluster, g): (e[0], e[1]) for g, e in decode_bucket(st.get[0], pkey).items()})
        else:
            out[pkey] = st.get
    return out


def job_outputs(recs, cfg, plan: list[tuple[int, int]], trigger_ms: int = 500, max_skew_ms: int = 1_000,
                states: dict | None = None, statuses: list | None = None, idle_ms: int = 0, group_buckets: int = 0):
    """(verdict lines, alert lines) of the job's router and state function reading the records in
    micro-batches ending at ``plan``'s offsets (heartbeats, offsets), one trigger of wall time each;
    then idle triggers (state timeouts) until nothing is held, and one more after ``idle_ms`` of
    wall time (0: none). ``states``: the keys' states at the end (Spark's: a removed one is gone);
    ``statuses``: every status row, as a dict; ``group_buckets``: ``streaming.group_buckets``."""
    router = make_router(group_buckets=group_buckets)
    wall = [time.time()]
    fn = make_stream_fn(cfg, max_skew_ms=max_skew_ms, wall_clock=lambda: wall[0], sources=group_sources("events"))
    states: dict[str, SparkGroupStateStub] = {} if states is None else states
    verdicts, alerts = set(), set()
    pos = {s: 0 for s in SOURCES}
    plan = list(plan)
    for _ in range(len(plan) + 200):
        rows = []
        if plan:
            for src, end in zip(SOURCES, plan.pop(0)):
                rows += [(recs[src][o], o * 4 + RANK[src], f"{src}/0/{o}", "", src, 0) for o in range(pos[src], end)]
                pos[src] = end
        for _, frame in micro_batch(router, fn, states, rows):
            for row in read_frame(frame):
                if row.record == "verdicts":
                    verdicts.update(unpack_lines(row.raw).decode().split("\n")[:-1])
                elif row.record == "alert":
                    alerts.add(row.json)
                elif row.record == "status" and statuses is not None:
                    statuses += read_status(row.raw)[0]
        wall[0] += trigger_ms / 1000
        if not plan and not any(held and decode_hold(held).pending for _, held in stored_by_key(states).values()):
            if idle_ms <= 0:
                break
            wall[0] += idle_ms / 1000
            idle_ms = 0
    return verdicts, alerts


def source_plan(recs, limit: int, first: int | None = None) -> list[tuple[int, int]]:
    """Batch end offsets as the Kafka source plans them (``rate_limit``: shares in proportion to the
    lag); ``first``: batch 0 cut to that many records per topic, as ``checkpoint bound`` does."""
    end = {(s, 0): len(recs[s]) for s in SOURCES}
    pos = {(s, 0): 0 for s in SOURCES}
    out = []
    if first:
        pos = {tp: min(first, o) for tp, o in end.items()}
        out.append(tuple(pos[(s, 0)] for s in SOURCES))
    while pos != end:
        pos = rate_limit(pos, end, limit)
        out.append(tuple(pos[(s, 0)] for s in SOURCES))
    return out


@pytest.mark.parametrize("group_buckets", [0, 2], ids=["key-per-group", "2-group-buckets"])
@pytest.mark.parametrize("limit,first,batch_ms", [(600, None, 500), (600, 500, 500), (2_000, 1_000, 500),
                                                   (600, None, 70_000)],
                         ids=["600-per-trigger", "bound-500-then-600", "bound-1000-then-2000",
                              "600-per-trigger-70s-batches"])
def test_same_records_in_other_chunkings_give_the_engine_outputs(records, limit, first, batch_ms, group_buckets):
    """``batch_ms``: the wall time each micro-batch takes (70 s: an executor lost and its tasks rerun
    on a loaded host; a held event must not go on wall time alone). Two buckets for three groups:
    groups share a key's state, each with its own hold."""
    cfg = RulesConfig()
    want_verdicts, want_alerts = engine_outputs(records, cfg)
    assert want_alerts, "the trace must raise alerts for the comparison to mean something"
    verdicts, alerts = job_outputs(records, cfg, source_plan(records, limit, first), trigger_ms=batch_ms,
                                   group_buckets=group_buckets)
    assert len(verdicts) == len(want_verdicts)
    assert verdicts == want_verdicts
    assert alerts == want_alerts


@pytest.mark.parametrize("group_buckets", [0, 4], ids=["key-per-group", "4-group-buckets"])
def test_groups_that_come_and_go_leave_no_state_and_the_engine_outputs(group_buckets):
    """Short-lived groups (the simulator's ``ephemeral`` profile): join, commit or not, close or
    crash, offsets expire, the group is deleted (Dead); and a few of their members commit again
    long after (a zombie meeting a group Kafka deleted). The job's state function removes the
    states of the groups that are gone (contract §4.4) and its verdicts and commit-time alerts
    stay the local engine's, which keeps every state to the end."""
    knobs = replace(profile("ephemeral"), groups=2, ephemeral_per_hour=3_000, ephemeral_life_ms=20_000,
                    retention_minutes=2, retention_check_interval_ms=20_000)
    events = simulate(SimConfig(knobs=knobs, seed=4, duration_ms=None, max_events=5_000, event_id_prefix="e-",
                                labels=False))
    late = max(e["ts"] for e in events) + 600_000
    committers = [e for e in events if e["type"] == "offset_commit" and e["group_id"].startswith("console")]
    firsts = list({e["group_id"]: e for e in reversed(committers)}.values())[:5]
    events += [{**e, "ts": late + i, "event_id": f"late-{i}", "error_code": None} for i, e in enumerate(firsts)]
    recs: dict[str, list[bytes]] = {src: [] for src in SOURCES}
    for e in events:
        recs["heartbeats" if e["type"] in MEMBERSHIP_TYPES else "offsets"].append(
            json.dumps({k: v for k, v in e.items() if v is not None}).encode())
    cfg = RulesConfig(offsets_retention_ms=120_000, offsets_retention_check_interval_ms=20_000,
                      group_retention_ms=300_000)
    want_verdicts, want_alerts = engine_outputs(recs, cfg)
    states, statuses = {}, []
    verdicts, alerts = job_outputs(recs, cfg, source_plan(recs, 600), states=states, statuses=statuses,
                                   idle_ms=200_000, group_buckets=group_buckets)
    assert verdicts == want_verdicts
    commit_kinds = ("ZOMBIE_COMMIT", "AVOIDABLE_FENCING", "UNSAFE_ACCEPT", "MODEL_DIVERGENCE")
    assert {a for a in alerts if json.loads(a)["kind"] in commit_kinds} == {
        a for a in want_alerts if json.loads(a)["kind"] in commit_kinds}
    # The zombies met groups that were gone: Kafka's answer to a group it deleted.
    late_classes = {json.loads(v)["class"] for v in verdicts if json.loads(v)["event_id"].startswith("late-")}
    assert late_classes == {"other"}
    # Gone: each ephemeral group's key was removed, with a last status saying Dead.
    ephemeral = {e["group_id"] for e in events if e["group_id"] and e["group_id"].startswith("console")}
    dead = {e["group_id"] for e in events if e["type"] == "group_state" and e["state"] == "Dead"}
    forgotten = {s["group_id"] for s in statuses if s.get("forgotten")}
    stored = stored_by_key(states)
    left = {k[2] for k in stored if k[0] == "g" and k[2].startswith("console")}
    assert len(ephemeral) > 50 and dead <= forgotten <= ephemeral and len(forgotten) > 2 * len(dead)
    assert all(s["state"] == "Dead" for s in statuses if s.get("forgotten"))
    assert not left & (forgotten - {e["group_id"] for e in firsts})
    # What is left is what only the idle rule can forget yet: groups with a member still in.
    if group_buckets:  # a bucket goes when its last group goes
        assert all(st.exists for st in states.values())
        assert len([k for k in states if k.startswith("G")]) <= group_buckets
    for key in (k for k in stored if k[0] == "g" and k[2].startswith("console")):
        g = decode_state(key, stored[key][0])
        assert g.members and grp.drop_at(g, cfg) == g.last_ts + cfg.group_retention_ms


def test_a_batch_run_again_after_a_crash_gives_what_its_first_attempt_gave(records):
    """Spark runs a micro-batch again after a crash with the offsets, the caught-up mark and the
    processing time its first attempt logged (``offsets/N``). The hold goes by that time, not the
    call's, so every batch's second attempt, from the state its first one started from, gives the
    same outputs and the same state, and the whole gives the engine's. Before (issue 33), the hold
    went by the call's wall time: a second attempt run later released events its first attempt had
    kept (and its outputs were lost when the first attempt had been logged done), and without the
    mark it kept the events a caught-up first attempt had released (and wrote them a batch later,
    twice). Batch times here are 2025's, the trace's, far from this host's clock."""
    cfg = RulesConfig()
    want_verdicts, want_alerts = engine_outputs(records, cfg)
    router = make_router()
    fn = make_stream_fn(cfg, max_skew_ms=1_000, sources=group_sources("events"))
    plan = source_plan(records, 600)
    states: dict[str, SparkGroupStateStub] = {}
    verdicts, alerts, pos = [], [], {s: 0 for s in SOURCES}
    t0 = json.loads(records["offsets"][0])["ts"]
    for i in range(len(plan) + 200):
        rows = []
        if i < len(plan):
            for src, end in zip(SOURCES, plan[i]):
                rows += [(records[src][o], o * 4 + RANK[src], f"{src}/0/{o}", "", src, 0) for o in range(pos[src], end)]
                pos[src] = end
        before = copy.deepcopy(states)
        attempts = []
        for run_states in (states, before):
            out = [(row.record, row.raw if row.record == "verdicts" else row.json)
                   for _, frame in micro_batch(router, fn, run_states, rows, batch_ms=t0 + 500 * i,
                                               caught_up=i == len(plan) - 1)
                   for row in read_frame(frame) if row.record in ("verdicts", "alert")]
            attempts.append(out)
        assert attempts[0] == attempts[1], f"batch {i}: the second attempt differs"
        assert {k: s.get for k, s in states.items()} == {k: s.get for k, s in before.items()}, f"batch {i}: state"
        for record, value in attempts[1]:
            if record == "verdicts":
                verdicts += unpack_lines(value).decode().split("\n")[:-1]
            else:
                alerts.append(value)
        states = before
        if i >= len(plan) and not any(s.get and decode_hold(s.get[1]).pending for s in states.values()):
            break
    assert len(verdicts) == len(set(verdicts)) == len(want_verdicts)
    assert set(verdicts) == want_verdicts and set(alerts) == want_alerts
