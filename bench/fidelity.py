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
#: How long after a commit the coordinator's move to a new generation or member epoch may show
#: in the logs and still explain the broker's rejection of that commit (a rebalance begun
#: before the commit arrived is recorded when it completes).
RACE_WINDOW_MS = 15_000
#: The share of the request log's commit partitions a run must account for (issue 44's bar).
ACCOUNTED_BAR = 99.0
#: The verdicts topic stops growing for this long once the job has read every shipped line.
SETTLE_S = 12.0


def policy_of(version: str) -> str:
    return POLICY_OF[".".join(version.split(".")[:2])]


# --------------------------------------------------------------------------- explanations

@dataclass
class Membership:
    """When each group's coordinator moved to a new generation (classic) or member epoch
    (KIP-848), from the same run's logs decoded offline (both sources of the run)."""

    generations: dict[str, list[tuple[int, int]]] = field(default_factory=lambda: collections.defaultdict(list))
    epochs: dict[tuple[str, str], list[tuple[int, int]]] = field(default_factory=lambda: collections.defaultdict(list))
    classic: set[str] = field(default_factory=set)
    emptied: dict[str, list[int]] = field(default_factory=lambda: collections.defaultdict(list))
    left: dict[tuple[str, str], list[int]] = field(default_factory=lambda: collections.defaultdict(list))

    def add(self, e: dict) -> None:
        t = e.get("type")
        if t == "member_left":
            self.left[(e["group_id"], e["member_id"])].append(e["ts"])
        if t == "group_state" and e.get("state") == "Empty":
            self.emptied[e["group_id"]].append(e["ts"])
        if t == "classic_sync":
            self.generations[e["group_id"]].append((e["ts"], e["generation"]))
            self.classic.add(e["group_id"])
        elif t == "classic_join" or (t == "group_state" and e.get("protocol") == "classic"):
            self.classic.add(e["group_id"])
        elif t == "member_assignment":
            self.epochs[(e["group_id"], e["member_id"])].append((e["ts"], e["member_epoch"]))

    def moved_past(self, series: Iterable[tuple[int, int]], epoch: int, ts: int) -> bool:
        return any(e > epoch and ts - 1_000 <= t <= ts + RACE_WINDOW_MS for t, e in series)

    def emptied_near(self, group_id: str, ts: int) -> bool:
        """The group became Empty around ``ts``: a classic group's last members leaving start a
        new generation too, which its Empty record shows (there is no SyncGroup to record)."""
        return any(ts - 1_000 <= t <= ts + RACE_WINDOW_MS for t in self.emptied.get(group_id, ()))


def _model_accepts(v: dict, policy: str) -> bool:
    return v[{"strict": "strict", "kip1251": "kip1251"}[policy]] == "NONE"


def _classic_rebalance(v: dict, m: Membership, policy: str) -> bool:
    """A classic group's JoinGroup moved it to a new generation before the commit arrived, and
    no line the model has read says so yet: a JoinGroup line is written when its join phase
    completes (contract §10.1 i), so a phase a new joiner began shows only then, or as a SyncGroup
    answered REBALANCE_IN_PROGRESS. The broker answers ILLEGAL_GENERATION or REBALANCE_IN_PROGRESS;
    the model, one generation behind, accepts. Since the request log's join phases are decoded
    (issue 44 item 3) it explained none of the classic load runs' rejections (77 and 29 before)."""
    return (v["group_id"] in m.classic and _model_accepts(v, policy)
            and v["broker_error"] in ("ILLEGAL_GENERATION", "REBALANCE_IN_PROGRESS")
            and (m.moved_past(m.generations.get(v["group_id"], ()), v["client_epoch"], v["ts"])
                 or m.emptied_near(v["group_id"], v["ts"])))


def _epoch_race(v: dict, m: Membership, policy: str) -> bool:
    """A KIP-848 member's epoch was bumped by a heartbeat the broker handled before this commit
    but logged after it (each line is written when its response is sent)."""
    return (v["group_id"] not in m.classic and _model_accepts(v, policy)
            and v["broker_error"] == "STALE_MEMBER_EPOCH"
            and m.moved_past(m.epochs.get((v["group_id"], v["member_id"]), ()), v["client_epoch"], v["ts"]))


def _same_millisecond(v: dict, m: Membership, policy: str) -> bool:
    """The coordinator's record of the member's new epoch or of its leaving (``__consumer_offsets``)
    and the commit's request-log line carry the same millisecond: the broker handled the commit
    first and accepted it, the model read the record first (the sources' order within one
    millisecond is not the broker's) and rejects."""
    key = (v["group_id"], v["member_id"])
    return (v["group_id"] not in m.classic and not _model_accepts(v, policy) and v["broker_error"] == "NONE"
            and (any(e > v["client_epoch"] and t == v["ts"] for t, e in m.epochs.get(key, ()))
                 or v["ts"] in m.left.get(key, ())))


#: (name, what it says in docs/fidelity.md, the rule). Tried in order; the first that holds explains.
EXPLANATIONS: list[tuple[str, str, Callable[[dict, Membership, str], bool]]] = [
    ("classic-rebalance-race", "a classic group's JoinGroup (or its last members leaving) had started a new "
     "generation when the commit arrived; __consumer_offsets records the generation only when its SyncGroup "
     "completes (or the group is Empty), and a JoinGroup line is written only when its join phase completes "
     "(contract §10.1 i)",
     _classic_rebalance),
    ("member-epoch-race", "a heartbeat that moved the member to a new epoch was handled before the commit "
     "but its request-log line was written after the commit's", _epoch_race),
    ("same-millisecond", "the coordinator's record of the member's new epoch (or of its leaving) and the "
     "commit's request-log line carry the same millisecond; the broker handled the commit first, the model "
     "read the record first", _same_millisecond),
]


def explain(v: dict, membership: Membership, policy: str) -> str | None:
    for name, _, rule in EXPLANATIONS:
        if rule(v, membership, policy):
            return name
    return None


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
        why = explain(v, membership, policy)
        if why is None:
            a.unexplained.append(v)
        else:
            a.explained[why] += 1
            a.examples.setdefault(why, v)
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


def _end_offset(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"fidelity-end-{os.getpid()}"})
    try:
        parts = c.list_topics(topic, timeout=10).topics[topic].partitions
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts)
    finally:
        c.close()


def _wait_shipped(bootstrap: str, request_log: Path, timeout_s: float = 300.0) -> int:
    """Until every line of the request log is in the lines topic (rsyslog ships each line once)."""
    with open(request_log, "rb") as f:
        want = sum(1 for _ in f)
    deadline = time.monotonic() + timeout_s
    while (got := _end_offset(bootstrap, LINES_TOPIC)) < want:
        if time.monotonic() > deadline:
            raise RuntimeError(f"rsyslog shipped {got} of {want} request-log lines in {timeout_s:.0f} s")
        time.sleep(1.0)
    return want


def _run_job(bootstrap: str, workdir: Path, policy: str, master: str) -> subprocess.Popen:
    args = [_fencewatch(), "run", "--bootstrap-servers", bootstrap, "--source", "request-log,consumer-offsets",
            "--request-log-topic", LINES_TOPIC, "--starting-offsets", "earliest",
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
    for cmd in (["bridge", "--from-file", str(records)], ["bridge", "--from-request-log", str(request_log)]):
        out = subprocess.run([_fencewatch(), *cmd, "--topic-ids", str(ids)], capture_output=True, text=True,
                             check=True).stdout
        for line in out.splitlines():
            m.add(json.loads(line))
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


def run_fidelity(version: str, workdir: Path, *, commits: int, groups: int = 8, seed: int = 1,
                 master: str = "local[2]", scenarios: str = "all", timeout_s: float = 1800.0) -> FidelityRun:
    """One version's run, start to finish; every process started here is stopped here."""
    from fencewatch.sim.live import capture, driver
    from fencewatch.streaming.brokers.kafka import KafkaBroker
    from fencewatch.streaming.brokers.rsyslog import start_rsyslog_shipper

    workdir.mkdir(parents=True, exist_ok=True)
    seconds: dict[str, float] = {}
    t = time.monotonic()
    with KafkaBroker(version=version) as broker:
        version = broker.version
        broker.create_topics([LINES_TOPIC], 1)
        broker.create_topics([VERDICTS_TOPIC, ALERTS_TOPIC, DLQ_TOPIC], 1)
        shipper = start_rsyslog_shipper(broker.bootstrap, LINES_TOPIC, broker.request_log_path, workdir / "rsyslog")
        job = None
        try:
            seconds["broker"] = time.monotonic() - t
            t = time.monotonic()
            # one run id for every version: the same group names, so reports compare group by group
            result = driver.run(broker.bootstrap, scenarios, groups=groups, commits=commits, seed=seed,
                                run_id=f"seed{seed}")
            seconds["traffic"] = time.monotonic() - t
            capture.wait_for_log(str(broker.request_log_path))
            lines = _wait_shipped(broker.bootstrap, broker.request_log_path)
            t = time.monotonic()
            job = _run_job(broker.bootstrap, workdir, policy_of(version), master)
            _wait_settled(broker.bootstrap, job, workdir, lines, timeout_s)
            seconds["job"] = time.monotonic() - t
        finally:
            if job is not None:
                _stop(job)
            shipper.stop()
        verdicts = [json.loads(b) for b in _read_topic(broker.bootstrap, VERDICTS_TOPIC)]
        dead_letters = _dead_letters(broker.bootstrap)
        request_log = workdir / "kafka-request.log"  # kept: the broker's folder goes with it
        shutil.copyfile(broker.request_log_path, request_log)
        membership = _offline_membership(broker.bootstrap, request_log, workdir, result.topics)
        (workdir / "verdicts.jsonl").write_text("".join(json.dumps(v) + "\n" for v in verdicts))
    failures = [line for line in (workdir / "job.log").read_text(errors="replace").splitlines()
                if "query failed" in line]
    with open(request_log, encoding="utf-8") as f:
        logged = logged_partitions(f, lambda i: f"{LINES_TOPIC}/0/{i}", result.topics)
    cases = fixed_cases(_expectations(result.expectations, request_log, verdicts, result.topics),
                        expected_cases(scenarios))
    return FidelityRun(version, agreement(version, verdicts, membership), result.summary(), cases, seconds, lines,
                       verdicts, failures, account(logged, verdicts, dead_letters, policy_of(version)),
                       dict(result.failed), set(membership.classic))


def render(runs: list[FidelityRun], command: str, date: str) -> str:
    """docs/fidelity.md's generated part: the confusion matrix on rejections first (per version and
    traffic, beside the accept-all baseline), the broker's codes, every commit partition of the
    request log accounted for, then the overall agreement (secondary) and the disagreements."""
    rows = [(r.version, r.accounting) for r in runs]
    out = [f"Command: `{command}`  \nDate: {date}\n",
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
                       f"`{ex['broker_error']}`, `{a.policy}` `{ex[a.policy]}`, class `{ex['class']}`.")
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
    p.add_argument("--workdir", default="/tmp/fencewatch-fidelity")
    p.add_argument("--write-docs", action="store_true", help="write docs/fidelity.md's table")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    runs = []
    for version in args.versions.split(","):
        r = run_fidelity(version, Path(args.workdir) / version, commits=args.commits)
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


def summary(r: FidelityRun) -> str:
    """One run in a line: the matrix's totals, the accounting, the secondary agreement, the cases."""
    a, m, acc = r.agreement, r.accounting.all, r.accounting
    return (f"{r.version} ({acc.policy}): broker rejected {m.broker:,} of {m.judged:,} judged partitions, model "
            f"{m.model:,}; recall {m.both}/{m.broker}, precision {m.both}/{m.model}; accounted for "
            f"{acc.accounted:,} of {acc.logged:,} commit partitions ({acc.accounted_percent:.2f}%), excluded "
            f"{dict(+acc.excluded)}; agreement {a.percent:.3f}% (accept-all {100 * m.accept_all:.3f}%), "
            f"{sum(a.explained.values())} explained, {len(a.unexplained)} unexplained; scripted cases "
            f"{r.cases_ok} of {len(r.expectations)}; failed scenarios {len(r.failed_scenarios)}")


if __name__ == "__main__":
    sys.exit(main())
