"""The streams groups' records (KIP-1071) and heartbeat lines as Apache Kafka 4.2, 4.3 and 4.4 really wrote them
(``tests/fixtures/kafka-streams/``, made by ``make_streams_captures.py`` with fencewatch's Kafka
Streams application under exactly_once_v2: instances joining, SIGKILLed, stalled, stopped).

Every record decodes, reads as Kafka's own ``kafka-dump-log --offsets-decoder`` printed it and,
written back with the test encoder of the same tables, gives the captured bytes; then what the
decoded records say is checked against a second source Kafka wrote independently, the request log (Kafka's own JSON of each StreamsGroupHeartbeat and
TxnOffsetCommit), and against the coordinator's own invariants: the topology the heartbeat
declared, member metadata as the heartbeats sent it, each assignment a heartbeat answered,
the active tasks' assignment epochs (kept while a task stays, the member epoch when it is
new), the member states, the target assignment covering every task once.
"""

from __future__ import annotations

import argparse
import ast
import base64
import json
import re
import struct
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

from bridge_encoder import encode_record
from fencewatch.sim.live.expect import read_request_log
from fencewatch.streaming.ingest.consumer_offsets.record_types import STREAMS_RECORD_TYPES
from fencewatch.streaming.commands.bridge import register
from fencewatch.streaming.ingest.consumer_offsets.records import CoordinatorRecord, RecordDecodeError, decode, kafka_json
from fencewatch.state.events import StreamsTask
from fencewatch.state.streams import Topology, task_partitions
from fencewatch.streaming.ingest.consumer_offsets.mapping import Bridge
from fencewatch.streaming.ingest.consumer_offsets.streams import (StreamsCurrentAssignment, StreamsTopology, TaskIds,
                                                                  streams_record)
from fencewatch.streaming.ingest.events import event_from_dict
from fencewatch.streaming.ingest.request_log.problems import Broken
from fencewatch.streaming.ingest.request_log.streams_heartbeat import StreamsHeartbeat, parse_streams_heartbeat

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "kafka-streams"
VERSIONS = ["4.2.2", "4.3.1", "4.4.0"]
HEARTBEAT, TXN_OFFSET_COMMIT, END_TXN = 88, 28, 26
UNKNOWN_MEMBER_ID = 25
INPUT_PARTITIONS = 4
SESSION_TIMEOUT_MS = 6000


@dataclass
class Capture:
    version: str
    raw: list[tuple[bytes, bytes | None, int]]
    records: list[tuple[CoordinatorRecord, int]]  # decoded, with the record's timestamp
    lines: list[dict]  # the request log's objects
    topic_names: dict[str, str]  # topic id -> name
    moves: list[dict]

    @property
    def topics(self) -> set[str]:
        return set(self.topic_names.values())

    def of_type(self, record_type: int, *, tombstones: bool = False) -> list[tuple[CoordinatorRecord, int]]:
        return [(r, ts) for r, ts in self.records
                if r.record_type == record_type and (tombstones or r.value is not None)]

    def api(self, key: int) -> list[dict]:
        return [o for o in self.lines if o["requestHeader"]["requestApiKey"] == key]

    @property
    def topology(self) -> StreamsTopology:
        found = [streams_record(r) for r, _ in self.of_type(23)]
        assert len(found) == 1, found
        return found[0]

    def heartbeats(self) -> list[StreamsHeartbeat]:
        lines = (CAPTURES / self.version / "request-log.txt").read_text(encoding="utf-8").splitlines()
        return [h for h in map(parse_streams_heartbeat, lines) if isinstance(h, StreamsHeartbeat)]

    def assignments(self) -> dict[str, list[StreamsCurrentAssignment]]:
        out: dict[str, list[StreamsCurrentAssignment]] = defaultdict(list)
        for r, _ in self.of_type(22):
            out[r.key["memberId"]].append(streams_record(r))
        return out


def _load(version: str) -> Capture:
    d = CAPTURES / version
    raw = []
    for line in (d / "consumer-offsets.jsonl").read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        raw.append((base64.b64decode(r["key"]), None if r["value"] is None else base64.b64decode(r["value"]),
                    r["timestamp"]))
    with open(d / "request-log.txt", encoding="utf-8") as f:
        lines = read_request_log(f)
    moves = [json.loads(x) for x in (d / "moves.jsonl").read_text(encoding="utf-8").splitlines()]
    names = json.loads((d / "topic-ids.json").read_text(encoding="utf-8"))
    return Capture(version, raw, [(decode(k, v), ts) for k, v, ts in raw], lines, names, moves)


_CACHE: dict[str, Capture] = {}


@pytest.fixture(params=VERSIONS)
def cap(request) -> Capture:
    if request.param not in _CACHE:
        _CACHE[request.param] = _load(request.param)
    return _CACHE[request.param]


def tasks(ts: tuple[TaskIds, ...] | list[dict]) -> set[tuple[str, int]]:
    """``{(subtopology, partition)}`` of decoded tasks or of a request log's task list."""
    if ts and isinstance(ts[0], dict):
        return {(t["subtopologyId"], p) for t in ts for p in t["partitions"]}
    return {(t.subtopology_id, p) for t in ts for p in t.partitions}


def pairs(ts: tuple[tuple[str, tuple[int, ...]], ...]) -> set[tuple[str, int]]:
    """``{(subtopology, partition)}`` of a parsed heartbeat's tasks."""
    return {(s, p) for s, parts in ts for p in parts}


def instance_of(client_id: str) -> str:
    """``i1`` of ``<application.id>-i1-StreamThread-2-consumer``."""
    return re.search(r"-(i\d+)-StreamThread-\d+-consumer$", client_id).group(1)


ALL_TASKS = {(s, p) for s in ("0", "1") for p in range(INPUT_PARTITIONS)}


# -- every record ---------------------------------------------------------------------------------


def test_every_record_decodes_and_writes_back_byte_for_byte(cap):
    """The tables read every byte Kafka wrote: encoded again from the decoded fields (the test
    encoder follows Kafka's writer rules), each key and value is the captured one."""
    for (key, value, _), (rec, _) in zip(cap.raw, cap.records):
        k, v = encode_record(rec.record_type, rec.key, rec.version, rec.value)
        assert (k, v) == (key, value), rec
    counts = Counter((r.name, r.version) for r, _ in cap.records)
    assert {r.record_type for r, _ in cap.records} == STREAMS_RECORD_TYPES | {1}, counts
    assert all(version in (0, None) for (name, version) in counts if name.startswith("Streams")), counts


_DUMPED = re.compile(r"^\| offset: (\d+) .* key: (\{.*\}) payload: (\{.*\}|<DELETE>)$")


def _dumped(line: str) -> tuple[int, dict] | None:
    """A record line of ``kafka-dump-log --offsets-decoder`` as ``kafka_json`` writes it (the tool
    prints the type and version as strings); None for a transaction marker."""
    m = _DUMPED.match(line)
    if m is None:
        assert "endTxnMarker: " in line, line
        return None
    key, value = json.loads(m.group(2)), None if m.group(3) == "<DELETE>" else json.loads(m.group(3))
    key["type"] = int(key["type"])
    if value is not None:
        value["version"] = int(value["version"])
    return int(m.group(1)), {"key": key, "value": value}


#: Versions whose capture holds ``dump-log.txt`` (4.3 moved kafka-dump-log to kafka-tools, not fetched).
DUMPED_VERSIONS = ["4.2.2"]


@pytest.mark.parametrize("version", DUMPED_VERSIONS)
def test_every_record_reads_as_kafkas_own_dump_log_prints_it(version):
    """``kafka_json`` of each captured record is what Kafka's ``kafka-dump-log --offsets-decoder``
    printed for it: the dump's records in log order, less those of aborted transactions (the
    capture reads read_committed), are the capture's."""
    cap = _CACHE.get(version) or _CACHE.setdefault(version, _load(version))
    dumped = [d for d in map(_dumped, (CAPTURES / cap.version / "dump-log.txt").read_text(
        encoding="utf-8").splitlines()) if d is not None]
    ours = [kafka_json(rec) for rec, _ in cap.records]
    left_out = []
    i = 0
    for _, record in dumped:
        if i < len(ours) and record == ours[i]:
            i += 1
        else:
            left_out.append(record)
    assert i == len(ours), (i, ours[i] if i < len(ours) else None)
    # read_committed leaves out only offsets an aborted transaction wrote (the killed instance's
    # open one, when it was cut between TxnOffsetCommit and EndTxn); the fenced ones wrote none
    assert all(r["key"]["type"] == 1 for r in left_out), left_out
    assert len(dumped) - len(left_out) == len(ours) >= 400


def test_tombstones_follow_the_members_that_left(cap):
    """A member whose leave heartbeat (epoch -1) was answered ends with tombstones of its
    metadata, target and current assignment; the SIGKILLed instance's members (no leave) go
    when their session times out, not before. (A member still in the group when the broker
    stopped keeps its records.)"""
    last: dict[tuple[int, str], tuple[CoordinatorRecord, int]] = {}
    for rec, ts in cap.records:
        if rec.record_type in (19, 21, 22):
            last[(rec.record_type, rec.key["memberId"])] = (rec, ts)
    left = {h.member_id for h in cap.heartbeats() if h.request_epoch == -1 and h.error_code == 0}
    assert len(left) >= 2
    for member in left:
        assert all(last[(t, member)][0].is_tombstone for t in (19, 21, 22)), member
    killed = next(m for m in cap.moves if m["move"] == "sigkill")
    members = {r.key["memberId"] for r, _ in cap.of_type(19)
               if instance_of(streams_record(r).client_id) == killed["instance"]}
    assert len(members) >= 2 and not members & left  # one per stream thread; none left
    for member in members:
        rec, ts = last[(19, member)]
        assert rec.is_tombstone
        # the session runs from the member's last heartbeat (at most one 500 ms interval before)
        assert SESSION_TIMEOUT_MS - 1000 <= ts - killed["ts"] <= SESSION_TIMEOUT_MS + 5000, (member, ts - killed["ts"])


# -- topology -------------------------------------------------------------------------------------


def test_topology_has_two_subtopologies_joined_by_the_repartition_topic(cap):
    """selectKey + groupByKey + count: subtopology 0 reads the input and writes the repartition
    topic, subtopology 1 reads it and keeps the store's changelog; the broker created both."""
    topology = cap.topology
    app = topology.group_id
    [source_topic] = [t for t in cap.topics if t.endswith("-streams-in")]
    repartition, changelog = f"{app}-by-value-repartition", f"{app}-counts-changelog"
    first, second = topology.subtopologies
    assert (first.subtopology_id, first.source_topics, first.repartition_sink_topics) == ("0", (source_topic,),
                                                                                          (repartition,))
    assert first.repartition_source_topics == () and first.state_changelog_topics == ()
    assert (second.subtopology_id, second.source_topics, second.repartition_sink_topics) == ("1", (), ())
    assert [t.name for t in second.repartition_source_topics] == [repartition]
    assert [t.name for t in second.state_changelog_topics] == [changelog]
    assert ("cleanup.policy", "compact") in second.state_changelog_topics[0].topic_configs
    assert ("cleanup.policy", "delete") in second.repartition_source_topics[0].topic_configs
    assert {repartition, changelog} <= cap.topics
    assert (first.input_topics, second.input_topics) == ((source_topic,), (repartition,))


def test_topology_is_the_one_the_first_heartbeat_declared(cap):
    declared = [o["request"]["topology"] for o in cap.api(HEARTBEAT) if o["request"]["topology"] is not None]
    assert declared
    [(rec, _)] = cap.of_type(23)
    stored = kafka_json(rec)["value"]["data"]
    assert all(d == declared[0] for d in declared)
    assert stored == declared[0]


def test_tasks_map_to_the_partitions_of_their_subtopologys_input_topics(cap):
    """The topology record as the bridge maps it (``streams_topology``) and the rules keep it
    (``state.streams.Topology``): task (s, p) owns partition p of each input topic of s, at the
    task's epoch (the member epoch without one); a subtopology the topology lacks owns nothing."""
    topology = cap.topology
    [source_topic] = topology.subtopologies[0].source_topics
    repartition = topology.subtopologies[1].repartition_source_topics[0].name
    (rec, ts), = cap.of_type(23)
    [event] = Bridge(cap.topic_names).feed(*[(k, v) for k, v, _ in cap.raw if decode(k, v) == rec][0], ts, "t")
    ev = event_from_dict(event, seq=0, default_event_id="t", coords="t")
    rules = Topology(ev.topology_epoch, ev.subtopologies)
    every = tuple(StreamsTask(s, tuple(range(INPUT_PARTITIONS))) for s in ("0", "1"))
    tps, epochs = task_partitions(rules, every, 7)
    assert tps == tuple(sorted((t, p) for t in (source_topic, repartition) for p in range(INPUT_PARTITIONS)))
    assert set(epochs) == {7}
    assert task_partitions(rules, (StreamsTask("1", (2,), (3,)), StreamsTask("9", (0,))), 7) == (
        ((repartition, 2),), (3,))
    assert rules.topics() == tuple(sorted({source_topic, repartition}))


# -- members --------------------------------------------------------------------------------------


def test_member_metadata_is_what_the_members_heartbeats_sent(cap):
    """One member per stream thread (two per instance), its instance named by ``process_id``;
    each field as the member's own first heartbeat sent it."""
    sent = {}
    for o in cap.api(HEARTBEAT):
        req, resp = o["request"], o["response"]
        if req["memberEpoch"] == 0 and resp["errorCode"] == 0:
            sent.setdefault(resp["memberId"] or req["memberId"], (o["requestHeader"]["clientId"], req))
    app = cap.topology.group_id
    process_of: dict[str, set[str]] = defaultdict(set)
    for rec, _ in cap.of_type(19):
        m = streams_record(rec)
        client_id, req = sent[m.member_id]
        assert (m.client_id, m.process_id, m.instance_id, m.rack_id, m.rebalance_timeout_ms, m.user_endpoint,
                m.client_tags) == (client_id, req["processId"], req["instanceId"], req["rackId"],
                                   req["rebalanceTimeoutMs"], req["userEndpoint"], tuple(req["clientTags"]))
        assert m.topology_epoch == 0 and m.client_host == "/127.0.0.1"
        instance = re.fullmatch(rf"{re.escape(app)}-(i\d)-StreamThread-\d+-consumer", m.client_id).group(1)
        process_of[instance].add(m.process_id)
    started = {m["instance"] for m in cap.moves if m["move"] == "started"}
    assert set(process_of) == started and all(len(p) == 1 for p in process_of.values())
    assert len({p for ps in process_of.values() for p in ps}) == len(started)


# -- assignments ----------------------------------------------------------------------------------


def test_each_assignment_a_heartbeat_answered_is_a_current_assignment_record(cap):
    """A heartbeat answer that lists tasks (read by ``parse_streams_heartbeat``) gives the member
    what its current-assignment record at that member epoch holds (active, standby and warm-up
    tasks; those pending revocation not included)."""
    by_member = cap.assignments()
    answered = 0
    for h in cap.heartbeats():
        if h.error_code != 0 or h.active_tasks is None:
            continue
        held = [(tasks(a.active_tasks), tasks(a.standby_tasks), tasks(a.warmup_tasks))
                for a in by_member[h.member_id] if a.member_epoch == h.response_epoch]
        assert (pairs(h.active_tasks), pairs(h.standby_tasks), pairs(h.warmup_tasks)) in held, (
            h.member_id, h.response_epoch)
        answered += 1
    assert answered >= 20


def test_every_streams_heartbeat_line_decodes_as_kafka_wrote_it(cap):
    """``parse_streams_heartbeat`` reads each API 88 line as the json module reads Kafka's JSON;
    4.4 sends v1, 4.2 and 4.3 v0; every other line is another API."""
    lines = (CAPTURES / cap.version / "request-log.txt").read_text(encoding="utf-8").splitlines()
    parsed = [parse_streams_heartbeat(line) for line in lines]
    beats = [(h, o) for h, o in zip(parsed, cap.lines) if isinstance(h, StreamsHeartbeat)]
    assert len(beats) == len(cap.api(HEARTBEAT)) >= 300
    assert all(isinstance(h, Broken) and h.code == "OTHER_API" for h in parsed if not isinstance(h, StreamsHeartbeat))
    for h, o in beats:
        req, resp = o["request"], o["response"]
        assert (h.group_id, h.member_id, h.request_epoch, h.response_epoch, h.error_code, h.process_id,
                h.topology_epoch) == (req["groupId"], req["memberId"] or resp["memberId"], req["memberEpoch"],
                                      resp["memberEpoch"], resp["errorCode"], req["processId"],
                                      (req["topology"] or {}).get("epoch"))
        for mine, theirs in ((h.owned_active_tasks, req["activeTasks"]), (h.active_tasks, resp["activeTasks"]),
                             (h.standby_tasks, resp["standbyTasks"]), (h.warmup_tasks, resp["warmupTasks"])):
            assert mine == (None if theirs is None else tuple((t["subtopologyId"], tuple(t["partitions"]))
                                                              for t in theirs))
    assert {h.api_version for h, _ in beats} == {1 if cap.version >= "4.4" else 0}


def test_heartbeats_join_leave_and_the_zombies_answer(cap):
    """Each member joins at epoch 0 and is given an epoch; the stopped instances' members leave
    at -1; the stalled instance's members, resumed after their session expired, are answered
    UNKNOWN_MEMBER_ID at their old epoch (contract §10.1 g)."""
    beats = cap.heartbeats()
    members = {r.key["memberId"] for r, _ in cap.of_type(19)}
    joined = {h.member_id for h in beats if h.request_epoch == 0 and h.error_code == 0 and h.response_epoch > 0}
    assert joined == members
    stopped = {m["instance"] for m in cap.moves if m["move"] == "stopped"}
    left = [h for h in beats if h.request_epoch == -1]
    assert left and all((h.error_code, h.response_epoch) == (0, -1) for h in left)
    assert {instance_of(h.client_id) for h in left} == stopped
    stalled = next(m["instance"] for m in cap.moves if m["move"] == "sigstop")
    zombies = [h for h in beats if h.error_code == UNKNOWN_MEMBER_ID]
    assert len(zombies) == 2 and {instance_of(h.client_id) for h in zombies} == {stalled}
    assert all(h.request_epoch > 0 for h in zombies)


def test_member_states_follow_the_tasks_pending_revocation(cap):
    """UNREVOKED_TASKS exactly while the member has tasks to give up (Kafka's
    ``CurrentAssignmentBuilder``); all three states occur, UNKNOWN never."""
    seen = Counter()
    for history in cap.assignments().values():
        for a in history:
            pending = (a.active_tasks_pending_revocation + a.standby_tasks_pending_revocation
                       + a.warmup_tasks_pending_revocation)
            assert (a.state == "UNREVOKED_TASKS") == bool(tasks(pending)), a
            seen[a.state] += 1
    assert set(seen) == {"STABLE", "UNREVOKED_TASKS", "UNRELEASED_TASKS"}, seen


def test_active_tasks_carry_the_epoch_they_were_assigned_at(cap):
    """Kafka 4.2+ writes an assignment epoch beside each active task (none beside standby and
    warm-up tasks): the member epoch of the record that gave the task, kept while the member
    keeps the task; so a member holds tasks of different epochs after a rebalance."""
    mixed = kept = new = 0
    for history in cap.assignments().values():
        before: dict[tuple[str, int], int] = {}
        for a in history:
            assert all(t.assignment_epochs is not None for t in a.active_tasks + a.active_tasks_pending_revocation)
            assert all(t.assignment_epochs is None for t in a.standby_tasks + a.warmup_tasks
                       + a.standby_tasks_pending_revocation + a.warmup_tasks_pending_revocation)
            epochs = a.active_task_epochs()
            for task, epoch in epochs.items():
                if task in before:
                    assert epoch == before[task], (a.member_id, task)
                    kept += 1
                else:
                    assert epoch == a.member_epoch, (a.member_id, task)
                    new += 1
            mixed += len(set(epochs.values())) > 1
            pending = {(t.subtopology_id, p): e for t in a.active_tasks_pending_revocation
                       for p, e in zip(t.partitions, t.assignment_epochs)}
            assert all(before.get(task, e) == e for task, e in pending.items())
            before = {**epochs, **pending}
    assert mixed >= 1 and kept >= 10 and new >= 8, (mixed, kept, new)


def test_standby_tasks_are_of_the_stateful_subtopology_and_warmups_never_assigned(cap):
    standby = warmup = 0
    for rec, _ in cap.of_type(21):
        target = streams_record(rec)
        assert not tasks(target.active_tasks) & tasks(target.standby_tasks)
        assert {s for s, _ in tasks(target.standby_tasks)} <= {"1"}  # subtopology 0 has no store
        standby += len(tasks(target.standby_tasks))
        warmup += len(tasks(target.warmup_tasks))
    assert standby >= 1 and warmup == 0  # Kafka's StickyTaskAssignor (4.2-4.4) assigns no warm-ups


def test_target_assignment_gives_every_task_to_one_member(cap):
    """At each target assignment epoch the members' targets split the eight tasks: each active
    once, or none (while the broker is still creating the internal topics, and once the last
    member left). From 4.3 (KIP-1263) a computed assignment carries the time it was computed,
    before the record was written."""
    target: dict[str, set[tuple[str, int]]] = {}
    epochs = []
    for rec, ts in cap.records:
        if rec.record_type == 21:
            if rec.value is None:
                target.pop(rec.key["memberId"], None)
            else:
                target[rec.key["memberId"]] = tasks(streams_record(rec).active_tasks)
        elif rec.record_type == 20 and rec.value is not None:
            given = [t for ts_ in target.values() for t in ts_]
            assert given == [] or sorted(given) == sorted(ALL_TASKS), (rec.value, sorted(given))
            epochs.append(rec.value["assignmentEpoch"])
            computed_at = streams_record(rec).assignment_timestamp
            if cap.version < "4.3":
                assert "assignmentTimestamp" not in rec.value
            elif given:
                assert 0 < computed_at <= ts, (rec.value, ts)
    assert epochs == sorted(epochs) and len(epochs) >= 5, epochs


# -- the EOS producers' commits -------------------------------------------------------------------


def test_txn_offset_commits_come_from_the_members_producers(cap):
    """Exactly-once v2: each stream thread's producer (``<application.id>-<process id>-<thread>``)
    commits the offsets of its active tasks' input partitions with its member's id and epoch;
    the stalled instance's commits after its session expired are answered UNKNOWN_MEMBER_ID.
    Kafka 4.4 sends v6, the others v5."""
    topology = cap.topology
    process_of = {streams_record(r).member_id: streams_record(r).process_id for r, _ in cap.of_type(19)}
    inputs = {t for s in topology.subtopologies for t in s.input_topics}
    codes = Counter()
    for o in cap.api(TXN_OFFSET_COMMIT):
        req = o["request"]
        assert req["groupId"] == topology.group_id and req["memberId"] in process_of
        assert re.fullmatch(rf"{re.escape(topology.group_id)}-{process_of[req['memberId']]}-\d+",
                            req["transactionalId"])
        # v6 (Kafka 4.4, KIP-1319) names topics by id
        assert {t["name"] if "name" in t else cap.topic_names[t["topicId"]] for t in req["topics"]} <= inputs
        codes.update(p["errorCode"] for t in o["response"]["topics"] for p in t["partitions"])
    assert codes[0] >= 50 and codes[UNKNOWN_MEMBER_ID] >= 1, codes
    assert {o["requestHeader"]["requestApiVersion"] for o in cap.api(TXN_OFFSET_COMMIT)} == {
        6 if cap.version >= "4.4" else 5}


def test_each_aborted_transaction_follows_a_fence_of_its_thread(cap):
    """The stalled instance's threads abort their transactions (EndTxn committed=false) once
    their member was fenced (a heartbeat or a TxnOffsetCommit answered UNKNOWN_MEMBER_ID; a
    thread's producer ``...-StreamThread-N-producer`` and consumer ``...-consumer`` share the
    prefix), and no other transaction is aborted: the aborts a fence caused, as the
    application's log says ("being fenced")."""
    fenced: set[str] = set()  # "<application.id>-iK-StreamThread-N" of fenced members
    aborted = []
    for o in cap.lines:
        req, resp, key = o["request"], o["response"], o["requestHeader"]["requestApiKey"]
        thread = o["requestHeader"]["clientId"].rsplit("-", 1)[0]
        if key == HEARTBEAT and resp["errorCode"] == UNKNOWN_MEMBER_ID:
            fenced.add(thread)
        elif key == TXN_OFFSET_COMMIT and any(p["errorCode"] == UNKNOWN_MEMBER_ID
                                              for t in resp["topics"] for p in t["partitions"]):
            fenced.add(thread)
        elif key == END_TXN and not req["committed"]:
            aborted.append(thread)
            assert thread in fenced, (thread, fenced)
    stalled = next(m["instance"] for m in cap.moves if m["move"] == "sigstop")
    log = (CAPTURES / cap.version / "app-log.txt").read_text(encoding="utf-8").splitlines()
    said = [line for line in log if line.startswith(stalled + " ") and "Detected that the thread is being fenced" in line]
    assert aborted and len(aborted) == len(set(aborted)) and said
    assert {t.split("-StreamThread-")[0].rsplit("-", 1)[1] for t in aborted} == {stalled}


def _bridge(argv: list[str], capsys) -> tuple[list[dict], str]:
    parser = argparse.ArgumentParser(prog="fencewatch")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["bridge", *argv])
    assert args.func(args) == 0
    out, err = capsys.readouterr()
    return [json.loads(x) for x in out.splitlines()], err


def test_the_bridge_maps_the_streams_records_and_heartbeats(cap, capsys):
    """``fencewatch bridge`` on a streams capture, as a user runs it: every record is mapped
    (none skipped): each current assignment a ``member_assignment`` of protocol ``streams`` (the
    topology comes first in every capture, so none is held), each of its tombstones a
    ``member_left``, and the derived group states; every StreamsGroupHeartbeat line a
    ``heartbeat`` (those answered a coordinator-routing error none), the EOS producers'
    TxnOffsetCommits one event per answer code of a line, and only EndTxn (API 26) skipped."""
    d = CAPTURES / cap.version
    ids = str(d / "topic-ids.json")
    events, err = _bridge(["--from-file", str(d / "consumer-offsets.jsonl"), "--topic-ids", ids], capsys)
    current = cap.of_type(22, tombstones=True)
    kinds = Counter(e["type"] for e in events)
    assert kinds["offset_committed"] == len(cap.of_type(1))
    assert kinds["member_assignment"] == sum(r.value is not None for r, _ in current)
    assert kinds["member_left"] == sum(r.value is None for r, _ in current)
    states = {(e["state"], e["protocol"]) for e in events if e["type"] == "group_state"}
    assert {("Stable", "streams"), ("Reconciling", "streams")} <= states <= {
        (s, "streams") for s in ("Empty", "Assigning", "Reconciling", "Stable")}, states
    assert {e["protocol"] for e in events if e["type"] == "member_assignment"} == {"streams"}
    assert err.strip().splitlines()[-1].endswith(" 0 skipped"), err
    events, err = _bridge(["--from-request-log", str(d / "request-log.txt"), "--topic-ids", ids], capsys)
    answers = sum(len({p["errorCode"] for t in o["response"]["topics"] for p in t["partitions"]})
                  for o in cap.api(TXN_OFFSET_COMMIT))
    routed = [o for o in cap.api(HEARTBEAT) if o["response"]["errorCode"] in (14, 15, 16)]
    kinds = Counter(e["type"] for e in events)
    assert kinds["txn_offset_commit"] == answers
    assert kinds["heartbeat"] == len(cap.api(HEARTBEAT)) - len(routed)
    committed = {o["topic"] for e in events if e["type"] == "txn_offset_commit" for o in e["offsets"]}
    assert committed == {t for s in cap.topology.subtopologies for t in s.input_topics}  # 4.4's ids resolved
    summary = ast.literal_eval(err.strip().splitlines()[-1].split(" events, ", 1)[1])
    assert summary["STREAMS_GROUP_HEARTBEAT"] == len(cap.api(HEARTBEAT))  # lines, as for the other APIs
    assert sum(v for k, v in summary.items() if k.startswith("dropped.")) == len(routed)
    assert summary["skipped.OTHER_API"] == len(cap.api(END_TXN))
    assert not [k for k in summary if k.startswith(("broken.", "problem."))], summary


# -- bad input ------------------------------------------------------------------------------------


def test_assignment_epochs_not_matching_their_partitions_are_malformed():
    key = {"groupId": "g", "memberId": "m"}
    value = {"memberEpoch": 5, "previousMemberEpoch": 4, "state": 1,
             "activeTasks": [{"subtopologyId": "0", "partitions": [0, 1], "assignmentEpochs": [3]}]}
    rec = decode(*encode_record(22, key, 0, value))
    with pytest.raises(RecordDecodeError, match="1 assignment epochs for 2 partitions") as exc:
        streams_record(rec)
    assert exc.value.code == "MALFORMED_VALUE"


@pytest.mark.parametrize("line, code", [
    ("not json", "BAD_JSON"),
    ('{"requestHeader":{"requestApiKey":88},"request":{"groupId":"g","memberEpoch":"x"},"response":{"errorCode":0}}',
     "BAD_FIELD"),
    ('{"requestHeader":{"requestApiKey":68},"request":{},"response":{}}', "OTHER_API"),
    ('[2026-12-03 13:00:00,000] DEBUG Completed request:{"requestHeader":{"requestApiKey":88},'
     '"request":{"groupId":"g","memberEpoch":1,"activeTasks":[{"subtopologyId":"0","partitions":[1099511627776]}]},'
     '"response":{"errorCode":0}} (kafka.request.logger)', "BAD_FIELD"),
])
def test_bad_heartbeat_lines_are_broken_with_a_reason(line, code):
    h = parse_streams_heartbeat(line)
    assert isinstance(h, Broken) and h.code == code, h


def test_a_record_without_epochs_reads_the_member_epoch_and_warmups_decode():
    """Kafka's ``TasksTupleWithEpochs.fromCurrentAssignmentRecord``: no epochs -> the member
    epoch for every active task. Warm-up tasks, which no capture has, decode like the others."""
    key = {"groupId": "g", "memberId": "m"}
    value = {"memberEpoch": 9, "previousMemberEpoch": 8, "state": 3,
             "activeTasks": [{"subtopologyId": "1", "partitions": [2, 0]}],
             "warmupTasks": [{"subtopologyId": "1", "partitions": [3]}],
             "warmupTasksPendingRevocation": [{"subtopologyId": "0", "partitions": [1]}]}
    a = streams_record(decode(*encode_record(22, key, 0, value)))
    assert a.active_task_epochs() == {("1", 2): 9, ("1", 0): 9}
    assert (a.state, tasks(a.warmup_tasks), tasks(a.warmup_tasks_pending_revocation)) == (
        "UNRELEASED_TASKS", {("1", 3)}, {("0", 1)})
    odd = streams_record(decode(*encode_record(22, key, 0, {**value, "state": 9})))
    assert odd.state == "UNKNOWN"
    assert streams_record(decode(encode_record(22, key)[0], None)) is None
    with pytest.raises(ValueError, match="not a streams group record"):
        streams_record(decode(struct.pack(">h", 3) + b"\x00\x01g", None))
