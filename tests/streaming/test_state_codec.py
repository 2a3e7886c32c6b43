"""``streaming.runtime.state_codec``: the Spark state's versioned encoding.

Round trips over every stored class (Hypothesis, one strategy per field: a field added to a stored
class without one fails here), the committed schema of format 1 (a changed class fails until the
format is bumped or the snapshot regenerated), the header's refusals (0.1.0's pickles, newer
formats, other kinds, damage), migrations, committed format-1 values read back, and the rules
deciding the same when every touched key is stored and read back after every event.

    python tests/streaming/test_state_codec.py   # re-make tests/fixtures/state-format/v1/ (format 1 only)
"""
from __future__ import annotations

import dataclasses
import json
import pickle
import string
import sys
from dataclasses import replace
from pathlib import Path

import msgspec
import msgspec.inspect as mi
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fencewatch.state import group as grp
from fencewatch.state.assignment import Member
from fencewatch.state.config import RulesConfig
from fencewatch.state.events import MemberAssignment, StreamsTask, Subtopology
from fencewatch.state.streams import Topology
from fencewatch.state.engine import LocalEngine, apply, group_key, new_state, route
from fencewatch.state.expiry import CommittedOffset
from fencewatch.state.group import Counters, Group
from fencewatch.state.judgement_cache import JudgementCache
from fencewatch.state.model import MemberState, Protocol
from fencewatch.state.offsets import ExpiryTrack
from fencewatch.state.partition import PartitionState, TopicWatch
from fencewatch.state.spike import SignalState, SpikeState
from fencewatch.streaming.runtime import state_codec as codec
from fencewatch.streaming.runtime.hold import Held, Hold, Record, StoredCommit
from fencewatch.streaming.runtime.state_codec import GROUP, HOLD, TOPICS, StateFormatError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "state-format"

# --------------------------------------------------------------------------- one strategy per stored field

names = st.text(string.ascii_letters + string.digits + "-._", min_size=1, max_size=10)
ts = st.integers(0, 2 ** 53)
epochs = st.integers(-2, 2 ** 31 - 1)
counts = st.integers(0, 2 ** 40)
tps = st.tuples(names, st.integers(0, 1_000))
floats = st.floats(0, 1e6, allow_nan=False)


def maybe(s):
    return st.none() | s


def _unfolded_entry():
    """A stored commit request of a topic watch: (group, partitions, offsets, leader epochs), equal lengths."""
    return st.integers(0, 4).flatmap(lambda n: st.tuples(
        names, st.tuples(*[st.integers(0, 100)] * n), st.tuples(*[st.integers(0, 2 ** 40)] * n),
        st.tuples(*[st.integers(-1, 100)] * n)))


def _held():
    record = st.builds(Record, st.binary(max_size=40), names)
    columns = st.builds(StoredCommit, names, names, st.tuples(st.integers(0, 50)), st.tuples(counts), st.tuples(epochs))
    return st.builds(Held, ts, st.integers(0, 2 ** 40), record | columns, ts)


FIELDS: dict[type, dict] = {
    Member: dict(member_id=names, protocol=st.sampled_from(Protocol), member_epoch=epochs,
                 previous_member_epoch=epochs, state=st.sampled_from(MemberState),
                 assigned_partitions=st.dictionaries(tps, epochs, max_size=4),
                 partitions_pending_revocation=st.dictionaries(tps, epochs, max_size=2), revocation_epoch=epochs,
                 instance_id=maybe(names), subscribed_topics=maybe(st.frozensets(names, max_size=3))),
    CommittedOffset: dict(commit_ts=ts, expire_ts=maybe(ts)),
    ExpiryTrack: dict(deadline=maybe(ts), set_ts=ts, warned=maybe(ts), stale=st.booleans()),
    Counters: {f.name: counts for f in dataclasses.fields(Counters)},
    SignalState: dict(baseline=floats, firing=st.booleans(), fired_level=floats, episode_start_ms=st.integers(-1, 2 ** 53),
                      quiet_windows=st.integers(0, 100), peak=counts),
    SpikeState: dict(window_start_ms=st.integers(-1, 2 ** 53), fencing_errors=counts, txn_aborts=counts,
                     fencing=st.deferred(lambda: build(SignalState)), txn=st.deferred(lambda: build(SignalState))),
    PartitionState: dict(cluster=names, topic=names, partition=st.integers(0, 1_000), log_start_offset=maybe(counts),
                         log_end_offset=maybe(counts), epochs=st.lists(st.tuples(epochs, counts), max_size=3).map(tuple),
                         reported=st.dictionaries(names, st.tuples(names, counts, counts), max_size=2)),
    TopicWatch: dict(cluster=names, topic=names,
                     partitions=st.dictionaries(st.integers(0, 50), st.deferred(lambda: build(PartitionState)),
                                                max_size=3),
                     committed=st.dictionaries(names, st.dictionaries(st.integers(0, 50), st.tuples(counts, epochs),
                                                                      max_size=3), max_size=3),
                     unfolded=st.lists(_unfolded_entry(), max_size=4),
                     group_ts=st.dictionaries(names, ts, max_size=3),
                     facts_ts=st.dictionaries(st.integers(0, 50), ts, max_size=3), idle_from=maybe(ts)),
    Group: dict(cluster=names, group_id=names, exists=st.booleans(),
                group_type=maybe(st.sampled_from(["consumer", "streams", "classic", "simple"])), state=names,
                state_ts=maybe(ts), first_seen_ts=maybe(ts), last_ts=ts, group_epoch=epochs,
                members=st.dictionaries(names, st.deferred(lambda: build(Member)), max_size=3),
                owners=st.dictionaries(tps, st.lists(names, min_size=1, max_size=2).map(tuple), max_size=4),
                pending_owners=st.dictionaries(tps, st.lists(names, min_size=1, max_size=2).map(tuple), max_size=2),
                offsets=st.dictionaries(tps, st.deferred(lambda: build(CommittedOffset)), max_size=4),
                unfolded=st.lists(st.tuples(st.lists(tps, max_size=3).map(tuple),
                                            st.deferred(lambda: build(CommittedOffset))), max_size=3),
                committed_topics=st.sets(names, max_size=3), pending_txn=st.dictionaries(tps, ts, max_size=2),
                claims=st.dictionaries(tps, st.lists(st.tuples(names, epochs), max_size=2).map(tuple), max_size=2),
                expiry=st.deferred(lambda: build(ExpiryTrack)), counters=st.deferred(lambda: build(Counters)),
                txn_aborts_by_id=st.dictionaries(names, st.tuples(counts, counts), max_size=2),
                alert_last=st.dictionaries(names, ts, max_size=2), alert_suppressed=st.dictionaries(names, counts, max_size=2),
                spike=maybe(st.deferred(lambda: build(SpikeState))),
                subscribed=maybe(st.frozensets(names, max_size=3)),
                judged=st.just(None),  # derived: emptied before storing (below)
                sees_join_phases=st.booleans(), topology=maybe(st.deferred(lambda: build(Topology))),
                member_tasks=st.dictionaries(names, st.deferred(lambda: build(MemberAssignment)), max_size=2),
                departed=maybe(st.lists(names, max_size=3).map(tuple))),
    Topology: dict(epoch=epochs, subtopologies=st.lists(st.deferred(lambda: build(Subtopology)), max_size=3).map(tuple)),
    Subtopology: dict(subtopology_id=names, source_topics=st.lists(names, max_size=2).map(tuple),
                      repartition_source_topics=st.lists(names, max_size=2).map(tuple)),
    StreamsTask: dict(subtopology_id=names, partitions=st.lists(st.integers(0, 50), max_size=3).map(tuple),
                      assignment_epochs=maybe(st.lists(epochs, max_size=3).map(tuple))),
    MemberAssignment: dict(
        ts=ts, cluster=names, group_id=names, event_id=names, seq=counts, member_id=names,
        protocol=st.sampled_from(Protocol), member_epoch=epochs,
        assigned=maybe(st.lists(tps, max_size=3).map(tuple)), pending_revocation=maybe(st.lists(tps, max_size=2).map(tuple)),
        assigned_epochs=maybe(st.lists(epochs, max_size=3).map(tuple)),
        pending_epochs=maybe(st.lists(epochs, max_size=2).map(tuple)), previous_member_epoch=maybe(epochs),
        state=st.sampled_from(MemberState), subscribed_topics=maybe(st.lists(names, max_size=2).map(tuple)),
        instance_id=maybe(names), group_epoch=maybe(epochs), target_assignment_epoch=maybe(epochs),
        active_tasks=maybe(st.lists(st.deferred(lambda: build(StreamsTask)), max_size=2).map(tuple)),
        active_tasks_pending_revocation=maybe(st.lists(st.deferred(lambda: build(StreamsTask)), max_size=2).map(tuple))),
    Hold: dict(pending=st.lists(_held(), max_size=5), seen=st.dictionaries(names, st.tuples(ts, counts), max_size=2),
               last_ts=ts, last_wall=ts, last_input=ts, idle_calls=st.integers(0, 100),
               input_walls=st.lists(ts, max_size=4)),
}
STORED_EMPTY = {(Group, "judged")}
"""Fields stored empty: derived data rebuilt on demand (the judgement cache)."""


def build(cls):
    fields = dict(FIELDS[cls])
    if cls is Group:
        fields["judged"] = st.builds(JudgementCache)
    return st.builds(cls, **fields)


def stored_classes() -> dict[str, type]:
    """Every dataclass and NamedTuple a stored value holds, by name (as the schema names them)."""
    found: dict[str, type] = {}

    def walk(t) -> None:
        if isinstance(t, (mi.DataclassType, mi.NamedTupleType)):
            if t.cls.__qualname__ in found:
                return
            found[t.cls.__qualname__] = t.cls
            for f in t.fields:
                walk(f.type)
        for attr in ("key_type", "value_type", "item_type"):
            if hasattr(t, attr):
                walk(getattr(t, attr))
        for many in ("item_types", "types"):
            for sub in getattr(t, many, ()):
                walk(sub)

    for t in mi.multi_type_info(list(codec.ROOT_TYPES.values())):
        walk(t)
    return found


# --------------------------------------------------------------------------- every field, every class

def test_every_stored_class_has_a_strategy_for_each_of_its_fields():
    """A field added to a class the state holds must be given a strategy here, so that the round
    trips below carry it (and the schema test makes the format change a decision)."""
    classes = stored_classes()
    assert set(classes) == set(codec.stored_schema()["classes"])
    for name, cls in classes.items():
        fields = [f.name for f in dataclasses.fields(cls)] if dataclasses.is_dataclass(cls) else list(cls._fields)
        assert cls in FIELDS, f"{name} is stored but has no strategies in FIELDS"
        assert list(FIELDS[cls]) == fields, (
            f"{name}'s fields {fields} differ from the strategies {list(FIELDS[cls])}: give the new field a "
            f"strategy, then see state_codec's docstring (a new FORMAT, or a regenerated schema)")


def test_msgspec_writes_every_field_of_every_stored_class():
    for name, cls in stored_classes().items():
        info = mi.type_info(cls)
        fields = [f.name for f in dataclasses.fields(cls)] if dataclasses.is_dataclass(cls) else list(cls._fields)
        assert [f.encode_name for f in info.fields] == fields, name


def test_the_stored_schema_is_format_1_as_committed():
    """Changing what a stored class holds changes the format: bump ``state_codec.FORMAT`` with a
    migration, or, for a field with a default that older values decode to, regenerate the
    snapshot with ``python -m fencewatch.streaming.runtime.state_codec > tests/fixtures/state-format/schema.json``."""
    committed = json.loads((FIXTURES / "schema.json").read_text())
    assert codec.stored_schema() == committed


def test_a_field_with_no_stored_form_fails_loudly():
    """A field whose type has no stored form stops the write (the job fails and says so); the
    decoder knows no custom type but the judgement cache."""
    @dataclasses.dataclass
    class WithAHandle:
        name: str
        handle: object = dataclasses.field(default_factory=object)

    with pytest.raises(TypeError, match="unsupported"):
        codec._encode(WithAHandle("x"))
    with pytest.raises(TypeError, match="no stored form"):  # msgspec: a ValidationError at the value's path
        codec._dec_hook(WithAHandle, {})


# --------------------------------------------------------------------------- round trips

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(build(Group))
def test_a_group_round_trips(g):
    members = dict(g.members)
    data = codec.encode_group(g)  # empties the cache, folds the offsets
    assert data[:4] == b"fw\x01G"
    back = codec.decode(data, GROUP)
    assert back == g
    assert type(back.judged) is JudgementCache and not back.judged and back.unfolded == []
    assert back.members == members and all(type(m) is Member for m in back.members.values())
    assert type(back.subscribed) in (frozenset, type(None)) and type(back.committed_topics) is set


@SETTINGS
@given(st.dictionaries(names, build(TopicWatch), max_size=3))
def test_a_topic_buckets_watches_round_trip(watches):
    data = codec.encode_topics(watches)  # folds every watch
    back = codec.decode(data, TOPICS)
    assert back == watches and all(tw.unfolded == [] for tw in back.values())


@SETTINGS
@given(build(Hold))
def test_a_hold_round_trips_with_its_payloads_as_held(hold):
    back = codec.decode_hold(codec.encode_hold(hold))
    assert back == hold
    assert all(type(h) is Held and type(h.payload) in (Record, StoredCommit) for h in back.pending)
    assert all(type(x) is tuple for h in back.pending if type(h.payload) is StoredCommit
               for x in (h.payload.partitions, h.payload.offsets, h.payload.leader_epochs))


def test_folding_before_storing_keeps_the_newest_commit_of_each_partition():
    tw = TopicWatch("c", "t")
    shape = (0, 1)
    tw.unfolded = [("g", shape, (5, 6), (0, 0)), ("g", (1,), (9,), (1,)), ("g", shape, (7, 8), (0, 0))]
    back = codec.decode(codec.encode_topics({"t": tw}), TOPICS)["t"]
    assert back.committed == {"g": {0: (7, 0), 1: (8, 0)}} and back.unfolded == []


def test_stored_group_keeps_no_judgement_cache():
    eng = LocalEngine(RulesConfig())
    eng.feed_all(_events("mixed", seed=3, n=300))
    g = max(eng.groups(), key=lambda x: len(x.judged))
    assert len(g.judged) > 0
    owners = dict(g.owners)
    back = codec.decode(codec.encode_group(g), GROUP)
    assert isinstance(back.judged, JudgementCache) and len(back.judged) == 0 and back.owners == owners


# --------------------------------------------------------------------------- the header's refusals

def test_a_value_pickled_by_0_1_0_is_refused_with_what_to_do():
    blob = pickle.dumps(grp.new_group("c", "g"), pickle.HIGHEST_PROTOCOL)
    assert codec.value_format(blob) == "0.1.0"
    with pytest.raises(StateFormatError, match=r"key g/c/g: written by fencewatch 0\.1\.0 .*checkpoint reset-state"):
        codec.decode_state(group_key("c", "g"), blob)


def test_a_newer_format_another_kind_garbage_and_damage_are_refused():
    body = codec.encode_group(grp.new_group("c", "g"))[4:]
    with pytest.raises(StateFormatError, match="format 2 was written by a newer fencewatch; .* up to 1"):
        codec.decode(b"fw\x02G" + body, GROUP)
    with pytest.raises(StateFormatError, match="a group value where a hold was expected"):
        codec.decode(b"fw\x01G" + body, HOLD)
    with pytest.raises(StateFormatError, match="not a fencewatch state value"):
        codec.decode(b"{}", GROUP)
    with pytest.raises(StateFormatError, match="unreadable group state of format 1"):
        codec.decode(b"fw\x01G" + body[:-3], GROUP)
    with pytest.raises(StateFormatError, match=r"Expected `str`, got `int` - at `\$.cluster`"):
        codec.decode(b"fw\x01G" + msgspec.msgpack.encode({"cluster": 1, "group_id": "g"}), GROUP)


def test_an_older_format_is_read_through_its_migration(monkeypatch):
    """Format 0 stands in for a future format's predecessor: its values go through the migration."""
    old_body = msgspec.msgpack.encode({"cluster": "c", "group": "g"})  # a field renamed since

    def rename(kind, body):
        doc = msgspec.msgpack.decode(body)
        return msgspec.msgpack.encode({"cluster": doc["cluster"], "group_id": doc["group"]})

    with pytest.raises(StateFormatError, match="state format 0 is no longer read; .*reset-state"):
        codec.decode(b"fw\x00G" + old_body, GROUP)
    monkeypatch.setitem(codec.MIGRATIONS, 0, rename)
    assert codec.decode(b"fw\x00G" + old_body, GROUP) == grp.new_group("c", "g")


# --------------------------------------------------------------------------- format 1's values, committed

def _events(profile_name: str, seed: int, n: int) -> list:
    from fencewatch.sim.world import SimConfig, simulate
    from fencewatch.sim.profiles import profile
    from fencewatch.streaming.ingest.events import DecodeError, UnknownType, decode_json_line

    knobs = replace(profile(profile_name), groups=2)
    out = []
    for i, e in enumerate(simulate(SimConfig(knobs=knobs, seed=seed, duration_ms=None, max_events=n, labels=False))):
        ev = decode_json_line(json.dumps(e), seq=i, default_event_id=f"e{i}", coords="")
        if not isinstance(ev, (DecodeError, UnknownType)):
            out.append(ev)
    return out


def _facts(kind: bytes, value) -> dict:
    """What a committed sample is checked for, beyond decoding and re-encoding to the same bytes."""
    if kind == GROUP:
        return {"group_id": value.group_id, "members": sorted(value.members), "group_epoch": value.group_epoch,
                "commits": value.counters.commits, "offsets": len(value.offsets),
                "epochs": sorted(e for m in value.members.values() for e in m.assigned_partitions.values())}
    if kind == TOPICS:
        return {t: {"groups": sorted(tw.committed), "partitions": sorted(tw.partitions)} for t, tw in value.items()}
    return {"pending": [(e[0], e[1], len(e[2])) for e in value.pending], "seen": value.seen}


def make_samples() -> dict[str, tuple[bytes, bytes]]:
    """Format-1 values of a small simulated run: the busiest group, a bucket's watches with log
    facts, a hold with both kinds of payload."""
    eng = LocalEngine(RulesConfig())
    eng.feed_all(_events("unclean-election", seed=7, n=1_500))
    eng.finish()
    group = max(eng.groups(), key=lambda g: (g.counters.commits, g.group_id))
    watches = {k[2]: s for k, s in sorted(eng.states.items()) if k[0] == "t"}
    hold = Hold()
    hold.admit_read("offsets", [Held(100, 4, Record(b'{"type":"offset_commit"}', "off/0/1"), 7)], 7)
    hold.admit_read("offsets", [Held(101, 9, StoredCommit("topic-0", "group-1", (0, 1), (40, 41), (2, 2)), 7)], 7)
    return {"group": (GROUP, codec.encode_group(group)), "topics": (TOPICS, codec.encode_topics(watches)),
            "hold": (HOLD, codec.encode_hold(hold))}


@pytest.mark.parametrize("name", ["group", "topics", "hold"])
def test_format_1_values_committed_read_back(name):
    """Values written by format 1 (tests/fixtures/state-format/v1/) decode to what they held; while
    format 1 is written, encoding them again and reading that back gives the same value (a field
    added since with a default is then written too: the topic watch's forgetting clocks)."""
    kind, data = {"group": GROUP, "topics": TOPICS, "hold": HOLD}[name], (FIXTURES / "v1" / f"{name}.msgpack").read_bytes()
    value = codec.decode(data, kind)
    assert json.loads(json.dumps(_facts(kind, value))) == json.loads((FIXTURES / "v1" / f"{name}.json").read_text())
    if codec.FORMAT == 1:
        again = {GROUP: codec.encode_group, TOPICS: codec.encode_topics, HOLD: codec.encode_hold}[kind](value)
        assert codec.decode(again, kind) == codec.decode(data, kind)


# --------------------------------------------------------------------------- the rules through storage

@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["mixed", "zombie-storm", "eos-heavy", "expiry-hazard", "unclean-election"]),
       st.integers(0, 10_000))
def test_keys_stored_after_every_event_decide_as_kept_in_memory(profile_name, seed):
    """Every key the event touched is stored and read back after each event (a micro-batch of one
    event, the most storing there can be): verdicts and alerts equal the local engine's, whose
    states never leave memory; so do the offsets each group keeps."""
    events = _events(profile_name, seed, 400)
    cfg = RulesConfig()
    kept = LocalEngine(cfg)
    kept.feed_all(events)
    states, out = {}, grp.Outputs()
    for ev in events:
        for key, kev in route(ev):
            st_ = states.get(key) or new_state(key)
            st_ = apply(st_, kev, cfg, out)
            if key[0] == "g":
                states[key] = codec.decode(codec.encode_group(st_), GROUP)
            else:
                states[key] = codec.decode(codec.encode_topics({key[2]: st_}), TOPICS)[key[2]]
    assert out.verdicts == kept.out.verdicts
    assert [a.alert_id for a in out.alerts] == [a.alert_id for a in kept.out.alerts]
    for key, g in kept.states.items():
        if key[0] == "g":
            assert dict(grp.committed_offsets(states[key])) == dict(grp.committed_offsets(g))


@pytest.mark.parametrize("topology_late", [False, True], ids=["as-captured", "topology-late"])
def test_a_streams_group_stored_after_every_event_decides_as_kept_in_memory(topology_late):
    """A Kafka Streams capture (4.3.1, both sources): the group's topology and its members' last
    task-level assignments survive storing after every event; verdicts equal the local engine's.
    ``topology-late``: the topology moved after the first assignments (held while stored)."""
    import base64

    from fencewatch.streaming.ingest.consumer_offsets.mapping import Bridge, map_records
    from fencewatch.streaming.ingest.request_log import RequestLogBridge
    from fencewatch.state.engine import sort_key
    from fencewatch.streaming.runtime.replay import decode_dicts

    d = FIXTURES.parent / "kafka-streams" / "4.3.1"
    ids = json.loads((d / "topic-ids.json").read_text())
    raw = [json.loads(x) for x in (d / "consumer-offsets.jsonl").read_text().splitlines()]
    co, problems = map_records([(base64.b64decode(r["key"]), None if r["value"] is None else
                                 base64.b64decode(r["value"]), r["timestamp"], f"co-{n}") for n, r in enumerate(raw)],
                               Bridge(ids))
    assert problems == []
    rl_bridge = RequestLogBridge(ids)
    rl = [e for n, line in enumerate((d / "request-log.txt").read_text().splitlines())
          for e in rl_bridge.map_line(line, f"rl-{n}")]
    if topology_late:
        (i,) = [n for n, e in enumerate(co) if e["type"] == "streams_topology"]
        assigned = [n for n, e in enumerate(co) if e["type"] == "member_assignment"]
        topo = co.pop(i)
        at = assigned[2]  # after two assignments (indexes shift by one after the pop)
        co.insert(at, {**topo, "ts": co[at - 1]["ts"]})
    errors: list = []
    events = sorted(decode_dicts(co + rl, errors, {}), key=sort_key)
    assert not errors
    cfg = RulesConfig(streams_broker_policy="kip1251")
    kept = LocalEngine(cfg)
    kept.feed_all(events)
    states, out, held = {}, grp.Outputs(), 0
    for ev in events:
        for key, kev in route(ev):
            st_ = apply(states.get(key) or new_state(key), kev, cfg, out)
            if key[0] == "g":
                held = max(held, len(st_.member_tasks) - len(st_.members))
                states[key] = codec.decode(codec.encode_group(st_), GROUP)
            else:
                states[key] = codec.decode(codec.encode_topics({key[2]: st_}), TOPICS)[key[2]]
    assert out.verdicts == kept.out.verdicts and len(out.verdicts) >= 200
    assert (held > 0) is topology_late
    (g,) = [g for k, g in states.items() if k[0] == "g" and g.group_type == "streams"]
    assert g.topology is not None


if __name__ == "__main__":
    if codec.FORMAT != 1:
        sys.exit("these are format 1's samples: keep them; add samples of the new format beside them")
    (FIXTURES / "v1").mkdir(parents=True, exist_ok=True)
    for name, (kind, data) in make_samples().items():
        (FIXTURES / "v1" / f"{name}.msgpack").write_bytes(data)
        facts = json.loads(json.dumps(_facts(kind, codec.decode(data, kind))))
        (FIXTURES / "v1" / f"{name}.json").write_text(json.dumps(facts, indent=1, sort_keys=True) + "\n")


def test_a_watch_stored_before_forgetting_existed_loads_with_its_defaults():
    """A field added with a default (the topic watch's forgetting clocks, issue 36) reads values
    stored before it existed: the watch then forgets from the next pass on."""
    from fencewatch.state import group as grp
    from fencewatch.state import partition as part

    tw = part.new_topic_watch("default", "t")
    part.note_commits(tw, "g1", (0,), (7,), (-1,), 1_000, grp.Outputs())
    blob = codec.encode_topics({"t": tw})
    body = msgspec.msgpack.decode(blob[4:])
    for name in ("group_ts", "facts_ts", "idle_from"):
        del body["t"][name]
    back = codec.decode(blob[:4] + msgspec.msgpack.encode(body), codec.TOPICS)["t"]
    assert back.group_ts == {} and back.facts_ts == {} and back.idle_from is None
    assert set(back.committed) == {"g1"}
    part.note_commits(back, "g2", (0,), (9,), (-1,), 3_000, grp.Outputs())
    part.forget_idle(back, 4_000, 1_000)  # g1 had no time stored: counted from this pass; g2 is a second old
    assert set(back.committed) == {"g1"}
    part.forget_idle(back, 5_000, 1_000)
    assert back.committed == {} and part.is_unreferenced(back)

