"""The simulation loop: determinism, KIP-848 invariants, event ordering, and each profile's hazards."""

from __future__ import annotations

import collections
import dataclasses

import pytest

from fencewatch.sim.emit import DictEmitter, HEARTBEATS, OFFSETS
from fencewatch.sim.world import SimConfig, Simulator, iter_events, simulate
from fencewatch.sim.profiles import PROFILES, Knobs, parse_knob, profile

COMMITS = ("offset_commit", "txn_offset_commit")
MEMBERSHIP = ("heartbeat", "member_assignment", "member_left", "group_state", "classic_join", "classic_sync",
              "streams_topology")


def small(name: str) -> Knobs:
    """A profile without exactly-once groups (their 100 ms commits dominate the event count)."""
    return dataclasses.replace(profile(name), eos_fraction=0.0)


def test_same_seed_same_events_and_a_different_seed_differs():
    config = SimConfig(knobs=small("mixed"), seed=3, duration_ms=600_000)
    first = simulate(config)
    assert first == simulate(config)
    assert first != simulate(dataclasses.replace(config, seed=4))


def test_event_budget_is_exact_and_a_prefix_of_the_longer_run():
    config = SimConfig(knobs=small("zombie-storm"), seed=1, duration_ms=None, max_events=2_500)
    events = simulate(config)
    assert len(events) == 2_500
    longer = simulate(dataclasses.replace(config, max_events=4_000))
    assert longer[:2_500] == events


def test_labels_do_not_change_the_traffic(sim_events):
    labelled = sim_events("zombie-storm", duration_ms=900_000)
    plain = sim_events("zombie-storm", duration_ms=900_000, labels=False)
    assert [{k: v for k, v in e.items() if k != "truth"} for e in labelled] == plain
    assert any("truth" in e for e in labelled) and not any("truth" in e for e in plain)


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_coordinator_invariants_hold_at_every_step(name):
    """At most one holder per partition, assignment epoch <= member epoch <= target <= group epoch."""
    knobs = dataclasses.replace(profile(name), groups=6, eos_fraction=min(profile(name).eos_fraction, 0.2))
    sim = Simulator(SimConfig(knobs=knobs, seed=11, duration_ms=1_200_000), DictEmitter(lambda *a: None))
    consumer_groups = [g.coord for g in sim.groups if g.protocol in ("consumer", "streams")]
    steps = 0
    for _ in sim.steps():
        steps += 1
        if steps % 7 == 0:
            for coord in consumer_groups:
                coord.check_invariants()
    assert steps > 1_000


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_output_order_and_ids(sim_events, name):
    """ts never goes back within a group and moves on when the group's events switch topics."""
    events = sim_events(name, duration_ms=900_000, eos_fraction=0.0)
    ids = [e["event_id"] for e in events]
    assert len(set(ids)) == len(ids)
    last: dict[str, tuple[int, int]] = {}
    for e in events:
        assert isinstance(e["ts"], int)
        group = e.get("group_id")
        if group is None:
            assert e["type"] == "partition_epochs"
            continue
        kind = HEARTBEATS if e["type"] in MEMBERSHIP else OFFSETS
        if group in last:
            ts, previous_kind = last[group]
            assert e["ts"] >= ts
            if kind != previous_kind:
                assert e["ts"] > ts, e
        last[group] = (e["ts"], kind)


class StrictModel:
    """An independent reading of the stream: what Kafka <= 4.2 must answer each commit."""

    def __init__(self) -> None:
        self.members: dict[str, dict[str, int]] = collections.defaultdict(dict)
        self.generation: dict[str, int] = {}

    def feed(self, e: dict) -> int | None:
        g, t = e.get("group_id"), e["type"]
        members = self.members[g] if g else None
        if t == "member_assignment":
            members[e["member_id"]] = e["member_epoch"]
        elif t == "member_left":
            if e["reason"] == "static_leave":
                members[e["member_id"]] = -2
            else:
                members.pop(e["member_id"], None)
        elif t == "classic_sync":
            self.generation[g] = e["generation"]
            members.clear()
            members.update({m: e["generation"] for m in e["assignments"]})
        elif t == "group_state" and e["protocol"] == "classic" and e["state"] == "Empty":
            members.clear()
        elif t in COMMITS:
            member, epoch = e["member_id"], e["member_epoch"]
            if member == "" and epoch < 0:
                return 0 if not members else 25
            if member not in members:
                return 25
            if g in self.generation:  # classic group
                return 0 if epoch == self.generation[g] else 22
            if epoch != members[member]:
                return 22 if t == "txn_offset_commit" else 113
            return 0
        return None


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_error_codes_follow_from_the_emitted_membership(sim_events, name):
    """Every commit's error_code is what the events before it imply under the strict rule (streams
    groups answered as Kafka 4.1 does; 4.2+'s relaxed answers: test_streams_profile.py)."""
    model = StrictModel()
    checked = 0
    strict = {"streams_relaxed": False, "groups": 4} if profile(name).streams_fraction else {}
    for e in sim_events(name, duration_ms=1_800_000, eos_fraction=0.1, **strict):
        expected = model.feed(e)
        if expected is not None:
            assert e["error_code"] == expected, e
            checked += 1
    assert checked > 100


def test_profiles_produce_their_hazards(sim_events):
    def scenarios(name, **kw):
        return collections.Counter(
            e["truth"]["scenario"] for e in sim_events(name, **kw) if "truth" in e
        )

    def reasons(name, **kw):
        return collections.Counter(e["reason"] for e in sim_events(name, **kw) if e["type"] == "member_left")

    storm = scenarios("zombie-storm", eos_fraction=0.0)
    assert storm["zombie"] and storm["fenced_zombie"] and storm["heartbeat_race"] and storm["stale_claim"]
    assert {"session_timeout", "rebalance_timeout"} <= set(reasons("zombie-storm", eos_fraction=0.0))
    assert {"static_leave", "leave"} <= set(reasons("rolling-restart", eos_fraction=0.0))
    assert scenarios("rolling-restart", eos_fraction=0.0)["heartbeat_race"] > 10
    eos = [e for e in sim_events("eos-heavy", duration_ms=600_000) if e["type"] == "txn_offset_commit"]
    assert len(eos) > 10_000 and any(e["error_code"] == 22 for e in eos)
    expiry = scenarios("expiry-hazard", duration_ms=10_800_000, eos_fraction=0.0)
    assert expiry["expiry_hazard"] and expiry["expired"] and expiry["admin"]
    unclean = scenarios("unclean-election", duration_ms=3_600_000)
    assert unclean["unclean_election"] and unclean["clean_election"]
    mixed = collections.Counter(e["type"] for e in sim_events("mixed", duration_ms=3_600_000, eos_fraction=0.0))
    assert mixed["classic_join"] and mixed["classic_sync"] and mixed["partition_epochs"] and mixed["member_left"]


def test_static_member_takes_over_its_partitions_with_epochs_reset(sim_events):
    """SPEC §2: after a static leave the next incarnation holds the same partitions at epoch 0."""
    events = sim_events("rolling-restart", duration_ms=1_800_000, eos_fraction=0.0, static_fraction=1.0,
                        assignment_epochs=True)
    held: dict[tuple[str, str], dict] = {}
    left: dict[tuple[str, str], tuple[dict, int]] = {}
    group_epoch: dict[str, int] = {}
    takeovers = 0
    for e in events:
        if e["type"] == "member_assignment":
            key = (e["group_id"], e.get("instance_id"))
            if key in left and e["member_id"] != left[key][0]["member_id"]:
                previous, epoch_before = left.pop(key)
                # Same partitions, assignment epochs 0, and no rebalance for the replacement.
                assert e["assigned"] == [dict(tp, assignment_epochs=[0] * len(tp["partitions"])) for tp in previous["assigned"]]
                assert e["group_epoch"] == epoch_before
                takeovers += 1
            held[key] = e
            group_epoch[e["group_id"]] = e["group_epoch"]
        elif e["type"] == "member_left" and e["reason"] == "static_leave":
            key = (e["group_id"], e["instance_id"])
            left[key] = (held[key], group_epoch[e["group_id"]])
        elif e["type"] == "member_left":
            left.pop((e["group_id"], e.get("instance_id")), None)
    assert takeovers > 5


def test_unclean_election_labels_name_the_groups_whose_commits_diverged(sim_events):
    """KIP-320: a group diverged iff its last accepted offset at an older epoch is beyond the new log end."""
    committed: dict[tuple[str, str, int], tuple[int, int]] = {}
    consumers: dict[tuple[str, int], set[str]] = collections.defaultdict(set)
    seen_diverged = 0
    for e in sim_events("unclean-election", duration_ms=3_600_000):
        if e["type"] in COMMITS and e["error_code"] == 0:
            for o in e["offsets"]:
                committed[(e["group_id"], o["topic"], o["partition"])] = (o["offset"], o["leader_epoch"])
                consumers[(o["topic"], o["partition"])].add(e["group_id"])
        elif e["type"] == "partition_epochs" and e["truth"]["scenario"] == "unclean_election":
            new_epoch = e["epochs"][-1]["epoch"]
            end = e["log_end_offset"]
            expected = sorted(
                g for g in consumers[(e["topic"], e["partition"])]
                if committed[(g, e["topic"], e["partition"])][0] > end
                and committed[(g, e["topic"], e["partition"])][1] < new_epoch
            )
            diverged = [g for g in e["truth"]["details"]["diverged_groups"].split(",") if g]
            assert sorted(diverged) == expected
            assert e["epochs"][-1]["start_offset"] == end < int(e["truth"]["details"]["previous_log_end_offset"])
            seen_diverged += len(diverged)
    assert seen_diverged > 0


def test_expired_offsets_are_deleted_only_after_retention_in_an_empty_group(sim_events):
    """SPEC §4: a KIP-848 group that went empty loses offsets R after their commit, at a cleanup run."""
    knobs = profile("expiry-hazard")
    retention = knobs.retention_minutes * 60_000
    start = SimConfig().start_ts
    last_commit: dict[tuple[str, str, int], int] = {}
    state: dict[str, tuple[str, str]] = {}
    deleted = dead = 0
    for e in sim_events("expiry-hazard", duration_ms=10_800_000, eos_fraction=0.0):
        if e["type"] in COMMITS and e["error_code"] == 0:
            for o in e["offsets"]:
                last_commit[(e["group_id"], o["topic"], o["partition"])] = e["ts"]
        elif e["type"] == "group_state":
            state[e["group_id"]] = (e["state"], e["protocol"])
        elif e["type"] == "offset_deleted":
            group_state, protocol = state[e["group_id"]]
            assert group_state in ("Empty", "Dead")
            assert (e["ts"] - start) % knobs.retention_check_interval_ms == 0
            if protocol == "consumer" or group_state == "Dead":
                # KIP-848 groups, and simple groups (admin commits after a deletion): from the commit.
                assert e["ts"] - last_commit[(e["group_id"], e["topic"], e["partition"])] >= retention
            deleted += 1
        if e["type"] == "group_state" and e["state"] == "Dead":
            dead += 1
    assert deleted > 0 and dead > 0


def test_scales_to_thousands_of_groups_and_hundreds_of_thousands_of_partitions():
    knobs = dataclasses.replace(profile("steady"), groups=2_000, topics=2, partitions_per_topic=50, eos_fraction=0.0)
    sim = Simulator(SimConfig(knobs=knobs, seed=5, duration_ms=20_000), DictEmitter(lambda *a: None))
    assert sum(g.topology.partition_count for g in sim.groups) == 200_000
    sim.run()
    assert all(g.coord.members for g in sim.groups if g.protocol == "consumer")
    assert sim.emit.count > 20_000


def test_iter_events_streams_the_same_events_as_simulate():
    config = SimConfig(knobs=small("steady"), seed=2, duration_ms=300_000)
    assert list(iter_events(config)) == simulate(config)


def test_knob_overrides_are_typed_and_validated():
    knobs = parse_knob(profile("steady"), "race_rate=0.5")
    assert knobs.race_rate == 0.5
    assert parse_knob(knobs, "groups=12").groups == 12
    assert parse_knob(knobs, "committed-records=true").committed_records is True
    for bad in ("race_rate=2", "nope=1", "groups=-1", "groups=x", "race_rate"):
        with pytest.raises(ValueError):
            parse_knob(knobs, bad)
