"""The simulator's ``streams`` profile (KIP-1071 groups under exactly-once) against the rules engine.

Every group is a Kafka Streams application: a ``streams_topology``, members whose
``member_assignment`` names active tasks (a subtopology per source topic and one reading the
repartition topic), TxnOffsetCommits every 100 ms while restarts, crashes, freezes and delayed
requests move tasks. The engine only sees the events and must recover the simulator's ground truth
(``truth.expect``) through the tasks -> partitions rule (``state.streams``); the broker's answers
follow the streams groups' policy of the release simulated (``streams_relaxed``: Kafka 4.2+ runs
KIP-1251's check, 4.1 the exact epoch), which the engine is told (``streams_broker_policy``).
"""

from __future__ import annotations

import collections
import dataclasses
import json

import pytest

from fencewatch.sim.emit import DictEmitter, JsonEmitter
from fencewatch.sim.profiles import profile
from fencewatch.sim.run import streams_format_problem
from fencewatch.sim.world import SimConfig, Simulator
from fencewatch.state.config import RulesConfig
from fencewatch.state.model import Policy
from fencewatch.state.records import EventType, check_event
from fencewatch.streaming.runtime.replay import judge_events

RUN = dict(groups=4, duration_ms=1_200_000)
# The broker of each setting and the policy the engine is told it runs on streams groups.
SETTINGS = {"kip1251 (4.2+)": (True, Policy.KIP1251), "strict (4.1)": (False, Policy.STRICT)}
_JUDGED: dict = {}


def labelled_verdicts(events, result):
    """(verdict, its commit event, the index of its partition in the commit), as test_against_engine."""
    by_id = {e["event_id"]: e for e in events if e["type"] in ("offset_commit", "txn_offset_commit")}
    out = []
    for v in result.verdicts:
        e = by_id[v["event_id"]]
        out.append((v, e, next(i for i, o in enumerate(e["offsets"]) if (o["topic"], o["partition"]) == (v["topic"], v["partition"]))))
    return out


def judged(sim_events, setting: str):
    if setting not in _JUDGED:
        relaxed, policy = SETTINGS[setting]
        events = sim_events("streams", streams_relaxed=relaxed, **RUN)
        _JUDGED[setting] = (events, judge_events(events, RulesConfig(streams_broker_policy=policy)))
    return _JUDGED[setting]


def test_streams_groups_write_their_topology_tasks_and_transactional_commits(sim_events):
    events, _ = judged(sim_events, "kip1251 (4.2+)")
    groups = {e["group_id"] for e in events if "group_id" in e}
    types = collections.Counter(e["type"] for e in events)
    topologies = [e for e in events if e["type"] == "streams_topology"]
    assert {e["group_id"] for e in topologies} == groups and len(topologies) == len(groups)  # one each, first
    for t in topologies:
        assert t["subtopologies"][-1]["repartition_source_topics"][0].endswith("-repartition")
        first = next(e for e in events if e.get("group_id") == t["group_id"] and e["type"] == "member_assignment")
        assert first["ts"] >= t["ts"] and events.index(first) > events.index(t)
    assignments = [e for e in events if e["type"] == "member_assignment"]
    assert all(a["protocol"] == "streams" and a["assigned"] == [] for a in assignments)
    assert any(a["active_tasks_pending_revocation"] for a in assignments)  # tasks moved
    assert {s["subtopology_id"] for a in assignments for s in a["active_tasks"]} == {"0", "1", "2"}
    assert types["offset_commit"] == 0 and types["txn_offset_commit"] > 100_000  # EOS v2 only, every 100 ms
    assert {e["protocol"] for e in events if e["type"] == "group_state"} == {"streams"}


def test_streams_events_are_the_declared_fields_of_their_types():
    """The streams events (not in test_emit's mixed run) on both emitters, as state.records declares."""
    config = SimConfig(knobs=dataclasses.replace(profile("streams"), groups=2), seed=3, duration_ms=300_000,
                       cluster="east-1")
    for emitter_class in (DictEmitter, JsonEmitter):
        written = set()
        out: list = []
        emitter = emitter_class(lambda kind, key, payload: out.append(payload), event_id_prefix=config.id_prefix,
                                cluster=config.cluster)
        Simulator(config, emitter).run()
        for payload in out:
            event = payload if isinstance(payload, dict) else json.loads(payload)
            check_event(emitter_class.__name__, event)
            written.add(event["type"])
        assert {EventType.STREAMS_TOPOLOGY.value, EventType.MEMBER_ASSIGNMENT.value,
                EventType.TXN_OFFSET_COMMIT.value} <= written


@pytest.mark.parametrize("setting", sorted(SETTINGS))
def test_every_streams_commit_is_classed_as_labelled_and_the_broker_predicted(sim_events, setting):
    """Through the tasks: each committed partition's class is the one on the simulator's true
    coordinator state, and the broker's answer is the one the policy of its release gives."""
    events, result = judged(sim_events, setting)
    assert not result.errors and not result.unknown_types
    mismatches, classes = collections.Counter(), collections.Counter()
    for v, e, i in labelled_verdicts(events, result):
        classes[v["class"]] += 1
        if v["class"] != e["truth"]["expect"][i]:
            mismatches[(e["truth"]["scenario"], e["truth"]["expect"][i], v["class"])] += 1
    assert not mismatches, mismatches
    assert classes["accepted"] > 100_000 and classes["avoidable"] > 50 and classes["zombie"] > 10, classes
    assert not [v for v in result.verdicts if v["model_agrees"] is False]
    assert not [a for a in result.alerts if a["kind"] == "MODEL_DIVERGENCE"]


def test_alerts_of_streams_groups(sim_events):
    """Zombie commits and abort storms on either release; AVOIDABLE_FENCING only where the broker
    runs the exact epoch (4.1): on 4.2+ the commit it would name was accepted, no abort to save."""
    kinds = {}
    for setting in SETTINGS:
        events, result = judged(sim_events, setting)
        streams = {e["group_id"] for e in events if e["type"] == "streams_topology"}
        assert {a["group_id"] for a in result.alerts} <= streams
        kinds[setting] = collections.Counter(a["kind"] for a in result.alerts)
    assert kinds["strict (4.1)"]["AVOIDABLE_FENCING"] > 0
    assert kinds["kip1251 (4.2+)"]["AVOIDABLE_FENCING"] == 0
    for setting in SETTINGS:
        assert kinds[setting]["ZOMBIE_COMMIT"] > 0, kinds
        assert kinds[setting]["TXN_ABORT_STORM"] > 0, kinds
    # The relaxed check aborts fewer transactions: the ones it accepts are the saving.
    assert kinds["strict (4.1)"]["TXN_ABORT_STORM"] >= kinds["kip1251 (4.2+)"]["TXN_ABORT_STORM"]


def test_streams_groups_are_json_only():
    assert streams_format_problem(profile("streams"), "json") is None
    assert streams_format_problem(profile("mixed"), "avro") is None
    assert "JSON events only" in streams_format_problem(profile("streams"), "request-log")
