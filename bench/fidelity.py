"""The model against a real broker's own answers (issue 33, contract §3.4).

One run: Apache Kafka's broker (``streaming/brokers/kafka.py``) with its request logger at DEBUG
-> its ``kafka-request.log`` -> the shipped rsyslog (``deploy/request-log/rsyslog-fencewatch.conf``,
``imfile`` -> ``omkafka``) -> the lines topic -> ``fencewatch run --source
request-log,consumer-offsets`` -> the verdicts topic. The traffic is real clients
(``fencewatch.sim.live``: KIP-848 and classic consumers, transactional producers, the
hand-built KIP-1251 and KIP-1319 requests). For every judged commit partition, the answer of
the policy that version runs (``strict`` on 4.2, ``kip1251`` on 4.3 and 4.4) is compared with
what the broker answered (``model_agrees``); every disagreement is explained by a rule below or
listed as unexplained. The headline is the confusion matrix on the broker's rejections, with
every commit partition of the request log judged or excluded for a counted reason
(``bench/fidelity_matrix.py``); the scripted cases are checked against a fixed list
(:data:`SCRIPTED_CASES`).

``bench/bench_fidelity.py`` runs it per version, writes docs/fidelity.md and exits non-zero on
any of :meth:`FidelityRun.failures`; the test suite runs a short one (``tests/fidelity``) that
also fails below a bar on recall, precision and the commit partitions accounted for.
"""
from __future__ import annotations

import collections
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from bench.fidelity_matrix import (Accounting, account, accounting_notes, accounting_table, codes_table,
                                   logged_partitions, matrix_table)

log = logging.getLogger("fidelity")

#: The offset-commit check each broker version runs (contract §3; docs/fidelity.md).
POLICY_OF = {"4.2": "strict", "4.3": "kip1251", "4.4": "kip1251"}
LINES_TOPIC = "fencewatch.request-log"
VERDICTS_TOPIC = "fencewatch.verdicts"
ALERTS_TOPIC = "fencewatch.alerts"
DLQ_TOPIC = "fencewatch.dlq"
#: The share of the request log's commit partitions a run must account for (issue 44's bar).
ACCOUNTED_BAR = 99.0
#: The verdicts topic stops growing for this long once the job has read every shipped line.
SETTLE_S = 12.0


def policy_of(version: str) -> str:
    return POLICY_OF[".".join(version.split(".")[:2])]


# --------------------------------------------------------------------------- explanations

@dataclass(frozen=True)
class Timing:
    """A request-log line's time and its own timings (Kafka's ``RequestChannel`` metrics, ms):
    the line is written at ``line_ts``, once the response has been sent, ``total`` after the
    request arrived. The request waited ``queue`` for a handler thread, which spent ``local`` and
    handed it to the group coordinator's queue (one FIFO per ``__consumer_offsets`` partition,
    which stamps its records when it processes them): the coordinator took it up no earlier than
    :meth:`enqueued`, and what it did (a new epoch or generation, a commit's check) was done no
    later than :meth:`done`, before its response was queued."""

    line_ts: int
    total: float
    queue: float
    local: float
    throttle: float
    response_queue: float
    send: float

    @classmethod
    def of(cls, line_ts: int, body: dict) -> Timing | None:
        try:
            return cls(line_ts, float(body["totalTimeMs"]), float(body["requestQueueTimeMs"]),
                       float(body.get("localTimeMs", 0)), float(body.get("throttleTimeMs", 0)),
                       float(body["responseQueueTimeMs"]), float(body["sendTimeMs"]))
        except (KeyError, TypeError, ValueError):
            return None

    def enqueued(self) -> float:
        return self.line_ts - self.total + self.queue + self.local

    def done(self) -> float:
        return self.line_ts - (self.throttle + self.response_queue + self.send)


#: The resolution of every stamp compared (a line's ``[%d]``, a record's timestamp): whole
#: milliseconds, each the floor of its moment, so two moments a stamp apart may be in either order.
STAMP_MS = 1.0
_LINE_TS = re.compile(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d{3})\]")


def _line_ts(line: str) -> int | None:
    """A request-log line's own time (Kafka's layout ``[%d]``, UTC as the test brokers write it)."""
    import datetime as dt

    m = _LINE_TS.match(line)
    if m is None:
        return None
    t = dt.datetime.strptime(m[1], "%Y-%m-%d %H:%M:%S").replace(tzinfo=dt.timezone.utc)
    return int(t.timestamp()) * 1000 + int(m[2])


@dataclass(frozen=True)
class Change:
    """One event that moved a member (or a classic group) on: when its source says it happened,
    the new epoch or generation (None: the member left, the group emptied), and where it is."""

    ts: int
    epoch: int | None
    source: str  # "record": __consumer_offsets, its ts the write's; "line": a request-log line
    event_id: str
    timing: Timing | None = None
    what: str | None = None  # what the event says when it is no epoch (a coordinator's answer)

    def earliest(self) -> float:
        return self.timing.enqueued() if self.source == "line" and self.timing else self.ts

    def latest(self) -> float:
        return self.timing.done() if self.source == "line" and self.timing else self.ts

    def cite(self) -> str:
        where = (f"request-log line {self.event_id}" if self.source == "line"
                 else f"__consumer_offsets record {self.event_id}")
        what = self.what or ("left" if self.epoch is None else f"epoch {self.epoch}")
        return f"{where} ({what}, ts {self.ts})"


@dataclass
class Membership:
    """When each group's coordinator moved a member to a new member epoch (KIP-848) or a classic
    group to a new generation, from the run's own logs decoded offline (both sources), with each
    request-log line's timings, so that an explanation can name the one event that caused a
    disagreement and show, from measured times alone, that the broker and the model could have
    seen it in different orders."""

    generations: dict[str, list[Change]] = field(default_factory=lambda: collections.defaultdict(list))
    epochs: dict[tuple[str, str], list[Change]] = field(default_factory=lambda: collections.defaultdict(list))
    classic: set[str] = field(default_factory=set)
    emptied: dict[str, list[Change]] = field(default_factory=lambda: collections.defaultdict(list))
    left: dict[tuple[str, str], list[Change]] = field(default_factory=lambda: collections.defaultdict(list))
    timings: dict[int, Timing] = field(default_factory=dict)  # request-log line number -> its timings
    # a group's coordinator loading or moved: its lines answered COORDINATOR_LOAD_IN_PROGRESS or
    # NOT_COORDINATOR (the bridge maps them to no event, contract §10.1 a)
    loads: dict[str, list[Change]] = field(default_factory=lambda: collections.defaultdict(list))

    def add_lines(self, lines: Iterable[str]) -> None:
        """The request log's timings, by line number (as its events' and the verdicts' ids name
        them), and the lines that show a group's coordinator loading or moved."""
        from fencewatch.sim.live.expect import read_request_log

        for i, line in enumerate(lines):
            objects = read_request_log([line])
            if not objects or (ts := _line_ts(line)) is None:
                continue
            t = Timing.of(ts, objects[0])
            if t is not None:
                self.timings[i] = t
            group = (objects[0].get("request") or {}).get("groupId")
            if group and _coordinator_answer(objects[0].get("response") or {}):
                self.loads[group].append(Change(ts, None, "line", str(i), t, "coordinator moving"))

    def add(self, e: dict, source: str = "record") -> None:
        """An event of the run decoded offline; ``source``: "record" (``bridge --from-file``) or
        "line" (``bridge --from-request-log``, its event id the line number)."""
        t = e.get("type")
        timing = self.timings.get(_line_number(e.get("event_id"))) if source == "line" else None

        def change(epoch: int | None) -> Change:
            return Change(e["ts"], epoch, source, str(e.get("event_id")), timing)

        if t == "member_left":
            self.left[(e["group_id"], e["member_id"])].append(change(None))
        if t == "group_state" and e.get("state") == "Empty":
            self.emptied[e["group_id"]].append(change(None))
        if t in ("classic_sync", "classic_generation"):
            self.generations[e["group_id"]].append(change(e["generation"]))
            self.classic.add(e["group_id"])
        elif t == "classic_join" or (t == "group_state" and e.get("protocol") == "classic"):
            self.classic.add(e["group_id"])
        elif t == "member_assignment":
            self.epochs[(e["group_id"], e["member_id"])].append(change(e["member_epoch"]))

    def commit_timing(self, v: dict) -> Timing | None:
        return self.timings.get(_line_number(v.get("event_id")))


_COORDINATOR_MOVES = (14, 16)  # COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR


def _coordinator_answer(resp: dict) -> bool:
    """A response that says the group's coordinator is loading it or is elsewhere: its top-level
    code, or an OffsetCommit's first partition's."""
    if resp.get("errorCode") in _COORDINATOR_MOVES:
        return True
    topics = resp.get("topics") or ()
    parts = (topics[0].get("partitions") or ()) if topics else ()
    return bool(parts) and parts[0].get("errorCode") in _COORDINATOR_MOVES


def _line_number(event_id) -> int | None:
    """A request-log line's number from its event id: ``"<lines topic>/0/<n>"`` (the job's: the
    lines topic has one partition) or ``"<n>"`` (``bridge --from-request-log``)."""
    tail = str(event_id).rsplit("/", 1)[-1]
    return int(tail) if tail.isdigit() else None


def _first(changes: Iterable[Change], moved: Callable[[int | None], bool]) -> Change | None:
    """The first change (by its source's time) that moved past the commit's epoch: the one the
    model had to see; any later one only repeats it."""
    hits = [c for c in changes if moved(c.epoch)]
    return min(hits, key=lambda c: (c.ts, c.earliest())) if hits else None


def _model_read_first(c: Change, v: dict) -> bool:
    """Whether the job applied change ``c`` before the commit ``v``: by ts, and at an equal ts a
    request-log line before a ``__consumer_offsets`` record (contract §1), lines in their order."""
    if c.ts != v["ts"]:
        return c.ts < v["ts"]
    if c.source == "record":
        return False
    mine, theirs = _line_number(c.event_id), _line_number(v.get("event_id"))
    return mine is not None and theirs is not None and mine < theirs


def _broker_first(c: Change | None, v: dict, m: Membership) -> Change | None:
    """The broker had made change ``c`` when it handled the commit, and the model had not seen
    it (:func:`_model_read_first`), yet could be done before the coordinator's check of the
    commit, done by the commit's line (``c.earliest() <= the commit's done()``; with no timings,
    its ts). For a ``__consumer_offsets`` record that is the commit's own time in the broker; for
    a request-log line (a JoinGroup or heartbeat answered late) its own timings bound it too."""
    if c is None or _model_read_first(c, v):
        return None
    t = m.commit_timing(v)
    return c if c.earliest() < (t.done() if t is not None else v["ts"]) + STAMP_MS else None


def _commit_first(c: Change | None, v: dict, m: Membership) -> Change | None:
    """The broker handled the commit before change ``c``, and the model saw ``c`` first
    (:func:`_model_read_first`), and ``c`` was done no earlier than the coordinator could take the commit up
    (``c.latest() >= the commit's enqueued()``: its line's ts - totalTimeMs + requestQueueTimeMs
    + localTimeMs; with no timings, the commit's millisecond)."""
    if c is None or not _model_read_first(c, v):
        return None
    t = m.commit_timing(v)
    earliest = t.enqueued() if t is not None else v["ts"]
    return c if c.latest() + STAMP_MS > earliest else None


def _model_accepts(v: dict, policy: str) -> bool:
    return v[policy] == "NONE"


def _classic_rebalance(v: dict, m: Membership, policy: str) -> Change | None:
    """A classic group's join phase had completed (a new generation, or CompletingRebalance for
    the commit's own generation) when the broker handled the commit, and the line that shows it
    reached the model after the commit's. The broker answers ILLEGAL_GENERATION or
    REBALANCE_IN_PROGRESS; the model, a generation behind, accepts. A group its last members
    left moves to a new generation too, which its Empty record shows."""
    if not (v["group_id"] in m.classic and _model_accepts(v, policy)
            and v["broker_error"] in ("ILLEGAL_GENERATION", "REBALANCE_IN_PROGRESS")):
        return None
    epoch = v["client_epoch"]
    moved = (lambda e: e is not None and e >= epoch) if v["broker_error"] == "REBALANCE_IN_PROGRESS" else (
        lambda e: e is not None and e > epoch)
    return (_broker_first(_first(m.generations.get(v["group_id"], ()), moved), v, m)
            or _broker_first(_first([c for c in m.emptied.get(v["group_id"], ()) if c.ts >= v["ts"]],
                                    lambda e: True), v, m))


def _classic_coordinator_load(v: dict, m: Membership, policy: str) -> Change | None:
    """A classic group's coordinator moved (a line for it answered COORDINATOR_LOAD_IN_PROGRESS
    or NOT_COORDINATOR, at or before the commit) while the commit's generation was the old
    coordinator's alone: the last GroupMetadata record before the move holds an older generation
    (a classic group's record is written when its leader's SyncGroup completes, so a generation
    whose sync had not completed lives only in memory), and no record of that generation or a
    later one was written from the move to the commit. The new coordinator loaded the stored
    generation and answered the commit against it; the model, whose generation came from the
    JoinGroup lines, does not go back to it (docs/fidelity.md, "What the model does not see")."""
    if not (v["group_id"] in m.classic and _model_accepts(v, policy)
            and v["broker_error"] in ("ILLEGAL_GENERATION", "REBALANCE_IN_PROGRESS", "UNKNOWN_MEMBER_ID")):
        return None
    epoch, ts = v["client_epoch"], v["ts"]
    stored = [c for c in m.generations.get(v["group_id"], ()) if c.source == "record" and c.epoch is not None]
    load = max((c for c in m.loads.get(v["group_id"], ()) if c.ts <= ts), key=lambda c: c.ts, default=None)
    if load is None:
        return None
    before = max((c for c in stored if c.ts <= load.ts), key=lambda c: c.ts, default=None)
    if before is not None and before.epoch >= epoch:
        return None  # the commit's generation was stored before the move: the load kept it
    if any(load.ts <= c.ts < ts and c.epoch >= epoch for c in stored):
        return None  # stored again after the move, before the commit
    return load


def _epoch_race(v: dict, m: Membership, policy: str) -> Change | None:
    """A KIP-848 member had been moved to a new epoch (or removed) when the broker handled the
    commit, and the event that shows it reached the model after the commit's line."""
    if v["group_id"] in m.classic or not _model_accepts(v, policy):
        return None
    key = (v["group_id"], v["member_id"])
    if v["broker_error"] == "STALE_MEMBER_EPOCH":
        return _broker_first(_first(m.epochs.get(key, ()), lambda e: e is not None and e > v["client_epoch"]), v, m)
    if v["broker_error"] == "UNKNOWN_MEMBER_ID":
        return _broker_first(_first(_lefts_since_joined(m, key, v["ts"]), lambda e: True), v, m)
    return None


def _lefts_since_joined(m: Membership, key: tuple[str, str], ts: int) -> list[Change]:
    """The member's leavings since its last move the model saw before ``ts`` (a member that left
    and came back is judged against its last coming back)."""
    since = max((c.ts for c in m.epochs.get(key, ()) if c.ts < ts), default=None)
    return [c for c in m.left.get(key, ()) if since is None or c.ts >= since]


def _commit_handled_first(v: dict, m: Membership, policy: str) -> Change | None:
    """The broker accepted the commit, having handled it before the member's (or the classic
    group's) move, and the model saw the move first: its record or line is stamped at or before
    the commit's line but after the commit could have been handled (the commit's measured
    timings; with none, the same millisecond)."""
    if _model_accepts(v, policy) or v["broker_error"] != "NONE":
        return None
    epoch, key = v["client_epoch"], (v["group_id"], v["member_id"])
    past = (lambda e: e is not None and e > epoch)
    series = m.generations.get(v["group_id"], ()) if v["group_id"] in m.classic else m.epochs.get(key, ())
    return (_commit_first(_first([c for c in series if c.ts <= v["ts"]], past), v, m)
            or _commit_first(_first([c for c in _lefts_since_joined(m, key, v["ts"]) if c.ts <= v["ts"]],
                                    lambda e: True), v, m))


def _emptied_after_commit(v: dict, m: Membership, policy: str) -> Change | None:
    """A commit at epoch -1 (a member's last, after its leave) that the model accepted because the
    group had no members, and the broker answered UNKNOWN_MEMBER_ID: the broker handled it before
    the group's last member left (Kafka accepts epoch -1 only into an empty group), and the model
    read that leave first: the group's Empty is stamped at or before the commit's line but after the
    coordinator could have taken the commit up (the commit line's own timings, as
    ``commit-handled-first``)."""
    if not (v["client_epoch"] < 0 and _model_accepts(v, policy) and v["broker_error"] == "UNKNOWN_MEMBER_ID"):
        return None
    emptied = [c for c in m.emptied.get(v["group_id"], ()) if c.ts <= v["ts"]]
    last = max(emptied, key=lambda c: c.ts, default=None)
    return _commit_first(last, v, m)


#: (name, what it says in docs/fidelity.md, the rule). Tried in order; the first that cites an
#: event explains. Each rule names the one event that caused the disagreement and holds only when
#: the measured times allow the broker and the model to have seen it in different orders.
EXPLANATIONS: list[tuple[str, str, Callable[[dict, Membership, str], Change | None]]] = [
    ("classic-rebalance-race", "a classic group's join phase had completed (or its last members had left) when "
     "the broker handled the commit, and the line or record that shows it reached the model after the "
     "commit's line, within that line's own measured timings", _classic_rebalance),
    ("classic-coordinator-load", "a classic group's coordinator moved (a line for it answered "
     "COORDINATOR_LOAD_IN_PROGRESS or NOT_COORDINATOR) while the commit's generation had not been stored: "
     "the last GroupMetadata record before the move holds an older one and none of it was written from the "
     "move to the commit; the new coordinator judged the commit against the stored generation", _classic_coordinator_load),
    ("member-epoch-race", "the member had been moved to a new epoch (or removed) when the broker handled the "
     "commit, and the line or record that shows it reached the model after the commit's line, within that "
     "line's own measured timings (for a record: the same millisecond)", _epoch_race),
    ("emptied-after-commit", "a commit at epoch -1 the broker answered UNKNOWN_MEMBER_ID and the model accepted "
     "into a group it saw empty: the group's last member left after the broker could have handled the commit "
     "(its Empty is stamped at or before the commit's line, after the commit line's own timings let the "
     "coordinator take it up)", _emptied_after_commit),
    ("commit-handled-first", "the broker handled the commit before the member's move and accepted it; the "
     "model read the move first: it is stamped at or before the commit's line, but after the commit could "
     "have been handled (the commit line's totalTimeMs and requestQueueTimeMs; with none, the same "
     "millisecond)", _commit_handled_first),
]


def cite(v: dict, membership: Membership, policy: str) -> tuple[str, Change] | None:
    """The first explanation that holds, with the event it cites; None: unexplained."""
    for name, _, rule in EXPLANATIONS:
        c = rule(v, membership, policy)
        if c is not None:
            return name, c
    return None


def explain(v: dict, membership: Membership, policy: str) -> str | None:
    found = cite(v, membership, policy)
    return None if found is None else found[0]


# --------------------------------------------------------------------------- agreement

@dataclass
class Agreement:
    version: str
    policy: str
    requests: int = 0  # commit requests with a broker answer (by event_id)
    partitions: int = 0  # (commit, partition) verdicts with a broker answer
    agree: int = 0
    requests_agree: int = 0
    explained: collections.Counter = field(default_factory=collections.Counter)
    unexplained: list[dict] = field(default_factory=list)
    examples: dict[str, dict] = field(default_factory=dict)
    classes: collections.Counter = field(default_factory=collections.Counter)

    @property
    def percent(self) -> float:
        return 100.0 * self.agree / self.partitions if self.partitions else float("nan")

    @property
    def requests_percent(self) -> float:
        return 100.0 * self.requests_agree / self.requests if self.requests else float("nan")


def agreement(version: str, verdicts: Iterable[dict], membership: Membership) -> Agreement:
    policy = policy_of(version)
    a = Agreement(version, policy)
    by_request: dict[str, bool] = {}
    for v in verdicts:
        a.classes[v["class"]] += 1
        if v.get("model_agrees") is None:
            continue
        a.partitions += 1
        ok = bool(v["model_agrees"])
        by_request[v["event_id"]] = by_request.get(v["event_id"], True) and ok
        if ok:
            a.agree += 1
            continue
        found = cite(v, membership, policy)
        if found is None:
            a.unexplained.append(v)
        else:
            why, cited = found
            a.explained[why] += 1
            a.examples.setdefault(why, {**v, "cited": cited.cite()})
    a.requests = len(by_request)
    a.requests_agree = sum(by_request.values())
    return a


# --------------------------------------------------------------------------- the scripted cases

#: The scripted cases that name the class fencewatch should give, with how many expectations each
#: records in a full run (not ``--short``; sim/live/*_cases.py): the fixed denominator of "N of M
#: as expected". A case its scenario never reached (the scenario failed, or a client's commit
#: never went out) counts as failed.
SCRIPTED_CASES: dict[tuple[str, str], int] = {
    ("join_leave", "stable_commit"): 2,  # consumer_cases.join_leave: the settled member's two commits
    ("zombie", "zombie_commit"): 1,
    ("zombie", "heir_commit"): 1,
    ("static_rejoin", "stable_commit"): 2,  # the returning instance's first two commits
    ("txn_fence", "txn_commit"): 5,  # txn_cases.txn_fence: five transactions of the first instance
    ("txn_fence", "new_instance_commit"): 1,
    ("txn_stale_metadata", "txn_stale_on_kept"): 1,
    ("txn_stale_metadata", "txn_stale_on_lost"): 1,
    ("kip1251", "behind_on_owned"): 1,  # handbuilt_cases.kip1251
    ("kip1251", "behind_on_newer"): 1,
    ("kip1251", "current"): 1,
    ("kip1251", "ahead"): 1,
    ("kip1251", "behind_on_taken"): 1,
    ("kip1251", "behind_on_kept"): 1,
    ("kip1319", "txn_behind_on_newer"): 1,  # handbuilt_cases.kip1319 (txn_unknown_group names no class)
    ("kip1319", "txn_behind_on_owned"): 1,
}


def expected_cases(scenarios: str) -> dict[tuple[str, str], int]:
    """:data:`SCRIPTED_CASES` of the scenarios a run plays (``all`` or a comma-separated list)."""
    from fencewatch.sim.live.driver import scenario_names

    names = set(scenario_names(scenarios))
    return {k: n for k, n in SCRIPTED_CASES.items() if k[0] in names}


def fixed_cases(checked: list[dict], expected: dict[tuple[str, str], int]) -> list[dict]:
    """The checked expectations against the fixed list: each expected one that is not there is
    added as failed (``missing``); a case the list does not know, or more of one than it says,
    fails too (``unexpected``: the list is out of date)."""
    out, seen = [], collections.Counter()
    for e in checked:
        k = (e["scenario"], e["case"])
        seen[k] += 1
        out.append(e if seen[k] <= expected.get(k, 0) else {**e, "ok": False, "unexpected": True})
    for (scenario, case), n in expected.items():
        out.extend({"scenario": scenario, "case": case, "expected": None, "classes": [], "broker": [], "ok": False,
                    "missing": True} for _ in range(n - seen[(scenario, case)]))
    return out


# --------------------------------------------------------------------------- the run

@dataclass
class FidelityRun:
    version: str
    agreement: Agreement
    traffic: str
    expectations: list[dict]
    seconds: dict[str, float]
    lines: int
    verdicts: list[dict]
    query_failures: list[str]  # the job's "query failed" log lines: a run with any is not a measurement
    accounting: Accounting
    failed_scenarios: dict[str, str]  # scenario -> its error
    classic_groups: set[str] = field(default_factory=set)  # groups the logs show as classic
    topology: Topology = field(default_factory=lambda: Topology())
    moves: list[dict] = field(default_factory=list)  # the coordinator moves made (_move_coordinator)

    @property
    def cases_ok(self) -> int:
        return sum(e["ok"] for e in self.expectations)

    def failures(self) -> list[str]:
        """Why this run fails the harness (empty: it passes): a failed scenario, a scripted case not
        judged as expected (or missing), an unexplained disagreement, a query failure, or verdicts
        that do not reconcile with the request log."""
        out = [f"scenario {k} failed: {v}" for k, v in self.failed_scenarios.items()]
        out += [f"scripted case {e['scenario']}/{e['case']}: " + ("missing" if e.get("missing") else
                "not in the fixed case list" if e.get("unexpected") else
                f"expected {e['expected']}, got {e['classes']} (broker {e['broker']})")
                for e in self.expectations if not e["ok"]]
        out += [f"unexplained disagreement: {json.dumps(v, sort_keys=True)}" for v in self.agreement.unexplained]
        out += [f"query failed: {line}" for line in self.query_failures]
        if not self.accounting.reconciled:
            out += accounting_notes(self.version, self.accounting)[-1:]
        if not self.accounting.accounted_percent >= ACCOUNTED_BAR:
            out.append(f"commit partitions accounted for: {self.accounting.accounted:,} of {self.accounting.logged:,}, "
                       f"under {ACCOUNTED_BAR}%")
        return out


def _fencewatch() -> str:
    return str(Path(sys.executable).with_name("fencewatch"))


def _read_topic(bootstrap: str, topic: str) -> list[bytes]:
    return [value for value, _ in _read_records(bootstrap, topic)]


def _dead_letters(bootstrap: str) -> list[str]:
    """The event ids (``topic/partition/offset``) of the lines the job dead-lettered: a dead
    letter's ``fencewatch.source`` header holds its coordinates, ``topic[partition]@offset``."""
    out = []
    for _, headers in _read_records(bootstrap, DLQ_TOPIC):
        source = dict(headers or ()).get("fencewatch.source", b"").decode("utf-8", "replace")
        if m := re.fullmatch(r"(.+)\[(\d+)\]@(\d+)", source):
            out.append(f"{m[1]}/{m[2]}/{m[3]}")
    return out


def _read_records(bootstrap: str, topic: str) -> list[tuple[bytes, list | None]]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"fidelity-read-{os.getpid()}",
                  "enable.auto.commit": False, "enable.partition.eof": True, "isolation.level": "read_committed"})
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        out, eof = [], set()
        while len(eof) < len(parts):
            m = c.poll(5)
            if m is None:
                break
            if m.error():
                if m.error().code() == -191:  # _PARTITION_EOF
                    eof.add(m.partition())
                continue
            out.append((m.value(), m.headers()))
        return out
    finally:
        c.close()


def _end_offset(bootstrap: str, topic: str, attempts: int = 30) -> int:
    """The topic's end offset over its partitions. A cluster's nodes learn a new topic, and a
    restarted node its leaderships, a moment apart: such an answer is asked again."""
    from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"fidelity-end-{os.getpid()}"})
    try:
        for attempt in range(attempts):
            try:
                parts = c.list_topics(topic, timeout=10).topics[topic].partitions
                return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts)
            except KafkaException as exc:
                code = exc.args[0].code() if exc.args else None
                if code not in (KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.NOT_LEADER_FOR_PARTITION,
                                KafkaError._TRANSPORT, KafkaError._TIMED_OUT) or attempt == attempts - 1:
                    raise
                time.sleep(1.0)
        raise AssertionError("unreachable")
    finally:
        c.close()


def _wait_shipped(bootstrap: str, request_logs: list[Path], timeout_s: float = 300.0) -> int:
    """Until every line of every node's request log is in the lines topic (rsyslog ships each
    line once)."""
    want = 0
    for path in request_logs:
        with open(path, "rb") as f:
            want += sum(1 for _ in f)
    deadline = time.monotonic() + timeout_s
    while (got := _end_offset(bootstrap, LINES_TOPIC)) < want:
        if time.monotonic() > deadline:
            raise RuntimeError(f"rsyslog shipped {got} of {want} request-log lines in {timeout_s:.0f} s")
        time.sleep(1.0)
    return want


def _run_job(bootstrap: str, workdir: Path, policy: str, master: str, starting: str = "earliest") -> subprocess.Popen:
    args = [_fencewatch(), "run", "--bootstrap-servers", bootstrap, "--source", "request-log,consumer-offsets",
            "--request-log-topic", LINES_TOPIC, "--starting-offsets", starting,
            "--checkpoint", str(workdir / "checkpoint"), "--broker-policy", policy,
            "--verdicts-topic", VERDICTS_TOPIC, "--alerts-topic", ALERTS_TOPIC, "--alerts-format", "json",
            "--dlq-topic", DLQ_TOPIC, "--metrics-port", "0", "--spark-master", master]
    return subprocess.Popen(args, stdout=open(workdir / "job.log", "w"), stderr=subprocess.STDOUT,
                            start_new_session=True)


def _lines_committed(checkpoint: Path) -> int:
    """The lines topic's offset of the query's newest committed batch (its offset log's last line
    for the batch, Spark's checkpoint layout), or -1 before the first."""
    commits = [int(p.name) for p in (checkpoint / "commits").glob("[0-9]*")] if (checkpoint / "commits").is_dir() else []
    if not commits:
        return -1
    for line in (checkpoint / "offsets" / str(max(commits))).read_text().splitlines()[2:]:
        offsets = json.loads(line)
        if LINES_TOPIC in offsets:
            return sum(offsets[LINES_TOPIC].values())
    return -1


def _wait_settled(bootstrap: str, job: subprocess.Popen, workdir: Path, lines: int, timeout_s: float) -> None:
    """A committed batch read every shipped line, then the verdicts topic stopped growing for
    SETTLE_S (the held events released). A slow batch on a busy machine then never cuts the run
    short."""
    deadline = time.monotonic() + timeout_s
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        if job.poll() is not None:
            raise RuntimeError(f"fencewatch run exited {job.returncode}: {(workdir / 'job.log').read_text()[-3000:]}")
        n = _end_offset(bootstrap, VERDICTS_TOPIC)
        if n != last or _lines_committed(workdir / "checkpoint") < lines:
            last, since = n, time.monotonic()
        elif n > 0 and time.monotonic() - since >= SETTLE_S:
            return
        time.sleep(2.0)
    raise RuntimeError(f"the job did not judge every line in {timeout_s:.0f} s ({last} verdicts, "
                       f"{_lines_committed(workdir / 'checkpoint')} of {lines} lines committed)")


def _stop(job: subprocess.Popen) -> None:
    if job.poll() is None:
        os.killpg(job.pid, signal.SIGTERM)
        try:
            job.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()


def _offline_membership(bootstrap: str, request_log: Path, workdir: Path, topic_ids: dict[str, str]) -> Membership:
    """The run's membership from its logs decoded offline, for the explanations only."""
    from fencewatch.sim.live import capture

    ids = workdir / "topic-ids.json"
    ids.write_text(json.dumps(topic_ids))
    records = workdir / "consumer-offsets.jsonl"
    with open(records, "w") as f:
        for r in capture.consumer_offsets_records(bootstrap):
            f.write(json.dumps(r) + "\n")
    m = Membership()
    with open(request_log, encoding="utf-8") as f:
        m.add_lines(f)
    for source, cmd in (("record", ["bridge", "--from-file", str(records)]),
                        ("line", ["bridge", "--from-request-log", str(request_log)])):
        out = subprocess.run([_fencewatch(), *cmd, "--topic-ids", str(ids)], capture_output=True, text=True,
                             check=True).stdout
        for line in out.splitlines():
            m.add(json.loads(line), source)
    return m


def _expectations(expectations: list, request_log: Path, verdicts: list[dict],
                  topic_names: dict[str, str]) -> list[dict]:
    """The scripted cases that name a fencewatch class, against the job's verdicts of their
    request-log line (the lines topic has one partition, so a line's offset is its index). A case
    may name its topic by id (TxnOffsetCommit v6 carries ids, KIP-1319); verdicts carry names."""
    from fencewatch.sim.live.expect import matching, read_request_log

    with open(request_log, encoding="utf-8") as f:
        lines = f.readlines()
    objects, index = [], []
    for i, line in enumerate(lines):  # every line was shipped; only request lines are objects
        if "Completed request:" in line:
            objects.extend(read_request_log([line]))
            index.append(i)
    by_event = collections.defaultdict(list)
    for v in verdicts:
        by_event[v["event_id"]].append(v)
    out = []
    for e in expectations:
        part = (e.match or {}).get("partition")
        if not e.fencewatch_class or part is None:
            continue
        hits = matching(e, objects)
        if e.count == "last":
            hits = hits[-1:]
        found = [v for h in hits for v in by_event.get(f"{LINES_TOPIC}/0/{index[h]}", [])
                 if (v["topic"], v["partition"]) == (topic_names.get(part[0], part[0]), part[1])]
        classes = sorted({v["class"] for v in found})
        out.append({"scenario": e.scenario, "case": e.case, "expected": e.fencewatch_class, "classes": classes,
                    "broker": sorted({v["broker_error"] for v in found}), "ok": classes == [e.fencewatch_class]})
    return out


@dataclass
class Topology:
    """How a run is laid out: ``brokers`` KRaft nodes (1: ``KafkaBroker``; 3: ``KafkaCluster``,
    ``__consumer_offsets`` at 50 partitions replicated 3 times, every node's request log shipped
    by its own rsyslog); ``move``: restart, once the scripted cases are over and while the
    load goes on, the node that leads the coordinator partitions of the most load groups (a coordinator move: NOT_COORDINATOR,
    COORDINATOR_LOAD_IN_PROGRESS, the groups' commits on another node); ``live``: the job starts
    from ``latest`` while the traffic is on (``run``'s default warm-up), else from ``earliest`` on
    the finished backlog."""

    brokers: int = 1
    move: bool = False
    live: bool = False

    def describe(self) -> str:
        return (f"{self.brokers} broker{'s' if self.brokers > 1 else ''}" + (", coordinator moved" if self.move else "")
                + (", judged live from latest" if self.live else ", judged from the backlog"))


def _fence_groups() -> int:
    from fencewatch.sim.live.fence_load import plan

    return len(plan())


def _start_kafka(version: str, brokers: int):
    from fencewatch.streaming.brokers.cluster import KafkaCluster
    from fencewatch.streaming.brokers.kafka import KafkaBroker

    return KafkaCluster(version=version, nodes=brokers) if brokers > 1 else KafkaBroker(version=version)


def _request_logs(kafka) -> dict[str, Path]:
    """Each node's request log by node id (one broker: ``"1"``)."""
    paths = getattr(kafka, "request_log_paths", None)
    return {str(k): Path(v) for k, v in paths.items()} if paths is not None else {"1": Path(kafka.request_log_path)}


def _move_coordinator(kafka, groups: list[str], moves: list[dict]) -> None:
    """Restart the node leading the coordinator partitions of the most of ``groups`` (ties: the
    lowest node id); what happened goes to ``moves``."""
    leaders = collections.Counter(kafka.coordinator_leader(g).node_id for g in groups)
    node = min(leaders, key=lambda n: (-leaders[n], n))
    t0 = time.time()
    timing = kafka.restart(node)
    moves.append({"node": node, "groups_led": leaders[node], "of_groups": len(groups), "at_ms": int(t0 * 1000),
                  "stopped_s": round(timing.stopped_in_s, 1), "ready_s": round(timing.ready_in_s, 1),
                  "in_sync_s": None if timing.in_sync_in_s is None else round(timing.in_sync_in_s, 1)})


def _wait_first_batch(job: subprocess.Popen, workdir: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not (workdir / "checkpoint" / "commits" / "0").exists():
        if job.poll() is not None:
            raise RuntimeError(f"fencewatch run exited {job.returncode}: {(workdir / 'job.log').read_text()[-3000:]}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the job committed no batch in {timeout_s:.0f} s")
        time.sleep(0.5)


def run_fidelity(version: str, workdir: Path, *, commits: int, groups: int = 8, seed: int = 1,
                 master: str = "local[2]", scenarios: str = "all", timeout_s: float = 1800.0,
                 topology: Topology | None = None, load: str = "steady") -> FidelityRun:
    """One version's run, start to finish; every process started here is stopped here."""
    import threading

    from fencewatch.sim.live import capture, driver
    from fencewatch.streaming.brokers.rsyslog import start_rsyslog_shipper

    topology = topology or Topology()
    if topology.move and topology.brokers < 2:
        raise ValueError("a coordinator move needs a cluster (brokers >= 2)")
    workdir.mkdir(parents=True, exist_ok=True)
    seconds: dict[str, float] = {}
    moves: list[dict] = []
    start_lines: tuple[int, int] = (0, 0)  # the lines topic's end when the job was launched, and at its first batch
    t = time.monotonic()
    with _start_kafka(version, topology.brokers) as kafka:
        version = kafka.version
        kafka.create_topics([LINES_TOPIC], 1)
        kafka.create_topics([VERDICTS_TOPIC, ALERTS_TOPIC, DLQ_TOPIC], 1)
        logs = _request_logs(kafka)
        shippers = [start_rsyslog_shipper(kafka.bootstrap, LINES_TOPIC, path, workdir / f"rsyslog-{node}",
                                          broker_id=node) for node, path in logs.items()]
        job = None
        try:
            seconds["broker"] = time.monotonic() - t
            t = time.monotonic()
            # one run id for every version: the same group names, so reports compare group by group
            outcome: dict = {}
            judging = threading.Event()  # live: the job has committed its first batch

            load_groups = [f"fw-seed{seed}-load-g{g}" for g in range(groups if load == "steady" else _fence_groups())]

            def move(load) -> None:
                """After the scripted cases (a move must not cut them short), while the load goes
                on: the coordinator move, then the load's commits on the new coordinators."""
                if not topology.move:
                    return
                want = max(200, commits // 4)
                if hasattr(load, "top_up"):  # the steady load's messages may be used up by now
                    load.top_up(want * 3 // max(1, groups))
                before = load.committed if load is not None else 0
                _move_coordinator(kafka, load_groups, moves)
                deadline = time.monotonic() + 300.0
                while load is not None and load.committed < before + want:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"the load made {load.committed - before} of {want} commits in 300 s "
                                           "after the coordinator move")
                    time.sleep(0.5)
                moves[-1]["load_commits_after"] = load.committed - before if load is not None else 0

            def traffic() -> None:
                try:
                    if topology.live:
                        # Live: load groups of their own are on when the job starts from latest
                        # (their members joined before it: warm-up); the scenarios and the main
                        # load begin once it judges, so every scripted case is judged live.
                        outcome["before"] = driver.run(kafka.bootstrap, [], groups=max(1, groups // 2),
                                                       commits=max(1_000, commits // 4), seed=seed,
                                                       run_id=f"seed{seed}-pre")
                        judging.wait(timeout_s)
                    outcome["result"] = driver.run(kafka.bootstrap, scenarios, groups=groups, commits=commits,
                                                   seed=seed, run_id=f"seed{seed}", load=load,
                                                   after_scenarios=move)
                except BaseException as exc:  # noqa: BLE001 - reported below, in the main thread
                    outcome["error"] = exc

            player = threading.Thread(target=traffic, name="traffic", daemon=True)
            player.start()
            if topology.live:
                while _end_offset(kafka.bootstrap, LINES_TOPIC) < 2_000 and player.is_alive():
                    time.sleep(1.0)
                launched = _end_offset(kafka.bootstrap, LINES_TOPIC)
                job = _run_job(kafka.bootstrap, workdir, policy_of(version), master, starting="latest")
                _wait_first_batch(job, workdir, timeout_s)
                judging.set()
                start_lines = (launched, launched)  # the second: the first line judged, read below
            player.join()
            if "error" in outcome:
                raise outcome["error"]
            result = outcome["result"]
            if "before" in outcome:
                result.topics.update(outcome["before"].topics)
            seconds["traffic"] = time.monotonic() - t
            for path in logs.values():
                capture.wait_for_log(str(path))
            lines = _wait_shipped(kafka.bootstrap, list(logs.values()))
            t = time.monotonic()
            if job is None:
                job = _run_job(kafka.bootstrap, workdir, policy_of(version), master)
            _wait_settled(kafka.bootstrap, job, workdir, lines, timeout_s)
            seconds["job"] = time.monotonic() - t
        finally:
            if job is not None:
                _stop(job)
            for shipper in shippers:
                shipper.stop()
        verdicts = [json.loads(b) for b in _read_topic(kafka.bootstrap, VERDICTS_TOPIC)]
        dead_letters = _dead_letters(kafka.bootstrap)
        # The request log as the job read it: every node's lines, in the lines topic's order (line n
        # is offset n: one partition), so event ids, accounting and explanations name the same line.
        request_log = workdir / "kafka-request.log"
        with open(request_log, "wb") as f:
            for value in _read_topic(kafka.bootstrap, LINES_TOPIC):
                f.write(value.rstrip(b"\n") + b"\n")
        membership = _offline_membership(kafka.bootstrap, request_log, workdir, result.topics)
        (workdir / "verdicts.jsonl").write_text("".join(json.dumps(v) + "\n" for v in verdicts))
    failures = [line for line in (workdir / "job.log").read_text(errors="replace").splitlines()
                if "query failed" in line]
    if topology.move and not moves:
        failures.append("query failed: the coordinator move did not happen (the traffic ended first)")
    with open(request_log, encoding="utf-8") as f:
        logged = logged_partitions(f, lambda i: f"{LINES_TOPIC}/0/{i}", result.topics)
    if topology.live:
        # latest was resolved between the launch and the first batch: the first line judged
        # bounds it (a line after it with no verdict is missing)
        judged_lines = [n for v in verdicts if (n := _line_number(v["event_id"])) is not None
                        and v["event_id"].startswith(LINES_TOPIC) and n >= start_lines[0]]
        start_lines = (start_lines[0], min(judged_lines, default=start_lines[0]))
    cases = fixed_cases(_expectations(result.expectations, request_log, verdicts, result.topics),
                        expected_cases(scenarios))
    run = FidelityRun(version, agreement(version, verdicts, membership), result.summary(), cases, seconds, lines,
                      verdicts, failures, account(logged, verdicts, dead_letters, policy_of(version),
                                                  start_lines=start_lines),
                      dict(result.failed), set(membership.classic))
    run.topology, run.moves = topology, moves
    return run


def render(runs: list[FidelityRun], command: str, date: str) -> str:
    """docs/fidelity.md's generated part: the confusion matrix on rejections first (per version and
    traffic, beside the accept-all baseline), the broker's codes, every commit partition of the
    request log accounted for, then the overall agreement (secondary) and the disagreements."""
    rows = [(r.version, r.accounting) for r in runs]
    runs_on = "; ".join(f"{r.version}: {r.topology.describe()}{_moves_text(r.moves)}" for r in runs)
    out = [f"Command: `{command}`  \nDate: {date}  \nRuns: {runs_on}\n",
           "**Rejections** (commit partitions; a partition is rejected when its request is): organic = the "
           "load's groups, scripted = the scenarios' cases. Recall = rejected by both / by the broker; "
           "precision = rejected by both / by the model; accept-all = the agreement of a model that accepts "
           "every commit.\n", matrix_table(rows), "",
           "**Per broker answer** (judged partitions):\n", codes_table(rows), "",
           "**Every commit partition of the request log** (OffsetCommit and TxnOffsetCommit, decoded offline "
           "with fencewatch's decoder): judged, or excluded and why; *missing* (no verdict, no dead letter) is "
           "the one not accounted for.\n", accounting_table(rows), ""]
    notes = [n for r in runs for n in accounting_notes(r.version, r.accounting)]
    if notes:
        out += ["\n".join(notes), ""]
    agree = ["| Kafka | policy | commit requests judged | partitions judged | agreement (partitions) | "
             "agreement (requests) | explained | unexplained | scripted cases as expected | failed scenarios | "
             "query failures |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        a = r.agreement
        agree.append(f"| {r.version} | `{a.policy}` | {a.requests:,} | {a.partitions:,} | {a.percent:.3f}% | "
                     f"{a.requests_percent:.3f}% | {sum(a.explained.values()):,} | {len(a.unexplained):,} | "
                     f"{r.cases_ok} of {len(r.expectations)} | {len(r.failed_scenarios)} | {len(r.query_failures)} |")
    out += ["**Overall agreement** (secondary: it is dominated by accepted commits, see accept-all above):\n",
            "\n".join(agree), ""]
    texts = {name: text for name, text, _ in EXPLANATIONS}
    for r in runs:
        a = r.agreement
        out.append(f"### {r.version}: disagreements\n")
        if not a.explained and not a.unexplained:
            out.append("None.\n")
        for name, n in a.explained.most_common():
            ex = a.examples[name]
            out.append(f"- **{name}** ({n:,}): {texts[name]}. Example: group `{ex['group_id']}`, "
                       f"{ex['topic']}[{ex['partition']}] at epoch {ex['client_epoch']}: broker "
                       f"`{ex['broker_error']}`, `{a.policy}` `{ex[a.policy]}`, class `{ex['class']}`; cites "
                       f"{ex['cited']}.")
        for v in a.unexplained[:20]:
            out.append(f"- **unexplained**: `{json.dumps(v, sort_keys=True)}`")
        bad = [f for f in r.failures() if not f.startswith("unexplained")]
        out.append(f"\nScripted cases with an expected class: {r.cases_ok} of {len(r.expectations)} as expected "
                   f"(fixed list: bench/fidelity.py `SCRIPTED_CASES`)." + "".join(f"\n- {f}" for f in bad) + "\n")
    return "\n".join(out)


def upgrade_prediction(before: Path, after: Path) -> str:
    """``fencewatch report`` on the 4.2 run's verdicts and on the 4.3 run's, then ``--compare``:
    the fences the 4.2 run predicts KIP-1251 avoids against those the 4.3 broker did avoid
    (issue 35; docs/report.md). Returns the comparison's table."""
    summaries = []
    for workdir, policy in ((before, "strict"), (after, "kip1251")):
        out = workdir / "report.json"
        subprocess.run([_fencewatch(), "report", str(workdir / "verdicts.jsonl"), "--broker-policy", policy,
                        "--out", str(workdir / "report.html"), "--json", str(out), "--log-level", "WARNING"],
                       check=True, capture_output=True, text=True)
        summaries.append(str(out))
    done = subprocess.run([_fencewatch(), "report", "--compare", *summaries, "--json",
                           str(after.parent / "comparison.json"), "--log-level", "WARNING"],
                          check=True, capture_output=True, text=True)
    return done.stdout.strip()


TABLE_START, TABLE_END = "<!-- table: bench/bench_fidelity.py writes from here -->", "<!-- end of table -->"
DOC = Path(__file__).resolve().parent.parent / "docs" / "fidelity.md"


def write_table(text: str) -> None:
    """Replace the generated part of docs/fidelity.md; the hand-written parts around it stay."""
    from bench.report import machine

    doc = DOC.read_text() if DOC.exists() else f"# Fidelity\n\n{TABLE_START}\n{TABLE_END}\n"
    head, rest = doc.split(TABLE_START, 1)
    tail = rest.split(TABLE_END, 1)[1]
    DOC.write_text(f"{head}{TABLE_START}\n\nMachine: {machine()}\n\n{text}\n{TABLE_END}{tail}")


def main(argv: list[str] | None = None) -> int:
    import argparse
    import datetime as dt

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--versions", default="4.2,4.3,4.4")
    p.add_argument("--commits", type=int, default=30_000, help="commits the load answers, per version")
    p.add_argument("--load", choices=("steady", "fences"), default="steady",
                   help="the organic traffic: steady (eight groups, members leaving and joining) or fences "
                        "(sim/live/fence_load.py: members stalled past their session, replaced, scaled)")
    p.add_argument("--workdir", default="/tmp/fencewatch-fidelity")
    p.add_argument("--write-docs", action="store_true", help="write docs/fidelity.md's table")
    p.add_argument("--brokers", type=int, default=1, choices=(1, 3),
                   help="KRaft nodes: 1, or a 3-node cluster (__consumer_offsets 50 partitions, RF 3)")
    p.add_argument("--move", action="store_true", help="restart the node leading the most load groups' "
                   "coordinators once the scenarios are over, while the load goes on (needs --brokers 3)")
    p.add_argument("--live", action="store_true", help="start the job from latest while the traffic is on "
                   "(run's default warm-up), not from earliest on the finished backlog")
    p.add_argument("--groups", type=int, default=8, help="load groups (default 8)")
    args = p.parse_args(argv)
    if args.move and args.brokers < 2:
        p.error("--move needs --brokers 3")
    topology = Topology(brokers=args.brokers, move=args.move, live=args.live)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    runs = []
    for version in args.versions.split(","):
        r = run_fidelity(version, Path(args.workdir) / version, commits=args.commits, groups=args.groups,
                         topology=topology, load=args.load)
        log.info("%s", summary(r))
        runs.append(r)
    text = render(runs, "python bench/bench_fidelity.py " + " ".join(argv or sys.argv[1:]),
                  dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))
    dirs = {r.version.rsplit(".", 1)[0]: Path(args.workdir) / v for r, v in zip(runs, args.versions.split(","))}
    if "4.2" in dirs and "4.3" in dirs:
        text += ("\n### The upgrade prediction: the 4.2 run's report against the 4.3 run's\n\n"
                 "`fencewatch report --compare` (docs/report.md), commit requests per group:\n\n```\n"
                 f"{upgrade_prediction(dirs['4.2'], dirs['4.3'])}\n```\n")
    print(text)
    if args.write_docs:
        write_table(text)
    failures = [f"{r.version}: {f}" for r in runs for f in r.failures()]
    for f in failures:
        log.error("%s", f[:500])
    return 1 if failures else 0


def _moves_text(moves: list[dict]) -> str:
    return "".join(f"; node {m['node']} restarted (coordinator of {m['groups_led']} of {m['of_groups']} load groups: "
                   f"stopped in {m['stopped_s']} s, answering in {m['ready_s']} s)" for m in moves)


def summary(r: FidelityRun) -> str:
    """One run in a line: the matrix's totals, the accounting, the secondary agreement, the cases."""
    a, m, acc = r.agreement, r.accounting.all, r.accounting
    return (f"{r.version} ({acc.policy}; {r.topology.describe()}{_moves_text(r.moves)}): broker rejected {m.broker:,} of {m.judged:,} judged partitions, model "
            f"{m.model:,}; recall {m.both}/{m.broker}, precision {m.both}/{m.model}; accounted for "
            f"{acc.accounted:,} of {acc.logged:,} commit partitions ({acc.accounted_percent:.2f}%), excluded "
            f"{dict(+acc.excluded)}; agreement {a.percent:.3f}% (accept-all {100 * m.accept_all:.3f}%), "
            f"{sum(a.explained.values())} explained, {len(a.unexplained)} unexplained; scripted cases "
            f"{r.cases_ok} of {len(r.expectations)}; failed scenarios {len(r.failed_scenarios)}")


if __name__ == "__main__":
    sys.exit(main())
