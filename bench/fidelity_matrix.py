"""The fidelity run's headline: the model's rejections against the broker's, and what became of
every commit partition of the request log (issue 44, items 1 and 7; docs/fidelity.md).

What lives here, pure (no broker, no Spark): :func:`logged_partitions` (the request log's
OffsetCommit and TxnOffsetCommit partitions, decoded offline with fencewatch's own decoder,
``streaming/ingest/request_log``, and their answers read from the broker's JSON), and
:func:`account` (each of those partitions judged or excluded for a counted reason, and the
confusion matrix of the judged ones, per traffic and per broker error code). ``bench/fidelity.py``
runs the broker and the job and calls these; ``tests/fidelity/test_accounting.py`` tests them on
hand-made verdict lists.

A partition is *rejected* when its request is: Kafka fails a commit request on its first bad
partition and answers every partition with that code, so the model's answer for a request is the
first non-NONE answer of the broker's policy among its partitions' verdicts (what
``model_agrees`` compares; a verdict whose ``model_agrees`` says otherwise is counted
``inconsistent``). Recall = rejected by both / rejected by the broker; precision = rejected by
both / rejected by the model.
"""
from __future__ import annotations

import collections
import math
import re
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping

#: Why a commit partition of the request log has no judged verdict, in the order they are tried.
#: ``missing`` (no verdict, no dead letter, no coordinator error) is the one not accounted for.
REASONS = ("before the start", "at the start", "dead letter", "coordinator error", "no answer",
           "REBALANCE_IN_PROGRESS", "unknown code", "warm-up", "other", "missing")
COORDINATOR_ERRORS = ("NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE")
TRAFFIC = ("organic", "scripted")
#: Load groups are ``fw-<run id>-load-g<n>`` (sim/live/load.py); every other group is a scripted
#: case's (sim/live/*_cases.py: ``fw-<run id>-<scenario>-...``).
_LOAD_GROUP = re.compile(r"^fw-[^-]+-load-")


def traffic_of(group_id: str) -> str:
    return "organic" if _LOAD_GROUP.match(group_id or "") else "scripted"


@dataclass(frozen=True, slots=True)
class LoggedPartition:
    """One partition of one commit line of the request log. ``answer``: the broker's error name
    for it (None: the response does not list it); ``decoded``: the decoder gave it an event
    (False for coordinator errors, contract §10.1 a, and for a line it could not read)."""

    event_id: str
    group_id: str
    topic: str
    partition: int
    answer: str | None
    decoded: bool = True


# --------------------------------------------------------------------------- the request log

def logged_partitions(lines: Iterable[str], event_id_of: Callable[[int], str],
                      topic_ids: Mapping[str, str]) -> list[LoggedPartition]:
    """Every OffsetCommit (8) and TxnOffsetCommit (28) partition of ``lines`` (line ``i`` has event
    id ``event_id_of(i)``). The decoder (``RequestLogBridge``, as the job runs it) names each
    partition it makes an event of; the rest of a request's partitions (coordinator errors, which
    make no event, contract §10.1 a, or all of a line the decoder could not read) are counted from
    the line's JSON, each with its answer in the response."""
    from msgspec import UNSET

    from fencewatch.sim.live.expect import read_request_log
    from fencewatch.streaming.ingest.request_log import RequestLogBridge

    bridge = RequestLogBridge(dict(topic_ids), carry=False)
    out: list[LoggedPartition] = []
    for i, line in enumerate(lines):
        objects = read_request_log([line], apis=(8, 28))
        if not objects:
            continue
        body, eid = objects[0], event_id_of(i)
        decoded = 0
        for e in bridge.events(line, eid):
            answer = None if e.error_code is UNSET else error_name(e.error_code)
            out.extend(LoggedPartition(eid, e.group_id, o.topic, o.partition, answer) for o in e.offsets)
            decoded += len(e.offsets)
        req = body.get("request") if isinstance(body.get("request"), dict) else {}
        resp = body.get("response") if isinstance(body.get("response"), dict) else {}
        codes = {(t.get("name") or t.get("topicId"), p.get("partitionIndex")): p.get("errorCode")
                 for t in resp.get("topics") or [] for p in t.get("partitions") or []}
        requested = [(t.get("name") or t.get("topicId"), p.get("partitionIndex"))
                     for t in req.get("topics") or [] for p in t.get("partitions") or []]
        # the partitions no event holds: the coordinator errors (the decoder drops exactly those),
        # or every partition of a line it could not read
        routed = [k for k in requested if error_name(codes.get(k)) in COORDINATOR_ERRORS]
        rest = (routed + [k for k in requested if k not in routed])[:max(0, len(requested) - decoded)]
        out.extend(LoggedPartition(eid, req.get("groupId", ""), str(t), int(p), error_name(codes.get((t, p))),
                                   decoded=False) for t, p in rest)
    return out


def error_name(code: int | None) -> str | None:
    """Kafka's name of an error code (``ERROR_<n>`` for one fencewatch does not name); None: no code."""
    from fencewatch.state.model import KafkaError

    if code is None:
        return None
    err = KafkaError.from_code(code)
    return err.value if err is not KafkaError.UNKNOWN else f"ERROR_{code}"


# --------------------------------------------------------------------------- the accounting

@dataclass
class Rejections:
    """A confusion matrix on rejections, with the broker's codes."""

    judged: int = 0
    broker: int = 0  # rejected by the broker
    model: int = 0  # rejected by the model (the policy of the broker's version)
    both: int = 0
    agree: int = 0  # the same answer, code for code
    broker_none: int = 0  # accepted by the broker: what accepting every commit would get right
    #: broker code -> [partitions, the model gave the same code, the model rejected (any code)]
    by_code: dict[str, list[int]] = field(default_factory=dict)
    model_codes: collections.Counter = field(default_factory=collections.Counter)

    def add(self, broker: str, model: str) -> None:
        self.judged += 1
        b, m = broker != "NONE", model != "NONE"
        self.broker += b
        self.model += m
        self.both += b and m
        self.agree += broker == model
        self.broker_none += not b
        row = self.by_code.setdefault(broker, [0, 0, 0])
        row[0] += 1
        row[1] += broker == model
        row[2] += m
        self.model_codes[model] += 1

    @property
    def recall(self) -> float:
        return self.both / self.broker if self.broker else math.nan

    @property
    def precision(self) -> float:
        return self.both / self.model if self.model else math.nan

    @property
    def agreement(self) -> float:
        return self.agree / self.judged if self.judged else math.nan

    @property
    def accept_all(self) -> float:
        """The agreement of a model that accepts every commit (its recall is 0)."""
        return self.broker_none / self.judged if self.judged else math.nan


@dataclass
class Accounting:
    policy: str
    logged: int = 0  # commit partitions in the request log
    judged: int = 0
    excluded: collections.Counter = field(default_factory=collections.Counter)  # reason -> partitions
    details: collections.Counter = field(default_factory=collections.Counter)  # (reason, detail) -> partitions
    traffic: dict[str, Rejections] = field(default_factory=lambda: {t: Rejections() for t in TRAFFIC})
    unmatched_verdicts: int = 0  # verdicts of no logged partition: a key the two sides read differently
    duplicate_verdicts: int = 0
    inconsistent: int = 0  # verdicts whose model_agrees is not what their request's answers say

    @property
    def all(self) -> Rejections:
        total = Rejections()
        for r in self.traffic.values():
            for name in ("judged", "broker", "model", "both", "agree", "broker_none"):
                setattr(total, name, getattr(total, name) + getattr(r, name))
            for code, row in r.by_code.items():
                mine = total.by_code.setdefault(code, [0, 0, 0])
                for i, n in enumerate(row):
                    mine[i] += n
            total.model_codes.update(r.model_codes)
        return total

    @property
    def accounted(self) -> int:
        return self.logged - self.excluded["missing"]

    @property
    def accounted_percent(self) -> float:
        return 100.0 * self.accounted / self.logged if self.logged else math.nan

    @property
    def reconciled(self) -> bool:
        """Every verdict is of a logged partition, once, and says what its request's answers say."""
        return not (self.unmatched_verdicts or self.duplicate_verdicts or self.inconsistent)


def _line_number(event_id: str) -> int | None:
    """The lines topic's offset in an event id ``<topic>/0/<offset>`` (line n of the run's log)."""
    tail = event_id.rsplit("/", 1)[-1]
    return int(tail) if tail.isdigit() else None


def _key(event_id: str, topic: str, partition: int) -> tuple[str, str, int]:
    return (event_id, topic, int(partition))


def _request_answers(verdicts: list[dict], policy: str) -> dict[tuple[str, str | None], str]:
    """(event id, broker answer) -> the model's answer for that request: its first partition's
    non-NONE answer under ``policy``, else NONE (Kafka fails a request on its first bad partition).
    A line whose partitions the broker answered with different codes makes one event per code."""
    out: dict[tuple[str, str | None], str] = {}
    for v in verdicts:
        k = (v["event_id"], v.get("broker_error"))
        if out.get(k, "NONE") == "NONE":
            out[k] = v[policy]
    return out


def _excluded(v: dict) -> tuple[str, str]:
    """Why a verdict with no ``model_agrees`` is not judged: (reason, detail)."""
    err = v.get("broker_error")
    if err is None:
        return "no answer", ""
    if err in COORDINATOR_ERRORS:
        return "coordinator error", err
    if err == "REBALANCE_IN_PROGRESS":
        return "REBALANCE_IN_PROGRESS", ""
    if err == "UNKNOWN":
        return "unknown code", ""
    if v.get("warming_up"):
        return "warm-up", ""
    return "other", err


def account(logged: Iterable[LoggedPartition], verdicts: Iterable[dict], dead_letters: Iterable[str],
            policy: str, start_lines: tuple[int, int] = (0, 0)) -> Accounting:
    """Each logged commit partition judged (a verdict with ``model_agrees``) or excluded for a
    reason of :data:`REASONS`; the judged ones in the confusion matrix of their traffic.
    ``start_lines``: a job started from ``latest`` (live) was launched when the lines topic ended
    at the first line number and had committed its first batch when it ended at the second: a
    line before the first was never the job's to read (*before the start*), one between them
    without a verdict may have been (*at the start*: ``latest`` was resolved in between)."""
    launched, first_batch = start_lines
    a = Accounting(policy)
    verdicts = list(verdicts)
    by_key: dict[tuple[str, str, int], dict] = {}
    for v in verdicts:
        k = _key(v["event_id"], v["topic"], v["partition"])
        if k in by_key:
            a.duplicate_verdicts += 1
        else:
            by_key[k] = v
    answers = _request_answers(list(by_key.values()), policy)
    dead = set(dead_letters)
    seen: set[tuple[str, str, int]] = set()
    for p in logged:
        a.logged += 1
        k = _key(p.event_id, p.topic, p.partition)
        v = by_key.get(k) if p.decoded else None
        if v is not None:
            seen.add(k)
        line = _line_number(p.event_id)
        if v is None and line is not None and line < launched:
            reason, detail = "before the start", ""
        elif v is None and line is not None and line < first_batch:
            reason, detail = "at the start", ""
        elif p.event_id in dead and v is None:
            reason, detail = "dead letter", ""
        elif v is None:
            if p.answer in COORDINATOR_ERRORS:
                reason, detail = "coordinator error", p.answer
            else:
                reason, detail = "missing", "not decoded" if not p.decoded else f"no verdict (broker {p.answer})"
        elif v.get("model_agrees") is None:
            reason, detail = _excluded(v)
        else:
            a.judged += 1
            broker, model = v["broker_error"], answers[(v["event_id"], v["broker_error"])]
            a.inconsistent += bool(v["model_agrees"]) != (broker == model)
            a.traffic[traffic_of(v["group_id"])].add(broker, model)
            continue
        a.excluded[reason] += 1
        if detail:
            a.details[(reason, detail)] += 1
    a.unmatched_verdicts = len(set(by_key) - seen)
    return a


# --------------------------------------------------------------------------- docs/fidelity.md

def pct(x: float, digits: int = 1) -> str:
    return "n/a" if math.isnan(x) else f"{100.0 * x:.{digits}f}%"


def ratio(n: int, d: int) -> str:
    return f"{n:,} of {d:,} ({pct(n / d if d else math.nan)})"


def matrix_table(rows: list[tuple[str, Accounting]]) -> str:
    """The headline: per version and traffic, the broker's rejections, the model's, recall and
    precision, beside the accept-all baseline."""
    out = ["| Kafka | policy | traffic | judged | broker rejections | model rejections | recall | precision | "
           "agreement | accept-all agreement |", "|---|---|---|---|---|---|---|---|---|---|"]
    for version, a in rows:
        for name, r in (*a.traffic.items(), ("all", a.all)):
            out.append(f"| {version} | `{a.policy}` | {name} | {r.judged:,} | {r.broker:,} | {r.model:,} | "
                       f"{pct(r.recall)} ({r.both:,}/{r.broker:,}) | {pct(r.precision)} ({r.both:,}/{r.model:,}) | "
                       f"{pct(r.agreement, 2)} | {pct(r.accept_all, 2)} |")
    return "\n".join(out)


def codes_table(rows: list[tuple[str, Accounting]]) -> str:
    """Per version and broker error code: the partitions the broker answered with it, those the
    model answered with the same code, and those the model rejected with any code."""
    out = ["| Kafka | broker answer | organic | scripted | model: same code | model: rejected | model answered it |",
           "|---|---|---|---|---|---|---|"]
    for version, a in rows:
        total = a.all
        for code in sorted(set(total.by_code) | set(total.model_codes), key=lambda c: (c != "NONE", c)):
            n, same, rejected = total.by_code.get(code, [0, 0, 0])
            org, scr = (a.traffic[t].by_code.get(code, [0])[0] for t in TRAFFIC)
            out.append(f"| {version} | `{code}` | {org:,} | {scr:,} | {ratio(same, n) if n else '–'} | "
                       f"{rejected:,} | {total.model_codes.get(code, 0):,} |")
    return "\n".join(out)


def accounting_table(rows: list[tuple[str, Accounting]]) -> str:
    """Every commit partition of the request log: judged, or excluded and why."""
    out = ["| Kafka | commit partitions logged | judged | " + " | ".join(REASONS) + " | accounted for |",
           "|---|---|---|" + "---|" * len(REASONS) + "---|"]
    for version, a in rows:
        out.append(f"| {version} | {a.logged:,} | {a.judged:,} | " + " | ".join(f"{a.excluded[r]:,}" for r in REASONS)
                   + f" | {a.accounted:,} of {a.logged:,} ({a.accounted_percent:.2f}%) |")
    return "\n".join(out)


def accounting_notes(version: str, a: Accounting) -> list[str]:
    notes = [f"- {version}: {reason} {detail}: {n:,}" for (reason, detail), n in sorted(a.details.items())]
    if not a.reconciled:
        notes.append(f"- {version}: **not reconciled**: {a.unmatched_verdicts} verdicts of no logged partition, "
                     f"{a.duplicate_verdicts} duplicated, {a.inconsistent} whose model_agrees contradicts their "
                     "request's answers")
    return notes
