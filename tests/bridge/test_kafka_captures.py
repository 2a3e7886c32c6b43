"""Both decoders on what Apache Kafka 4.2, 4.3 and 4.4 really wrote (``tests/fixtures/kafka/``,
made by ``make_captures.py`` with real librdkafka clients and hand-built requests).

``fencewatch bridge --from-request-log`` and ``--from-file`` run on every capture as a user
would run them; then facts the scripted cases produced are looked up in their output (each
case's request is found through ``expectations.jsonl``, written by the run that made the
capture): the zombie's commit and its answer, a static member's leave, the KIP-1251 case
answered differently by 4.2 and 4.3, Kafka 4.4's TxnOffsetCommit names, heartbeats that
do not restate ownership, coordinator-routing answers (contract §10.1 a), the zombie's heartbeat
answered UNKNOWN_MEMBER_ID (§10.1 g) and the commits' API versions (§10.1 h).
"""

from __future__ import annotations

import argparse
import ast
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from fencewatch.sim.live.expect import Expectation, check, load_expectations, read_request_log
from fencewatch.state.config import RulesConfig
from fencewatch.state.model import Policy
from fencewatch.streaming.commands.bridge import register
from fencewatch.streaming.runtime.replay import judge_events

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "kafka"
VERSIONS = ["4.2.2", "4.3.1", "4.4.0"]
ROUTING = {14, 15, 16}  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR


@dataclass
class Decoded:
    version: str
    lines: list[str]  # the request log, as captured
    objects: list[dict]  # each line's JSON, by line number
    events: list[dict]  # --from-request-log
    log_err: str
    records: list[dict]  # --from-file
    file_err: str
    expectations: list[Expectation]

    def expectation(self, scenario: str, case: str) -> Expectation:
        found = [e for e in self.expectations if e.scenario == scenario and e.case == case]
        assert found, f"{self.version}: no {scenario}/{case} in expectations.jsonl"
        return found[0]

    def line_of(self, e: Expectation) -> int:
        """The line number of a hand-built request (client id and correlation id)."""
        head = e.match["header"]
        hits = [n for n, o in enumerate(self.objects)
                if o["requestHeader"]["requestApiKey"] == e.api and o["requestHeader"]["clientId"] == head["clientId"]
                and o["requestHeader"]["correlationId"] == head["correlationId"]]
        assert len(hits) == 1, (e.case, hits)
        return hits[0]

    def events_of_line(self, n: int) -> list[dict]:
        return [ev for ev in self.events if ev["event_id"] == str(n)]


def _bridge(argv: list[str], capsys) -> tuple[list[dict], str]:
    parser = argparse.ArgumentParser(prog="fencewatch")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["bridge", *argv])
    assert args.func(args) == 0
    out, err = capsys.readouterr()
    return [json.loads(x) for x in out.splitlines()], err


@pytest.fixture(params=VERSIONS)
def cap(request, capsys) -> Decoded:
    d = CAPTURES / request.param
    ids = str(d / "topic-ids.json")
    events, log_err = _bridge(["--from-request-log", str(d / "request-log.txt"), "--topic-ids", ids], capsys)
    records, file_err = _bridge(["--from-file", str(d / "consumer-offsets.jsonl"), "--topic-ids", ids], capsys)
    lines = (d / "request-log.txt").read_text(encoding="utf-8").splitlines()
    with open(d / "expectations.jsonl", encoding="utf-8") as f:
        expectations = load_expectations(f)
    return Decoded(request.param, lines, read_request_log(lines), events, log_err, records, file_err, expectations)


def _summary(err: str) -> dict:
    """The counts of the request-log bridge's last stderr line."""
    last = err.strip().splitlines()[-1]
    assert last.startswith("bridge --from-request-log: "), last
    return ast.literal_eval(last[last.index("{"):])  # the summary prints a dict of counts


# -- every line, every record ----------------------------------------------------------------------


def test_every_request_log_line_decodes(cap):
    counts = _summary(cap.log_err)
    assert len(cap.log_err.strip().splitlines()) == 1, cap.log_err  # no line reported broken
    assert not [k for k in counts if k.startswith(("broken.", "problem.", "skipped."))], counts
    assert counts["OFFSET_COMMIT"] + counts["TXN_OFFSET_COMMIT"] + counts["CONSUMER_GROUP_HEARTBEAT"] == len(cap.lines)
    assert counts["TXN_OFFSET_COMMIT"] >= 6 and counts["OFFSET_COMMIT"] >= 50


def test_every_consumer_offsets_record_decodes(cap):
    assert cap.file_err.strip().splitlines()[-1].endswith(" 0 skipped"), cap.file_err
    assert len(cap.file_err.strip().splitlines()) == 1, cap.file_err
    kinds = {e["type"] for e in cap.records}
    assert {"member_assignment", "member_left", "offset_committed", "group_state", "classic_join",
            "classic_sync"} <= kinds


def test_the_capture_answers_as_its_run_expected(cap):
    """The scripted cases' expectations hold against the captured lines (the capture is what
    the run saw; a re-made capture that broke one would be caught here). The capture keeps
    APIs 8, 28 and 68 only: the AddOffsetsToTxn expectation of ``txn_fence`` is left out."""
    results = check([e for e in cap.expectations if e.api in (8, 28, 68)], cap.objects, cap.version)
    assert [r.detail for r in results if not r.ok] == []
    assert len(results) >= 40


# -- facts of the scripted cases -----------------------------------------------------------------


def test_heartbeats_map_one_to_one(cap):
    """Every heartbeat line not answered with a routing error is one ``heartbeat`` event with the
    epochs and answer of the line; most of them do not restate ownership (``topicPartitions``
    null, contract §10.1 b) and decode all the same."""
    null_owned = 0
    for n, o in enumerate(cap.objects):
        if o["requestHeader"]["requestApiKey"] != 68:
            continue
        req, resp = o["request"], o["response"]
        hbs = [e for e in cap.events_of_line(n) if e["type"] == "heartbeat"]
        if resp["errorCode"] in ROUTING:
            assert cap.events_of_line(n) == []
            continue
        null_owned += req["topicPartitions"] is None
        assert [(h["member_id"], h["request_epoch"], h["response_epoch"], h["error_code"]) for h in hbs] == [
            (req["memberId"], req["memberEpoch"], resp["memberEpoch"], resp["errorCode"])]
    assert null_owned > 50


def test_pending_revocation_is_the_last_reported_ownership_minus_the_new_assignment(cap):
    """Contract §10.1 b on librdkafka's heartbeats: when a heartbeat that does not restate
    ownership (``topicPartitions`` null) gets a new assignment, the member's pending partitions
    are what it last reported owning minus that assignment."""
    names = json.loads((CAPTURES / cap.version / "topic-ids.json").read_text())
    owned: dict[tuple[str, str], set] = {}
    checked = 0
    for n, o in enumerate(cap.objects):
        if o["requestHeader"]["requestApiKey"] != 68:
            continue
        req, resp = o["request"], o["response"]
        key = (req["groupId"], req["memberId"])
        if req["memberEpoch"] == 0:
            owned[key] = set()
        if req["topicPartitions"] is not None:
            owned[key] = {(names[t["topicId"]], p) for t in req["topicPartitions"] for p in t["partitions"]}
        if resp["errorCode"] or resp["assignment"] is None or req["memberEpoch"] < 0:
            continue
        new = {(names[t["topicId"]], p) for t in resp["assignment"]["topicPartitions"] for p in t["partitions"]}
        (ma,) = [e for e in cap.events_of_line(n) if e["type"] == "member_assignment"]
        assert {(t["topic"], p) for t in ma["assigned"] for p in t["partitions"]} == new
        assert {(t["topic"], p) for t in ma["pending_revocation"] for p in t["partitions"]} == owned[key] - new
        checked += req["topicPartitions"] is None
    assert checked >= 5  # librdkafka leaves ownership out of most heartbeats, also when assignments change


def test_the_zombies_commit_is_answered_unknown_member(cap):
    e = cap.expectation("zombie", "zombie_commit")
    topic, partition, offset = e.match["partition"]
    member = e.match["request"]["memberId"]
    commits = [ev for ev in cap.events if ev["type"] == "offset_commit" and ev["member_id"] == member
               and any(o["topic"] == topic and o["partition"] == partition and o["offset"] == offset
                       for o in ev["offsets"])]
    assert len(commits) == 1 and commits[0]["error_code"] == 25  # UNKNOWN_MEMBER_ID
    # the zombie's epoch is the one it had before the pause
    first = next(ev for ev in cap.events if ev["type"] == "heartbeat" and ev["member_id"] == member)
    assert commits[0]["member_epoch"] == first["response_epoch"] > 0
    # __consumer_offsets: the coordinator removed the member before its commit arrived
    left = [r for r in cap.records if r["type"] == "member_left" and r["member_id"] == member]
    assert len(left) == 1 and left[0]["ts"] <= commits[0]["ts"]


def test_a_heartbeat_answered_unknown_member_id_removes_the_zombie_once(cap):
    """Contract §10.1 g on each broker: the zombie's first heartbeat after its pause is answered
    UNKNOWN_MEMBER_ID (25) and gives, after its ``heartbeat``, one ``member_left`` ``fenced``; its
    leave, answered 25 too, gives none. The log is in completion order: on 4.2.2 and 4.4.0 that
    heartbeat comes before the zombie's commit, on 4.3.1 the commit completed 3 ms before it."""
    member = cap.expectation("zombie", "zombie_commit").match["request"]["memberId"]
    answered_25 = [n for n, o in enumerate(cap.objects) if o["requestHeader"]["requestApiKey"] == 68
                   and o["request"]["memberId"] == member and o["response"]["errorCode"] == 25]
    assert len(answered_25) == 2 and cap.objects[answered_25[1]]["request"]["memberEpoch"] == -1
    first = cap.events_of_line(answered_25[0])
    assert [(ev["type"], ev["member_id"], ev.get("reason")) for ev in first] == [
        ("heartbeat", member, None), ("member_left", member, "fenced")]
    assert [ev["type"] for ev in cap.events_of_line(answered_25[1])] == ["heartbeat"]
    assert [ev for ev in cap.events if ev["type"] == "member_left" and ev["member_id"] == member] == [first[1]]
    assert sum(ev["type"] == "member_left" and ev["reason"] == "fenced" for ev in cap.events) == 1
    (commit,) = [n for n, o in enumerate(cap.objects) if o["requestHeader"]["requestApiKey"] == 8
                 and o["request"]["memberId"] == member
                 and o["response"]["topics"][0]["partitions"][0]["errorCode"] == 25]
    assert (answered_25[0] < commit) == (cap.version != "4.3.1")


def test_the_zombies_commit_judged_from_the_request_log_alone(cap):
    """The rules on the zombie group's request-log events alone, with the policy the version
    runs: where the heartbeat answered 25 came first (4.2.2, 4.4.0), the commit is an unknown
    member's and agrees with the broker; on 4.3.1 the commit came first and is judged against the
    member the log still shows (the disagreement contract §10.1 g names; ``__consumer_offsets``,
    read too, removes the member in time)."""
    e = cap.expectation("zombie", "zombie_commit")
    policy = Policy.STRICT if cap.version.startswith("4.2") else Policy.KIP1251
    events = [ev for ev in cap.events if ev.get("group_id") == e.group_id]
    result = judge_events(events, RulesConfig(broker_policy=policy))
    assert not result.errors
    topic, partition, offset = e.match["partition"]
    (commit,) = [ev for ev in events if ev["type"] == "offset_commit" and ev["error_code"] == 25]
    (verdict,) = [v for v in result.verdicts if v["event_id"] == commit["event_id"] and v["partition"] == partition]
    if cap.version == "4.3.1":
        assert (verdict["class"], verdict["model_agrees"]) == ("accepted", False)
    else:
        assert (verdict["class"], verdict["broker_error"], verdict["model_agrees"]) == (
            "unknown_member", "UNKNOWN_MEMBER_ID", True)


def test_commit_events_carry_the_requests_api_version(cap):
    """Contract §10.1 h: every commit event's ``api_version`` is its line's ``requestApiVersion``:
    librdkafka's OffsetCommit v9 and TxnOffsetCommit v3; the hand-built TxnOffsetCommit of the
    ``kip1319`` case v6 on 4.4 (KIP-1319), v5 where v6 is not served."""
    seen = set()
    for n, o in enumerate(cap.objects):
        for ev in cap.events_of_line(n):
            if ev["type"] in ("offset_commit", "txn_offset_commit"):
                assert ev["api_version"] == o["requestHeader"]["requestApiVersion"], n
                seen.add((ev["type"], ev["api_version"]))
    kip1319 = cap.expectation("kip1319", "txn_behind_on_newer")
    (hand_built,) = cap.events_of_line(cap.line_of(kip1319))
    assert hand_built["api_version"] == (6 if cap.version.startswith("4.4") else 5)
    hand_built_lines = {str(cap.line_of(x)) for x in cap.expectations if x.api == 28 and "header" in x.match}
    librdkafka = [ev for ev in cap.events
                  if ev["type"] == "txn_offset_commit" and ev["event_id"] not in hand_built_lines]
    assert len(librdkafka) >= 4 and {ev["api_version"] for ev in librdkafka} == {3}
    assert ("offset_commit", 9) in seen


def test_a_static_members_leave_keeps_epoch_minus_two(cap):
    e = cap.expectation("static_rejoin", "static_leave")
    member = e.match["request"]["memberId"]
    leaves = [ev for ev in cap.events if ev["member_id"] == member and ev["type"] in ("heartbeat", "member_left")
              and ev.get("request_epoch", -2) == -2]
    assert [ev["type"] for ev in leaves] == ["heartbeat", "member_left"]
    assert leaves[1]["reason"] == "static_leave" and leaves[1]["instance_id"].endswith("static_rejoin-instance")
    back = cap.expectation("static_rejoin", "static_rejoin").match["request"]
    joins = [ev for ev in cap.events if ev["type"] == "member_assignment" and ev["member_id"] == back["memberId"]]
    assert joins and joins[0]["instance_id"] == back["instanceId"]
    # __consumer_offsets says the same
    assert any(r["type"] == "member_left" and r["member_id"] == member and r["reason"] == "static_leave"
               for r in cap.records)


def test_the_kip1251_commit_is_rejected_by_4_2_and_accepted_by_4_3(cap):
    """OffsetCommit v9 one epoch behind on a partition the member still owns (hand-built):
    STALE_MEMBER_EPOCH (113) on 4.2, accepted on 4.3 and 4.4; stored in __consumer_offsets only
    where it was accepted."""
    e = cap.expectation("kip1251", "behind_on_owned")
    (commit,) = cap.events_of_line(cap.line_of(e))
    topic, partition, offset = e.match["partition"]
    assert commit["offsets"] == [{"topic": topic, "partition": partition, "offset": offset, "leader_epoch": -1,
                                  "metadata": "fw:kip1251"}]
    assignments = [ev for ev in cap.events if ev["type"] == "member_assignment" and ev["member_id"] == commit["member_id"]
                   and ev["ts"] <= commit["ts"]]
    assert commit["member_epoch"] < assignments[-1]["member_epoch"]
    assert commit["error_code"] == (113 if cap.version.startswith("4.2") else 0)
    stored = [r for r in cap.records if r["type"] == "offset_committed" and r["topic"] == topic
              and r["partition"] == partition and r["offset"] == offset]
    assert len(stored) == (0 if cap.version.startswith("4.2") else 1)


def test_assignment_epochs_are_in_consumer_offsets_from_4_3(cap):
    """KIP-1251 brokers store each partition's assignment epoch: in the kip1251 case, partition 0
    keeps the epoch it was assigned at when partition 1 arrives one epoch later."""
    group = cap.expectation("kip1251", "behind_on_owned").group_id
    assignments = [r for r in cap.records if r["type"] == "member_assignment" and r["group_id"] == group
                   and any(t["partitions"] == [0, 1] for t in r["assigned"])]
    assert assignments
    assigned = assignments[0]["assigned"][0]
    if cap.version.startswith("4.2"):
        assert "assignment_epochs" not in assigned
    else:
        epochs = assigned["assignment_epochs"]
        assert epochs[0] < epochs[1] == assignments[0]["member_epoch"]


def test_txn_offset_commit_names(cap):
    """TxnOffsetCommit as each version logs it: ``generationId`` up to 4.3,
    ``generationIdOrMemberEpoch`` in 4.4 (contract §10.1 c), v6 with ``topicId`` (KIP-1319);
    the decoded epoch, topic and answer are the line's."""
    e = cap.expectation("kip1319", "txn_behind_on_newer")
    n = cap.line_of(e)
    req = cap.objects[n]["request"]
    name = "generationIdOrMemberEpoch" if cap.version.startswith("4.4") else "generationId"
    assert name in req
    (ev,) = cap.events_of_line(n)
    assert ev["type"] == "txn_offset_commit" and ev["member_epoch"] == req[name]
    assert ev["transactional_id"] == req["transactionalId"] and ev["producer_id"] == req["producerId"]
    topic_ids = json.loads((CAPTURES / cap.version / "topic-ids.json").read_text())
    if cap.version.startswith("4.4"):
        assert cap.objects[n]["requestHeader"]["requestApiVersion"] == 6
        assert ev["offsets"][0]["topic"] == topic_ids[req["topics"][0]["topicId"]]
        assert ev["error_code"] == 113  # STALE_MEMBER_EPOCH (KIP-1319)
    else:
        assert ev["offsets"][0]["topic"] == req["topics"][0]["name"]
        assert ev["error_code"] == 22  # ILLEGAL_GENERATION
    # librdkafka's TxnOffsetCommit v3 is named the same way by the same broker
    v3 = [o for o in cap.objects if o["requestHeader"]["requestApiKey"] == 28
          and o["requestHeader"]["requestApiVersion"] == 3]
    assert v3 and all(name in o["request"] for o in v3)


def test_coordinator_routing_answers_give_no_event(cap):
    """Contract §10.1 a, on all three APIs: the hand-built requests a fresh broker answered
    NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE, and any other routing answer in the log."""
    for case in ("routing_commit", "routing_heartbeat", "routing_txn_commit"):
        n = cap.line_of(cap.expectation("coordinator_routing", case))
        assert cap.events_of_line(n) == [], case
    routed = 0
    for n, o in enumerate(cap.objects):
        resp = o["response"]
        codes = {resp["errorCode"]} if "errorCode" in resp else {
            p["errorCode"] for t in resp["topics"] for p in t["partitions"]}
        if codes <= ROUTING:
            routed += 1
            assert cap.events_of_line(n) == []
    counts = _summary(cap.log_err)
    assert sum(v for k, v in counts.items() if k.startswith("dropped.")) == routed >= 3
